"""`plan_capacity` over HTTP: DaemonSets from the Kubernetes API emulator, offerings from the
fake cloud's catalog endpoint and the built-in catalog."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.planning.activity import PlanningActivities
from activities.planning.config import PlanningConfig
from api.nodeclass import NodeClassSpec
from api.nodepool import NodePoolSpec
from api.planning import PlanRequest, PodDemand, Resources
from cluster.tenancy import Tenancy
from sim.cloud import FakeCloud, FakeCloudServer, FakeInstanceType
from sim.kubeapi import KubeApiServer

TOKEN = "fake-cloud-token"
NS = "burst"


@pytest.fixture(scope="module")
def planning_kube() -> Iterator[k8s.ApiClient]:
    """An emulator of our own: DaemonSets are listed cluster-wide, so no other test's may leak in."""
    server = KubeApiServer(port=0)
    server.start()
    api = server.api_client()
    core = k8s.CoreV1Api(api)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NS)))
    core.create_namespaced_secret(
        NS,
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name="fake-cloud"),
            data={"token": base64.b64encode(TOKEN.encode()).decode()},
        ),
    )
    yield api
    api.close()
    server.stop()


@pytest.fixture(scope="module")
def cloud_url() -> Iterator[str]:
    cloud = FakeCloud(
        regions=["sim-1"],
        instance_types=[
            FakeInstanceType("fk-medium", 4, 8, "x86_64", 0.022),
            FakeInstanceType("fk-large", 8, 16, "x86_64", 0.041),
            FakeInstanceType("fk-arm-medium", 4, 8, "arm64", 0.017),
        ],
        token=TOKEN,
    )
    server = FakeCloudServer(cloud).start()
    yield server.url
    server.stop()


def node_class(url: str, token_secret: str = "fake-cloud") -> NodeClassSpec:
    return NodeClassSpec.model_validate(
        {
            "fake": {"endpoint": url, "apiTokenSecretRef": {"name": token_secret, "key": "token"}},
            "hetzner": {
                "location": "fsn1",
                "apiTokenSecretRef": {"name": "hcloud", "key": "token"},
            },
            "join": {"hostApiServer": "https://10.0.0.1:6443"},
        }
    )


POOL = NodePoolSpec.model_validate(
    {
        "template": {
            "labels": {"team": "shop"},
            "taints": [{"key": "burst", "effect": "NoSchedule"}],
        },
        "requirements": {"allowedProviders": ["fake"]},
    }
)


def pods(n: int, cpu_m: int = 1000) -> list[PodDemand]:
    return [
        PodDemand(
            uid=f"uid-{i}",
            namespace="shop",
            name=f"web-{i}",
            requests=Resources(cpu_m=cpu_m, memory_bytes=2**30, pods=1),
            tolerations=[{"key": "burst", "operator": "Exists"}],
        )
        for i in range(n)
    ]


def daemonset(name: str, cpu: str, **spec: Any) -> k8s.V1DaemonSet:
    labels = {"app": name}
    return k8s.V1DaemonSet(
        metadata=k8s.V1ObjectMeta(name=name, namespace="kube-system"),
        spec=k8s.V1DaemonSetSpec(
            selector=k8s.V1LabelSelector(match_labels=labels),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels=labels),
                spec=k8s.V1PodSpec(
                    containers=[
                        k8s.V1Container(
                            name=name,
                            image="agent",
                            resources=k8s.V1ResourceRequirements(
                                requests={"cpu": cpu, "memory": "128Mi"}
                            ),
                        )
                    ],
                    **spec,
                ),
            ),
        ),
    )


def plan(planning_kube: k8s.ApiClient, request: PlanRequest) -> Any:
    # The operator allows the fake cloud's address (as the dev stack does).
    fake = request.node_class.fake if request.node_class else None
    allowed = {"fake": (fake.endpoint,)} if fake and fake.endpoint else {}
    activities = PlanningActivities(
        planning_kube, config=PlanningConfig(), tenancy=Tenancy(allowed_endpoints=allowed)
    )
    return ActivityEnvironment().run(activities.plan_capacity, request)


