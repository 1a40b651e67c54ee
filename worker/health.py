"""`/healthz` and `/readyz` for the kubelet's probes, served from a thread.

- `/healthz` (liveness): the process' event loop still turns. The server runs in its own
  thread, so answering alone would prove nothing; a loop blocked for `stall_after_s` fails it
  and the kubelet restarts the pod.
- `/readyz` (readiness): Temporal answers its health check and the Kubernetes API answers
  `/version`. A worker that cannot reach either cannot do useful work; the probe says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kubernetes import client as k8s
from temporalio.client import Client

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], Awaitable[None]]  # raises when not ready
CHECK_TIMEOUT_S = 3.0


@contextlib.contextmanager
def serving_health(
    port: int, temporal: Client, api_client: k8s.ApiClient, host: str = "0.0.0.0"
) -> Iterator[HealthServer | None]:
    """Serve the probes of a worker or trigger for the duration of the block (port 0: none).

    Call it from the process' event loop: the readiness checks run on that loop."""
    with _serving(
        port, {"temporal": temporal_check(temporal), "kubernetes": kube_check(api_client)}, host
    ) as server:
        yield server


@contextlib.contextmanager
def serving_kube_health(
    port: int, api_client: k8s.ApiClient, host: str = "0.0.0.0"
) -> Iterator[HealthServer | None]:
    """The probes of a process that needs only the Kubernetes API (the CSR approver)."""
    with _serving(port, {"kubernetes": kube_check(api_client)}, host) as server:
        yield server


@contextlib.contextmanager
def _serving(
    port: int, checks: dict[str, ReadinessCheck], host: str
) -> Iterator[HealthServer | None]:
    if not port:
        yield None
        return
    server = HealthServer(asyncio.get_running_loop(), checks)
    try:
        server.start(host, port)
    except OSError as err:
        # A busy port on a developer's machine must not stop the process; in a pod the
        # probes then fail, which says the same thing louder.
        log.warning("health endpoints not served on :%d: %s", port, err)
        yield None
        return
    try:
        yield server
    finally:
        server.stop()


def temporal_check(client: Client) -> ReadinessCheck:
    async def check() -> None:
        await client.service_client.check_health(timeout=timedelta(seconds=CHECK_TIMEOUT_S))

    return check


def kube_check(api_client: k8s.ApiClient) -> ReadinessCheck:
    version = k8s.VersionApi(api_client)

    async def check() -> None:
        await asyncio.to_thread(version.get_code, _request_timeout=CHECK_TIMEOUT_S)

    return check


class HealthServer:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        checks: dict[str, ReadinessCheck],
        stall_after_s: float = 30.0,
    ) -> None:
        self._loop = loop
        self._checks = checks
        self._stall_after_s = stall_after_s
        self._last_tick = time.monotonic()
        self._ticker: asyncio.TimerHandle | None = None
        self._server: ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_port

    def start(self, host: str, port: int) -> None:
        self._tick()
        server = ThreadingHTTPServer((host, port), _handler(self))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
        self._server = server
        log.info("health endpoints on :%d (/healthz, /readyz)", server.server_port)

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def live(self) -> tuple[bool, dict[str, str]]:
        stalled = time.monotonic() - self._last_tick
        if stalled > self._stall_after_s:
            return False, {"eventLoop": f"no progress for {stalled:.0f}s"}
        return True, {"eventLoop": "ok"}

    def ready(self) -> tuple[bool, dict[str, str]]:
        try:
            future = asyncio.run_coroutine_threadsafe(self._run_checks(), self._loop)
            results = future.result(timeout=CHECK_TIMEOUT_S + 1)
        except Exception as err:  # the loop is stuck or gone
            return False, {"eventLoop": f"checks did not run: {err!r}"}
        return all(r == "ok" for r in results.values()), results

    async def _run_checks(self) -> dict[str, str]:
        async def one(check: ReadinessCheck) -> str:
            try:
                await asyncio.wait_for(check(), timeout=CHECK_TIMEOUT_S)
            except Exception as err:
                return f"unreachable: {err!r}"[:300]
            return "ok"

        names = list(self._checks)
        outcomes = await asyncio.gather(*(one(self._checks[n]) for n in names))
        return dict(zip(names, outcomes, strict=True))

    def _tick(self) -> None:
        self._last_tick = time.monotonic()
        self._ticker = self._loop.call_later(1.0, self._tick)


def _handler(health: HealthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                ok, detail = health.live()
            elif self.path == "/readyz":
                ok, detail = health.ready()
            else:
                self.send_error(404)
                return
            body = json.dumps({"ok": ok, "checks": detail}).encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # the kubelet probes every few seconds: keep the log for what matters

    return Handler
