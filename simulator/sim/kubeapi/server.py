"""The HTTP front of the emulator: URL routing, JSON in and out, chunked watch streams.

It runs `http.server.ThreadingHTTPServer` in a daemon thread, so the synchronous
`kubernetes` client can call it from anywhere, including from inside an asyncio loop's
thread pool, without blocking whatever serves it.

Two things a test may ask of it, as of a real API server: an audit log (`audit(after=mark)`:
each resource request's verb, resource, namespace and name since `audit_mark()`; the last
`audit_size` are kept, and asking for more than were kept is an error, never a silent gap), and
authorization refusals (`forbid(verb, resource, namespace)`: 403 Forbidden, as RBAC answers
a request no Role grants). Every client is the same user here, so both are per server.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import queue
import select
import socket
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import orjson
import yaml

from sim.kubeapi import apply as apply_fields
from sim.kubeapi import (
    builtins,
    crds,
    discovery,
    errors,
    openapi,
    policy,
    protobuf,
    resources,
    tables,
)
from sim.kubeapi.admission import Admission, WriteOptions
from sim.kubeapi.errors import ApiError, status_body
from sim.kubeapi.patch import JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, apply_patch
from sim.kubeapi.pki import client_kubeconfig, cluster_info_kubeconfig, make_ca_pem
from sim.kubeapi.pod_admission import PodAdmission
from sim.kubeapi.resources import CONFIGMAPS, NAMESPACES, PDBS, PODS, SERVICES, ResourceType
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
DEFAULT_AUDIT_SIZE = 10_000  # bounded: each request costs O(1), however long the server runs
_SUBRESOURCE_METHODS = {
    "": {"GET", "POST", "PUT", "PATCH", "DELETE"},
    "status": {"GET", "PUT", "PATCH"},
    "eviction": {"POST"},
    "binding": {"POST"},
    "scale": {"GET", "PUT", "PATCH"},
    "bindings": {"POST"},  # POST namespaces/{ns}/bindings: the pod is named in the body
}


@dataclass(frozen=True)
class AuditRecord:
    """One resource request, as an audit log (and RBAC) sees it."""

    seq: int  # 1, 2, ...: its place in the log
    verb: str  # get, list, watch, create, update, patch, delete, deletecollection
    group: str  # "" for the core group
    resource: str  # plural, with "/subresource" when there is one
    namespace: str | None  # None: all namespaces, or a cluster-scoped resource
    name: str
    user: str = ""  # who asked (Kubernetes' audit log; the emulator authenticates no one)


class KubeApiServer:
    """A Kubernetes API server emulator for the official `kubernetes` client, over plain HTTP.

    >>> server = KubeApiServer()          # port 0: pick a free port
    >>> server.start()                    # serves in a daemon thread
    >>> core = kubernetes.client.CoreV1Api(server.api_client())
    >>> server.stop()

    The admission plugins PodNodeSelector and PodTolerationRestriction run unless
    `disable_admission_plugins` names them (kube-apiserver's `--disable-admission-plugins`);
    `admission_config` gives each what its `--admission-control-config-file` entry would
    (sim/kubeapi/pod_admission.py).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        event_log_size: int = DEFAULT_LOG_SIZE,
        watch_queue_size: int = DEFAULT_WATCH_QUEUE,
        audit_size: int = DEFAULT_AUDIT_SIZE,
        disable_admission_plugins: Iterable[str] = (),
        admission_config: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.host = host
        self._audit: deque[AuditRecord] = deque(maxlen=audit_size)
        self._audit_seq = 0
        self._forbidden: set[tuple[str, str, str, str | None]] = set()
        self._audit_lock = threading.Lock()
        self.port = port
        pods = PodAdmission(disable_admission_plugins, admission_config)
        self.store = Store(event_log_size, watch_queue_size, Admission(pods=pods))
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

    def ensure_namespace(self, name: str) -> None:
        """Create a namespace unless it exists (what an install step would have made)."""
        try:
            self.store.get(NAMESPACES, "", name)
        except ApiError as e:
            if e.code != 404:
                raise
            self.store.create(NAMESPACES, "", {"metadata": {"name": name}})

    def audit_mark(self) -> int:
        """Where the log is now: pass it to `audit(after=...)` later."""
        with self._audit_lock:
            return self._audit_seq

    def audit(self, after: int = 0) -> list[AuditRecord]:
        """The resource requests since `after` (a mark), oldest first; LookupError when some
        of them were already dropped from the bounded log."""
        with self._audit_lock:
            records = [r for r in self._audit if r.seq > after]
            if after < self._audit_seq and (not records or records[0].seq != after + 1):
                raise LookupError(f"the audit log no longer holds what came after #{after}")
            return records

    def forbid(self, verb: str, resource: str, namespace: str | None, group: str = "") -> None:
        """Answer such requests 403 Forbidden (`namespace` None: cluster-wide ones)."""
        with self._audit_lock:
            self._forbidden.add((verb, group, resource, namespace))

    def allow_all(self) -> None:
        with self._audit_lock:
            self._forbidden.clear()

    def _refused(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        """Whether a test forbade this (what a SelfSubjectAccessReview answers)."""
        with self._audit_lock:
            return (verb, group, resource, namespace) in self._forbidden

    def _authorize(
        self, verb: str, group: str, resource: str, namespace: str | None, name: str
    ) -> None:
        """Log the request; refuse it like RBAC when a test forbade it."""
        key = (verb, group, resource, namespace)
        with self._audit_lock:
            self._audit_seq += 1
            record = AuditRecord(self._audit_seq, verb, group, resource, namespace, name)
            self._audit.append(record)
            refused = key in self._forbidden
        if refused:
            where = f' in the namespace "{record.namespace}"' if record.namespace else ""
            what = f'{record.resource} "{record.name}"' if record.name else record.resource
            raise ApiError(
                403,
                "Forbidden",
                f'{what} is forbidden: User "cloudburst-sim" cannot {record.verb} resource '
                f'"{record.resource}" in API group "{record.group}"{where}',
            )

    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig (no auth, context `cloudburst-sim`) pointing at this server."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Whole or not at all: a process waiting for the file never reads half of it.
        partial = target.with_name(f".{target.name}.partial")
        partial.write_text(client_kubeconfig(self.url))
        partial.replace(target)
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
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        builtins.seed(self.store, now)
        builtins.seed_crds(self.store, crds.crd_documents(), now)


# ---- routing ---------------------------------------------------------------------------


@dataclass
class _Route:
    rt: ResourceType
    namespace: str | None  # None: all namespaces, or a cluster-scoped resource
    name: str = ""
    subresource: str = ""


def _route(parts: list[str], server_address: str, aggregated: bool) -> _Route | Obj:
    """Resolve an `/api/...` or `/apis/...` path to a resource route, or a discovery doc."""
    if parts[0] == "api":
        if len(parts) == 1:
            if aggregated:
                return discovery.aggregated(core=True)
            return discovery.api_versions(server_address)
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) == 1:
            return discovery.aggregated(core=False) if aggregated else discovery.group_list()
        if len(parts) == 2:
            return discovery.group(parts[1])
        group, version, rest = parts[1], parts[2], parts[3:]
    if not rest:
        return discovery.resource_list(group, version)
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
    return discovery.not_found()


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

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that drops its connection (a process killed, a keep-alive closed) is no
        error of the server's, and is not printed with a traceback; anything else is."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)

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
            if parts[1:] == ["v2"] and not _accepts_json(self.headers.get("Accept") or ""):
                # kubectl asks for the protobuf form first; only JSON is served here.
                raise ApiError(
                    406,
                    "NotAcceptable",
                    "only the following media types are accepted: application/json",
                )
            self._send(200, openapi.document(parts[1:], schemas, VERSION["gitVersion"]))
            return
        if parts[0] not in ("api", "apis"):
            raise _not_found_path()
        accept = self.headers.get("Accept") or ""
        aggregated = len(parts) == 1 and discovery.wants_aggregated(accept)
        address = f"{self.server.emulator.host}:{self.server.emulator.port}"
        route = _route(parts, address, aggregated)
        if not isinstance(route, _Route):
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")
            self._send(200, route, content_type=discovery.AGGREGATED if aggregated else None)
            return
        self._resource(method, route, query, raw)

    def _resource(self, method: str, r: _Route, query: dict[str, str], raw: bytes) -> None:
        emulator = self.server.emulator
        store = emulator.store
        ns = r.namespace or ""
        rt = r.rt
        verbs = _SUBRESOURCE_METHODS.get(r.subresource)
        if (
            verbs is None
            or (r.subresource in ("eviction", "binding") and rt is not PODS)
            or (r.subresource == "scale" and not rt.scale_subresource)
            or (r.subresource == "status" and not (rt.status_subresource or rt.custom))
        ):
            raise _not_found_path()
        if method not in verbs:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on this resource")
        verb = _verb(method, r, query)
        if verb not in rt.verbs and not r.subresource:
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        emulator._authorize(
            verb,
            rt.group,
            f"{rt.plural}/{r.subresource}" if r.subresource else rt.plural,
            r.namespace,
            r.name,
        )
        view = _negotiate(self.headers.get("Accept") or "", rt)
        if rt.virtual:
            body = builtins.review(rt, self._body(raw, rt), emulator._refused)
            self._send(201, body)
            return
        if method == "GET":
            if r.name:
                obj = store.get(rt, ns, r.name)
                if r.subresource == "scale":
                    self._send(200, builtins.scale_of(rt, obj))
                    return
                self._send_view(view, rt, [_present(store, rt, obj)], None, query)
                return
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(query.get("fieldSelector"))
            if query.get("watch", "").lower() in ("1", "true"):
                self._watch(store, r, query, labels, fields, view)
                return
            _check_list_options(query)
            items, rv = store.list_objects(rt, r.namespace, labels, fields)
            items, list_meta = _page(items, rv, query)
            self._send_view(view, rt, [_present(store, rt, o) for o in items], list_meta, query)
            return
        if query.get("dryRun") not in (None, "", "All"):
            raise errors.bad_request(f"unsupported dryRun value: {query['dryRun']}")
        opts = WriteOptions(
            field_validation=query.get("fieldValidation") or "Warn",
            manager=query.get("fieldManager")
            or apply_fields.manager_from_user_agent(self.headers.get("User-Agent") or ""),
            dry_run=query.get("dryRun") == "All",
        )
        if len(opts.manager) > 128:
            raise errors.bad_request("fieldManager: Too long: may not be more than 128 bytes")
        if method == "POST":
            body = self._body(raw, rt)
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
                _check_kind(rt, body)
                obj = store.create(_stored_as(rt), ns, builtins.to_storage(rt, body), opts)
                self._send(201, _present(store, rt, obj), opts.warnings)
            return
        if not r.name and method != "DELETE":
            raise ApiError(405, "MethodNotAllowed", f"{method} needs an object name")
        if r.subresource == "scale":
            self._scale(method, r, raw, opts)
        elif method == "PUT":
            body = self._body(raw, rt)
            _check_kind(rt, body)
            obj = store.replace(
                _stored_as(rt), ns, r.name, builtins.to_storage(rt, body), r.subresource, opts
            )
            self._send(200, _present(store, rt, obj), opts.warnings)
        elif method == "PATCH":
            content_type = _media_type(self.headers.get("Content-Type"))
            accepted = _PATCH_TYPES_CUSTOM if rt.custom else _PATCH_TYPES
            if content_type not in accepted:
                raise errors.unsupported_media_type(accepted)
            _check_patch_options(content_type, query)
            if content_type == APPLY_PATCH:
                applied = _yaml(raw)
                force = query.get("force", "").lower() in ("1", "true")
                applied = builtins.to_storage(rt, applied)
                obj, created = store.apply(
                    _stored_as(rt), ns, r.name, applied, r.subresource, opts, force
                )
                self._send(201 if created else 200, _present(store, rt, obj), opts.warnings)
                return
            patch = _json(raw, dict | list)
            if rt.same_as is None:
                obj = store.patch(rt, ns, r.name, content_type, patch, r.subresource, opts)
            else:  # patched in the shape it was sent for, stored in the other

                def change(old: Obj) -> Obj:
                    shown = apply_patch(content_type, builtins.present(rt, old), patch)
                    return builtins.to_storage(rt, shown)

                obj = store.update(_stored_as(rt), ns, r.name, change, r.subresource, None, opts)
            self._send(200, _present(store, rt, obj), opts.warnings)
        elif method == "DELETE":
            self._delete(store, r, query, raw)
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")

    def _body(self, raw: bytes, rt: ResourceType) -> Obj:
        """A POST or PUT body in any of the media types the server reads for this kind."""
        content_type = _media_type(self.headers.get("Content-Type"))
        if content_type in ("", "application/json"):
            value = _json(raw)
        elif content_type == "application/yaml":
            value = _yaml(raw)
        elif content_type == protobuf.CONTENT_TYPE and not rt.custom:
            value = protobuf.decode_object(raw)
        else:
            accepted = ["application/json", "application/yaml"]
            if not rt.custom:
                accepted.append(protobuf.CONTENT_TYPE)
            raise errors.unsupported_media_type(accepted)
        return value

    def _scale(self, method: str, r: _Route, raw: bytes, opts: WriteOptions) -> None:
        store, rt, ns = self.server.emulator.store, r.rt, r.namespace or ""
        if method == "PUT":
            scale = self._body(raw, rt)
        else:
            content_type = _media_type(self.headers.get("Content-Type"))
            if content_type not in _PATCH_TYPES or content_type == APPLY_PATCH:
                raise errors.unsupported_media_type(_PATCH_TYPES[:3])
            current = builtins.scale_of(rt, store.get(rt, ns, r.name))
            scale = apply_patch(content_type, current, _json(raw, dict | list))
        expect = (scale.get("metadata") or {}).get("resourceVersion")
        opts.subresource = "scale"

        def change(obj: Obj) -> Obj:
            return builtins.apply_scale(rt, obj, scale)

        obj = store.update(rt, ns, r.name, change, "", str(expect) if expect else None, opts)
        self._send(200, builtins.scale_of(rt, obj), opts.warnings)

    def _watch(
        self,
        store: Store,
        r: _Route,
        query: dict[str, str],
        labels: Any,
        fields: Any,
        view: str,
    ) -> None:
        initial_events = query.get("sendInitialEvents", "").lower() in ("1", "true")
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("1", "true")
        match = query.get("resourceVersionMatch", "")
        problems = []
        if initial_events:
            if match != "NotOlderThan":
                problems.append(
                    errors.FieldError.forbidden(
                        "resourceVersionMatch",
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    )
                )
            if not bookmarks:
                problems.append(
                    errors.FieldError.forbidden(
                        "allowWatchBookmarks",
                        "sendInitialEvents requires setting allowWatchBookmarks to true",
                    )
                )
        elif match:
            problems.append(
                errors.FieldError.forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                )
            )
        if problems:
            raise errors.invalid_fields("ListOptions", "meta.k8s.io", "", problems)
        timeout = _number(query.get("timeoutSeconds"))
        rt = r.rt
        try:
            w = store.watch(
                rt, r.namespace, labels, fields, query.get("resourceVersion"), initial_events
            )
        except ApiError as e:
            if e.code != 410:
                raise
            self._stream_error(e)  # in the stream, like a real server
            return
        self._stream(w, timeout, view, query, w.initial_rv if initial_events else None)

    def _delete(self, store: Store, r: _Route, query: dict[str, str], raw: bytes) -> None:
        # `gracePeriodSeconds`, `propagationPolicy` and `orphanDependents` are accepted and
        # ignored: objects go at once (after their finalizers).
        options = self._body(raw, r.rt) if raw.strip() else {}
        rt = r.rt
        if not r.name:
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(query.get("fieldSelector"))
            deleted = store.delete_collection(rt, r.namespace, labels, fields)
            self._send(
                200,
                _list_body(rt, [_present(store, rt, o) for o in deleted], store.resource_version),
            )
            return
        if query.get("dryRun") == "All" or "All" in (options.get("dryRun") or []):
            obj = store.get(rt, r.namespace or "", r.name)
            self._send(200, _present(store, rt, obj))
            return
        obj, gone = store.delete(rt, r.namespace or "", r.name, options.get("preconditions"))
        if gone and not (rt.custom or rt in _DELETE_RETURNS_OBJECT):
            # Most built-in kinds answer a deleted object with a Status, like a real server.
            md = obj.get("metadata") or {}
            details = {"name": r.name, "group": rt.group, "kind": rt.plural, "uid": md.get("uid")}
            self._send(200, status_body(200, "", "", details))
            return
        self._send(200, _present(store, rt, obj))

    # ---- output ------------------------------------------------------------------------

    def _send_view(
        self,
        view: str,
        rt: ResourceType,
        items: list[Obj],
        list_meta: Obj | None,
        query: dict[str, str],
    ) -> None:
        """A get (`list_meta` None) or a list, as JSON, a Table or partial metadata."""
        if view == "table":
            meta = (
                list_meta
                if list_meta is not None
                else {
                    "resourceVersion": (items[0].get("metadata") or {}).get("resourceVersion", "")
                }
            )
            include = query.get("includeObject") or "Metadata"
            self._send(200, tables.table(rt, items, meta, include), content_type=_TABLE_TYPE)
        elif view == "pom":
            if list_meta is None:
                self._send(200, tables.partial_metadata(items[0]), content_type=_POM_TYPE)
            else:
                body = {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": list_meta,
                    "items": [tables.partial_metadata(o) for o in items],
                }
                self._send(200, body, content_type=_POM_LIST_TYPE)
        elif list_meta is None:
            self._send(200, items[0])
        else:
            body = _list_body(rt, items, 0)
            body["metadata"] = list_meta
            self._send(200, body)

    def _send(
        self,
        code: int,
        body: Obj,
        warnings: list[str] | None = None,
        content_type: str | None = None,
    ) -> None:
        data = _dumps(body)
        self.send_response_only(code)
        for warning in warnings or ():
            # RFC 7234 warn-code 299, agent "-", as the API server sends them.
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.send_header("Content-Type", content_type or "application/json")
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

    def _stream(
        self,
        w: Watcher,
        timeout: float | None,
        view: str = "json",
        query: dict[str, str] | None = None,
        bookmark_rv: int | None = None,
    ) -> None:
        """Serve a watch: one JSON event per line, chunked, until timeout, overflow or EOF.

        A watch-list (`sendInitialEvents=true`) ends its initial events with a BOOKMARK
        annotated `k8s.io/initial-events-end: "true"` at the resourceVersion they reflect.
        """
        store = self.server.emulator.store
        # Like a real API server's, a watch that ends with its terminating chunk (a timeout,
        # or a reader too slow to keep up) leaves the connection open for the client's next
        # request; one cut short closes it.
        self.close_connection = True
        deadline = time.monotonic() + (timeout if timeout is not None else DEFAULT_WATCH_TIMEOUT)
        render = _event_renderer(store, w.rt, view, (query or {}).get("includeObject"))
        try:
            self.send_response_only(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            backlog, w.initial = w.initial, []
            for i in range(0, len(backlog), _BATCH):
                self._chunk(render, backlog[i : i + _BATCH])
            del backlog
            if bookmark_rv is not None:
                self._chunk(render, [("BOOKMARK", _initial_events_end(w.rt, bookmark_rv))])
            bookmarks = (query or {}).get("allowWatchBookmarks") == "true"
            while not w.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if bookmarks:
                        self._closing_bookmark(store, w, render)
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
                self._chunk(render, [e for e in batch if e[0]])
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = False
        except (BrokenPipeError, ConnectionResetError, TimeoutError, OSError):
            pass
        finally:
            store.unwatch(w)

    def _closing_bookmark(self, store: Any, w: Watcher, render: Any) -> None:
        """As the API server's watch cache does, a watch that asked for bookmarks ends with
        one at the current resourceVersion: the client resumes from there, not from its last
        event, which writes to other kinds may have pushed out of the event window."""
        with store.lock:
            rv = store.resource_version
            caught_up = w.queue.empty()  # every event up to `rv` for this watch was sent
        if caught_up:
            bookmark = {
                "kind": w.rt.kind,
                "apiVersion": w.rt.api_version,
                "metadata": {"resourceVersion": str(rv)},
            }
            self._chunk(render, [("BOOKMARK", bookmark)])

    def _stream_error(self, e: ApiError) -> None:
        """A 200 stream holding one ERROR event: the client raises or re-lists on a 410."""
        data = json.dumps({"type": "ERROR", "object": e.status()}).encode() + b"\n"
        self.send_response_only(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))

    def _chunk(self, render: Any, events: list[tuple[str, Obj]]) -> None:
        if not events:
            return
        data = b"".join(_dumps({"type": k, "object": render(k, obj)}) + b"\n" for k, obj in events)
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


