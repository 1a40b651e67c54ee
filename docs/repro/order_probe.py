"""Does a query that rebuilds a workflow take in signals no task has taken yet?

`PYTHONPATH=. .venv/bin/python docs/repro/order_probe.py`: a probe workflow on a worker
process that is SIGKILLed; a signal ("arm": start a timer) arrives while no worker runs; a
new worker answers a query (the number of timers) and then takes the task, which also holds
an "act" signal (start an activity). Printed: the query's answer (1: the rebuild took "arm"
in before any task did), the commands' order, and whether the history replays. On
2026-11-27 (temporalio 1.35): query 1, ACTIVITY before TIMER (one round), replays.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker


@activity.defn
async def permit() -> None:
    pass


@workflow.defn
class OrderProbe:
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


async def serve(address: str, queue: str) -> None:
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    async with Worker(
        client,
        task_queue=queue,
        workflows=[OrderProbe],
        activities=[permit],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
    ):
        await asyncio.Event().wait()


def worker(address: str, queue: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, address, queue])


async def probe() -> None:
    from cli.devstack import temporal_cli  # the dev server `make dev` and the tests use

    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(), data_converter=pydantic_data_converter
    )
    async with env:
        address = env.client.service_client.config.target_host
        queue = f"probe-{uuid.uuid4()}"
        first = worker(address, queue)
        second: subprocess.Popen[bytes] | None = None
        try:
            handle = await env.client.start_workflow(
                OrderProbe.run, id=f"probe-{uuid.uuid4()}", task_queue=queue
            )
            await handle.signal(OrderProbe.hello)
            await asyncio.sleep(1.0)
            await handle.query(OrderProbe.timers)  # answered by the first worker: cached
            first.send_signal(signal.SIGKILL)
            first.wait()
            await handle.signal(OrderProbe.arm)
            second = worker(address, queue)
            await asyncio.sleep(1.0)
            query = asyncio.create_task(handle.query(OrderProbe.timers))
            await asyncio.sleep(0.5)
            await handle.signal(OrderProbe.act)
            print("query answered:", await query)
            await asyncio.sleep(4)
            history = await handle.fetch_history()
        finally:
            for process in (first, second):
                if process is not None and process.poll() is None:
                    process.kill()
    kinds = {EventType.EVENT_TYPE_TIMER_STARTED, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
    order = [EventType.Name(e.event_type) for e in history.events if e.event_type in kinds]
    print("commands:", order)
    replayer = Replayer(workflows=[OrderProbe], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    print("replay failure:", result.replay_failure)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        asyncio.run(serve(sys.argv[1], sys.argv[2]))
    else:
        asyncio.run(probe())
