"""A workflow that acts on its signals in rounds — "arm" starts a timer, "act" an activity, as
the pool's rounds start alarms and permits — and a worker for it that runs as its own process
(`python -m tests.workflows.untaken_probe ADDRESS QUEUE guarded|plain`), so that a test can
SIGKILL it. See test_untaken_events.py."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

# The sandbox runs this module again for each workflow run: the worker's runner (and the
# product's modules it imports) come from outside it, as a worker's own modules do.
with workflow.unsafe.imports_passed_through():
    from worker.untaken_events import TakenEventsOnlyRunner

# Long enough that a worker started after a kill is polling before a query leaves the dead
# worker's sticky queue, and that the test can signal between the query and the task.
STICKY_TIMEOUT = timedelta(seconds=3)


@activity.defn
async def permit() -> None:
    pass


@workflow.defn
class RoundsProbe:
    def __init__(self) -> None:
        self._arm = 0
        self._act = 0
        self._dirty = False
        self._timers: list[asyncio.Task[None]] = []

    @workflow.run
    async def run(self) -> None:
        while True:
            await workflow.wait_condition(lambda: self._dirty)
            self._dirty = False
            for _ in range(self._arm):
                self._timers.append(asyncio.create_task(workflow.sleep(3600)))
            for _ in range(self._act):
                workflow.start_activity(permit, start_to_close_timeout=timedelta(seconds=10))
            self._arm = self._act = 0

    @workflow.signal
    def hello(self) -> None:
        self._dirty = True

    @workflow.signal
    def arm(self) -> None:
        self._arm += 1
        self._dirty = True

    @workflow.signal
    def act(self) -> None:
        self._act += 1
        self._dirty = True

    @workflow.query
    def timers(self) -> int:
        return len(self._timers)


async def serve(address: str, queue: str, guarded: bool) -> None:
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    async with Worker(
        client,
        task_queue=queue,
        workflows=[RoundsProbe],
        activities=[permit],
        sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        # The SDK's default runner, with or without the product's guard around it.
        workflow_runner=TakenEventsOnlyRunner() if guarded else SandboxedWorkflowRunner(),
    ):
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2], sys.argv[3] == "guarded"))
