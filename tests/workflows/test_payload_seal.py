"""Reaching Temporal without a payload key of ours starts and signals nothing that acts
(worker/payload_codec.py, docs/security.md "Payload keys"), on the real dev server with the
real NodeClaimWorkflow (its cluster and cloud stand-in activities, tests/workflows/
test_claim_wakeups.py), and the operator's paths keep working through the keys.

- A signal no key sealed, to a running claim: README's `temporal workflow signal ...
  scale_down` as it was written before the keys, forced. Without sealing the claim would
  scale down (the attack of issue #53); with a codec that raised on it, every workflow task
  of the claim would fail from then on. Here the SDK drops it: the claim stays Ready and no
  task fails. A forged update (what `cloudburst claims scale-down` sends) is rejected.
- A workflow started with an input no key sealed: fails at once, with the reason in its
  failure, having run nothing (no activity, no local activity); without sealing, the claim
  would create its VM.
- README's command through the codec server (`--codec-endpoint`, `--codec-auth`) is sealed
  there and scales the claim down; without the token the codec server refuses it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from api import NodeClaimPhase
from api.messages import ScaleDownRequest, claim_key_of
from sim.dev.stack import free_port, temporal_cli
from tests.workflows.test_claim_wakeups import Cluster, observation, phase, start_claim, worker
from worker.codec_server import codec_app
from worker.payload_codec import (
    DATA_CONVERTER,
    PAYLOAD_REFUSED,
    Keyring,
    data_converter,
    new_key_line,
)
from workflows.nodeclaim import NodeClaimWorkflow

pytestmark = pytest.mark.asyncio(loop_scope="session")

KEYRING = Keyring.from_text(new_key_line("test"))
TOKEN = "operator-token"
# README's scale-down with the Temporal CLI.
README_INPUT = '{"reason": "done", "requested_by": "temporal-cli"}'


def sealed_client(client: Client) -> Client:
    """`client`'s connection, with the processes' sealing converter."""
    return _with_converter(client, data_converter(KEYRING))


def unsealed_client(client: Client) -> Client:
    """The same connection without a key: what whoever reaches Temporal has."""
    return _with_converter(client, DATA_CONVERTER)


def _with_converter(client: Client, converter: DataConverter) -> Client:
    config = client.config()
    config["data_converter"] = converter
    return Client(**config)


@pytest_asyncio.fixture(loop_scope="session")
async def codec_endpoint(tmp_path: Path) -> AsyncIterator[str]:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    runner = web.AppRunner(codec_app(token_file=token, keyring=KEYRING))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def temporal(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The `temporal` CLI, in a thread: the codec server it may call runs on this loop."""
    return await asyncio.to_thread(
        subprocess.run,
        [temporal_cli(), *args, "--address", address],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def until(handle: WorkflowHandle[NodeClaimWorkflow, object], *phases: NodeClaimPhase) -> None:
    for _ in range(300):
        if await phase(handle) in phases:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id} never reached {phases}: {await phase(handle)}")


async def events(handle: WorkflowHandle[NodeClaimWorkflow, object]) -> list[EventType.ValueType]:
    return [event.event_type async for event in handle.fetch_history_events()]


async def signal_taken(
    handle: WorkflowHandle[NodeClaimWorkflow, object],
) -> list[EventType.ValueType]:
    """The history once a workflow task completed after the last signal."""
    for _ in range(300):
        kinds = await events(handle)
        last_signal = max(
            i for i, k in enumerate(kinds) if k == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        )
        if EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED in kinds[last_signal:]:
            return kinds
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id}: no workflow task completed after the signal")


async def test_a_signal_no_key_sealed_is_dropped_and_the_readme_signal_goes_through_the_codec_server(
    temporal_client: Client, temporal_address: str, codec_endpoint: str
) -> None:
    """Issue #53's third attempt: a forced `scale_down` with no uid, sent by a process that
    reaches Temporal without our key (README's old `temporal workflow signal`), to a Ready
    claim: dropped, the claim stays, no workflow task fails; a forged update is rejected; the
    operator's signal through the codec server, with its token, scales it down. (Fails on
    the code before payload keys: the forged signal deleted the claim; and on a codec that
    raises instead: no workflow task completed after the signal.)"""
    ours, theirs = sealed_client(temporal_client), unsealed_client(temporal_client)
    queue = f"seal-{uuid.uuid4().hex[:8]}"
    async with worker(ours, queue, Cluster()):
        handle = await start_claim(ours, queue, None)
        name = claim_key_of(handle.id)[1]
        await handle.signal(NodeClaimWorkflow.observe_node, observation(name, empty_for_s=None))
        await until(handle, NodeClaimPhase.READY)
        forced = json.dumps({"reason": "forged", "requested_by": "attacker", "force": True})
        signal = ["workflow", "signal", "--workflow-id", handle.id, "--name", "scale_down"]
        plain = await temporal(temporal_address, *signal, "--input", forced)
        assert plain.returncode == 0, plain.stderr  # Temporal took it: only we refuse it
        kinds = await signal_taken(handle)
        assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
        assert await phase(handle) == NodeClaimPhase.READY

        forged = theirs.get_workflow_handle_for(NodeClaimWorkflow.run, handle.id)
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await forged.execute_update(
                NodeClaimWorkflow.request_scale_down, ScaleDownRequest(reason="forged", force=True)
            )
        assert isinstance(rejected.value.cause, ApplicationError)
        assert rejected.value.cause.type == PAYLOAD_REFUSED
        assert "not sealed by a payload key" in str(rejected.value.cause)
        assert await phase(handle) == NodeClaimPhase.READY

        through = ["--codec-endpoint", codec_endpoint]
        refused = await temporal(temporal_address, *signal, "--input", README_INPUT, *through)
        assert refused.returncode != 0 and "Unauthorized" in refused.stderr
        sealed = await temporal(
            temporal_address,
            *signal,
            "--input",
            README_INPUT,
            *through,
            "--codec-auth",
            f"Bearer {TOKEN}",
        )
        assert sealed.returncode == 0, sealed.stderr
        await until(handle, NodeClaimPhase.DELETING, NodeClaimPhase.DELETED)
        assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in await events(handle)


async def test_a_workflow_started_with_an_input_no_key_sealed_fails_at_once_saying_why(
    temporal_client: Client,
) -> None:
    """A claim started by a process without our key fails at its first task, saying why,
    having run no activity. (Fails on the code before payload keys: the claim ran; and on a
    codec that raises instead: it never failed, its task retried.)"""
    ours, theirs = sealed_client(temporal_client), unsealed_client(temporal_client)
    queue = f"seal-{uuid.uuid4().hex[:8]}"
    cluster = Cluster()
    async with worker(ours, queue, cluster):
        handle = await start_claim(theirs, queue, None)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), timeout=30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == PAYLOAD_REFUSED
    assert "not sealed by a payload key" in str(cause)
    kinds = await events(handle)
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in kinds
    assert EventType.EVENT_TYPE_MARKER_RECORDED not in kinds  # no local activity either
    assert kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