_TABLE_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"
_POM_TYPE = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
_POM_LIST_TYPE = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
APPLY_PATCH = "application/apply-patch+yaml"
_PATCH_TYPES = [JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, APPLY_PATCH]
_PATCH_TYPES_CUSTOM = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
# Built-in kinds whose registry returns the deleted object rather than a Status.
_DELETE_RETURNS_OBJECT = frozenset([PODS, NAMESPACES, SERVICES])


def _media_type(header: str | None) -> str:
    return (header or "").split(";")[0].strip().lower()


def _negotiate(accept: str, rt: ResourceType) -> str:
    """The representation asked for: json, table (meta.k8s.io Table) or pom (partial metadata).

    The first acceptable entry wins, as the server's negotiation picks it; none acceptable is
    a 406.
    """
    if not accept.strip():
        return "json"
    for part in accept.split(","):
        pieces = part.split(";")
        media = pieces[0].strip().lower()
        params = {k.strip(): v.strip() for k, _, v in (p.partition("=") for p in pieces[1:])}
        as_kind = params.get("as")
        if media not in ("application/json", "application/*", "*/*"):
            continue
        if as_kind is None:
            return "json"
        if params.get("g") != "meta.k8s.io" or params.get("v") not in ("v1", "v1beta1"):
            continue
        if as_kind == "Table":
            return "table"
        if as_kind in ("PartialObjectMetadata", "PartialObjectMetadataList"):
            return "pom"
    raise ApiError(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, "
        "application/json;as=Table;v=v1;g=meta.k8s.io, "
        "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
    )


