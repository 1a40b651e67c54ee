"""A query during a worker takeover must not leave a history that fails to replay.

A worker dies; a query comes while its workflow is quiet and waits on the dead worker's sticky
queue; a signal comes meanwhile; the query moves to the normal queue, and the new worker gets
it with a history ending in that signal, which no workflow task has taken. The SDK (temporalio
1.35) runs the workflow on that signal to answer the query and keeps the result; the real task
then brings only the signals after it. Live the probe ran two rounds, on replay one: its
commands come in another order and the workflow loops on nondeterminism errors — what froze
`nodepool-default-lane-a` in a chaos soak (docs/repro/).

The product's worker runs workflows through `worker.untaken_events.TakenEventsOnlyRunner`,
which refuses that activation: the query fails with a message to ask again, and the task
replays from history. The second test keeps the SDK's behaviour in view: if it ever passes,
the SDK no longer builds workflows from events no task has taken and the runner is only a
safety margin.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from api.errors import QUERY_REFUSED_DURING_TAKEOVER as REFUSAL
from tests.workflows.test_stale_clock import settled
from tests.workflows.untaken_probe import STICKY_TIMEOUT, RoundsProbe

ROOT = __file__.rsplit("/tests/", 1)[0]


class ProbeWorker:
    def __init__(self, address: str, queue: str, *, guarded: bool) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.workflows.untaken_probe",
                address,
                queue,
                "guarded" if guarded else "plain",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )

    async def ready(self) -> None:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.process.stdout.readline), 60)
        assert line.strip() == b"ready", line

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


@dataclass
class Takeover:
    query_answer: int | str  # the number of timers, or the query's failure
    commands: list[str]  # the commands the new worker wrote, in order
    replay_failure: str | None


async def takeover(client: Client, address: str, *, guarded: bool) -> Takeover:
    # The probe's worker, a process of its own, and the replayer read plain pydantic JSON:
    # what is under test is the SDK, not our payloads.
    config = client.config()
    config["data_converter"] = pydantic_data_converter
    client = Client(**config)
    queue = f"untaken-{uuid.uuid4()}"
    first = ProbeWorker(address, queue, guarded=guarded)
    second: ProbeWorker | None = None
    try:
        await first.ready()
        # By name: a typed start of a run without arguments makes mypy 2.4 mis-infer
        # `get_workflow_handle_for` in every other module it checks (45 errors).
        handle = await client.start_workflow(
            "RoundsProbe", id=f"untaken-{uuid.uuid4()}", task_queue=queue
        )
        await handle.signal(RoundsProbe.hello)
        await settled(handle, signals=1)
        first.kill()  # the probe stays bound to its sticky queue
        second = ProbeWorker(address, queue, guarded=guarded)
        await second.ready()
        # Quiet: the query goes to the dead worker's sticky queue and waits out its timeout.
        query = asyncio.create_task(handle.query(RoundsProbe.timers))
        await asyncio.sleep(STICKY_TIMEOUT.total_seconds() / 2)
        # The task for this signal also waits on the dead sticky queue, half a timeout longer.
        await handle.signal(RoundsProbe.arm)
        answer: int | str
        try:
            answer = await query  # the new worker, from a history ending in "arm"
        except WorkflowQueryFailedError as refused:
            answer = str(refused)
        await handle.signal(RoundsProbe.act)  # before "arm"'s task leaves the sticky queue
        await settled(handle, signals=3)
        history = await handle.fetch_history()
    finally:
        first.kill()
        if second is not None:
            second.kill()
    kinds = {EventType.EVENT_TYPE_TIMER_STARTED, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
    commands = [EventType.Name(e.event_type) for e in history.events if e.event_type in kinds]
    replayer = Replayer(workflows=[RoundsProbe], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    failure = str(result.replay_failure) if result.replay_failure else None
    return Takeover(answer, commands, failure)


@pytest.mark.slow
async def test_a_query_during_a_takeover_is_refused_and_the_history_replays(
    temporal_client: Client, temporal_address: str
) -> None:
    seen = await takeover(temporal_client, temporal_address, guarded=True)
    assert seen.query_answer == REFUSAL  # the query met the signal no task had taken
    # One round took "arm" and "act" together: the permit first, as a replay runs it.
    assert seen.commands == ["EVENT_TYPE_ACTIVITY_TASK_SCHEDULED", "EVENT_TYPE_TIMER_STARTED"]
    assert seen.replay_failure is None


@pytest.mark.slow
async def test_without_the_runner_the_sdk_writes_a_history_that_does_not_replay(
    temporal_client: Client, temporal_address: str
) -> None:
    seen = await takeover(temporal_client, temporal_address, guarded=False)
    if seen.replay_failure is None:
        pytest.fail(
            f"the history replayed (query answered {seen.query_answer!r}): the SDK seems no "
            "longer to run workflows on events no task has taken; the runner is a margin now"
        )
    assert seen.query_answer == 1  # answered with the effect of a signal no task had taken
    assert seen.commands == ["EVENT_TYPE_TIMER_STARTED", "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"]
    assert "Nondeterminism" in seen.replay_failure
