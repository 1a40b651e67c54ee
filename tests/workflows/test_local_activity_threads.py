"""Local activities have threads of their own in the worker's activity pool: a claim's
bootstrap and mirror calls run inside its workflow task, and must not wait there for a
thread while every activity slot is busy with a drain or a VM call."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from tests.e2e.harness import new_task_queue
from worker.settings import Settings

_release = threading.Event()


@activity.defn
def long_call() -> None:
    """A drain or a VM call: holds its thread until released."""
    _release.wait(30)


@activity.defn
def quick_call() -> str:
    return "written"


@workflow.defn(sandboxed=False)
class BusyWorkerWorkflow:
    @workflow.run
    async def run(self, pause_s: float) -> str:
        # Every activity slot taken, then a local activity, as a claim's first steps would be.
        busy = workflow.start_activity(long_call, start_to_close_timeout=timedelta(seconds=60))
        await workflow.sleep(pause_s)
        done: str = await workflow.execute_local_activity(
            quick_call, start_to_close_timeout=timedelta(seconds=5)
        )
        busy.cancel()
        return done


async def test_a_local_activity_runs_while_every_activity_slot_is_busy(
    temporal_client: Client,
) -> None:
    settings = Settings(max_concurrent_activities=1, max_concurrent_local_activities=1)
    queue = new_task_queue()
    _release.clear()
    with ThreadPoolExecutor(max_workers=settings.activity_threads()) as executor:
        async with Worker(
            temporal_client,
            task_queue=queue,
            workflows=[BusyWorkerWorkflow],
            activities=[long_call, quick_call],
            activity_executor=executor,
            max_concurrent_activities=settings.max_concurrent_activities,
            max_concurrent_local_activities=settings.max_concurrent_local_activities,
        ):
            try:
                result = await temporal_client.execute_workflow(
                    BusyWorkerWorkflow.run,
                    0.5,
                    id=f"busy-{queue}",
                    task_queue=queue,
                    execution_timeout=timedelta(seconds=12),
                )
            finally:
                _release.set()  # before the worker's shutdown, which waits for the long call
    # With the pool sized for activities alone, the local activity waited for the long call's
    # thread and timed out (its 5 s), failing the workflow.
    assert result == "written"
