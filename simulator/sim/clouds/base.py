"""What every cloud stand-in shares: the kubelet-boot protocol, failure injection, an HTTP face.

`BootableCloud` is all the simulated kubelets need from a cloud to boot its VMs "from the
inside": which VMs exist and in what state, one VM's details with its user data as the VM
received it (decoded text), and the shape of an instance type. `FakeCloudBootable` adapts
the original `sim.cloud.FakeCloud` to it.

The helpers below are for writing stand-ins quickly and alike (none is required):

- `CloudStandin`: the base the seven cloud stand-ins share — its HTTP server and lifecycle
  (`start`/`stop`/`with`, from `ServedStandin`), the lock over its state, failure injection
  (`inject_failure`/`clear_failures`, `_fail(op)` answering with the subclass's
  `_failure_response(kind)`), the created/deleted counters and the delete delay after which
  a VM is gone (`_purge_deleted`), and the constructor keywords every stand-in takes
  (`StandinOptions`: boot and delete delays, host, port); each subclass keeps only what its
  real API shapes;
- `Failures`: per-op injected failures (`inject_failure(op, kind, times=1)`), consumed in
  order; each stand-in maps a kind to its own cloud's wire error;
- `lifecycle_state`: pending → running after a boot delay, stopping → gone after a delete
  delay, derived from timestamps so that no background thread is needed;
- `StandinHTTPServer`: a threaded stdlib HTTP server in a daemon thread that hands each
  request, parsed, to a `route(Request) -> Response` callable.

What `sim.cluster.SimulatedCluster(clouds=[...])` and `cloudburst dev` expect of a stand-in
module `sim/clouds/<provider>.py` (see `Standin`):

- a module-level factory `standin(*, boot_delay_s: float = 1.0, host: str = "127.0.0.1")`
  returning the stand-in object, not yet started;
- on that object: `provider`, `start()`, `stop()`, `endpoint` (what goes into the NodeClass
  block's `endpoint`; `url` is accepted too), `credential` (the ONE string the provider
  reads from its Secret, e.g. a token or a JSON document), `stats()` (with
  `created_by_name`), `inject_failure(op, kind, times=1)`, `clear_failures()`, and the
  `BootableCloud` methods;
- optionally, for clouds that sell spot VMs: `interrupt(native_id, notice_s=...)` (reclaim a
  spot VM: a notice first, then the cloud's own termination after `notice_s`) and
  `interruption_notice(native_id) -> str | None` (what the in-VM agent sees; the kubelets
  turn it into the `cloudburst.io/interruption` taint);
- optionally `nodeclass_block(secret_name: str, secret_key: str) -> dict` — the camelCase
  NodeClass block that reaches this stand-in with the credential from that Secret key (for
  the sample NodeClass of `cloudburst dev` and the e2e tests), `region` and `instance_type`
  (an offering it accepts; the simulated catalog uses them).
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, Self, TypedDict, TypeVar, runtime_checkable
from urllib.parse import parse_qs, urlsplit

from sim.cloud import FakeCloud
from sim.cloud.server import LISTEN_BACKLOG

FAILURE_KINDS = ("unavailable", "capacity", "quota", "throttle", "auth")
VM_STATES = ("pending", "running", "stopping", "terminated")


@runtime_checkable
class BootableCloud(Protocol):
    """A cloud whose VMs the simulated kubelets can boot (see `sim.kubelet.Kubelets`)."""

    provider: str  # "hetzner", "aws", ... — the providerID scheme of its nodes

    def instance_states(self) -> dict[str, str]:
        """native id -> "pending" | "running" | "stopping" | "terminated"."""
        ...

    def peek(self, native_id: str) -> dict[str, Any] | None:
        """{"id", "name", "region", "instance_type", "user_data" (decoded text), "private_ip",
        "labels"} of one VM, bypassing injected failures; None when it does not exist."""
        ...

    def instance_shape(self, instance_type: str) -> tuple[float, float, str] | None:
        """(vcpu, memory_gib, arch) of an instance type; None when unknown."""
        ...


class FakeCloudBootable:
    """`sim.cloud.FakeCloud` as a `BootableCloud` (provider "fake")."""

    provider = "fake"

    def __init__(self, cloud: FakeCloud) -> None:
        self.cloud = cloud

    def instance_states(self) -> dict[str, str]:
        return self.cloud.instance_states()

    def peek(self, native_id: str) -> dict[str, Any] | None:
        return self.cloud.peek(native_id)

    def instance_shape(self, instance_type: str) -> tuple[float, float, str] | None:
        t = self.cloud.types.get(instance_type)
        return None if t is None else (float(t.vcpu), float(t.memory_gib), t.arch)


def as_bootable(cloud: BootableCloud | FakeCloud) -> BootableCloud:
    """A `BootableCloud` for anything the kubelets may be handed."""
    return FakeCloudBootable(cloud) if isinstance(cloud, FakeCloud) else cloud


class Standin(BootableCloud, Protocol):
    """A started-or-not stand-in as the simulated cluster drives it (see the module doc)."""

    credential: str

    def start(self) -> object: ...

    def stop(self) -> None: ...

    def stats(self) -> dict[str, Any]: ...

    def inject_failure(self, op: str, kind: str, times: int | None = 1) -> None: ...

    def clear_failures(self) -> None: ...


def standin_endpoint(standin: object) -> str:
    """The stand-in's API address (`endpoint`, else `url`)."""
    value = getattr(standin, "endpoint", None) or getattr(standin, "url", None)
    if not isinstance(value, str) or not value:
        raise AttributeError(f"{type(standin).__name__} has no endpoint/url")
    return value


