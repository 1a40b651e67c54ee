"""A simplified kube-scheduler for the simulated cluster, over the Kubernetes API.

It watches pods and nodes (list + watch into an in-memory cache, like client-go's
informers), and binds each pending, unbound pod to a Ready, schedulable node that fits it:
resources (cpu, memory, pods), nodeSelector, required node affinity, and NoSchedule/NoExecute
taints. Among fitting nodes it picks the most allocated one (bin-packing; ties by name) so
that runs are deterministic. A pod that fits nowhere gets `PodScheduled=False,
reason=Unschedulable` with kube-scheduler's "0/N nodes are available: ..." message: that
condition is what Cloudburst's trigger reacts to, so it is patched only when it changes, and
once set, rewritten no more often than kube-scheduler's per-pod backoff (1 s doubling to
10 s) would retry the pod. Pods alike (same requests, selectors, affinity, tolerations) that
failed in a pass fail the same way until a node changes: the pass judges them once. A pod
whose reason is written waits, like in kube-scheduler's unschedulable queue, until it, a node
or the room on a node changed; passes start at most every `min_pass_interval_s`.

One object it cannot read (a quantity that does not parse, a field of the wrong type: objects
stored before the API server validated them) never stops a pass: such a pod is skipped and
reported once with a `FailedScheduling` Warning Event, such a node takes no pods, and both
are logged once per version of the object.

Objects are handled as raw JSON dicts (`_preload_content=False`): deserialising into the
client's models would cost far more than the scheduling itself.

On any API server it reads and writes through the API (its informers watch over HTTP, as
kube-scheduler's do). Inside the simulated cluster it reads and writes the emulator's store
directly (`StoreListWatch`, `StoreWrites`): the same store operations the API server's
handlers run, so every other watcher sees the same events, without an HTTP round trip per
pod or a watch event serialised for a reader in the same process. A real control plane runs
the scheduler on its own cores; on the one machine that runs the whole simulated cluster
beside the product, a client call per pod made the scheduler the slowest stage of a burst,
and its watches a quarter of the simulator's CPU (docs/benchmarks-history.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from api.quantity import cpu_millis, memory_bytes, parse_quantity
from sim.kubeapi import policy
from sim.kubeapi.admission import WriteOptions
from sim.kubeapi.errors import ApiError
from sim.kubeapi.patch import STRATEGIC_PATCH
from sim.kubeapi.resources import EVENTS, NODES, PODS, ResourceType
from sim.kubeapi.store import Store, Watcher, wake

log = logging.getLogger(__name__)

Obj = dict[str, Any]
DEFAULT_SCHEDULER = "default-scheduler"
# kube-scheduler's per-pod backoff: podInitialBackoffSeconds, podMaxBackoffSeconds.
_BACKOFF_S = 1.0
_MAX_BACKOFF_S = 10.0
_TERMINAL = ("Succeeded", "Failed")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    """Call a `kubernetes` client method with a raw JSON body and return the raw JSON reply.

    The typed client wants its model classes for bodies and builds them for replies; raw
    dicts are both faster and what the emulator speaks. A body-less reply gives {}.
    """
    response = fn(*args, _preload_content=False, **kwargs)
    data = response.data
    return json.loads(data) if data else {}


def pod_key(pod: Obj) -> str:
    md = pod.get("metadata") or {}
    return f"{md.get('namespace', '')}/{md.get('name', '')}"


def condition(obj: Obj, kind: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


# ---- how the scheduler writes --------------------------------------------------------------


class WriteRejected(Exception):
    """The API server refused a write (a 409 on a pod bound meanwhile, a 404 on one gone)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason


class Writes(Protocol):
    def bind(self, namespace: str, name: str, binding: Obj) -> None: ...

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> None: ...

    def create_event(self, namespace: str, event: Obj) -> None: ...


