"""Every process's data converter: pydantic JSON (reading fields a newer release added as absent),
with the largest payloads compressed, and every payload sealed when a keyring is configured.

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

Sealing (`SealingCodec`, `data_converter`): reaching Temporal must not be enough to start or
signal anything that acts, nor to read a history. With a keyring (`CLOUDBURST_PAYLOAD_KEYRING_FILE`,
a mounted Secret only the worker, the trigger, the CLI and the codec server hold) every payload
is compressed as above, then encrypted and authenticated with AES-256-GCM under the keyring's
first key: the whole serialized payload inside, `binary/cloudburst-sealed` and the key's id in
the metadata, both bound as associated data. A payload that does not open (not sealed, sealed
with a key the keyring lacks, altered) decodes to a `binary/cloudburst-refused` payload saying
why, and only the converter refuses it. Not the codec: the SDK decodes a whole activation at
once, and a codec that raises fails that workflow task, again on every retry, so one forged
signal would stop the legitimate workflow it was sent to. A converter that raises a
non-retryable `ApplicationError` instead makes the SDK drop that signal ("Failed deserializing
signal input ... dropping the signal"), reject that update, and fail a workflow started with
such an input, once, with the reason in its failure. `accept_unsealed` reads unsealed payloads
as they are, for the histories written before the keyring while those workflows drain
(docs/security.md, "Payload keys").
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
import secrets
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, EncodingPayloadConverter, PayloadCodec
from temporalio.exceptions import ApplicationError

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


# --- sealing: who wrote a payload --------------------------------------------------------

SEALED = b"binary/cloudburst-sealed"
# What `SealingCodec.decode` puts in place of a payload it refuses: no converter but
# `RefusedPayloadConverter` reads it, and that one raises (module docstring).
REFUSED = b"binary/cloudburst-refused"
KEY_ID = "key-id"
PAYLOAD_REFUSED = "PayloadRefused"  # the type of the error a refused payload raises
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # GCM's own: a random one per payload
KEY_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")


class KeyringError(ValueError):
    """A keyring file that cannot be used; the message names the file and the line."""


@dataclass(frozen=True)
class Keyring:
    """Payload keys by id: the first seals, every one opens (rotation: docs/security.md)."""

    sealing_id: str
    keys: dict[str, AESGCM]

    @classmethod
    def from_file(cls, path: Path) -> Keyring:
        try:
            text = path.read_text()
        except OSError as err:
            raise KeyringError(f"{path}: {err.strerror}") from None
        return cls.from_text(text, str(path))

    @classmethod
    def from_text(cls, text: str, source: str = "the keyring") -> Keyring:
        """One key a line, `<key-id> <32 random bytes, base64>`; blank lines and `#` comments
        are skipped. What `cloudburst payload-key create` prints is such a line."""
        keys: dict[str, AESGCM] = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key_id, _, encoded = line.partition(" ")
            where = f"{source}, line {number}"
            if not KEY_ID_PATTERN.fullmatch(key_id):
                raise KeyringError(f"{where}: a key id is 1-64 of [A-Za-z0-9._-], then a space")
            if key_id in keys:
                raise KeyringError(f"{where}: key id {key_id!r} appears twice")
            try:
                key = base64.b64decode(encoded.strip(), validate=True)
            except binascii.Error:
                raise KeyringError(f"{where}: the key is not base64") from None
            if len(key) != KEY_BYTES:
                raise KeyringError(f"{where}: a key is {KEY_BYTES} bytes, not {len(key)}")
            keys[key_id] = AESGCM(key)
        if not keys:
            raise KeyringError(f"{source} holds no key")
        return cls(sealing_id=next(iter(keys)), keys=keys)


def new_key_line(key_id: str | None = None) -> str:
    """A keyring line holding a new random key; its id the date and a random suffix unless
    given."""
    if key_id is None:
        key_id = f"{time.strftime('%Y%m%d', time.gmtime())}-{secrets.token_hex(4)}"
    if not KEY_ID_PATTERN.fullmatch(key_id):
        raise KeyringError(f"{key_id!r}: a key id is 1-64 of [A-Za-z0-9._-]")
    return f"{key_id} {base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()}"


def sealed(payload: Payload, keyring: Keyring) -> Payload:
    """`payload` (its serialized bytes, metadata and all) encrypted and authenticated with the
    keyring's first key; the encoding and the key id are bound as associated data."""
    key_id = keyring.sealing_id.encode()
    nonce = os.urandom(NONCE_BYTES)
    box = keyring.keys[keyring.sealing_id].encrypt(
        nonce, payload.SerializeToString(), _bound(key_id)
    )
    return Payload(metadata={"encoding": SEALED, KEY_ID: key_id}, data=nonce + box)