def test_daemonset_overhead_changes_the_node_choice(
    planning_kube: k8s.ApiClient, cloud_url: str
) -> None:
    request = PlanRequest(
        pool_name="shop", pool=POOL, class_providers=["fake", "hetzner"], pods=pods(3),
        namespace=NS, node_class=node_class(cloud_url),
    )  # fmt: skip
    # No DaemonSets: three 1-core pods fit one fk-medium (3.92 cores usable).
    before = plan(planning_kube, request)
    assert [n.offerings[0].key for n in before.new_nodes] == ["fake/sim-1/fk-medium"]

    apps = k8s.AppsV1Api(planning_kube)
    tolerate_all = [k8s.V1Toleration(operator="Exists")]
    apps.create_namespaced_daemon_set(
        "kube-system", daemonset("node-agent", "1", tolerations=tolerate_all)
    )
    # These three never run on the pool's nodes: wrong arch, missing label, untolerated taint.
    apps.create_namespaced_daemon_set(
        "kube-system",
        daemonset(
            "arm-agent",
            "2",
            node_selector={"kubernetes.io/arch": "arm64"},
            tolerations=tolerate_all,
        ),
    )
    apps.create_namespaced_daemon_set(
        "kube-system",
        daemonset("gpu-agent", "2", node_selector={"gpu": "true"}, tolerations=tolerate_all),
    )
    apps.create_namespaced_daemon_set("kube-system", daemonset("untolerant", "2"))

    # node-agent takes a core from every node: 2 pods per fk-medium (0.044/h) or all three on
    # one fk-large (0.041/h) — the cheaper plan wins.
    try:
        after = plan(planning_kube, request)
    finally:
        for name in ("node-agent", "arm-agent", "gpu-agent", "untolerant"):
            apps.delete_namespaced_daemon_set(name, "kube-system")
    assert [n.offerings[0].key for n in after.new_nodes] == ["fake/sim-1/fk-large"]
    assert sorted(after.new_nodes[0].pod_uids) == ["uid-0", "uid-1", "uid-2"]
    assert after.cost_eur_per_hour == pytest.approx(0.041)


def test_catalog_offerings_for_real_providers_come_with_the_fake_ones(
    planning_kube: k8s.ApiClient, cloud_url: str
) -> None:
    pool = NodePoolSpec.model_validate({"requirements": {"regionConstraint": "EU"}})
    request = PlanRequest(
        pool_name="mixed", pool=pool, class_providers=["fake", "hetzner"], pods=pods(1, cpu_m=500),
        namespace=NS, node_class=node_class(cloud_url), offerings_per_node=5,
    )  # fmt: skip
    result = plan(planning_kube, request)
    keys = [o.key for o in result.new_nodes[0].offerings]
    assert {k.split("/")[0] for k in keys} == {"hetzner", "fake"}  # failover across providers
    assert keys[0] == "hetzner/fsn1/cx23"  # the catalog's cheapest that holds the pod


def test_a_wrong_fake_cloud_token_is_a_configuration_error(
    planning_kube: k8s.ApiClient, cloud_url: str
) -> None:
    k8s.CoreV1Api(planning_kube).create_namespaced_secret(
        NS,
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name="wrong"),
            data={"token": base64.b64encode(b"nope").decode()},
        ),
    )
    request = PlanRequest(
        pool_name="shop", pool=POOL, class_providers=["fake"], pods=pods(1),
        namespace=NS, node_class=node_class(cloud_url, token_secret="wrong"),
    )  # fmt: skip
    with pytest.raises(ApplicationError) as err:
        plan(planning_kube, request)
    assert err.value.type == "InvalidConfiguration" and err.value.non_retryable
    assert "apiTokenSecretRef" in str(err.value) and "nope" not in str(err.value)