# ---- spot interruption ---------------------------------------------------------------------


@dataclass
class SpotNotice:
    """A spot VM told it is being reclaimed: what the cloud's in-VM endpoint serves
    (`detail`), the taint value an agent makes of it, and when the cloud reclaims the VM."""

    native_id: str
    region: str
    detail: dict[str, str]
    taint_value: str
    noticed_mono: float
    due_mono: float
    done: bool = False  # the VM was reclaimed


# ---- failure injection ---------------------------------------------------------------------


@dataclass
class _Failure:
    op: str
    kind: str
    remaining: int | None  # None: until cleared


class Failures:
    """Injected failures per op, thread-safe. `take(op)` consumes and returns the next kind."""

    def __init__(self, ops: tuple[str, ...], kinds: tuple[str, ...] = FAILURE_KINDS) -> None:
        self.ops = ops
        self.kinds = kinds
        self._lock = threading.Lock()
        self._items: list[_Failure] = []

    def inject(self, op: str, kind: str, times: int | None = 1) -> None:
        if op not in self.ops:
            raise ValueError(f"op must be one of {self.ops}, not {op!r}")
        if kind not in self.kinds:
            raise ValueError(f"kind must be one of {self.kinds}, not {kind!r}")
        with self._lock:
            self._items.append(_Failure(op, kind, times))

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def take(self, op: str) -> str | None:
        with self._lock:
            for item in self._items:
                if item.op != op:
                    continue
                if item.remaining is not None:
                    item.remaining -= 1
                    if item.remaining <= 0:
                        self._items.remove(item)
                return item.kind
        return None

    def pending(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"op": f.op, "kind": f.kind, "remaining": f.remaining} for f in self._items]


def lifecycle_state(
    now: float,
    created_mono: float,
    boot_delay_s: float,
    *,
    delete_requested_mono: float | None = None,
    terminated: bool = False,
    powered_on: bool = True,
) -> str:
    """The state of a VM from its timestamps (no background thread needed).

    A VM that is not powered on (Scaleway creates servers stopped) stays "pending"... as far
    as the kubelets are concerned: it never boots until it is.
    """
    if terminated:
        return "terminated"
    if delete_requested_mono is not None:
        return "stopping"
    if not powered_on or now - created_mono < boot_delay_s:
        return "pending"
    return "running"


