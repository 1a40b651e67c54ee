"""A pool plans the pods the cluster has pending, as the cluster has them (activities/planning/
pending.py), against Kubernetes' own API server and scheduler, as the worker (its shipped
RBAC): not what a `demand` signal — which whoever reaches Temporal could send — says."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client as k8s
from temporalio.testing import ActivityEnvironment

from activities.planning.activity import PlanningActivities
from activities.planning.config import PlanningConfig
from api.nodeclass import NodeClassSpec
from api.nodepool import NodePoolSpec
from api.planning import PlanRequest, PodDemand, Resources, replacement_uid
from cluster.requirements import pod_demand
from cluster.tenancy import Tenancy
from sim.cloud import FakeCloud, FakeCloudServer, FakeInstanceType
from tests.activities.claims import authorise_claim
from tests.activities.conftest import create_namespace, wait_for

GROUP, VERSION = "cloudburst.io", "v1alpha1"
# Where no node of the session's cluster is: the scheduler marks these pods Unschedulable.
SELECTOR = {"cloudburst-test/pending": "nowhere"}
# The pool's nodes would carry it: its pods are the pool's to plan.
POOL: dict[str, Any] = {
    "requirements": {"allowedProviders": ["fake"]},
    "template": {"labels": SELECTOR},
}


@pytest.fixture(scope="module")
def cloud_url() -> Any:
    cloud = FakeCloud(
        regions=["sim-1"],
        instance_types=[
            FakeInstanceType("fk-medium", 4, 8, "x86_64", 0.022),
            FakeInstanceType("fk-huge", 64, 256, "x86_64", 0.9),
        ],
    )
    server = FakeCloudServer(cloud).start()
    yield server.url
    server.stop()


def pending_pod(core: k8s.CoreV1Api, namespace: str, name: str, cpu: str) -> k8s.V1Pod:
    """A pod the scheduler has found no room for (its PodScheduled condition says so)."""
    core.create_namespaced_pod(
        namespace,
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name=name),
            spec=k8s.V1PodSpec(
                node_selector=SELECTOR,
                containers=[
                    k8s.V1Container(
                        name="app",
                        image="busybox:1.36",
                        resources=k8s.V1ResourceRequirements(requests={"cpu": cpu}),
                    )
                ],
            ),
        ),
    )

    def unschedulable() -> k8s.V1Pod | None:
        pod = core.read_namespaced_pod(name, namespace)
        conditions = (pod.status.conditions if pod.status else None) or []
        marked = any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions)
        return pod if marked else None

    found: k8s.V1Pod = wait_for(f"{namespace}/{name} marked unschedulable", unschedulable)
    return found


def make_pool(api: k8s.ApiClient, namespace: str, name: str) -> None:
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "nodepools",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": "default", **POOL},
        },
    )


def request(namespace: str, pool: str, url: str, pods: list[PodDemand]) -> PlanRequest:
    return PlanRequest(
        pool_name=pool,
        namespace=namespace,
        pool=NodePoolSpec.model_validate(POOL),
        class_providers=["fake"],
        node_class=NodeClassSpec.model_validate(
            {"fake": {"endpoint": url}, "join": {"hostApiServer": "https://10.0.0.1:6443"}}
        ),
        pods=pods,
    )


def test_a_pool_plans_the_pods_the_cluster_has_pending_as_the_cluster_has_them(
    kube_api_client: k8s.ApiClient, worker_api_client: k8s.ApiClient, cloud_url: str
) -> None:
    """A `demand` naming pods the cluster does not have pending for the pool — one never
    there, one deleted, one of a namespace the pool does not serve — and a real pending pod
    whose requests it inflates: the plan is for the real pod at its real requests (one small
    node, not a huge one), and the others come back as not pending, for the pool to forget.
    (Fails on the activity that planned whatever the request said.)"""
    core = k8s.CoreV1Api(kube_api_client)
    ours = create_namespace(core, f"t-{uuid.uuid4().hex[:8]}")
    theirs = create_namespace(core, f"t-{uuid.uuid4().hex[:8]}")
    make_pool(kube_api_client, ours, "burst")
    real = pending_pod(core, ours, "web-0", "500m")
    gone = pending_pod(core, ours, "web-1", "500m")
    core.delete_namespaced_pod("web-1", ours, grace_period_seconds=0)
    other = pending_pod(core, theirs, "db-0", "500m")

    inflated = pod_demand(real).model_copy(
        update={"requests": Resources(cpu_m=60_000, memory_bytes=200 * 2**30, pods=1)}
    )
    asked = [
        inflated,
        pod_demand(gone),
        pod_demand(other),
        PodDemand(uid=str(uuid.uuid4()), namespace=ours, name="ghost", requests=Resources(pods=1)),
    ]
    planning = PlanningActivities(
        worker_api_client,
        config=PlanningConfig(),
        tenancy=Tenancy(allowed_endpoints={"fake": (cloud_url,)}),
    )
    made = ActivityEnvironment().run(
        planning.plan_capacity, request(ours, "burst", cloud_url, asked)
    )

    assert len(made.new_nodes) == 1, made
    [node] = made.new_nodes
    assert node.pod_uids == [real.metadata.uid]
    assert node.offerings[0].instance_type == "fk-medium"  # 500m, not 60 cores
    assert sorted(made.not_pending) == sorted(p.uid for p in asked[1:])
    assert "is not pending in the cluster" in made.not_pending[asked[1].uid]
    assert f"does not serve namespace {theirs}" in made.not_pending[other.metadata.uid]


def test_a_pool_gone_from_the_cluster_plans_nothing(
    kube_api_client: k8s.ApiClient, worker_api_client: k8s.ApiClient, cloud_url: str
) -> None:
    core = k8s.CoreV1Api(kube_api_client)
    ours = create_namespace(core, f"t-{uuid.uuid4().hex[:8]}")
    real = pending_pod(core, ours, "web-0", "500m")
    planning = PlanningActivities(
        worker_api_client,
        config=PlanningConfig(),
        tenancy=Tenancy(allowed_endpoints={"fake": (cloud_url,)}),
    )
    made = ActivityEnvironment().run(
        planning.plan_capacity, request(ours, "burst", cloud_url, [pod_demand(real)])
    )
    assert made.new_nodes == []
    assert "is not in the cluster" in made.not_pending[real.metadata.uid]


def test_a_replacement_is_planned_for_a_nodeclaim_of_the_pool_only(
    kube_api_client: k8s.ApiClient, worker_api_client: k8s.ApiClient, cloud_url: str
) -> None:
    """A drifted node's replacement is the pool's own demand, no pod: it is planned when the
    NodeClaim it replaces is the pool's in the cluster, not for a name nothing stands behind."""
    core = k8s.CoreV1Api(kube_api_client)
    ours = create_namespace(core, f"t-{uuid.uuid4().hex[:8]}")
    make_pool(kube_api_client, ours, "burst")
    authorise_claim(kube_api_client, ours, "burst-drifted", pool="burst")
    size = Resources(cpu_m=500, memory_bytes=2**29, pods=1)
    asked = [
        PodDemand(uid=replacement_uid(name), namespace=ours, name=name, requests=size)
        for name in ("burst-drifted", "burst-nobody")
    ]
    planning = PlanningActivities(
        worker_api_client,
        config=PlanningConfig(),
        tenancy=Tenancy(allowed_endpoints={"fake": (cloud_url,)}),
    )
    made = ActivityEnvironment().run(
        planning.plan_capacity, request(ours, "burst", cloud_url, asked)
    )
    assert [n.pod_uids for n in made.new_nodes] == [[replacement_uid("burst-drifted")]]
    assert list(made.not_pending) == [replacement_uid("burst-nobody")]
