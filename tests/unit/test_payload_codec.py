"""The processes' data converter: payloads past Temporal's warning size go compressed, the
rest as plain JSON (what the Web UI shows), and either kind reads back the same."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.api.common.v1 import Payload

from api.nodepool.messages import PoolState
from tests.workflows.test_history_bound import waiting_pods
from tests.workflows.test_nodepool_races import specs
from worker.payload_codec import (
    COMPRESS_OVER,
    DATA_CONVERTER,
    ENCODING,
    LargePayloadCodec,
    PayloadTooLarge,
    compressed,
    decompressed,
)


def encoded(value: object) -> Payload:
    [payload] = asyncio.run(DATA_CONVERTER.encode([value]))
    return payload


def decoded(payload: Payload) -> PoolState:
    [value] = asyncio.run(DATA_CONVERTER.decode([payload], [PoolState]))
    assert isinstance(value, PoolState)
    return value


def test_a_large_state_goes_compressed_well_under_temporals_limit_and_reads_back() -> None:
    state = PoolState(specs=specs(), pending=waiting_pods(6_000))
    payload = encoded(state)
    assert payload.metadata["encoding"] == ENCODING
    assert len(state.model_dump_json()) > 2 * 2**20 > 4 * payload.ByteSize()
    assert decoded(payload) == state


def test_a_small_payload_stays_plain_json() -> None:
    state = PoolState(specs=specs(), pending=waiting_pods(10))
    payload = encoded(state)
    assert payload.metadata["encoding"] == b"json/plain"
    assert payload.ByteSize() < COMPRESS_OVER
    assert decoded(payload) == state


def test_payloads_written_before_the_codec_read_as_before() -> None:
    state = PoolState(specs=specs(), pending=waiting_pods(2_000))
    [plain] = DATA_CONVERTER.payload_converter.to_payloads([state])
    assert decoded(plain) == state


def test_a_bounded_decode_stops_at_its_bound_even_when_the_bound_is_used_up_exactly() -> None:
    """The codec server's bound is on a request's payloads together; the payload after one
    that used all of it must be refused, not inflated without a limit (zlib's 0)."""
    first = compressed(Payload(data=b"\0" * (COMPRESS_OVER + 1)))
    exact = decompressed(first).ByteSize()
    codec = LargePayloadCodec(max_decoded_bytes=exact)
    assert asyncio.run(codec.decode([first]))[0].ByteSize() == exact
    with pytest.raises(PayloadTooLarge, match="inflate past"):
        asyncio.run(codec.decode([first, first]))
    with pytest.raises(PayloadTooLarge):
        decompressed(first, exact - 1)
