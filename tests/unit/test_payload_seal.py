"""Sealed payloads (worker/payload_codec.py): what our processes seal reads back; anything
else decodes to a refused payload, which the converter refuses with a non-retryable error
saying why, and the codec itself never raises (a codec that raises fails the whole
workflow task it decodes, on every retry)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.exceptions import ApplicationError

from api.messages import ScaleDownRequest
from api.nodepool.messages import PoolState
from tests.workflows.test_history_bound import waiting_pods
from tests.workflows.test_nodepool_races import specs
from worker.payload_codec import (
    DATA_CONVERTER,
    ENCODING,
    KEY_ID,
    PAYLOAD_REFUSED,
    REFUSED,
    SEALED,
    Keyring,
    KeyringError,
    SealingCodec,
    data_converter,
    new_key_line,
)

OURS = Keyring.from_text(new_key_line("ours"))
REQUEST = ScaleDownRequest(reason="done", force=True)


def sealed_with(keyring: Keyring, value: object) -> Payload:
    [payload] = asyncio.run(data_converter(keyring).encode([value]))
    return payload


def read(payload: Payload, keyring: Keyring = OURS, accept_unsealed: bool = False) -> object:
    converter = data_converter(keyring, accept_unsealed)
    [value] = asyncio.run(converter.decode([payload], [type(REQUEST)]))
    return value


def refusal(payload: Payload, keyring: Keyring = OURS, accept_unsealed: bool = False) -> str:
    with pytest.raises(ApplicationError) as raised:
        read(payload, keyring, accept_unsealed)
    assert raised.value.type == PAYLOAD_REFUSED and raised.value.non_retryable
    return str(raised.value)


def test_a_sealed_payload_reads_back_and_shows_nothing_of_its_content() -> None:
    payload = sealed_with(OURS, REQUEST)
    assert payload.metadata["encoding"] == SEALED and payload.metadata[KEY_ID] == b"ours"
    assert b"done" not in payload.SerializeToString()
    assert read(payload) == REQUEST


def test_a_large_payload_is_compressed_then_sealed() -> None:
    state = PoolState(specs=specs(), pending=waiting_pods(6_000))
    payload = sealed_with(OURS, state)
    assert payload.ByteSize() < len(state.model_dump_json()) / 4
    [inner] = asyncio.run(SealingCodec(OURS).decode([payload]))
    assert inner.metadata["encoding"] == b"json/plain"  # inflated, as it was written
    [back] = asyncio.run(data_converter(OURS).decode([payload], [PoolState]))
    assert back == state


def test_an_unsealed_payload_is_refused_saying_why() -> None:
    [plain] = asyncio.run(DATA_CONVERTER.encode([REQUEST]))
    assert "not sealed by a payload key" in refusal(plain)


def test_an_altered_payload_is_refused() -> None:
    payload = sealed_with(OURS, REQUEST)
    flipped = bytearray(payload.data)
    flipped[-1] ^= 1
    altered = Payload(metadata=payload.metadata, data=bytes(flipped))
    assert "does not verify" in refusal(altered)


def test_the_key_id_is_bound_to_the_seal() -> None:
    """A payload relabelled with another key id of the keyring does not open under it."""
    keyring = Keyring.from_text(f"{new_key_line('a')}\n{new_key_line('b')}")
    payload = sealed_with(keyring, REQUEST)
    relabelled = Payload(metadata={**payload.metadata, KEY_ID: b"b"}, data=payload.data)
    assert "does not verify" in refusal(relabelled, keyring)


def test_a_payload_sealed_by_another_key_is_refused() -> None:
    theirs = Keyring.from_text(new_key_line("ours"))  # the same id, another key
    assert "does not verify" in refusal(sealed_with(theirs, REQUEST))
    stranger = Keyring.from_text(new_key_line("theirs"))
    assert "'theirs', which this process's keyring lacks" in refusal(sealed_with(stranger, REQUEST))


def test_a_payload_already_marked_refused_is_refused_still() -> None:
    forged = Payload(metadata={"encoding": REFUSED, "reason": b"nothing"}, data=b"{}")
    assert "not sealed" in refusal(forged)


def test_rotation_the_first_key_seals_every_key_opens() -> None:
    old, new = new_key_line("old"), new_key_line("new")
    before = Keyring.from_text(old)
    during = Keyring.from_text(f"{old}\n{new}")  # every process can open the new key
    after = Keyring.from_text(f"# rotated\n{new}\n{old}\n")  # the new key seals
    written_before = sealed_with(before, REQUEST)
    written_after = sealed_with(after, REQUEST)
    assert written_after.metadata[KEY_ID] == b"new"
    for keyring in (during, after):
        assert read(written_before, keyring) == REQUEST
    assert read(written_after, during) == REQUEST


def test_unsealed_payloads_read_only_when_the_rollout_setting_allows() -> None:
    [plain] = asyncio.run(DATA_CONVERTER.encode([REQUEST]))
    assert read(plain, accept_unsealed=True) == REQUEST
    refusal(plain, accept_unsealed=False)
    # Compressed by a release without keys: inflated as before.
    state = PoolState(specs=specs(), pending=waiting_pods(6_000))
    [compressed] = asyncio.run(DATA_CONVERTER.encode([state]))
    assert compressed.metadata["encoding"] == ENCODING
    [back] = asyncio.run(
        data_converter(OURS, accept_unsealed=True).decode([compressed], [PoolState])
    )
    assert back == state


def test_without_a_keyring_nothing_is_sealed() -> None:
    assert data_converter(None) is DATA_CONVERTER


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "holds no key"),
        ("# only a comment\n", "holds no key"),
        ("k notbase64!!", "line 1: the key is not base64"),
        ("k c2hvcnQ=", "a key is 32 bytes, not 5"),
        ("bad/id AAAA", "a key id is 1-64"),
        (f"{new_key_line('k')}\n{new_key_line('k')}", "line 2: key id 'k' appears twice"),
    ],
    ids=["empty", "comment-only", "not-base64", "short", "bad-id", "twice"],
)
def test_a_keyring_that_cannot_serve_says_which_line(text: str, says: str) -> None:
    with pytest.raises(KeyringError, match=says):
        Keyring.from_text(text)


def test_a_keyring_file_is_read_and_a_missing_one_named(tmp_path: Path) -> None:
    path = tmp_path / "keyring"
    with pytest.raises(KeyringError, match=str(path)):
        Keyring.from_file(path)
    path.write_text(new_key_line("file-key") + "\n")
    assert Keyring.from_file(path).sealing_id == "file-key"
