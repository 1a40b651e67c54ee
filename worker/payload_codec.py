"""Every process's data converter: pydantic JSON, with the largest payloads compressed.

Temporal refuses a payload over its blob limit (2 MB by default, Temporal Cloud's too), and
the SDK then fails the workflow task, again on every retry: a pool whose continue-as-new
carried more than ~2,800 claims (~700 bytes each as JSON) would stop for good there, and so
would a `demand` signal or a plan naming ~4,300 pending pods (docs/capacity.md). That JSON
repeats itself (the same keys, shapes and offerings in every claim) and compresses about
tenfold, which is the first remedy Temporal documents for the blob limit.

Only payloads over `COMPRESS_OVER` are compressed: everything smaller — a claim's input, its
status, nearly every signal and activity — stays plain JSON that the Temporal Web UI and
`temporal workflow show` display as they did. Compressed payloads are marked by their
encoding, so histories written before (or by a process without this codec) decode as
before, and every process must use `DATA_CONVERTER` to read the compressed ones.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec

ENCODING = b"binary/zlib"
# Temporal's own warning size for a payload: below it nothing changes.
COMPRESS_OVER = 512 * 1024


def compressed(payload: Payload) -> Payload:
    """zlib for a payload over `COMPRESS_OVER` bytes (the whole payload, metadata and all,
    as Temporal's codec samples do); any other is returned as it is."""
    if payload.ByteSize() <= COMPRESS_OVER:
        return payload
    return Payload(metadata={"encoding": ENCODING}, data=zlib.compress(payload.SerializeToString()))


def decompressed(payload: Payload) -> Payload:
    """The payload `compressed` was given; any other is returned as it is."""
    if payload.metadata.get("encoding") != ENCODING:
        return payload
    return Payload.FromString(zlib.decompress(payload.data))


class LargePayloadCodec(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [compressed(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [decompressed(payload) for payload in payloads]


DATA_CONVERTER: DataConverter = dataclasses.replace(
    pydantic_data_converter, payload_codec=LargePayloadCodec()
)
