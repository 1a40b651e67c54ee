"""A workflow that decides whether a deadline has passed — by alarm or by reading the clock —
and a worker for it that runs as its own process (`python -m tests.workflows.clock_probe
ADDRESS QUEUE`), so a test can SIGKILL it. See test_stale_clock.py."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from datetime import datetime, timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from workflows.alarms import Alarms


@activity.defn
async def act_on_deadline() -> None:
    pass


@workflow.defn
class ClockProbe:
    def __init__(self) -> None:
        self._deadline: datetime | None = None
        self._dirty = False
        self._alarms = Alarms(on_ring=self._wake)

    @workflow.run
    async def run(self, by_alarm: bool) -> None:
        while True:
            if by_alarm:
                await workflow.wait_condition(lambda: self._dirty)
            else:  # the way the pool waited: news, or a periodic look (a timer)
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(lambda: self._dirty, timeout=60)
            self._dirty = False
            if self._deadline is None:
                continue
            if by_alarm:
                passed = self._alarms.reached("deadline", self._deadline)
                self._alarms.settle()
            else:
                passed = workflow.now() >= self._deadline
            if passed:
                await workflow.execute_activity(
                    act_on_deadline, start_to_close_timeout=timedelta(seconds=10)
                )
                return

    def _wake(self) -> None:
        self._dirty = True

    @workflow.signal
    def hello(self) -> None:
        self._dirty = True

    @workflow.signal
    def deadline(self, at: datetime) -> None:
        self._deadline = at
        self._dirty = True

    @workflow.query
    def waiting(self) -> bool:
        return self._deadline is not None


async def serve(address: str, queue: str) -> None:
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    async with Worker(
        client,
        task_queue=queue,
        workflows=[ClockProbe],
        activities=[act_on_deadline],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
    ):
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
