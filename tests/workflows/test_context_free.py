"""`worker.context_free`: the worker answers the SDK's serialization-context questions
itself when its converter takes no context, and the payloads it writes are the ones the
sandbox's answers gave: compressed over the codec's bound, readable by every process."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.converter import (
    ActivitySerializationContext,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
)
from temporalio.worker import Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from tests.payload_keys import KEYRING
from tests.workflows.echo_probe import WRAPPING, EchoProbe, unwrap
from worker.context_free import ContextFreeRunner, ignores_contexts, runner_for
from worker.payload_codec import COMPRESS_OVER, DATA_CONVERTER, ENCODING, opened

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _echo_payloads(client: Client, runner: WorkflowRunner, text: str) -> list[Payload]:
    """The payloads EchoProbe's history holds, run by a worker with `runner`: opened (the
    suite's processes seal theirs, each with a nonce of its own), not inflated."""
    queue = f"echo-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=queue, workflows=[EchoProbe], activities=[unwrap], workflow_runner=runner
    ):
        handle = await client.start_workflow(
            EchoProbe.run, text, id=f"echo-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        assert await handle.result() == text
    payloads: list[Payload] = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            payloads += event.activity_task_scheduled_event_attributes.input.payloads
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payloads += event.activity_task_completed_event_attributes.result.payloads
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            payloads += event.marker_recorded_event_attributes.details["result"].payloads
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            payloads += event.workflow_execution_completed_event_attributes.result.payloads
    return [opened(payload, KEYRING, accept_unsealed=False) for payload in payloads]


async def test_the_worker_writes_the_payloads_the_sandbox_would(
    temporal_client: Client,
) -> None:
    assert ignores_contexts(DATA_CONVERTER)
    runner = runner_for(DATA_CONVERTER, SandboxedWorkflowRunner())
    assert isinstance(runner, ContextFreeRunner)
    for text in ("small", "x" * (COMPRESS_OVER + 1)):
        answered_here = await _echo_payloads(temporal_client, runner, text)
        answered_in_sandbox = await _echo_payloads(temporal_client, SandboxedWorkflowRunner(), text)
        # activity input and result, the local activity's marker, the workflow's result
        assert len(answered_here) == 4
        assert answered_here == answered_in_sandbox
    assert all(p.metadata["encoding"] == ENCODING for p in answered_here)


class _ContextRecordingCodec(PayloadCodec, WithSerializationContext):
    """A codec that takes a context (as an encrypting codec keyed per workflow may): records
    the context each payload was encoded with."""

    def __init__(
        self,
        encoded: list[tuple[bytes, SerializationContext | None]],
        context: SerializationContext | None = None,
    ) -> None:
        self.encoded = encoded
        self._context = context

    def with_context(self, context: SerializationContext) -> _ContextRecordingCodec:
        return _ContextRecordingCodec(self.encoded, context)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.encoded += [(p.data, self._context) for p in payloads]
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


async def test_a_converter_that_takes_contexts_still_gets_them(temporal_client: Client) -> None:
    encoded: list[tuple[bytes, SerializationContext | None]] = []
    converter = dataclasses.replace(DATA_CONVERTER, payload_codec=_ContextRecordingCodec(encoded))
    assert not ignores_contexts(converter)
    config = temporal_client.config()
    config["data_converter"] = converter
    client = Client(**config)
    runner = runner_for(converter, SandboxedWorkflowRunner())
    await _echo_payloads(client, runner, "keyed")
    # The activity's input, which only the workflow writes, was encoded for the activity.
    [context] = [c for data, c in encoded if data == f'"keyed{WRAPPING}"'.encode()]
    assert isinstance(context, ActivitySerializationContext)
    assert context.activity_type == "unwrap"
