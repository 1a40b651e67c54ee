"""`start_claim_workflows` against the real Temporal dev server and Kubernetes' own API server,
as the worker (its shipped RBAC): what a pool's retried batch of claim starts may and may not
do, and the NodeClaim object it creates before each claim starts (what authorises the claim,
activities/claim_authority.py). No worker polls the claims' queue: a started claim waits for
its first workflow task, which is all these tests look at."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client as k8s
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import ActivityEnvironment

from activities.claim_workflows import ClaimWorkflowActivities
from api import labels
from api import search_attributes as sa
from api.claims import new_claim
from api.messages import ClaimStart, ClaimStarts, NodeClaimInput, claim_workflow_id
from api.nodeclaim import Offering
from api.nodeclass import FakeClass, JoinSettings, NodeClassSpec
from api.nodepool import NodePoolSpec, Taint
from api.nodepool.messages import pool_workflow_id
from cluster.tenancy import Tenancy
from tests.activities.claims import authorise_claim
from tests.e2e.harness import eventually

OFFERING = Offering(provider="fake", region="sim-1", instance_type="fk-two", vcpu=2, memory_gib=4)


def start(
    pool: str,
    suffix: str,
    task_queue: str,
    *,
    namespace: str = "default",
    pool_uid: str | None = None,
    spec: NodePoolSpec | None = None,
) -> ClaimStart:
    claim = new_claim(
        name=f"{pool}-{suffix}",
        namespace=namespace,
        pool_name=pool,
        pool=spec or NodePoolSpec(),
        node_class_name="sample",
        offerings=[OFFERING],
        pool_uid=pool_uid,
    )
    return ClaimStart(
        input=NodeClaimInput(
            claim=claim,
            node_class_name="sample",
            node_class=NodeClassSpec(
                fake=FakeClass(), join=JoinSettings(host_api_server="https://127.0.0.1:6443")
            ),
            pool_workflow_id=pool_workflow_id(namespace, pool),
        ),
        task_queue=task_queue,
        pool_name=pool,
    )


@dataclass(frozen=True)
class Pool:
    namespace: str
    name: str
    uid: str

    def start(self, suffix: str, task_queue: str, spec: NodePoolSpec | None = None) -> ClaimStart:
        return start(
            self.name,
            suffix,
            task_queue,
            namespace=self.namespace,
            pool_uid=self.uid,
            spec=spec,
        )


@pytest.fixture
def pool(kube_api_client: k8s.ApiClient, namespace: str) -> Pool:
    """A NodePool in the cluster, with a template label and taint of its own."""
    name = f"starts{uuid.uuid4().hex[:6]}"
    made = authorise_claim(
        kube_api_client,
        namespace,
        f"{name}-seed",
        pool=name,
        labels={"team": "blue"},
        taints=[Taint(key="dedicated", value="blue", effect="NoSchedule")],
    )
    return Pool(namespace, name, made.pool_uid)


@pytest.fixture
def starter(worker_api_client: k8s.ApiClient) -> ClaimWorkflowActivities:
    return ClaimWorkflowActivities(worker_api_client, Tenancy())


async def runs_of(
    client: Client, claim_name: str, namespace: str = "default"
) -> list[WorkflowExecutionStatus | None]:
    query = f"WorkflowId = '{claim_workflow_id(namespace, claim_name)}'"
    return [execution.status async for execution in client.list_workflows(query)]


def nodeclaim(api: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = k8s.CustomObjectsApi(api).get_namespaced_custom_object(  # type: ignore[assignment]
            "cloudburst.io", "v1alpha1", namespace, "nodeclaims", name
        )
    except k8s.ApiException as err:
        if err.status == 404:
            return None
        raise
    return found


async def test_a_retried_batch_starts_each_claim_once_and_never_revives_an_ended_one(
    temporal_client: Client, pool: Pool, starter: ClaimWorkflowActivities
) -> None:
    """A pool's worker may die after Temporal took some of a batch: the retry starts what
    is left, and a claim that ended meanwhile (scaled down, failed) stays ended."""
    name, ns = pool.name, pool.namespace
    batch = ClaimStarts(starts=[pool.start(s, f"{name}-claims") for s in ("aaaaa", "bbbbb")])
    run = ActivityEnvironment(client=temporal_client).run

    assert (await run(starter.start_claim_workflows, batch)).refused == {}
    first = temporal_client.get_workflow_handle(claim_workflow_id(ns, f"{name}-aaaaa"))
    described = await first.describe()
    assert described.status == WorkflowExecutionStatus.RUNNING
    assert described.typed_search_attributes.get(sa.NODE_POOL) == name
    assert described.parent_id is None  # its own workflow: no pool run closes it
    await first.terminate("ended before the retry")

    assert (await run(starter.start_claim_workflows, batch)).refused == {}
    # One run each (the list is Temporal's visibility store, which follows closely).
    ended = [WorkflowExecutionStatus.TERMINATED]
    assert await eventually(lambda: runs_of(temporal_client, f"{name}-aaaaa", ns), ended.__eq__)
    running = [WorkflowExecutionStatus.RUNNING]
    assert await eventually(lambda: runs_of(temporal_client, f"{name}-bbbbb", ns), running.__eq__)
    await temporal_client.get_workflow_handle(claim_workflow_id(ns, f"{name}-bbbbb")).terminate()


async def test_a_start_temporal_refuses_is_named_and_the_rest_of_the_batch_starts(
    temporal_client: Client,
    pool: Pool,
    starter: ClaimWorkflowActivities,
    kube_api_client: k8s.ApiClient,
) -> None:
    """Retrying a start Temporal refuses (here a task queue name past its length limit) would
    hold the whole batch, and its pool, for good: it is named, for the pool to plan its pods
    again, and the others start. The refused one's NodeClaim object goes with it."""
    name, ns = pool.name, pool.namespace
    batch = ClaimStarts(
        starts=[pool.start("ccccc", "q" * 1100), pool.start("ddddd", f"{name}-claims")]
    )
    result = await ActivityEnvironment(client=temporal_client).run(
        starter.start_claim_workflows, batch
    )
    assert list(result.refused) == [f"{name}-ccccc"]
    assert "taskqueue length exceeds limit" in result.refused[f"{name}-ccccc"].lower()
    assert await runs_of(temporal_client, f"{name}-ccccc", ns) == []
    assert nodeclaim(kube_api_client, ns, f"{name}-ccccc") is None
    started = temporal_client.get_workflow_handle(claim_workflow_id(ns, f"{name}-ddddd"))
    assert (await started.describe()).status == WorkflowExecutionStatus.RUNNING
    await started.terminate()