class ApiWrites:
    """Writes through the Kubernetes API, as kube-scheduler makes them."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api_client)

    def bind(self, namespace: str, name: str, binding: Obj) -> None:
        self._call(self.core.create_namespaced_pod_binding, name, namespace, binding)

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> None:
        self._call(
            self.core.patch_namespaced_pod_status,
            name,
            namespace,
            patch,
            _content_type=STRATEGIC_PATCH,
        )

    def create_event(self, namespace: str, event: Obj) -> None:
        self._call(self.core.create_namespaced_event, namespace, event)

    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            call(fn, *args, **kwargs)
        except client.ApiException as exc:
            raise WriteRejected(int(exc.status or 0), str(exc.reason)) from exc


class StoreWrites:
    """Writes straight into the emulator's store: what the API server's handlers for the same
    requests run (the binding subresource, a strategic-merge patch of pods/status with its
    admission, an Event create), under kube-scheduler's field manager."""

    MANAGER = "kube-scheduler"

    def __init__(self, store: Store) -> None:
        self.store = store

    def bind(self, namespace: str, name: str, binding: Obj) -> None:
        with self._rejections():
            policy.bind(self.store, namespace, name, binding)

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> None:
        options = WriteOptions(manager=self.MANAGER)
        with self._rejections():
            self.store.patch(PODS, namespace, name, STRATEGIC_PATCH, patch, "status", options)

    def create_event(self, namespace: str, event: Obj) -> None:
        with self._rejections():
            self.store.create(EVENTS, namespace, event, WriteOptions(manager=self.MANAGER))

    @staticmethod
    @contextlib.contextmanager
    def _rejections() -> Iterator[None]:
        try:
            yield
        except ApiError as exc:
            raise WriteRejected(exc.code, exc.reason) from exc


# ---- a tiny informer -----------------------------------------------------------------------


class ListWatch(Protocol):
    """Where an informer's objects come from: a list, then the events after it."""

    def list(self) -> tuple[list[Obj], str]:
        """Every object, and the resourceVersion the list reflects."""
        ...

    def watch(self, rv: str, timeout_s: int) -> Iterator[tuple[str, Obj]]:
        """(type, object) after `rv` until the watch ends; an "ERROR" event means re-list."""
        ...

    def cut(self) -> None:
        """Wake a `watch` blocked on its next event (stopping)."""
        ...


