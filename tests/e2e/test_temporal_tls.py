"""mTLS from the settings to a real server: the dev server has no TLS of its own, so a
TLS-terminating proxy (client certificate required, ALPN h2) stands in front of it. And an
API key with TLS turned off: every process refuses to start rather than send it in clear."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.tls_material import TlsFiles, make_tls_files
from worker.client import connect_temporal
from worker.settings import Settings


@contextlib.asynccontextmanager
async def tls_proxy(files: TlsFiles, upstream: str) -> AsyncIterator[tuple[int, list[str]]]:
    """Yields its port and the common names of the client certificates it accepted."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(files.ca))
    context.load_cert_chain(files.server_cert, files.server_key)
    context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["h2"])
    host, port = upstream.rsplit(":", 1)
    handshakes: list[str] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert") or {}
        handshakes.append(str(dict(x[0] for x in peer.get("subject", ())).get("commonName")))
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1], handshakes
    finally:
        server.close()


async def test_mtls_settings_reach_a_tls_server(tmp_path: Path, temporal_address: str) -> None:
    files = make_tls_files(tmp_path, server_name="temporal.test")
    async with tls_proxy(files, temporal_address) as (port, clients):
        settings = Settings(
            temporal_address=f"127.0.0.1:{port}",
            temporal_tls_cert=files.client_cert,
            temporal_tls_key=files.client_key,
            temporal_tls_ca=files.ca,
            temporal_tls_server_name="temporal.test",
            temporal_api_key="not-checked-by-the-dev-server",
        )
        client = await connect_temporal(settings)
        assert await client.service_client.check_health()
        # A real call through the tunnel, not only the handshake.
        assert [w async for w in client.list_workflows("WorkflowType = 'NoSuchWorkflow'")] == []
        assert "cloudburst-worker" in clients  # the certificate from the settings was presented


async def test_without_the_client_certificate_the_server_refuses(
    tmp_path: Path, temporal_address: str
) -> None:
    files = make_tls_files(tmp_path, server_name="temporal.test")
    async with tls_proxy(files, temporal_address) as (port, _):
        settings = Settings(
            temporal_address=f"127.0.0.1:{port}",
            temporal_tls=True,
            temporal_tls_ca=files.ca,
            temporal_tls_server_name="temporal.test",
        )
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(connect_temporal(settings), timeout=30)


CLOUDBURST = Path(sys.executable).parent / "cloudburst"


@pytest.mark.parametrize("command", [["worker"], ["trigger"], ["claims", "list"]])
async def test_no_process_sends_an_api_key_over_plaintext(
    tmp_path: Path, command: list[str]
) -> None:
    """`cloudburst worker`, `trigger` and a CLI command, as an operator runs them, with
    CLOUDBURST_TEMPORAL_TLS=false and an API key: each ends with the reason before opening
    a connection, so the address (anyone's, on a plaintext network) never sees the key."""
    received: list[bytes] = []

    async def listener(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(65536))
        writer.close()

    server = await asyncio.start_server(listener, "127.0.0.1", 0)
    key = tmp_path / "api-key"
    key.write_text("secret-key\n")
    environment = {name: value for name, value in os.environ.items() if "TEMPORAL" not in name}
    environment |= {
        "CLOUDBURST_TEMPORAL_ADDRESS": f"127.0.0.1:{server.sockets[0].getsockname()[1]}",
        "CLOUDBURST_TEMPORAL_TLS": "false",
        "CLOUDBURST_TEMPORAL_API_KEY_FILE": str(key),
        "CLOUDBURST_KUBECONFIG": str(tmp_path / "no-kubeconfig"),
        "CLOUDBURST_HEALTH_PORT": "0",
        "CLOUDBURST_METRICS_PORT": "0",
        "CLOUDBURST_SDK_METRICS_PORT": "0",
        "COLUMNS": "500",  # the worker's traceback, with its last line unwrapped
    }
    try:
        process = await asyncio.create_subprocess_exec(
            str(CLOUDBURST),
            *command,
            env=environment,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    finally:
        server.close()
    said = (out + err).decode()
    assert process.returncode != 0, said
    assert "CLOUDBURST_TEMPORAL_TLS is false but an API key is configured" in said, said
    assert "secret-key" not in said
    assert received == []
