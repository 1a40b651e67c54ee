"""The codec server: what an operator sees of a compressed payload in the Web UI and with
`temporal workflow show --codec-endpoint` (the real CLI, against the real dev server), and
what it refuses: callers without its token, bodies too large, more work than its memory
holds."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import subprocess
import uuid
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from api.nodepool.messages import NodePoolInput, PoolState
from tests.conftest import TEMPORAL_CLI
from tests.payload_keys import KEYRING
from tests.workflows.test_history_bound import pods
from tests.workflows.test_nodepool_races import specs
from worker.codec_server import MAX_DECODED_BYTES, MAX_REQUEST_BYTES, codec_app
from worker.payload_codec import COMPRESS_OVER, ENCODING, SEALED
from workflows.nodepool import NodePoolWorkflow

UI = "http://127.0.0.1:8233"
TOKEN = "codec-token-1"


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def codec_url() -> AsyncIterator[str]:
    async with serving(codec_app([UI])) as url:
        yield url


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(f"{TOKEN}\n")  # as `kubectl create secret --from-file` often has it
    return path


async def _started_input(address: str, workflow_id: str, *codec: str) -> dict[str, Any]:
    """The workflow's input as `temporal workflow show` prints it (run in a thread: the
    codec server it calls answers from this test's event loop)."""
    command = [str(TEMPORAL_CLI), "workflow", "show", "-o", "json", "--address", address]
    shown = await asyncio.to_thread(
        subprocess.run,
        [*command, "-w", workflow_id, *codec],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    first = json.loads(shown.stdout)["events"][0]
    payload: dict[str, Any] = first["workflowExecutionStartedEventAttributes"]["input"]["payloads"][
        0
    ]
    return payload


def _encoding(payload: dict[str, Any]) -> bytes:
    return base64.b64decode(payload["metadata"]["encoding"])


async def test_the_cli_shows_a_large_pools_state_as_json_through_the_codec_server(
    temporal_client: Client, temporal_address: str, codec_url: str, token_file: Path
) -> None:
    # A pool whose state is past the codec's threshold: its input is stored compressed. No
    # worker polls its queue: what is shown is the input as recorded at the start.
    waiting = pods(0, 2_000)
    pool_id = f"nodepool-codec-{uuid.uuid4().hex[:8]}"
    handle = await temporal_client.start_workflow(
        NodePoolWorkflow.run,
        NodePoolInput(
            namespace="default",
            name=pool_id,
            state=PoolState(specs=specs(), pending={pod.uid: pod for pod in waiting}),
        ),
        id=pool_id,
        task_queue=f"nobody-{uuid.uuid4()}",
    )
    try:
        # What the UI shows without the codec server: sealed (tests/payload_keys.py), small.
        raw = await _started_input(temporal_address, pool_id)
        assert _encoding(raw) == SEALED
        assert len(base64.b64decode(raw["data"])) < COMPRESS_OVER
        # A codec server without the keys shows nothing more.
        shown = await _started_input(temporal_address, pool_id, "--codec-endpoint", codec_url)
        assert _encoding(shown) == SEALED

        # Through one holding the keys, which needs its token: the CLI sends it with
        # --codec-auth. (Without it, the CLI asks again until its 10 s deadline: the 401 is
        # checked below.)
        async with serving(codec_app([UI], token_file, keyring=KEYRING)) as guarded:
            shown = await _started_input(
                temporal_address,
                pool_id,
                *("--codec-endpoint", guarded, "--codec-auth", f"Bearer {TOKEN}"),
            )
            assert _encoding(shown) == b"json/plain"
            state = json.loads(base64.b64decode(shown["data"]))["state"]
            assert set(state["pending"]) == {pod.uid for pod in waiting}
    finally:
        await handle.terminate("test over")


async def test_the_web_ui_may_call_it_from_its_origin_and_is_told_what_is_wrong(
    codec_url: str,
) -> None:
    async with httpx.AsyncClient() as http:
        # The browser's preflight from the UI's origin, and from anywhere else.
        allowed = await http.options(
            f"{codec_url}/api/v1/namespaces/default/decode",
            headers={"Origin": UI, "Access-Control-Request-Method": "POST"},
        )
        assert allowed.headers["access-control-allow-origin"] == UI
        assert "x-namespace" in allowed.headers["access-control-allow-headers"]
        elsewhere = await http.options(
            f"{codec_url}/decode", headers={"Origin": "https://evil.example"}
        )
        assert "access-control-allow-origin" not in elsewhere.headers

        # Encode then decode, under a prefix (only the path's last part counts).
        big = {
            "metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
            "data": base64.b64encode(b'"' + b"x" * (COMPRESS_OVER + 1) + b'"').decode(),
        }
        small = {
            "metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
            "data": base64.b64encode(b'"small"').decode(),
        }
        empty = {"metadata": {"encoding": base64.b64encode(b"binary/null").decode()}}
        # Over 3 MB of data that does not repeat: its answer is written in pieces.
        varied = {
            "metadata": {"encoding": base64.b64encode(b"binary/plain").decode()},
            "data": base64.b64encode(os.urandom(4 * 2**20 + 1)).decode(),
        }
        sent = [big, small, empty, varied]
        encoded = await http.post(
            f"{codec_url}/prefix/encode", json={"payloads": sent}, headers={"Origin": UI}
        )
        assert encoded.status_code == 200
        assert encoded.headers["access-control-allow-origin"] == UI
        compressed, untouched, nothing_in_it, compressed_too = encoded.json()["payloads"]
        assert _encoding(compressed) == _encoding(compressed_too) == ENCODING
        assert untouched == small and nothing_in_it == empty
        decoded = await http.post(f"{codec_url}/decode", json=encoded.json())
        assert decoded.json()["payloads"] == sent

        # What is wrong, said plainly (the UI shows it), never a traceback.
        not_payloads = await http.post(f"{codec_url}/decode", content=b"{not json")
        assert not_payloads.status_code == 400
        assert "not a Payloads message" in not_payloads.json()["error"]
        broken = {"metadata": {"encoding": base64.b64encode(ENCODING).decode()}, "data": "AAAA"}
        corrupt = await http.post(f"{codec_url}/decode", json={"payloads": [broken]})
        assert corrupt.status_code == 400
        assert "cannot decode" in corrupt.json()["error"]
        nothing = await http.post(f"{codec_url}/decode", json={"payloads": []})
        assert nothing.json() == {"payloads": []}
        elsewhere_path = await http.post(f"{codec_url}/translate", json={"payloads": []})
        assert elsewhere_path.status_code == 404


async def test_it_answers_its_probes_and_refuses_to_inflate_a_bomb(codec_url: str) -> None:
    """Run as a Deployment anyone in the cluster may call: a few hundred KB that inflate
    past `MAX_DECODED_BYTES`, in one payload or in many, are refused with the reason, not
    inflated into the pod's memory."""
    bomb = Payload(
        metadata={"encoding": ENCODING},
        data=zlib.compress(Payload(data=b"\0" * (MAX_DECODED_BYTES + 1)).SerializeToString()),
    )
    fits = Payload(
        metadata={"encoding": ENCODING},
        data=zlib.compress(Payload(data=b"\0" * (MAX_DECODED_BYTES // 2)).SerializeToString()),
    )
    async with httpx.AsyncClient(timeout=60) as http:
        for probe in ("healthz", "readyz"):
            answer = await http.get(f"{codec_url}/{probe}")
            assert answer.status_code == 200 and answer.text == "ok"
        refused = await http.post(
            f"{codec_url}/decode", json={"payloads": [json_format.MessageToDict(bomb)]}
        )
        assert refused.status_code == 400
        assert "inflate past 64 MB" in refused.json()["error"]
        # Nor many that each fit and together do not.
        three = [json_format.MessageToDict(fits)] * 3
        refused = await http.post(f"{codec_url}/decode", json={"payloads": three})
        assert refused.status_code == 400
        assert "inflate past 64 MB" in refused.json()["error"]
        inflated = await http.post(
            f"{codec_url}/decode", json={"payloads": [json_format.MessageToDict(fits)]}
        )
        assert inflated.status_code == 200
        [payload] = inflated.json()["payloads"]
        assert len(base64.b64decode(payload["data"])) == MAX_DECODED_BYTES // 2


async def test_with_a_token_every_request_must_carry_it(tmp_path: Path, token_file: Path) -> None:
    """Every request but a CORS preflight (browsers send those without credentials) and the
    kubelet's probes; the answer says what is missing, with CORS headers so that the UI can
    read it. The file is read on every request: a rotated Secret needs no restart."""
    one = {"payloads": [json_format.MessageToDict(Payload(data=b"1"))]}
    async with serving(codec_app([UI], token_file)) as url, httpx.AsyncClient() as http:
        refused = await http.post(f"{url}/decode", json=one, headers={"Origin": UI})
        assert refused.status_code == 401
        assert "Authorization: Bearer <token>" in refused.json()["error"]
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert refused.headers["access-control-allow-origin"] == UI
        for wrong in (f"Bearer {TOKEN}x", "Bearer codec-token-", TOKEN, f"Basic {TOKEN}", ""):
            answer = await http.post(f"{url}/decode", json=one, headers={"Authorization": wrong})
            assert answer.status_code == 401, wrong
        for right in (f"Bearer {TOKEN}", f"bearer {TOKEN}"):
            answer = await http.post(f"{url}/encode", json=one, headers={"Authorization": right})
            assert answer.status_code == 200 and answer.json() == one, right
        unknown = await http.post(f"{url}/translate", json=one)
        assert unknown.status_code == 401  # nothing said of the paths without the token

        preflight = await http.options(
            f"{url}/decode",
            headers={
                "Origin": UI,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert preflight.status_code == 200
        assert "authorization" in preflight.headers["access-control-allow-headers"]
        for probe in ("healthz", "readyz"):
            assert (await http.get(f"{url}/{probe}")).status_code == 200

        token_file.write_text("codec-token-2\n")  # the Secret rotated
        old = await http.post(
            f"{url}/decode", json=one, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert old.status_code == 401
        new = await http.post(
            f"{url}/decode", json=one, headers={"Authorization": "Bearer codec-token-2"}
        )
        assert new.status_code == 200
        token_file.write_text("")  # a token that was there and is no more: nothing is served
        emptied = await http.post(f"{url}/decode", json=one, headers={"Authorization": "Bearer x"})
        assert emptied.status_code == 503

    # The Deployment's optional Secret, not created: the operator named a token, so nothing is
    # served until it is there (issue #55: it was served to anyone then).
    later = tmp_path / "later"
    async with serving(codec_app([UI], later)) as url, httpx.AsyncClient() as http:
        assert (await http.post(f"{url}/decode", json=one)).status_code == 503
        later.write_text(TOKEN)
        assert (await http.post(f"{url}/decode", json=one)).status_code == 401
        with_token = {"Authorization": f"Bearer {TOKEN}"}
        assert (await http.post(f"{url}/decode", json=one, headers=with_token)).status_code == 200
        later.unlink()
        assert (await http.post(f"{url}/decode", json=one)).status_code == 503


async def test_an_oversized_body_is_refused_before_it_is_read(codec_url: str) -> None:
    """A Content-Length over the bound is answered at once, the body neither read nor waited
    for, and the connection not kept. A body without a length stops at the bound."""
    reader, writer = await _posting(codec_url, MAX_REQUEST_BYTES + 1, b'{"payloads": [')
    status, headers, body = await asyncio.wait_for(_answer(reader), timeout=5)
    writer.close()
    assert status == 413
    assert headers["connection"] == "close"
    assert "at most 16 MiB" in json.loads(body)["error"]

    async def endless() -> AsyncIterator[bytes]:
        yield b'{"payloads": [{"data": "'
        for _ in range(MAX_REQUEST_BYTES // 2**20 + 1):
            yield b"A" * 2**20

    async with httpx.AsyncClient(timeout=30) as http:
        chunked = await http.post(f"{codec_url}/decode", content=endless())
    assert chunked.status_code == 413
    assert "at most 16 MiB" in chunked.json()["error"]


async def _posting(
    url: str, length: int, first: bytes, token: str | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A POST .../decode announcing `length` bytes of body, of which only `first` is sent."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = f"POST /decode HTTP/1.1\r\nHost: codec\r\n{auth}Content-Length: {length}\r\n\r\n"
    writer.write(head.encode() + first)
    await writer.drain()
    return reader, writer


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of an answer (its length given, or chunked)."""
    status_line, *lines = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
    headers = {
        name.lower(): value.strip()
        for name, _, value in (line.partition(":") for line in lines if line)
    }
    if "content-length" in headers:
        return (
            int(status_line.split()[1]),
            headers,
            await reader.readexactly(int(headers["content-length"])),
        )
    body = b""
    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
        body += (await reader.readexactly(size + 2))[:-2]
    return int(status_line.split()[1]), headers, body


async def test_work_at_once_is_bounded_and_the_rest_waits_briefly(token_file: Path) -> None:
    """One turn here (two in a Deployment): a request that holds it (its body still
    arriving) makes the next wait, up to the wait, then 503 with Retry-After; more than
    may wait are told at once; refusals that need no turn (no token, too large) never wait
    for one; a turn given back goes to the one waiting; a turn that outlasts its time ends."""
    one = json.dumps({"payloads": [json_format.MessageToDict(Payload(data=b"1"))]}).encode()
    auth = {"Authorization": f"Bearer {TOKEN}"}

    # The waiting request can be answered only by its wait running out (the turn stays held
    # until the holder sends the rest of its body): the refusals that never wait for a turn
    # are answered while it still waits.
    app = codec_app([UI], token_file, max_concurrent=1, max_waiting=1, wait_s=2)
    async with serving(app) as url, httpx.AsyncClient(headers=auth, timeout=10) as http:
        reader, writer = await _posting(url, len(one), one[:10], TOKEN)
        await asyncio.sleep(0.2)  # its handler took the turn and waits for the rest
        waiting = asyncio.create_task(http.post(f"{url}/decode", content=one))
        await asyncio.sleep(0.1)
        beyond = await http.post(f"{url}/decode", content=one)
        assert beyond.status_code == 503 and not waiting.done()
        no_token = await http.post(
            f"{url}/decode", content=one, headers={"Authorization": "Bearer no"}
        )
        assert no_token.status_code == 401 and not waiting.done()
        large_reader, large_writer = await _posting(url, MAX_REQUEST_BYTES + 1, b"{", TOKEN)
        too_large, _, _ = await _answer(large_reader)
        large_writer.close()
        assert too_large == 413 and not waiting.done(), "a refusal waited for a turn"
        busy = await waiting
        assert busy.status_code == 503
        assert busy.headers["retry-after"] == "5"
        assert "busy" in busy.json()["error"]

        # The turn given back goes to the one waiting for it.
        waiting = asyncio.create_task(http.post(f"{url}/decode", content=one))
        await asyncio.sleep(0.1)
        writer.write(one[10:])
        status, _, body = await asyncio.wait_for(_answer(reader), timeout=5)
        writer.close()
        assert status == 200 and json.loads(body) == json.loads(one)
        served = await waiting
        assert served.status_code == 200 and served.json() == json.loads(one)

    # A client that holds its turn without sending loses it when its time is up.
    app = codec_app([UI], max_concurrent=1, wait_s=2, turn_timeout_s=0.3)
    async with serving(app) as url, httpx.AsyncClient(timeout=10) as http:
        reader, writer = await _posting(url, len(one), one[:10])
        status, _, _ = await asyncio.wait_for(_answer(reader), timeout=5)
        writer.close()
        assert status == 408
        assert (await http.post(f"{url}/decode", content=one)).status_code == 200
