"""`plan_capacity` over HTTP: DaemonSets from Kubernetes' own API server, offerings from the
fake cloud's catalog endpoint and the built-in catalog.

DaemonSets are listed cluster-wide: the ones a test here makes are deleted before it ends, and
no other test of the session keeps one."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.kube import MERGE_PATCH
from activities.planning.activity import PlanningActivities
from activities.planning.config import PlanningConfig
from activities.planning.consolidation import ConsolidationActivities
from api.nodeclaim import Offering
from api.nodeclass import NodeClassSpec
from api.nodepool import NodePoolSpec
from api.nodepool.messages import ConsolidationInput
from api.planning import PlanRequest, PodDemand, Resources
from cluster.tenancy import Tenancy
from sim.cloud import FakeCloud, FakeCloudServer, FakeInstanceType
from tests.activities.conftest import create_namespace

TOKEN = "fake-cloud-token"
# The pools' namespace, this module's own in the session's cluster.
NS = f"burst-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def planning_kube(kube_api_client: k8s.ApiClient) -> k8s.ApiClient:
    api = kube_api_client
    core = k8s.CoreV1Api(api)
    create_namespace(core, NS)
    core.create_namespaced_secret(
        NS,
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name="fake-cloud"),
            data={"token": base64.b64encode(TOKEN.encode()).decode()},
        ),
    )
    return api


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


def planning(planning_kube: k8s.ApiClient, node_class: NodeClassSpec | None) -> PlanningActivities:
    # The operator allows the fake cloud's address (as the dev stack does).
    fake = node_class.fake if node_class else None
    allowed = {"fake": (fake.endpoint,)} if fake and fake.endpoint else {}
    return PlanningActivities(
        planning_kube, config=PlanningConfig(), tenancy=Tenancy(allowed_endpoints=allowed)
    )


def plan(planning_kube: k8s.ApiClient, request: PlanRequest) -> Any:
    """The plan for the request's pods as given (as consolidation plans): what the activity
    keeps of a pool's pods, those the cluster has pending, is tests/activities/
    test_planning_pending.py's."""
    activities = planning(planning_kube, request.node_class)
    return ActivityEnvironment().run(activities.plan, request)


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


# ---- machines of one's own: a type the fake cloud holds only so many of --------------------

RACK = "fk-rack"  # 4 cores, 8 GiB, free: the operator's machines, 2 per region


@pytest.fixture
def rack() -> Iterator[tuple[FakeCloud, str]]:
    cloud = FakeCloud(
        regions=["sim-1"],
        instance_types=[
            FakeInstanceType(RACK, 4, 8, "x86_64", 0.0, capacity=2),
            FakeInstanceType("fk-medium", 4, 8, "x86_64", 0.022),
            FakeInstanceType("fk-large", 8, 16, "x86_64", 0.041),
        ],
        token=TOKEN,
        delete_delay_s=0.0,
    )
    server = FakeCloudServer(cloud).start()
    yield cloud, server.url
    server.stop()


def use_a_machine(cloud: FakeCloud, name: str) -> str:
    return str(cloud.create_instance(name=name, region="sim-1", instance_type=RACK)["id"])


def test_the_machines_left_are_planned_first_and_the_rest_of_the_burst_goes_to_the_cloud(
    planning_kube: k8s.ApiClient, rack: tuple[FakeCloud, str]
) -> None:
    cloud, url = rack
    request = PlanRequest(
        pool_name="shop", pool=POOL, class_providers=["fake"], pods=pods(8),
        namespace=NS, node_class=node_class(url), offerings_per_node=3,
    )  # fmt: skip
    result = plan(planning_kube, request)
    first = [n.offerings[0] for n in result.new_nodes]
    machines = [o for o in first if o.instance_type == RACK]
    assert len(machines) == 2  # three 1-core pods on each, both machines the cloud has
    assert machines[0].available == 2 and machines[0].price_eur_per_hour == 0.0
    assert machines[0].price_source == "fake: the provider's live catalog"
    assert machines[0].price_as_of
    assert {o.instance_type for o in first} - {RACK} and not result.unschedulable
    assert sum(len(n.pod_uids) for n in result.new_nodes) == 8
    for node in result.new_nodes:
        if node.offerings[0].instance_type != RACK:
            assert RACK not in [o.instance_type for o in node.offerings]

    # One machine taken since: the next plan has one left.
    use_a_machine(cloud, "taken-1")
    again = plan(planning_kube, request)
    assert [n.offerings[0].instance_type for n in again.new_nodes].count(RACK) == 1