def rfc3339(value: datetime | None = None) -> str:
    return (value or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")


def private_ip(n: int, prefix: int = 10) -> str:
    """A distinct private address for the n-th VM of a stand-in."""
    return f"{prefix}.{(n >> 16) & 0xFF}.{(n >> 8) & 0xFF}.{n & 0xFF}"


# ---- HTTP ----------------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str  # without the query string
    parts: list[str]  # path segments, empty ones dropped
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def q(self, name: str, default: str | None = None) -> str | None:
        """The last value of a query parameter."""
        values = self.query.get(name)
        return values[-1] if values else default

    def json(self) -> Any:
        if not self.body:
            return {}
        return json.loads(self.body)


@dataclass
class Response:
    status: int
    body: Any = None  # JSON-serialisable, or bytes/str sent as they are
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    # The status line's reason phrase, where an API puts its message there (Proxmox VE).
    reason: str | None = None

    def encoded(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str) and self.content_type != "application/json":
            return self.body.encode()
        return json.dumps(self.body).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG
    route: Callable[[Request], Response]

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = Request(
            method=self.command,
            path=url.path,
            parts=[p for p in url.path.split("/") if p],
            query=parse_qs(url.query, keep_blank_values=True),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        try:
            response = self.server.route(request)
        except Exception as exc:  # a stand-in bug: answer 500 rather than hang up
            response = Response(500, {"message": f"stand-in error: {type(exc).__name__}: {exc}"})
        data = response.encoded()
        self.send_response(response.status, response.reason)
        if data:
            self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in response.headers.items():
            self.send_header(k, v)
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _dispatch


class StandinHTTPServer:
    """Serves `route` on `host:port` (port 0 picks a free one) from a daemon thread."""

    def __init__(
        self,
        route: Callable[[Request], Response],
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "standin-http",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._httpd = _Server((host, port), _Handler)
        self._httpd.route = route
        self._name = name
        # HTTPS, for clients that must not send a token in clear text (a test's own CA).
        self._scheme = "https" if tls is not None else "http"
        if tls is not None:
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{self._scheme}://{self._httpd.server_address[0]!s}:{self.port}"

    def start(self) -> StandinHTTPServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.1},
                name=self._name,
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
        self._thread = None


# ---- the stand-in classes ------------------------------------------------------------------


class ServedStandin:
    """An HTTP stand-in's lifecycle: `start()`/`stop()` (or `with`), serving `_route`."""

    _http: StandinHTTPServer

    def _serve(self, *, host: str, port: int, name: str, tls: ssl.SSLContext | None = None) -> None:
        self._http = StandinHTTPServer(self._route, host=host, port=port, name=name, tls=tls)

    def _route(self, req: Request) -> Response:
        raise NotImplementedError

    @property
    def url(self) -> str:
        return self._http.url

    def start(self) -> Self:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _DeletableVm(Protocol):
    delete_requested_mono: float | None


_Vm = TypeVar("_Vm", bound=_DeletableVm)


class StandinOptions(TypedDict, total=False):
    """What every cloud stand-in's constructor takes besides its own cloud's settings (a
    stand-in's `**options: Unpack[StandinOptions]`, handed on to `CloudStandin`)."""

    boot_delay_s: float  # a new VM is pending this long, then running
    delete_delay_s: float  # a deleted VM is still listed this long
    host: str
    port: int  # 0: any free port


class CloudStandin(ServedStandin):
    """What the cloud stand-ins share besides their API: the lock over their state, failure
    injection, the counters `stats()` reports, and VMs that go once a delete delay is over.

    A stand-in answers an injected failure with its own cloud's wire error
    (`_failure_response`), found by `_fail(op)` at the top of each operation.
    """

    provider: str
    boot_delay_s: float
    delete_delay_s: float

    def __init__(
        self,
        *,
        ops: tuple[str, ...],
        kinds: tuple[str, ...] = FAILURE_KINDS,
        name: str,
        tls: ssl.SSLContext | None = None,
        boot_delay_s: float = 1.0,
        delete_delay_s: float = 0.2,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.boot_delay_s = boot_delay_s
        self.delete_delay_s = delete_delay_s
        self.failures = Failures(ops, kinds)
        self._lock = threading.Lock()
        self._created_by_name: Counter[str] = Counter()
        self._deleted = 0
        self._serve(host=host, port=port, name=name, tls=tls)

    @property
    def endpoint(self) -> str:
        """What goes into the NodeClass block's `endpoint`: the API root (a stand-in whose
        real API lives below a path says so)."""
        return self._http.url

    # ---- test controls ---------------------------------------------------------------------

    def inject_failure(self, op: str, kind: str, times: int | None = 1) -> None:
        self.failures.inject(op, kind, times)

    def clear_failures(self) -> None:
        self.failures.clear()

    def _fail(self, op: str) -> Response | None:
        """The wire error of the next failure injected for `op`; None: no failure."""
        kind = self.failures.take(op)
        return None if kind is None else self._failure_response(kind)

    def _failure_response(self, kind: str) -> Response:
        raise NotImplementedError

    def _vm_counts(self, live_instances: int) -> dict[str, Any]:
        """The VMs created (by name), live and deleted: what `stats()` starts with."""
        return {
            "created_by_name": dict(self._created_by_name),
            "instances_created": sum(self._created_by_name.values()),
            "live_instances": live_instances,
            "deleted_instances": self._deleted,
        }

    # ---- VM lifecycle ----------------------------------------------------------------------

    def _purge_deleted(self, vms: dict[Any, _Vm], now: float) -> None:
        """Forget the VMs whose delete was asked `delete_delay_s` ago (with the lock held)."""
        gone = [
            key
            for key, vm in vms.items()
            if vm.delete_requested_mono is not None
            and now - vm.delete_requested_mono >= self.delete_delay_s
        ]
        for key in gone:
            del vms[key]
            self._deleted += 1
