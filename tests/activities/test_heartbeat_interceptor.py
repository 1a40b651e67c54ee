"""Every activity heartbeats, so a dead worker's attempt is retried elsewhere within seconds.

The worker's `HeartbeatInterceptor` beats for activities that do not report progress
themselves; those that do (a drain's progress) keep their details for the next attempt.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.heartbeat import HeartbeatInterceptor, heartbeats_itself


@activity.defn(name="slow_call")
def slow_call(seconds: float) -> str:
    time.sleep(seconds)  # a blocking call that never heartbeats on its own
    return "done"


@activity.defn(name="resumable")
@heartbeats_itself
def resumable(_: str) -> str:
    previous = activity.info().heartbeat_details
    if previous:
        return f"resumed from {previous[0]}"
    activity.heartbeat("step-7")
    time.sleep(1.0)  # long enough for automatic beats, were there any, to overwrite step-7
    raise ApplicationError("worker went away")


@workflow.defn(sandboxed=False)
class CallsOne:
    @workflow.run
    async def run(self, name: str, arg: str | float) -> str:
        result: str = await workflow.execute_activity(
            name,
            arg,
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=timedelta(seconds=1),
            retry_policy=RetryPolicy(maximum_attempts=2, initial_interval=timedelta(seconds=0.1)),
        )
        return result


async def run_on(client: Client, interceptors: list[HeartbeatInterceptor], name: str, arg: object):
    queue = f"beats-{uuid.uuid4()}"
    with ThreadPoolExecutor(4) as executor:
        async with Worker(
            client,
            task_queue=queue,
            workflows=[CallsOne],
            activities=[slow_call, resumable],
            activity_executor=executor,
            interceptors=interceptors,
        ):
            return await client.execute_workflow(
                CallsOne.run, args=[name, arg], id=f"beats-{uuid.uuid4()}", task_queue=queue
            )


async def test_a_blocking_call_outlives_a_short_heartbeat_timeout(temporal_client: Client) -> None:
    # Three seconds of blocking against a one-second heartbeat timeout: alive all along.
    assert await run_on(temporal_client, [HeartbeatInterceptor()], "slow_call", 3.0) == "done"


async def test_without_heartbeats_a_live_call_counts_as_dead(temporal_client: Client) -> None:
    # What the interceptor is for: without it the same call times out (as a dead one would).
    with pytest.raises(WorkflowFailureError):
        await run_on(temporal_client, [], "slow_call", 3.0)


async def test_an_activity_that_reports_progress_keeps_it(temporal_client: Client) -> None:
    result = await run_on(temporal_client, [HeartbeatInterceptor()], "resumable", "x")
    assert result == "resumed from step-7"