def opened(payload: Payload, keyring: Keyring, accept_unsealed: bool) -> Payload:
    """The payload `sealed` was given. Anything else (unsealed unless `accept_unsealed`, a
    key this keyring lacks, a seal that does not verify) comes back as a `refused` payload
    saying why: never an exception, which would fail the whole workflow task it came in."""
    if payload.metadata.get("encoding") != SEALED:
        if accept_unsealed:
            return payload
        return refused("it was not sealed by a payload key of this deployment")
    key_id = payload.metadata.get(KEY_ID, b"")
    key = keyring.keys.get(key_id.decode("utf-8", "replace"))
    if key is None:
        return refused(
            f"it was sealed with the payload key {key_id.decode('utf-8', 'replace')!r}, "
            "which this process's keyring lacks"
        )
    try:
        inner = key.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], _bound(key_id))
        return Payload.FromString(inner)
    except (InvalidTag, ValueError, DecodeError):
        return refused("its seal does not verify (altered, or not sealed by our key)")


def refused(why: str) -> Payload:
    return Payload(metadata={"encoding": REFUSED, "reason": why.encode()})


def _bound(key_id: bytes) -> bytes:
    return SEALED + b"\0" + key_id


class SealingCodec(PayloadCodec):
    """Compress (`LargePayloadCodec`), then seal; open, then inflate. A payload that does not
    open is decoded to a `refused` one, which the converter refuses (module docstring)."""

    def __init__(
        self, keyring: Keyring, accept_unsealed: bool = False, max_decoded_bytes: int | None = None
    ) -> None:
        self.keyring = keyring
        self.accept_unsealed = accept_unsealed
        self._compression = LargePayloadCodec(max_decoded_bytes)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [sealed(compressed(payload), self.keyring) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._compression.decode(
            [opened(payload, self.keyring, self.accept_unsealed) for payload in payloads]
        )


class RefusedPayloadConverter(EncodingPayloadConverter):
    """Reads a `refused` payload by raising a non-retryable `ApplicationError` of type
    `PayloadRefused`: a workflow whose input it is fails (once, saying why), a signal
    carrying it is dropped, an update carrying it rejected. Writes none."""

    @property
    def encoding(self) -> str:
        return REFUSED.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return None

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        reason = payload.metadata.get("reason", b"").decode("utf-8", "replace")
        raise ApplicationError(
            f"payload refused: {reason} (docs/security.md, payload keys)",
            type=PAYLOAD_REFUSED,
            non_retryable=True,
        )


def data_converter(keyring: Keyring | None, accept_unsealed: bool = False) -> DataConverter:
    """The converter of a process with `keyring` (None: `DATA_CONVERTER`, nothing sealed)."""
    if keyring is None:
        return DATA_CONVERTER
    return dataclasses.replace(DATA_CONVERTER, payload_codec=SealingCodec(keyring, accept_unsealed))


class PayloadConverter(ForwardCompatiblePayloadConverter):
    """Pydantic JSON that skips fields a newer release added (worker/forward_compatible.py),
    and refuses `refused` payloads."""

    def __init__(self) -> None:
        super().__init__()
        self._set_converters(*self.converters.values(), RefusedPayloadConverter())


# Without a keyring: nothing sealed, every payload read as it is.
DATA_CONVERTER = DataConverter(
    payload_converter_class=PayloadConverter, payload_codec=LargePayloadCodec()
)
