"""How a claim calls its activities: the options each kind of call gets, and side-by-side
steps."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError, RetryState

from activities.bootstrap import BootstrapActivities
from activities.kube import KubeActivities
from api.messages import NodeRef, NodeState
from workflows.nodeclaim.state import ClaimState
from workflows.retries import CLAIM_CALL
from workflows.timeouts import KUBE_CALL, QUICK_HEARTBEAT

Arg = TypeVar("Arg")
Result = TypeVar("Result")


async def together(*steps: Coroutine[Any, Any, None]) -> None:
    """Run the steps side by side (their commands in one workflow task) and return when all
    are done; a failure is raised only then, so that no step outlives the call. (No await in
    a `finally`: an evicted workflow's coroutines must close without waiting again.)"""
    tasks = [asyncio.create_task(step) for step in steps]
    await all_of(tasks)
    for task in tasks:
        task.result()


async def all_of(tasks: list[asyncio.Task[None]]) -> None:
    """Wait for every task; cancelled, cancel them too (a cancelled claim must not go on
    creating a VM in a task of its own while it cleans up)."""
    try:
        await workflow.wait(tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        raise


async def kube_call(
    activity: Callable[[Any, Arg], Result],
    arg: Arg,
    *,
    retry_policy: RetryPolicy,
    summary: str,
) -> Result:
    """A short Kubernetes call (the bootstrap Secrets, the mirror) as a local activity, inside
    the workflow task that needs it: no trip through the task queue, and a dead worker's
    attempt is retried with the workflow task, on another worker."""
    try:
        return await workflow.execute_local_activity_method(
            activity,
            arg,
            start_to_close_timeout=KUBE_CALL,
            retry_policy=retry_policy,
            summary=summary,
        )
    except ActivityError:
        raise
    except FailureError as failure:
        # A local activity's non-retryable failure reaches the workflow as the activity
        # raised it, not as an ActivityError: callers handle both alike (a missing Secret
        # fails the claim visibly, a mirror write that cannot be made is logged).
        raise ActivityError(
            f"local activity {activity.__name__} failed",
            scheduled_event_id=0,
            started_event_id=0,
            identity="",
            activity_type=activity.__name__,
            activity_id="",
            retry_state=RetryState.NON_RETRYABLE_FAILURE,
        ) from failure


async def on_node(
    activity: Callable[[KubeActivities, NodeRef], None], ref: NodeRef, summary: str
) -> None:
    """One call on the claim's node (cordon, uncordon, delete): the same options each."""
    await workflow.execute_activity_method(
        activity,
        ref,
        start_to_close_timeout=KUBE_CALL,
        heartbeat_timeout=QUICK_HEARTBEAT,
        retry_policy=CLAIM_CALL,
        summary=summary,
    )


async def look(
    activity: Callable[[KubeActivities, NodeRef], NodeState], ref: NodeRef, summary: str
) -> NodeState:
    """The node's state now, as an activity reads it from the API server."""
    return await workflow.execute_activity_method(
        activity,
        ref,
        start_to_close_timeout=KUBE_CALL,
        heartbeat_timeout=QUICK_HEARTBEAT,
        retry_policy=CLAIM_CALL,
        summary=summary,
    )


async def delete_bootstrap(state: ClaimState) -> None:
    """The join token has done its job: it joins nothing any more."""
    if state.bootstrap is None:
        return
    await workflow.execute_activity_method(
        BootstrapActivities.delete_bootstrap_secrets,
        state.bootstrap,
        start_to_close_timeout=KUBE_CALL,
        heartbeat_timeout=QUICK_HEARTBEAT,
        retry_policy=CLAIM_CALL,
        summary="delete token + script Secrets",
    )
    state.bootstrap_deleted()