def consolidation_input(url: str, node: str) -> ConsolidationInput:
    pool = POOL.model_copy(deep=True)
    pool.disruption.consolidation_policy = "WhenEmptyOrUnderutilized"
    medium = Offering(
        provider="fake", region="sim-1", instance_type="fk-medium", vcpu=4, memory_gib=8,
        price_eur_per_hour=0.022,
    )  # fmt: skip
    return ConsolidationInput(
        pool_name="shop", namespace=NS, pool=pool, node_class=node_class(url),
        candidates=[node], ready={node: medium}, min_savings_eur_per_hour=0.0,
    )  # fmt: skip


def make_node(core: k8s.CoreV1Api, name: str) -> None:
    """A cloud node of the pool (no kubelet: its allocatable written here)."""
    core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name)))
    core.patch_node_status(
        name,
        {"status": {"allocatable": {"cpu": "3920m", "memory": "6Gi", "pods": "110"}}},
        _content_type=MERGE_PATCH,
    )


def test_consolidation_moves_a_cloud_node_to_a_machine_once_one_is_free(
    planning_kube: k8s.ApiClient,
    rack: tuple[FakeCloud, str],
    unique: str,
    made_nodes: list[str],
) -> None:
    cloud, url = rack
    core = k8s.CoreV1Api(planning_kube)
    node = f"shop-cloud-{unique}"
    made_nodes.append(node)
    make_node(core, node)
    for i in range(2):
        core.create_namespaced_pod(
            NS,
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(name=f"web-on-cloud-{i}"),
                spec=k8s.V1PodSpec(
                    node_name=node,
                    containers=[
                        k8s.V1Container(
                            name="c",
                            image="web",
                            resources=k8s.V1ResourceRequirements(
                                requests={"cpu": "1", "memory": "1Gi"}
                            ),
                        )
                    ],
                ),
            ),
        )
    held = [use_a_machine(cloud, f"busy-{i}") for i in range(2)]
    request = consolidation_input(url, node)
    activities = ConsolidationActivities(
        planning_kube, planning(planning_kube, request.node_class).inputs
    )

    # Both machines in use: the cloud node stays (nothing cheaper can take its pods).
    full = ActivityEnvironment().run(activities.find_consolidation, request)
    assert full.action == "none", full

    # A machine frees up: the pods move back to it, replacement first.
    cloud.delete_instance(held[0])
    freed = ActivityEnvironment().run(activities.find_consolidation, request)
    assert freed.action == "replace" and freed.claim_name == node, freed
    assert freed.replacement is not None
    assert freed.replacement.offerings[0].instance_type == RACK
    assert freed.replacement.offerings[0].available == 1
    assert freed.savings_eur_per_hour == pytest.approx(0.022)


def test_at_the_floor_a_node_is_replaced_by_a_free_machine_never_deleted(
    planning_kube: k8s.ApiClient,
    rack: tuple[FakeCloud, str],
    unique: str,
    made_nodes: list[str],
) -> None:
    """A static pool (minNodes 1): its empty node is not consolidated away (the floor would
    start another at once), but moves to a machine of the operator's once one is free."""
    cloud, url = rack
    core = k8s.CoreV1Api(planning_kube)
    node = f"shop-floor-{unique}"
    made_nodes.append(node)
    make_node(core, node)
    held = [use_a_machine(cloud, f"floor-busy-{i}") for i in range(2)]
    request = consolidation_input(url, node)
    request.pool.limits.min_nodes = 1
    activities = ConsolidationActivities(
        planning_kube, planning(planning_kube, request.node_class).inputs
    )

    kept = ActivityEnvironment().run(activities.find_consolidation, request)
    assert kept.action == "none", kept

    cloud.delete_instance(held[1])
    moved = ActivityEnvironment().run(activities.find_consolidation, request)
    assert moved.action == "replace" and moved.replacement is not None, moved
    assert moved.replacement.offerings[0].instance_type == RACK
    assert moved.replacement.pod_uids == []