async def test_each_claim_starts_with_its_nodeclaim_owned_by_the_pool_the_cluster_has(
    temporal_client: Client,
    pool: Pool,
    starter: ClaimWorkflowActivities,
    kube_api_client: k8s.ApiClient,
) -> None:
    """The NodeClaim object exists before the claim's workflow does, owned by the NodePool,
    and carries the labels and taints of the pool as the cluster has it: a batch saying
    otherwise (a forged `specs` signal to the pool, another tenant's mark) is overruled. The
    claim's input names the object's uid. (Fails on the start activity that created no
    object and took the batch's labels as they came.)"""
    name, ns = pool.name, pool.namespace
    forged = NodePoolSpec.model_validate(
        {"template": {"labels": {"team": "red"}, "taints": []}}
    ).template.model_copy(update={"labels": {"team": "red", labels.TENANT_LABEL: "team-b"}})
    item = pool.start(
        "hhhhh", f"{name}-claims", spec=NodePoolSpec().model_copy(update={"template": forged})
    )
    run = ActivityEnvironment(client=temporal_client).run
    assert (await run(starter.start_claim_workflows, ClaimStarts(starts=[item]))).refused == {}

    made = nodeclaim(kube_api_client, ns, f"{name}-hhhhh")
    assert made is not None
    owners = made["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"], o["uid"], o.get("controller")) for o in owners] == [
        ("NodePool", name, pool.uid, True)
    ]
    assert made["metadata"]["finalizers"] == [labels.TERMINATION_FINALIZER]
    assert made["spec"]["labels"] == {"team": "blue"}
    assert made["spec"]["taints"] == [{"key": "dedicated", "value": "blue", "effect": "NoSchedule"}]
    handle = temporal_client.get_workflow_handle(claim_workflow_id(ns, f"{name}-hhhhh"))
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [sent] = await temporal_client.data_converter.decode(started.input.payloads, [NodeClaimInput])
    assert sent.claim.metadata.uid == made["metadata"]["uid"]
    assert sent.claim.spec.labels == {"team": "blue"}
    await handle.terminate()
