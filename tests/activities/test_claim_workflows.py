"""`start_claim_workflows` against the real Temporal dev server: what a pool's retried batch
of claim starts may and may not do. No worker polls the claims' queue: a started claim
waits for its first workflow task, which is all these tests look at."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client as k8s
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import ActivityEnvironment

from activities.claim_workflows import ClaimWorkflowActivities
from api import search_attributes as sa
from api.claims import new_claim
from api.messages import ClaimStart, ClaimStarts, NodeClaimInput, claim_workflow_id
from api.nodeclaim import Offering
from api.nodeclass import FakeClass, JoinSettings, NodeClassSpec
from api.nodepool import NodePoolSpec
from api.nodepool.messages import pool_workflow_id
from tests.e2e.harness import eventually

OFFERING = Offering(provider="fake", region="sim-1", instance_type="fk-two", vcpu=2, memory_gib=4)


def start(pool: str, suffix: str, task_queue: str) -> ClaimStart:
    claim = new_claim(
        name=f"{pool}-{suffix}",
        namespace="default",
        pool_name=pool,
        pool=NodePoolSpec(),
        node_class_name="sample",
        offerings=[OFFERING],
    )
    return ClaimStart(
        input=NodeClaimInput(
            claim=claim,
            node_class_name="sample",
            node_class=NodeClassSpec(
                fake=FakeClass(), join=JoinSettings(host_api_server="https://127.0.0.1:6443")
            ),
            pool_workflow_id=pool_workflow_id("default", pool),
        ),
        task_queue=task_queue,
        pool_name=pool,
    )


@pytest.fixture
def pool() -> str:
    return f"starts{uuid.uuid4().hex[:6]}"


async def runs_of(client: Client, claim_name: str) -> list[WorkflowExecutionStatus | None]:
    query = f"WorkflowId = '{claim_workflow_id('default', claim_name)}'"
    return [execution.status async for execution in client.list_workflows(query)]


async def test_a_retried_batch_starts_each_claim_once_and_never_revives_an_ended_one(
    temporal_client: Client, pool: str
) -> None:
    """A pool's worker may die after Temporal took some of a batch: the retry starts what
    is left, and a claim that ended meanwhile (scaled down, failed) stays ended."""
    batch = ClaimStarts(starts=[start(pool, s, f"{pool}-claims") for s in ("aaaaa", "bbbbb")])
    run = ActivityEnvironment(client=temporal_client).run
    starter = ClaimWorkflowActivities(k8s.ApiClient())

    assert (await run(starter.start_claim_workflows, batch)).refused == {}
    first = temporal_client.get_workflow_handle(claim_workflow_id("default", f"{pool}-aaaaa"))
    described = await first.describe()
    assert described.status == WorkflowExecutionStatus.RUNNING
    assert described.typed_search_attributes.get(sa.NODE_POOL) == pool
    assert described.parent_id is None  # its own workflow: no pool run closes it
    await first.terminate("ended before the retry")

    assert (await run(starter.start_claim_workflows, batch)).refused == {}
    # One run each (the list is Temporal's visibility store, which follows closely).
    ended = [WorkflowExecutionStatus.TERMINATED]
    assert await eventually(lambda: runs_of(temporal_client, f"{pool}-aaaaa"), ended.__eq__)
    running = [WorkflowExecutionStatus.RUNNING]
    assert await eventually(lambda: runs_of(temporal_client, f"{pool}-bbbbb"), running.__eq__)
    await temporal_client.get_workflow_handle(
        claim_workflow_id("default", f"{pool}-bbbbb")
    ).terminate()


async def test_a_start_temporal_refuses_is_named_and_the_rest_of_the_batch_starts(
    temporal_client: Client, pool: str
) -> None:
    """Retrying a start Temporal refuses (here a task queue name past its length limit) would
    hold the whole batch, and its pool, for good: it is named, for the pool to plan its pods
    again, and the others start."""
    batch = ClaimStarts(
        starts=[start(pool, "ccccc", "q" * 1100), start(pool, "ddddd", f"{pool}-claims")]
    )
    result = await ActivityEnvironment(client=temporal_client).run(
        ClaimWorkflowActivities(k8s.ApiClient()).start_claim_workflows, batch
    )
    assert list(result.refused) == [f"{pool}-ccccc"]
    assert "taskqueue length exceeds limit" in result.refused[f"{pool}-ccccc"].lower()
    assert await runs_of(temporal_client, f"{pool}-ccccc") == []
    started = temporal_client.get_workflow_handle(claim_workflow_id("default", f"{pool}-ddddd"))
    assert (await started.describe()).status == WorkflowExecutionStatus.RUNNING
    await started.terminate()
