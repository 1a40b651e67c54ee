"""Every process's data converter: pydantic JSON (reading fields a newer release added as absent),
with the largest payloads compressed.

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

import zlib
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, PayloadCodec

from worker.forward_compatible import ForwardCompatiblePayloadConverter

ENCODING = b"binary/zlib"
# Temporal's own warning size for a payload: below it nothing changes.
COMPRESS_OVER = 512 * 1024


def compressed(payload: Payload) -> Payload:
    """zlib for a payload over `COMPRESS_OVER` bytes (the whole payload, metadata and all,
    as Temporal's codec samples do); any other is returned as it is."""
    if payload.ByteSize() <= COMPRESS_OVER:
        return payload
    return Payload(metadata={"encoding": ENCODING}, data=zlib.compress(payload.SerializeToString()))


class PayloadTooLarge(ValueError):
    """A compressed payload that would inflate past the bound given to `decompressed`."""


def decompressed(payload: Payload, max_bytes: int | None = None) -> Payload:
    """The payload `compressed` was given; any other is returned as it is. With
    `max_bytes`, one that would inflate past it raises `PayloadTooLarge` instead (a codec
    server anyone may call must not be made to inflate a few MB into gigabytes)."""
    if payload.metadata.get("encoding") != ENCODING:
        return payload
    if max_bytes is None:
        return Payload.FromString(zlib.decompress(payload.data))
    if max_bytes < 1:  # zlib reads a max_length of 0 as no limit at all
        raise PayloadTooLarge("no room left to inflate it")
    inflater = zlib.decompressobj()
    data = inflater.decompress(payload.data, max_bytes)
    if inflater.unconsumed_tail:
        raise PayloadTooLarge(f"it inflates past {max_bytes} bytes")
    if not inflater.eof:
        raise zlib.error("incomplete or truncated stream")
    return Payload.FromString(data)


class LargePayloadCodec(PayloadCodec):
    """`max_decoded_bytes`: what the payloads of one `decode` may inflate to, together (the
    codec server's bound: a request may carry hundreds of payloads)."""

    def __init__(self, max_decoded_bytes: int | None = None) -> None:
        self._max_decoded_bytes = max_decoded_bytes

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [compressed(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if self._max_decoded_bytes is None:
            return [decompressed(payload) for payload in payloads]
        left, decoded = self._max_decoded_bytes, []
        for payload in payloads:
            try:
                inflated = decompressed(payload, left)
            except PayloadTooLarge:
                raise PayloadTooLarge(
                    f"the payloads inflate past {self._max_decoded_bytes // 2**20} MB"
                ) from None
            if inflated is not payload:
                left -= inflated.ByteSize()
            decoded.append(inflated)
        return decoded


# Pydantic JSON that skips fields a newer release added (worker/forward_compatible.py).
DATA_CONVERTER = DataConverter(
    payload_converter_class=ForwardCompatiblePayloadConverter, payload_codec=LargePayloadCodec()
)