def _accepts_json(accept: str) -> bool:
    if not accept.strip():
        return True
    return any(
        p.split(";")[0].strip().lower() in ("application/json", "application/*", "*/*")
        for p in accept.split(",")
    )


def _event_renderer(store: Store, rt: ResourceType, view: str, include: str | None) -> Any:
    def render(kind: str, obj: Obj) -> Obj:
        if kind == "BOOKMARK":
            return obj
        shown = _present(store, rt, obj)
        if view == "table":
            md = shown.get("metadata") or {}
            return tables.table(
                rt,
                [shown],
                {"resourceVersion": md.get("resourceVersion", "")},
                include or "Metadata",
            )
        if view == "pom":
            return tables.partial_metadata(shown)
        return shown

    return render


def _initial_events_end(rt: ResourceType, rv: int) -> Obj:
    return {
        "kind": rt.kind,
        "apiVersion": rt.api_version,
        "metadata": {
            "resourceVersion": str(rv),
            "annotations": {"k8s.io/initial-events-end": "true"},
        },
    }


def _check_patch_options(content_type: str, query: dict[str, str]) -> None:
    """PatchOptions validation: an apply names its field manager; `force` is for applies."""
    problems = []
    if content_type == APPLY_PATCH:
        if not query.get("fieldManager"):
            # kubectl defaults it to "kubectl"; controllers must set it.
            problems.append(
                errors.FieldError.required("fieldManager", "is required for apply patch")
            )
    elif "force" in query:
        problems.append(
            errors.FieldError.forbidden("force", "may not be specified for non-apply patch")
        )
    if problems:
        raise errors.invalid_fields("PatchOptions", "meta.k8s.io", "", problems)