class ApiListWatch:
    """List + watch over HTTP with a `kubernetes` client list method (`CoreV1Api.list_node`),
    as client-go's informers do."""

    def __init__(self, list_fn: Callable[..., Any]) -> None:
        self._list_fn = list_fn
        self._response: Any = None  # the open watch stream, so that cut() can end it
        self._cut = False  # for good: an informer that stops never watches again

    def list(self) -> tuple[list[Obj], str]:
        data = json.loads(self._list_fn(_preload_content=False, _request_timeout=30).data)
        rv = str((data.get("metadata") or {}).get("resourceVersion") or "")
        return list(data.get("items") or []), rv

    def watch(self, rv: str, timeout_s: int) -> Iterator[tuple[str, Obj]]:
        response = self._list_fn(
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_s,
            _preload_content=False,
            _request_timeout=timeout_s + 10,
        )
        self._response = response
        finished = False
        try:
            if self._cut:  # cut while this watch was being opened
                return
            for line in iter_resp_lines(response):
                event = json.loads(line)
                yield str(event.get("type")), event.get("object") or {}
            finished = True
        finally:
            self._response = None
            if finished:
                response.release_conn()
            else:
                response.close()  # mid-stream: this connection must not go back to the pool

    def cut(self) -> None:
        self._cut = True
        # A watch read blocks until the server sends something: shut the socket to wake it.
        sock = getattr(getattr(self._response, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class StoreListWatch:
    """List + watch straight from the emulator's store, for the scheduler inside the simulated
    cluster: the events every HTTP watcher gets, without serialising each for a reader in the
    same process (the scheduler's own watches were a quarter of the simulator's CPU in a
    burst). The objects are the store's own: read, never changed."""

    def __init__(self, store: Store, rt: ResourceType) -> None:
        self._store = store
        self._rt = rt
        self._watcher: Watcher | None = None
        self._cut = False  # for good: an informer that stops never watches again

    def list(self) -> tuple[list[Obj], str]:
        items, rv = self._store.list_objects(self._rt, None)
        return items, str(rv)

    def watch(self, rv: str, timeout_s: int) -> Iterator[tuple[str, Obj]]:
        try:
            w = self._store.watch(self._rt, None, None, None, rv)
        except ApiError:  # 410 Expired: the log no longer reaches back
            yield "ERROR", {}
            return
        self._watcher = w
        try:
            if self._cut:  # cut while this watch was being opened
                return
            yield from w.initial
            deadline = time.monotonic() + timeout_s
            while not w.closed and (remaining := deadline - time.monotonic()) > 0:
                try:
                    kind, obj = w.queue.get(timeout=remaining)
                except queue.Empty:
                    return
                if not kind:
                    break  # a wake-up: the store closed this watch, or cut() ends it
                yield kind, obj
            if w.closed:  # fell too far behind, or the store shut its watches: re-list
                yield "ERROR", {}
        finally:
            self._watcher = None
            self._store.unwatch(w)

    def cut(self) -> None:
        self._cut = True
        if (w := self._watcher) is not None:
            wake(w)


class Informer:
    """List + watch one resource into a dict keyed by namespace/name, re-listing when needed.

    Every change calls `on_change`. Resyncs (a full re-list) happen every `relist_s` and after
    any error, including 410 Gone, so the cache converges whatever the watch missed.
    """

    def __init__(
        self,
        name: str,
        source: ListWatch,
        on_change: Callable[[], None],
        *,
        relist_s: float = 30.0,
        watch_timeout_s: int = 5,
    ) -> None:
        self.name = name
        self._source = source
        self._on_change = on_change
        self._relist_s = relist_s
        self._watch_timeout_s = watch_timeout_s
        self._lock = threading.Lock()
        self._items: dict[str, Obj] = {}
        self._stop = threading.Event()
        self.synced = threading.Event()
        self._thread: threading.Thread | None = None
        self.version = 0  # changes with every change seen: "has anything changed since"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._source.cut()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._items.values())

    def keyed_items(self) -> list[tuple[str, Obj]]:
        """(namespace/name, object) pairs: a pass over many pods need not rebuild each key."""
        with self._lock:
            return list(self._items.items())

    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self._items.get(key)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rv = self._relist()
                deadline = time.monotonic() + self._relist_s
                while not self._stop.is_set() and time.monotonic() < deadline:
                    next_rv = self._watch(rv)
                    if next_rv is None:
                        break  # 410 Gone or an ERROR event: re-list
                    rv = next_rv
            except Exception as exc:  # the API server restarting, a dropped connection...
                if self._stop.is_set():
                    return
                log.debug("informer %s: %s; re-listing", self.name, exc)
                self._stop.wait(0.5)

    def _relist(self) -> str:
        items, rv = self._source.list()
        with self._lock:
            self._items = {pod_key(o): o for o in items}
            self.version += 1
        self.synced.set()
        self._on_change()
        return rv

    def _watch(self, rv: str) -> str | None:
        for kind, obj in self._source.watch(rv, self._watch_timeout_s):
            if self._stop.is_set():
                return rv
            if kind == "ERROR":
                return None
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
            if kind == "BOOKMARK":
                continue
            with self._lock:
                if kind == "DELETED":
                    self._items.pop(pod_key(obj), None)
                else:
                    self._items[pod_key(obj)] = obj
                self.version += 1
            self._on_change()
        return rv


# ---- predicates (pure functions, unit-testable) ------------------------------------------


@dataclass
class Requests:
    cpu: int = 0  # millicores
    memory: int = 0  # bytes
    pods: int = 0

    def __add__(self, other: Requests) -> Requests:
        return Requests(self.cpu + other.cpu, self.memory + other.memory, self.pods + other.pods)


def _container_requests(container: Obj) -> Requests:
    req = ((container.get("resources") or {}).get("requests")) or {}
    return Requests(
        cpu_millis(req["cpu"]) if "cpu" in req else 0,
        memory_bytes(req["memory"]) if "memory" in req else 0,
    )


def pod_requests(pod: Obj) -> Requests:
    """What kube counts: sum of containers, at least the largest init container, + overhead."""
    spec = pod.get("spec") or {}
    total = Requests()
    for c in spec.get("containers") or []:
        total = total + _container_requests(c)
    sidecars = Requests()
    init_max = Requests()
    for c in spec.get("initContainers") or []:
        r = _container_requests(c)
        if c.get("restartPolicy") == "Always":  # sidecars keep running beside the app
            sidecars = sidecars + r
            continue
        init_max = Requests(
            max(init_max.cpu, r.cpu + sidecars.cpu),
            max(init_max.memory, r.memory + sidecars.memory),
        )
    total = total + sidecars
    total = Requests(max(total.cpu, init_max.cpu), max(total.memory, init_max.memory))
    overhead = spec.get("overhead") or {}
    if overhead:
        total = total + Requests(
            cpu_millis(overhead.get("cpu", 0)), memory_bytes(overhead.get("memory", 0))
        )
    return Requests(total.cpu, total.memory, 1)


def node_allocatable(node: Obj) -> Requests:
    """What a node offers; raises ValueError (or TypeError) when a quantity cannot be read."""
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    return Requests(
        cpu_millis(alloc.get("cpu", 0)),
        memory_bytes(alloc.get("memory", 0)),
        int(parse_quantity(alloc.get("pods", 110))),  # a quantity too ("110", "1k")
    )


def _match_expression(expr: Obj, value: str | None) -> bool:
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_matches_selector_term(term: Obj, node: Obj) -> bool:
    """A NodeSelectorTerm: every matchExpression and matchField holds (empty term: none)."""
    md = node.get("metadata") or {}
    labels = md.get("labels") or {}
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    if not all(_match_expression(e, labels.get(e.get("key"))) for e in exprs):
        return False
    return all(
        _match_expression(f, md.get("name") if f.get("key") == "metadata.name" else None)
        for f in fields
    )


def node_matches_pod_affinity(pod: Obj, node: Obj) -> bool:
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution node affinity."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    ) or None
    if required is None:
        return True
    return any(node_matches_selector_term(t, node) for t in required.get("nodeSelectorTerms") or [])


def tolerates(toleration: Obj, taint: Obj) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    op = toleration.get("operator") or "Equal"
    if not key:
        return op == "Exists"
    if key != taint.get("key"):
        return False
    if op == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(pod: Obj, taints: Iterable[Obj]) -> Obj | None:
    """The first NoSchedule/NoExecute taint that the pod does not tolerate, if any."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def node_taints(node: Obj) -> list[Obj]:
    """The node's taints, plus the ones the node lifecycle controller adds when not Ready."""
    taints = list((node.get("spec") or {}).get("taints") or [])
    ready = condition(node, "Ready")
    status = (ready or {}).get("status")
    if status == "False" or ready is None:
        taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
    elif status == "Unknown":
        taints.append({"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"})
    return taints


def taint_message(taint: Obj) -> str:
    return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"


@dataclass
class NodeInfo:
    node: Obj
    name: str
    allocatable: Requests
    used: Requests = field(default_factory=Requests)

    def score(self, req: Requests) -> float:
        """Most-allocated: higher when the node would be fuller after placing the pod."""
        a = self.allocatable
        cpu = (self.used.cpu + req.cpu) / a.cpu if a.cpu else 1.0
        mem = (self.used.memory + req.memory) / a.memory if a.memory else 1.0
        return (cpu + mem) / 2


def fit_reasons(pod: Obj, info: NodeInfo, req: Requests) -> list[str]:
    """Why the pod cannot go on this node (empty: it fits), in kube-scheduler's filter order
    and wording: the first failing plugin wins, except resources which lists all shortfalls."""
    node = info.node
    if (node.get("spec") or {}).get("unschedulable") and not any(
        tolerates(t, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        for t in (pod.get("spec") or {}).get("tolerations") or []
    ):
        return ["node(s) were unschedulable"]
    taint = untolerated_taint(pod, node_taints(node))
    if taint is not None:
        return [taint_message(taint)]
    if not node_matches_pod_affinity(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    reasons = []
    a, u = info.allocatable, info.used
    if u.pods + req.pods > a.pods:
        reasons.append("Too many pods")
    if req.cpu and u.cpu + req.cpu > a.cpu:
        reasons.append("Insufficient cpu")
    if req.memory and u.memory + req.memory > a.memory:
        reasons.append("Insufficient memory")
    return reasons


def unschedulable_message(total: int, reasons: Counter[str]) -> str:
    """kube-scheduler's FitError text."""
    if total == 0:
        return "0/0 nodes are available: no nodes available to schedule pods."
    parts = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: kv[0]))
    return (
        f"0/{total} nodes are available: {parts}. preemption: 0/{total} nodes are available: "
        f"{total} Preemption is not helpful for scheduling."
    )


def is_pending_unbound(pod: Obj) -> bool:
    spec = pod.get("spec") or {}
    md = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    return (
        phase == "Pending"
        and not spec.get("nodeName")
        and not md.get("deletionTimestamp")
        and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
    )


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _alike(pod: Obj, req: Requests) -> str:
    """What decides where a pod fits, as one key: pods with the same key fit the same nodes."""
    spec = pod.get("spec") or {}
    return json.dumps(
        [
            req.cpu,
            req.memory,
            spec.get("nodeSelector"),
            spec.get("affinity"),
            spec.get("tolerations"),
        ],
        sort_keys=True,
        default=str,
    )


def _order(pod: Obj) -> tuple[int, str, str]:
    """Scheduling order: priority (highest first), then age, then name."""
    md = pod.get("metadata") or {}
    try:
        priority = int((pod.get("spec") or {}).get("priority") or 0)
    except (TypeError, ValueError):
        priority = 0
    return (-priority, str(md.get("creationTimestamp") or ""), pod_key(pod))


# ---- the scheduler -------------------------------------------------------------------------


class Scheduler:
    """Binds pending pods to nodes. `start()` runs it in its own threads; `stop()` ends them."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        resync_s: float = 1.0,
        min_pass_interval_s: float = 0.0,
        store: Store | None = None,
    ) -> None:
        """Over the API (`api_client`), as on any API server; given the emulator's `store`
        (inside the simulated cluster), it reads and writes that store directly instead."""
        core = client.CoreV1Api(api_client)
        self.writes: Writes = StoreWrites(store) if store else ApiWrites(api_client)
        pods: ListWatch = (
            StoreListWatch(store, PODS) if store else ApiListWatch(core.list_pod_for_all_namespaces)
        )
        nodes: ListWatch = StoreListWatch(store, NODES) if store else ApiListWatch(core.list_node)
        self.resync_s = resync_s
        self.min_pass_interval_s = min_pass_interval_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.pods = Informer("pods", pods, self._wake.set)
        self.nodes = Informer("nodes", nodes, self._wake.set)
        # Pods we bound whose binding the cache may not show yet: key -> (node, when).
        self._assumed: dict[str, tuple[str, float]] = {}
        # The Unschedulable message last written per pod, so that we patch on change only.
        self._reported: dict[str, str] = {}
        # When each pending pod's reason was last written, and how often it was rewritten.
        self._rewritten: dict[str, tuple[float, int]] = {}
        # Pods and nodes that cannot be read -> the resourceVersion already reported.
        self._unreadable: dict[str, str] = {}  # pending pods, reported with an Event
        self._uncounted: dict[str, str] = {}  # bound pods whose requests count as none
        # key -> (version, requests, `_alike`'s key once a pass needed it)
        self._facts_seen: dict[str, tuple[str, Requests, str | None]] = {}
        # kube-scheduler parks a pod it found unschedulable until something that could make it
        # fit happens; so does this one: a pending pod whose reason is written is judged again
        # only when it changed, a node changed, or room was freed on one (the generation).
        # Without it every watch event re-judged every pending pod: passes over a burst of
        # a thousand cost more CPU than the rest of the simulated cluster.
        self._parked: dict[str, tuple[str, int]] = {}  # key -> (version, generation)
        self._generation = 0
        self._nodes_judged = -1
        self._room_seen: dict[str, tuple[int, int, int]] = {}
        self._unreadable_nodes: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        self.bindings = 0  # for tests and the demo
        self.passes = 0

    def start(self) -> None:
        self.pods.start()
        self.nodes.start()
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.pods.stop()
        self.nodes.stop()
        if self._thread is not None:
            self._thread.join(5)
        log.info("scheduler stopped: %d passes, %d bindings", self.passes, self.bindings)

    def _run(self) -> None:
        self.pods.synced.wait()
        self.nodes.synced.wait()
        while not self._stop.is_set():
            self._wake.wait(self.resync_s)
            if self._stop.is_set():
                return
            self._wake.clear()
            started = time.monotonic()
            try:
                self.schedule_once()
                self.passes += 1
            except Exception:
                log.exception("scheduling pass failed")
                self._stop.wait(0.5)
            # A pass looks at every pod; while a burst's watch events arrive by the thousand
            # a pass per event would be most of the simulator's CPU. Passes start at most
            # every `min_pass_interval_s`: the events in between are handled together.
            self._stop.wait(max(0.0, started + self.min_pass_interval_s - time.monotonic()))

    def schedule_once(self) -> int:
        """One pass over every pending pod. Returns how many were bound."""
        now = time.monotonic()
        infos: dict[str, NodeInfo] = {}
        nodes_seen = self.nodes.version
        nodes = self.nodes.items()
        for node in nodes:
            info = self._node_info(node)
            if info is not None:
                infos[info.name] = info
        names = {(n.get("metadata") or {}).get("name", "") for n in nodes}
        for gone in [n for n in self._unreadable_nodes if n not in names]:
            del self._unreadable_nodes[gone]
        pending: list[tuple[str, Obj]] = []
        pods = self.pods.keyed_items()
        for key, pod in pods:
            spec = pod.get("spec") or {}
            node_name = spec.get("nodeName")
            assumed = self._assumed.get(key)
            if assumed is not None:
                if node_name or now - assumed[1] > 30:
                    del self._assumed[key]
                else:
                    node_name = assumed[0]
            if node_name:
                if (pod.get("status") or {}).get("phase") not in _TERMINAL and node_name in infos:
                    info = infos[node_name]
                    info.used = info.used + self._bound_requests(pod, key)
                continue
            if is_pending_unbound(pod):
                pending.append((key, pod))
        self._note_changes(nodes_seen, infos)
        live = {key for key, _ in pending}
        for key in [k for k in self._reported if k not in live]:
            del self._reported[key]
        for key in [k for k in self._parked if k not in live]:
            del self._parked[key]
        for key in [k for k in self._rewritten if k not in live]:
            del self._rewritten[key]
        for key in [k for k in self._unreadable if k not in live]:
            del self._unreadable[key]
        present = {key for key, _ in pods}
        for key in [k for k in self._uncounted if k not in present]:
            del self._uncounted[key]
        for key in [k for k in self._facts_seen if k not in present]:
            del self._facts_seen[key]

        bound = 0
        ordered = sorted(infos.values(), key=lambda i: i.name)
        # Pods alike that failed in this pass fail the same way until a node changes (nodes
        # only fill up within a pass): kube-scheduler's pod equivalence, and what keeps a
        # pass over a thousand pending pods of a few shapes cheap.
        failed_alike: dict[str, str] = {}
        judged = self._generation
        unparked = [(k, p) for k, p in pending if self._parked.get(k) != (_version(p), judged)]
        for key, pod in sorted(unparked, key=lambda pair: _order(pair[1])):
            # Each pod sees the nodes as they are now (the real scheduler snapshots its cache
            # per cycle): a node cordoned or deleted during a long pass takes no more pods.
            if self.nodes.version != nodes_seen:
                nodes_seen = self.nodes.version
                ordered = self._refreshed(ordered)
                failed_alike.clear()
            try:
                bound += self._schedule_one(key, pod, ordered, failed_alike)
            except Exception as exc:
                # Whatever in this one pod we cannot read: skip it, never the pass.
                self._report_unreadable(pod, str(exc) or type(exc).__name__)
        return bound

    def _note_changes(self, nodes_seen: int, infos: dict[str, NodeInfo]) -> None:
        """A new generation when a node changed or room was freed on one since the last pass
        (pods binding only take room: no parked pod can fit because of them)."""
        room = {name: (i.used.cpu, i.used.memory, i.used.pods) for name, i in infos.items()}
        freed = any(
            any(now < was for now, was in zip(used, self._room_seen.get(name, used), strict=True))
            for name, used in room.items()
        )
        if freed or nodes_seen != self._nodes_judged:
            self._generation += 1
        self._nodes_judged = nodes_seen
        self._room_seen = room

    def _schedule_one(
        self, key: str, pod: Obj, ordered: list[NodeInfo], failed_alike: dict[str, str]
    ) -> int:
        req = self._requests(pod, key)
        alike = self._alike(pod, key)
        known_failure = failed_alike.get(alike)
        if known_failure is not None:
            self._report_unschedulable(pod, known_failure)
            return 0
        best: NodeInfo | None = None
        best_score = -1.0
        reasons: Counter[str] = Counter()
        for info in ordered:
            why = fit_reasons(pod, info, req)
            if why:
                reasons.update(why)
                continue
            score = info.score(req)
            if score > best_score:
                best, best_score = info, score
        if best is None:
            failed_alike[alike] = unschedulable_message(len(ordered), reasons)
            self._report_unschedulable(pod, failed_alike[alike])
            return 0
        if self._bind(pod, best.name):
            best.used = best.used + req
            return 1
        return 0

    def _node_info(self, node: Obj, known: NodeInfo | None = None) -> NodeInfo | None:
        """The node as the scheduler sees it, or None (logged once) when it cannot be read."""
        md = node.get("metadata") or {}
        name = str(md.get("name", ""))
        if known is not None:
            known.node = node
            return known
        try:
            return NodeInfo(node, name, node_allocatable(node))
        except (ValueError, TypeError, AttributeError, ArithmeticError) as exc:
            version = str(md.get("resourceVersion", ""))
            if self._unreadable_nodes.get(name) != version:
                self._unreadable_nodes[name] = version
                log.warning("node %s takes no pods: its allocatable cannot be read: %s", name, exc)
            return None

    def _requests(self, pod: Obj, key: str) -> Requests:
        """The pod's requests, remembered per version of it: every pass adds up every bound
        pod and judges every pending one, and parsing quantities is most of that."""
        version = _version(pod)
        known = self._facts_seen.get(key)
        if known is not None and known[0] == version:
            return known[1]
        requests = pod_requests(pod)
        self._facts_seen[key] = (version, requests, None)
        return requests

    def _alike(self, pod: Obj, key: str) -> str:
        """`_alike`'s key, remembered beside the requests `_requests` just read."""
        version, requests, alike = self._facts_seen[key]
        if alike is None:
            alike = _alike(pod, requests)
            self._facts_seen[key] = (version, requests, alike)
        return alike

    def _bound_requests(self, pod: Obj, key: str) -> Requests:
        """A bound pod's requests; one that cannot be read counts for nothing (logged once)."""
        try:
            return self._requests(pod, key)
        except (ValueError, TypeError, AttributeError, ArithmeticError) as exc:
            version = str((pod.get("metadata") or {}).get("resourceVersion", ""))
            if self._uncounted.get(key) != version:
                self._uncounted[key] = version
                log.warning("%s: requests cannot be read, counted as none: %s", key, exc)
            return Requests()

    def _refreshed(self, infos: list[NodeInfo]) -> list[NodeInfo]:
        """The nodes in the cache now: known ones keep what this pass placed on them."""
        known = {info.name: info for info in infos}
        fresh = []
        for node in self.nodes.items():
            name = (node.get("metadata") or {}).get("name", "")
            info = self._node_info(node, known.get(name))
            if info is not None:
                fresh.append(info)
        return sorted(fresh, key=lambda i: i.name)

    def _report_unreadable(self, pod: Obj, problem: str) -> None:
        """A Warning Event `FailedScheduling` on the pod, once per version of it."""
        key = pod_key(pod)
        md = pod.get("metadata") or {}
        version = str(md.get("resourceVersion", ""))
        if self._unreadable.get(key) == version:
            return
        self._unreadable[key] = version
        message = f"the pod cannot be scheduled: its spec cannot be read: {problem}"
        log.warning("%s: %s", key, message)
        now = now_rfc3339()
        name, namespace = str(md.get("name", "")), str(md.get("namespace", ""))
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": name,
                "namespace": namespace,
                "uid": md.get("uid"),
                "resourceVersion": version,
            },
            "reason": "FailedScheduling",
            "message": message,
            "type": "Warning",
            "source": {"component": DEFAULT_SCHEDULER},
            "reportingComponent": DEFAULT_SCHEDULER,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.writes.create_event(namespace, event)
        except WriteRejected as exc:
            log.debug("event for %s: %s", key, exc)

    def _bind(self, pod: Obj, node: str) -> bool:
        md = pod.get("metadata") or {}
        name, namespace = md.get("name", ""), md.get("namespace", "")
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": md.get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self.writes.bind(namespace, name, body)
        except WriteRejected as exc:
            # 409: bound meanwhile (a stale cache); 404: deleted meanwhile. Either way, move on.
            log.debug("binding %s/%s to %s: %s", namespace, name, node, exc)
            return False
        self._assumed[pod_key(pod)] = (node, time.monotonic())
        self._reported.pop(pod_key(pod), None)
        self._rewritten.pop(pod_key(pod), None)
        self.bindings += 1
        log.info("bound %s/%s to %s", namespace, name, node)
        return True

    def _report_unschedulable(self, pod: Obj, message: str) -> None:
        key = pod_key(pod)
        current = condition(pod, "PodScheduled") or {}
        if self._reported.get(key) == message or (
            current.get("status") == "False"
            and current.get("reason") == "Unschedulable"
            and current.get("message") == message
        ):
            self._reported[key] = message
            self._parked[key] = (_version(pod), self._generation)
            return
        already = current.get("status") == "False" and current.get("reason") == "Unschedulable"
        last, rewrites = self._rewritten.get(key, (0.0, 0))
        now = time.monotonic()
        if already and now - last < min(_BACKOFF_S * 2**rewrites, _MAX_BACKOFF_S):
            # kube-scheduler tries a pod again only after a backoff (1 s, doubling, up to
            # 10 s), so it rewrites why it waits no more often than that; the first report
            # goes at once.
            return
        md = pod.get("metadata") or {}
        patch = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": (
                            current.get("lastTransitionTime")
                            if current.get("status") == "False"
                            else now_rfc3339()
                        ),
                    }
                ]
            }
        }
        try:
            self.writes.patch_pod_status(
                str(md.get("namespace", "")), str(md.get("name", "")), patch
            )
        except WriteRejected as exc:
            log.debug("marking %s unschedulable: %s", key, exc)
            return
        self._reported[key] = message
        self._rewritten[key] = (now, rewrites + 1 if already else 0)
        log.info("%s unschedulable: %s", key, message)
