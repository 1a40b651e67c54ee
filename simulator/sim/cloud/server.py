"""The fake cloud's HTTP API (stdlib server in a daemon thread).

Public, bearer-authenticated API (Hetzner-like JSON):
    POST   /v1/instances                     {name, region, instance_type, image, user_data, labels}
    GET    /v1/instances/{id}
    GET    /v1/instances?label_selector=k=v,k2=v2&name=N[&page=P&per_page=N]
    DELETE /v1/instances/{id}
    GET    /v1/instance-types
Admin API for tests and the demo (no auth: it is a test control, never exposed):
    GET    /_admin/stats           GET /_admin/create-times
    POST   /_admin/failures {op, kind, times?, region?, instance_type?}   DELETE /_admin/failures
    POST   /_admin/hold {op}       POST /_admin/release {op?}
    GET    /_admin/instances       (with user_data)   GET /_admin/instances/{id}
    DELETE /_admin/instances/{id}  (a VM deleted outside Cloudburst)
    POST   /_admin/instances/{id}/terminate
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sim.cloud.state import CloudError, FakeCloud

# A cloud's API takes a burst of new connections; socketserver's default listen backlog of
# 5 dropped the 7th of a burst's create calls whenever the accept loop lagged, and the
# client's kernel sent it again a second later (TCP's first SYN retry).
LISTEN_BACKLOG = 256


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG
    cloud: FakeCloud

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client hanging up mid-connection is normal here; anything else is printed."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


def _parse_selector(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, val = part.partition("=")
        if not sep:
            raise CloudError(
                400,
                "invalid_input",
                f"label_selector supports only k=v terms, got {part!r}",
                details={"fields": [{"name": "label_selector", "message": "k=v terms only"}]},
            )
        out[key.strip()] = val.strip().lstrip("=")  # accept k==v too
    return out


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle + delayed ACK add
        # ~40 ms to every keep-alive request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests and the demo would drown in access logs."""

    # ---- plumbing ------------------------------------------------------------------------

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if data:
            self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return {}
        try:
            value = json.loads(self.rfile.read(length))
        except json.JSONDecodeError as exc:
            raise CloudError(400, "invalid_input", f"body is not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise CloudError(400, "invalid_input", "body must be a JSON object")
        return value

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            # Read the body first so a keep-alive connection stays in sync whatever happens.
            body = self._body() if method in ("POST", "PUT") else {}
            if parts and parts[0] == "_admin":
                status, out = self._admin(method, parts[1:], body)
            elif parts[:1] == ["v1"]:
                self.server.cloud.check_auth(self.headers.get("Authorization"))
                status, out = self._api(method, parts[1:], query, body)
            else:
                raise CloudError(404, "not_found", f"no route for {method} {url.path}")
            self._send(status, out)
        except CloudError as err:
            self._send(err.status, err.body(), err.headers)
        except (ValueError, TypeError, KeyError) as exc:
            self._send(400, CloudError(400, "invalid_input", str(exc)).body())

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    # ---- the cloud API -------------------------------------------------------------------

    def _api(
        self, method: str, parts: list[str], query: dict[str, str], body: dict[str, Any]
    ) -> tuple[int, Any]:
        cloud = self.server.cloud
        match method, parts:
            case "POST", ["instances"]:
                labels = body.get("labels") or {}
                if not isinstance(labels, dict):
                    raise CloudError(400, "invalid_input", "labels must be an object")
                inst = cloud.create_instance(
                    name=str(body.get("name") or ""),
                    region=str(body.get("region") or ""),
                    instance_type=str(body.get("instance_type") or ""),
                    image=body.get("image"),
                    user_data=str(body.get("user_data") or ""),
                    labels={str(k): str(v) for k, v in labels.items()},
                )
                return 201, {"instance": inst}
            case "GET", ["instances"]:
                selector = _parse_selector(query.get("label_selector", ""))
                items = cloud.list_instances(label_selector=selector, name=query.get("name"))
                return 200, _page(items, query)
            case "GET", ["instances", iid]:
                return 200, {"instance": cloud.get_instance(iid)}
            case "DELETE", ["instances", iid]:
                return 202, {"instance": cloud.delete_instance(iid)}
            case "GET", ["instance-types"]:
                return 200, {"instance_types": cloud.instance_types()}
        raise CloudError(404, "not_found", f"no route for {method} /v1/{'/'.join(parts)}")

    # ---- the admin API -------------------------------------------------------------------

    def _admin(self, method: str, parts: list[str], body: dict[str, Any]) -> tuple[int, Any]:
        cloud = self.server.cloud
        match method, parts:
            case "GET", ["stats"]:
                return 200, cloud.stats()
            case "GET", ["create-times"]:
                # When the first create of each instance name arrived: decision latencies.
                return 200, {name: at.isoformat() for name, at in cloud.create_times().items()}
            case "GET", ["failures"]:
                return 200, {"failures": cloud.failures()}
            case "POST", ["failures"]:
                times = body.get("times", 1)
                cloud.inject_failure(
                    str(body["op"]),
                    str(body["kind"]),
                    None if times is None else int(times),
                    region=body.get("region"),
                    instance_type=body.get("instance_type"),
                )
                return 201, {"failures": cloud.failures()}
            case "DELETE", ["failures"]:
                cloud.clear_failures()
                return 200, {"failures": []}
            case "POST", ["hold"]:
                cloud.hold(str(body.get("op") or "create"))
                return 200, cloud.stats()
            case "POST", ["release"]:
                op = body.get("op")
                cloud.release(None if op is None else str(op))
                return 200, cloud.stats()
            case "GET", ["instances"]:
                return 200, {"instances": cloud.list_instances(with_user_data=True)}
            case "GET", ["instances", iid]:
                return 200, {"instance": cloud.get_instance(iid, with_user_data=True)}
            case "DELETE", ["instances", iid]:
                if not cloud.delete_behind_our_back(iid):
                    raise CloudError(404, "not_found", f"instance {iid!r} not found")
                return 200, {"deleted": iid}
            case "POST", ["instances", iid, "terminate"]:
                if not cloud.terminate(iid):
                    raise CloudError(404, "not_found", f"instance {iid!r} not found")
                return 200, {"terminated": iid}
        raise CloudError(404, "not_found", f"no admin route for {method} /{'/'.join(parts)}")


def _page(items: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
    """Hetzner-style paging when `per_page` is asked for; everything otherwise."""
    total = len(items)
    if "per_page" not in query:
        return {
            "instances": items,
            "meta": {
                "pagination": {"page": 1, "per_page": total, "next_page": None, "total": total}
            },
        }
    per_page = max(1, min(int(query["per_page"]), 1000))
    page = max(1, int(query.get("page", "1")))
    start = (page - 1) * per_page
    chunk = items[start : start + per_page]
    next_page = page + 1 if start + per_page < total else None
    return {
        "instances": chunk,
        "meta": {
            "pagination": {
                "page": page,
                "per_page": per_page,
                "next_page": next_page,
                "total": total,
            }
        },
    }


class FakeCloudServer:
    """Serves a `FakeCloud` over HTTP on `host:port` (port 0 picks a free one)."""

    def __init__(self, cloud: FakeCloud, host: str = "127.0.0.1", port: int = 0) -> None:
        self.cloud = cloud
        self._httpd = _Server((host, port), _Handler)
        self._httpd.cloud = cloud
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._httpd.server_address[0])
        return f"http://{host}:{self.port}"

    def start(self) -> FakeCloudServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="fake-cloud-http",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        # Held requests would otherwise keep their threads (and the caller) waiting.
        self.cloud.release()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeCloudServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
