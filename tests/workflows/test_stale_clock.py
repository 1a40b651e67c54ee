"""Why the workflows decide on time only through alarms (workflows/alarms.py).

After a worker dies, a query (`pools describe`, the Web UI) can reach a new worker with a
history ending in signals no task has taken; the SDK (temporalio 1.35) runs the workflow on
them with the clock of the task *before*, while a replay of the same history sees the true
time. A decision "is now past the deadline?" taken there goes one way live and the other on
replay — what froze `nodepool-default-lane-b` in a nondeterminism loop (its history:
`git show a147c42:tests/replay/histories/nodepool-lane-b-stale-clock.json`). The product's
worker refuses such activations (`worker/untaken_events.py`,
`tests/workflows/test_untaken_events.py`); this probe runs on the SDK's plain runner, to show
that the alarms alone keep a decision deterministic.

The probe takes the same decision both ways under exactly those conditions: decided by
alarm, its history replays; decided by the clock, it does not. If the second half ever
passes, the SDK has fixed its clock and the alarms are only a safety margin.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.workflows.clock_probe import ClockProbe

ROOT = __file__.rsplit("/tests/", 1)[0]


class ProbeWorker:
    def __init__(self, address: str, queue: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.workflows.clock_probe", address, queue], cwd=ROOT
        )

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


async def last_task_time(handle: WorkflowHandle) -> datetime:
    history = await handle.fetch_history()
    started = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    ]
    return started[-1].event_time.ToDatetime().replace(tzinfo=UTC)


async def settled(handle: WorkflowHandle, signals: int) -> None:
    """Until the probe has completed a workflow task after its `signals`-th signal."""
    for _ in range(300):
        events = (await handle.fetch_history()).events
        kinds = [e.event_type for e in events]
        received = [
            i for i, k in enumerate(kinds) if k == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        ]
        done = [i for i, k in enumerate(kinds) if k == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
        if len(received) == signals and done and done[-1] > received[-1]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the probe never took signal {signals} in")


async def run_probe(client: Client, address: str, *, by_alarm: bool) -> str | None:
    """The probe through a worker kill, a query and a deadline; its replay failure, if any."""
    # The probe's worker, a process of its own, and the replayer read plain pydantic JSON:
    # what is under test is the SDK, not our payloads.
    config = client.config()
    config["data_converter"] = pydantic_data_converter
    client = Client(**config)
    queue = f"probe-{uuid.uuid4()}"
    first = ProbeWorker(address, queue)
    second: ProbeWorker | None = None
    try:
        handle = await client.start_workflow(
            ClockProbe.run, by_alarm, id=f"probe-{uuid.uuid4()}", task_queue=queue
        )
        await handle.signal(ClockProbe.hello)
        # The first worker answers: it has run the probe and holds it in its sticky cache.
        assert await handle.query(ClockProbe.waiting) is False
        then = await last_task_time(handle)
        first.kill()
        second = ProbeWorker(address, queue)
        await asyncio.sleep(1.0)
        # A query while nothing is pending: the new worker rebuilds the probe to answer it
        # (once the dead worker's sticky queue has timed out) ...
        query = asyncio.create_task(handle.query(ClockProbe.waiting))
        await asyncio.sleep(0.5)
        # ... and meanwhile the deadline comes in: just after the last task the probe ran,
        # long before now. Decided at once, it has passed.
        await handle.signal(ClockProbe.deadline, then + timedelta(seconds=0.5))
        await query
        await settled(handle, signals=2)
        if by_alarm:  # the alarm rings: the probe acts on the deadline and ends
            await asyncio.wait_for(handle.result(), timeout=30)
        else:  # one more task, so that history goes on past the decision
            await handle.signal(ClockProbe.hello)
            await settled(handle, signals=3)
        history = await handle.fetch_history()
    finally:
        if first.process.poll() is None:
            first.kill()
        if second is not None:
            second.kill()
    replayer = Replayer(workflows=[ClockProbe], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    return str(result.replay_failure) if result.replay_failure else None


@pytest.mark.slow
async def test_a_deadline_decided_by_alarm_replays_after_a_restart_and_a_query(
    temporal_client: Client, temporal_address: str
) -> None:
    assert await run_probe(temporal_client, temporal_address, by_alarm=True) is None


@pytest.mark.slow
async def test_a_deadline_decided_by_the_clock_does_not(
    temporal_client: Client, temporal_address: str
) -> None:
    failure = await run_probe(temporal_client, temporal_address, by_alarm=False)
    if failure is None:
        pytest.fail(
            "the clock-read decision replayed: the SDK's stale workflow.now() after a "
            "query-rebuilt cache seems fixed (workflows/alarms.py could be relaxed)"
        )
    assert "Nondeterminism" in failure
