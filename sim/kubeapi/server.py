"""The HTTP front of the emulator: URL routing, JSON in and out, chunked watch streams.

It runs `http.server.ThreadingHTTPServer` in a daemon thread, so the synchronous
`kubernetes` client can call it from anywhere, including from inside an asyncio loop's
thread pool, without blocking whatever serves it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import select
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from sim.kubeapi import errors, openapi, policy, resources
from sim.kubeapi.admission import WriteOptions
from sim.kubeapi.errors import ApiError, status_body
from sim.kubeapi.pki import client_kubeconfig, cluster_info_kubeconfig, make_ca_pem
from sim.kubeapi.resources import CONFIGMAPS, NAMESPACES, PDBS, PODS, ResourceType
from sim.kubeapi.selectors import parse_field_selector, parse_label_selector
from sim.kubeapi.store import DEFAULT_LOG_SIZE, DEFAULT_WATCH_QUEUE, Obj, Store, Watcher

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)

SEED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
VERSION = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.1",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-09-09T00:00:00Z",
    "goVersion": "go1.24.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}
DEFAULT_WATCH_TIMEOUT = 1800.0  # a real server picks 30-60 min when the client sets none
IDLE_CONNECTION_TIMEOUT = 300.0  # keep-alive connections close after this long unused
_PEER_CHECK_INTERVAL = 1.0  # how often an idle watch checks whether its client went away
_BATCH = 500  # events written per chunk at most
_SUBRESOURCE_METHODS = {
    "": {"GET", "POST", "PUT", "PATCH", "DELETE"},
    "status": {"GET", "PUT", "PATCH"},
    "eviction": {"POST"},
    "binding": {"POST"},
    "bindings": {"POST"},  # POST namespaces/{ns}/bindings: the pod is named in the body
}


class KubeApiServer:
    """A Kubernetes API server emulator for the official `kubernetes` client, over plain HTTP.

    >>> server = KubeApiServer()          # port 0: pick a free port
    >>> server.start()                    # serves in a daemon thread
    >>> core = kubernetes.client.CoreV1Api(server.api_client())
    >>> server.stop()
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        event_log_size: int = DEFAULT_LOG_SIZE,
        watch_queue_size: int = DEFAULT_WATCH_QUEUE,
    ) -> None:
        self.host = host
        self.port = port
        self.store = Store(event_log_size, watch_queue_size)
        self.ca_cert_pem: str = make_ca_pem()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._seeded = False
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        """Bind and serve in a background thread; returns at once. Idempotent."""
        with self._lock:
            if self._httpd is not None:
                return
            httpd = _HTTPServer((self.host, self.port), self)
            self.port = httpd.server_address[1]
            self._httpd = httpd
            if not self._seeded:
                self._seed()
                self._seeded = True
            self._thread = threading.Thread(
                target=httpd.serve_forever,
                kwargs={"poll_interval": 0.2},
                name=f"kubeapi-{self.port}",
                daemon=True,
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop serving: end watch streams and drop open connections. The store is kept."""
        with self._lock:
            httpd, self._httpd = self._httpd, None
            if httpd is None:
                return
            httpd.shutdown()
            self.store.close_all_watches()
            httpd.close_connections()
            httpd.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)

    def __enter__(self) -> KubeApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig (no auth, context `cloudburst-sim`) pointing at this server."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(client_kubeconfig(self.url))
        return target

    def api_client(self) -> ApiClient:
        """A `kubernetes.client.ApiClient` for this server (the client is imported lazily)."""
        from kubernetes import client

        configuration = client.Configuration(host=self.url)
        return client.ApiClient(configuration)

    def _seed(self) -> None:
        for name in SEED_NAMESPACES:
            self.store.create(NAMESPACES, "", {"metadata": {"name": name}})
        info = cluster_info_kubeconfig(self.url, self.ca_cert_pem)
        self.store.create(
            CONFIGMAPS,
            "kube-public",
            {"metadata": {"name": "cluster-info"}, "data": {"kubeconfig": info}},
        )


# ---- routing ---------------------------------------------------------------------------


@dataclass
class _Route:
    rt: ResourceType
    namespace: str | None  # None: all namespaces, or a cluster-scoped resource
    name: str = ""
    subresource: str = ""


def _route(parts: list[str]) -> _Route | Obj:
    """Resolve an `/api/...` or `/apis/...` path to a resource route, or a discovery doc."""
    if parts[0] == "api":
        if len(parts) == 1:
            return {"kind": "APIVersions", "versions": ["v1"]}
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) == 1:
            return _group_list()
        if len(parts) == 2:
            return _group(parts[1])
        group, version, rest = parts[1], parts[2], parts[3:]
    if not rest:
        return _resource_list(group, version)
    namespace = None
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and (resources.lookup(group, version, rest[2]) or rest[2] == "bindings")
    ):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise _not_found_path()
    if rest[0] == "bindings" and namespace and group == "" and len(rest) == 1:
        return _Route(PODS, namespace, "", "bindings")
    rt = resources.lookup(group, version, rest[0])
    if rt is None or (namespace is not None and not rt.namespaced):
        raise _not_found_path()
    route = _Route(rt, namespace, *rest[1:])
    if rt.namespaced and namespace is None and route.name:
        raise _not_found_path()
    return route


def _not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def _group_list() -> Obj:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(g) for g in resources.group_versions() if g],
    }


def _group(name: str) -> Obj:
    versions = resources.group_versions().get(name)
    if not versions or not name:
        raise _not_found_path()
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def _resource_list(group: str, version: str) -> Obj:
    found = resources.resources_in(group, version)
    if not found:
        raise _not_found_path()
    verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    listed: list[Obj] = []
    for rt in found:
        base = {"namespaced": rt.namespaced, "kind": rt.kind}
        listed.append(base | {"name": rt.plural, "singularName": rt.kind.lower(), "verbs": verbs})
        if rt.status_subresource:
            listed.append(
                base | {"name": f"{rt.plural}/status", "verbs": ["get", "patch", "update"]}
            )
    if group == "":
        listed.append(
            {
                "name": "pods/eviction",
                "namespaced": True,
                "kind": "Eviction",
                "group": "policy",
                "version": "v1",
                "verbs": ["create"],
            }
        )
        listed.append(
            {"name": "pods/binding", "namespaced": True, "kind": "Binding", "verbs": ["create"]}
        )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": listed,
    }


# ---- HTTP ------------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], emulator: KubeApiServer) -> None:
        self.emulator = emulator
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def close_connections(self) -> None:
        with self.connections_lock:
            for conn in list(self.connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client's connection pool reuses sockets
    timeout = IDLE_CONNECTION_TIMEOUT
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # Small writes (watch events) must leave at once, not wait for Nagle.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would dominate the cost of a request

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ---- dispatch ----------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        try:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            body = self._read_body()
            self._handle(method, url.path, query, body)
        except ApiError as e:
            self._send(e.code, e.status())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:
            log.error("kubeapi: %s %s failed\n%s", method, self.path, traceback.format_exc())
            self._send(500, ApiError(500, "InternalError", f"internal error: {e}").status())

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self, method: str, path: str, query: dict[str, str], raw: bytes) -> None:
        parts = [p for p in path.split("/") if p]
        if not parts:
            raise _not_found_path()
        if parts[0] in ("healthz", "readyz", "livez"):
            self._send_text(200, "ok")
            return
        if parts == ["version"]:
            self._send(200, VERSION)
            return
        if parts[0] == "openapi":
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")
            schemas = self.server.emulator.store.admission.crds
            self._send(200, openapi.document(parts[1:], schemas, VERSION["gitVersion"]))
            return
        if parts[0] not in ("api", "apis"):
            raise _not_found_path()
        route = _route(parts)
        if not isinstance(route, _Route):
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")
            self._send(200, route)
            return
        self._resource(method, route, query, raw)

    def _resource(self, method: str, r: _Route, query: dict[str, str], raw: bytes) -> None:
        store = self.server.emulator.store
        ns = r.namespace or ""
        rt = r.rt
        verbs = _SUBRESOURCE_METHODS.get(r.subresource)
        if verbs is None or (r.subresource in ("eviction", "binding") and rt is not PODS):
            raise _not_found_path()
        if method not in verbs:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on this resource")
        if method == "GET":
            if r.name:
                self._send(200, _present(store, rt, store.get(rt, ns, r.name)))
                return
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(query.get("fieldSelector"))
            if query.get("watch", "").lower() in ("1", "true"):
                timeout = _number(query.get("timeoutSeconds"))
                try:
                    w = store.watch(rt, r.namespace, labels, fields, query.get("resourceVersion"))
                except ApiError as e:
                    if e.code != 410:
                        raise
                    self._stream_error(e)  # in the stream, like a real server
                    return
                self._stream(w, timeout)
                return
            items, rv = store.list_objects(rt, r.namespace, labels, fields)
            self._send(200, _list_body(rt, [_present(store, rt, o) for o in items], rv))
            return
        opts = WriteOptions(field_validation=query.get("fieldValidation") or "Warn")
        if method == "POST":
            body = _json(raw)
            if r.subresource == "bindings":  # POST namespaces/{ns}/bindings, pod named in body
                name = (body.get("metadata") or {}).get("name") or ""
                self._send(201, policy.bind(store, ns, name, body))
            elif r.subresource == "binding":
                self._send(201, policy.bind(store, ns, r.name, body))
            elif r.subresource == "eviction":
                self._send(201, policy.evict(store, ns, r.name, body.get("deleteOptions")))
            elif r.name:
                raise ApiError(405, "MethodNotAllowed", "POST is not allowed on a named object")
            else:
                obj = store.create(rt, ns, body, opts)
                self._send(201, _present(store, rt, obj), opts.warnings)
            return
        if not r.name and method != "DELETE":
            raise ApiError(405, "MethodNotAllowed", f"{method} needs an object name")
        if method == "PUT":
            obj = store.replace(rt, ns, r.name, _json(raw), r.subresource, opts)
            self._send(200, _present(store, rt, obj), opts.warnings)
        elif method == "PATCH":
            content_type = self.headers.get("Content-Type") or ""
            patch = _json(raw, dict | list)
            obj = store.patch(rt, ns, r.name, content_type, patch, r.subresource, opts)
            self._send(200, _present(store, rt, obj), opts.warnings)
        elif method == "DELETE":
            self._delete(store, r, query, raw)
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")

    def _delete(self, store: Store, r: _Route, query: dict[str, str], raw: bytes) -> None:
        # `gracePeriodSeconds`, `propagationPolicy` and `orphanDependents` are accepted and
        # ignored: objects go at once (after their finalizers).
        options = _json(raw) if raw.strip() else {}
        rt = r.rt
        if not r.name:
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(query.get("fieldSelector"))
            deleted = store.delete_collection(rt, r.namespace, labels, fields)
            self._send(200, _list_body(rt, deleted, store.resource_version))
            return
        obj, gone = store.delete(rt, r.namespace or "", r.name, options.get("preconditions"))
        if gone and not (rt.custom or rt in (PODS, NAMESPACES)):
            # Most built-in kinds answer a deleted object with a Status, like a real server.
            md = obj.get("metadata") or {}
            details = {"name": r.name, "group": rt.group, "kind": rt.plural, "uid": md.get("uid")}
            self._send(200, status_body(200, "", "", details))
            return
        self._send(200, obj)

    # ---- output ------------------------------------------------------------------------

    def _send(self, code: int, body: Obj, warnings: list[str] | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response_only(code)
        for warning in warnings or ():
            # RFC 7234 warn-code 299, agent "-", as the API server sends them.
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response_only(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, w: Watcher, timeout: float | None) -> None:
        """Serve a watch: one JSON event per line, chunked, until timeout, overflow or EOF."""
        store = self.server.emulator.store
        self.close_connection = True
        deadline = time.monotonic() + (timeout if timeout is not None else DEFAULT_WATCH_TIMEOUT)
        try:
            self.send_response_only(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            backlog, w.initial = w.initial, []
            for i in range(0, len(backlog), _BATCH):
                self._chunk(store, w.rt, backlog[i : i + _BATCH])
            del backlog
            while not w.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    first = w.queue.get(timeout=min(remaining, _PEER_CHECK_INTERVAL))
                except queue.Empty:
                    if _peer_closed(self.connection):
                        return
                    continue
                batch = [first]
                while len(batch) < _BATCH:
                    try:
                        batch.append(w.queue.get_nowait())
                    except queue.Empty:
                        break
                self._chunk(store, w.rt, [e for e in batch if e[0]])
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, TimeoutError, OSError):
            pass
        finally:
            store.unwatch(w)

    def _stream_error(self, e: ApiError) -> None:
        """A 200 stream holding one ERROR event: the client raises or re-lists on a 410."""
        self.close_connection = True
        data = json.dumps({"type": "ERROR", "object": e.status()}).encode() + b"\n"
        self.send_response_only(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))

    def _chunk(self, store: Store, rt: ResourceType, events: list[tuple[str, Obj]]) -> None:
        if not events:
            return
        lines = [
            json.dumps({"type": kind, "object": _present(store, rt, obj)}, separators=(",", ":"))
            for kind, obj in events
        ]
        data = ("\n".join(lines) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


def _present(store: Store, rt: ResourceType, obj: Obj) -> Obj:
    """An object as read: PDBs get their status computed on the fly."""
    return policy.with_pdb_status(store, obj) if rt is PDBS else obj


def _list_body(rt: ResourceType, items: list[Obj], rv: int) -> Obj:
    return {
        "kind": f"{rt.kind}List",
        "apiVersion": rt.api_version,
        "metadata": {"resourceVersion": str(rv)},
        "items": items,
    }


def _json(raw: bytes, expected: Any = dict) -> Any:
    try:
        value = json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError) as e:
        raise errors.bad_request(f"malformed JSON body: {e}") from None
    if not isinstance(value, expected):
        raise errors.bad_request("the request body must be a JSON object")
    return value


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        raise errors.bad_request(f"invalid number: {text}") from None


def _peer_closed(sock: socket.socket) -> bool:
    """True once the client hung up (its socket reads EOF); cheap, never blocks."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
