"""The codec server: what an operator sees of a compressed payload in the Web UI and with
`temporal workflow show --codec-endpoint` (the real CLI, against the real dev server)."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import uuid
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from api.nodepool.messages import NodePoolInput, PoolState
from tests.conftest import TEMPORAL_CLI
from tests.workflows.test_history_bound import pods
from tests.workflows.test_nodepool_races import specs
from worker.codec_server import MAX_DECODED_BYTES, codec_app
from worker.payload_codec import COMPRESS_OVER, ENCODING
from workflows.nodepool import NodePoolWorkflow

UI = "http://127.0.0.1:8233"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
async def codec_url() -> AsyncIterator[str]:
    runner = web.AppRunner(codec_app([UI]))
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


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
    temporal_client: Client, temporal_address: str, codec_url: str
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
        raw = await _started_input(temporal_address, pool_id)
        assert _encoding(raw) == ENCODING  # what the UI shows without the codec server
        assert len(base64.b64decode(raw["data"])) < COMPRESS_OVER

        shown = await _started_input(temporal_address, pool_id, "--codec-endpoint", codec_url)
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
        encoded = await http.post(
            f"{codec_url}/prefix/encode", json={"payloads": [big, small]}, headers={"Origin": UI}
        )
        assert encoded.status_code == 200
        assert encoded.headers["access-control-allow-origin"] == UI
        compressed, untouched = encoded.json()["payloads"]
        assert _encoding(compressed) == ENCODING
        assert untouched == small
        decoded = await http.post(f"{codec_url}/decode", json=encoded.json())
        assert decoded.json()["payloads"] == [big, small]

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