def _check_list_options(query: dict[str, str]) -> None:
    if query.get("sendInitialEvents"):
        raise errors.invalid_fields(
            "ListOptions",
            "meta.k8s.io",
            "",
            [
                errors.FieldError.forbidden(
                    "sendInitialEvents", "sendInitialEvents is forbidden for list"
                )
            ],
        )
    match = query.get("resourceVersionMatch")
    if match and not query.get("resourceVersion"):
        raise errors.invalid_fields(
            "ListOptions",
            "meta.k8s.io",
            "",
            [
                errors.FieldError.forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                )
            ],
        )


def _page(items: list[Obj], rv: int, query: dict[str, str]) -> tuple[list[Obj], Obj]:
    """`limit`/`continue`: one page of the (namespace, name)-ordered list, and its ListMeta."""
    list_meta: Obj = {"resourceVersion": str(rv)}
    token = query.get("continue")
    if token:
        try:
            state = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            start = str(state["start"])
            list_meta["resourceVersion"] = str(int(state["rv"]))
        except (ValueError, KeyError, TypeError):
            raise errors.bad_request(
                "continue key is not valid: incorrect encoded start resourceVersion "
                "(version meta.k8s.io/v1)"
            ) from None
        items = [o for o in items if _list_key(o) > start]
    limit = int(_number(query.get("limit")) or 0)
    if limit > 0 and len(items) > limit:
        rest = len(items) - limit
        items = items[:limit]
        state = {
            "v": "meta.k8s.io/v1",
            "rv": int(list_meta["resourceVersion"]),
            "start": _list_key(items[-1]),
        }
        encoded = json.dumps(state, separators=(",", ":")).encode()
        list_meta["continue"] = base64.urlsafe_b64encode(encoded).decode().rstrip("=")
        list_meta["remainingItemCount"] = rest
    return items, list_meta


