"""Workers for a pool under test, laid out as `worker.main.build_workers` lays them out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

from kubernetes import client as k8s
from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from activities.claim_workflows import (
    STARTED,
    STARTED_BEFORE,
    ClaimWorkflowActivities,
    start_claim_workflow,
)
from activities.heartbeat import HeartbeatInterceptor
from api.messages import ClaimStarts, ClaimStartsResult, claim_task_queue, claim_workflow_id
from cluster.tenancy import Tenancy


@activity.defn(name="start_claim_workflows")
async def start_claim_workflows_without_a_cluster(batch: ClaimStarts) -> ClaimStartsResult:
    """The pool's start activity without its cluster half (the fast lane has no cluster: no
    NodePool to read, no NodeClaim object to create): each claim's workflow started as the
    worker starts it (`start_claim_workflow`)."""
    refused: dict[str, str] = {}
    for item in batch.starts:
        outcome = await start_claim_workflow(activity.client(), item)
        if outcome not in (STARTED, STARTED_BEFORE):
            refused[item.input.claim.metadata.name] = outcome
    return ClaimStartsResult(refused=refused)


def claim_starter_activities() -> list[Callable[..., Any]]:
    """The claims' start and look activities as the fast lane runs them."""
    looks = ClaimWorkflowActivities(k8s.ApiClient(), Tenancy()).claim_workflow_states
    return [start_claim_workflows_without_a_cluster, looks]


@contextlib.asynccontextmanager
async def pool_workers(
    client: Client,
    queue: str,
    workflows: Sequence[type],
    activities: Sequence[Callable[..., Any]],
) -> AsyncIterator[None]:
    """One worker on the pool's task queue and one on its claims' (where the pool starts
    them), both with these workflows and activities, and the claims' activities (those
    not given here under the same name)."""
    given = {_name(fn) for fn in activities}
    activities = [
        *activities,
        *(fn for fn in claim_starter_activities() if _name(fn) not in given),
    ]
    async with contextlib.AsyncExitStack() as running:
        for task_queue in (queue, claim_task_queue(queue)):
            worker = Worker(
                client,
                task_queue=task_queue,
                workflows=workflows,
                activities=activities,
                # As deployed: an activity held up longer than its heartbeat timeout is alive.
                interceptors=[HeartbeatInterceptor()],
            )
            await running.enter_async_context(worker)
        yield


def _name(fn: Callable[..., Any]) -> str:
    return activity._Definition.must_from_callable(fn).name or ""


async def started_claim(client: Client, name: str, timeout_s: float = 15) -> WorkflowHandle:
    """The claim's workflow once it runs: a pool counts a claim before its start activity
    has started it."""
    handle = client.get_workflow_handle(claim_workflow_id("default", name))
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                await handle.describe()
                return handle
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
            await asyncio.sleep(0.05)


async def end_claims(client: Client, names: Iterable[str]) -> None:
    """Terminate the claims a test's pool started; one its start activity had not reached
    when the pool was terminated never ran."""
    for name in names:
        try:
            await client.get_workflow_handle(claim_workflow_id("default", name)).terminate(
                "test over"
            )
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