def _list_key(obj: Obj) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace') or ''}/{md.get('name') or ''}"


def _check_kind(rt: ResourceType, body: Obj) -> None:
    """A body naming another kind or version is refused, as the server's decoder does."""
    kind, api_version = body.get("kind"), body.get("apiVersion")
    if api_version and api_version != rt.api_version:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({rt.api_version})"
        )
    if kind and kind != rt.kind:
        raise errors.bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
        )


def _verb(method: str, r: _Route, query: dict[str, str]) -> str:
    """The RBAC verb of a request (what an audit log records)."""
    if method == "GET":
        if r.name:
            return "get"
        return "watch" if query.get("watch", "").lower() in ("1", "true") else "list"
    if method == "DELETE":
        return "delete" if r.name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]


def _stored_as(rt: ResourceType) -> ResourceType:
    """The resource whose shape is stored (events.k8s.io events are core events)."""
    return resources.REGISTRY[rt.same_as] if rt.same_as is not None else rt


def _present(store: Store, rt: ResourceType, obj: Obj) -> Obj:
    """An object as read: PDBs get their status computed on the fly; events.k8s.io events
    are core events in their own shape."""
    if rt is PDBS:
        return policy.with_pdb_status(store, obj)
    return builtins.present(rt, obj)


def _list_body(rt: ResourceType, items: list[Obj], rv: int) -> Obj:
    return {
        "kind": f"{rt.kind}List",
        "apiVersion": rt.api_version,
        "metadata": {"resourceVersion": str(rv)},
        "items": items,
    }


def _dumps(body: Any) -> bytes:
    """Compact JSON, as the API server writes it. orjson is an order of magnitude faster than
    the standard library on the lists and watch events a burst sends; what it refuses (an
    integer beyond 64 bits, which only a stored oddity could hold) the standard library
    writes."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body, separators=(",", ":")).encode()


def _json(raw: bytes, expected: Any = dict) -> Any:
    try:
        value = json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError) as e:
        raise errors.bad_request(f"malformed JSON body: {e}") from None
    if not isinstance(value, expected):
        raise errors.bad_request("the request body must be a JSON object")
    return value


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml(raw: bytes) -> Obj:
    try:
        value = yaml.load(raw, Loader=_YAML_LOADER) if raw else None
    except yaml.YAMLError as e:
        raise errors.bad_request(f"error converting YAML to JSON: {e}") from None
    if not isinstance(value, dict):
        raise errors.bad_request("the request body must be an object")
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
