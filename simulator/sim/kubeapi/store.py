"""The object store: objects, one global resourceVersion, a bounded event log, watches.

Stored objects are immutable once committed (every write builds a new dict), so readers can
serialise them outside the lock and the event log can share them without copying.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import queue
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.kubeapi import builtin_schema, builtins, errors, objectmeta
from sim.kubeapi.admission import Admission, WriteOptions
from sim.kubeapi.apply import ApplyConflict, allowed_by_last_applied, record_update
from sim.kubeapi.apply import apply as apply_fields
from sim.kubeapi.builtin_schema import Node
from sim.kubeapi.errors import ApiError
from sim.kubeapi.patch import STRATEGIC_PATCH, apply_patch
from sim.kubeapi.resources import APISERVICES, NAMESPACES, STORED, ResourceType
from sim.kubeapi.selectors import Predicate

Obj = dict[str, Any]

DEFAULT_LOG_SIZE = 10_000
DEFAULT_WATCH_QUEUE = 10_000
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of apiserver's generateName


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def meta(obj: Obj) -> Obj:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


@dataclass
class _Event:
    rv: int
    key: str  # ResourceType.storage
    type: str  # ADDED | MODIFIED | DELETED
    obj: Obj
    old: Obj | None  # previous state, for MODIFIED: lets selector watches see (un)matching


@dataclass(eq=False)
class Watcher:
    """One watch stream's subscription. The HTTP handler drains `initial`, then `queue`."""

    rt: ResourceType
    namespace: str | None
    labels: Predicate | None
    fields: Predicate | None
    queue: queue.Queue[tuple[str, Obj]]
    initial: list[tuple[str, Obj]] = field(default_factory=list)
    initial_rv: int = 0  # the resourceVersion the initial events reflect
    # Set when the watcher fell too far behind or the server stopped: the stream must end
    # (the client then re-lists or re-watches from its last resourceVersion).
    closed: bool = False

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and meta(obj).get("namespace") != self.namespace:
            return False
        if self.labels is not None and not self.labels(obj):
            return False
        return self.fields is None or self.fields(obj)

    def translate(self, ev: _Event) -> str | None:
        """The event type this watcher sees, or None: selector changes become ADDED/DELETED."""
        now = self.matches(ev.obj)
        if ev.type != "MODIFIED":
            return ev.type if now else None
        was = self.matches(ev.old)
        if now:
            return "MODIFIED" if was else "ADDED"
        return "DELETED" if was else None


class Store:
    """Thread-safe object store. One re-entrant lock guards everything.

    Writes given `WriteOptions` (the HTTP API's) go through `admission` as a real server's do;
    writes without them (the store's own, and tests planting objects) are stored as they are.
    """

    def __init__(
        self,
        log_size: int = DEFAULT_LOG_SIZE,
        watch_queue: int = DEFAULT_WATCH_QUEUE,
        admission: Admission | None = None,
    ):
        self.admission = admission or Admission()
        self.lock = threading.RLock()
        self._rv = 0
        # resource key -> namespace ("" when cluster-scoped) -> name -> object
        self._objects: dict[str, dict[str, dict[str, Obj]]] = {}
        self._log: deque[_Event] = deque(maxlen=log_size)
        self._evicted_upto = 0  # every event with rv <= this has left the log
        self._watchers: dict[str, set[Watcher]] = {}
        self._watch_queue = watch_queue

    # ---- reads -------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        with self.lock:
            obj = self._objects.get(rt.storage, {}).get(namespace, {}).get(name)
        if obj is None:
            raise errors.not_found(rt, name)
        return obj

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: Predicate | None = None,
        fields: Predicate | None = None,
    ) -> tuple[list[Obj], int]:
        """Matching objects sorted by (namespace, name), and the current resourceVersion."""
        with self.lock:
            by_ns = self._objects.get(rt.storage, {})
            if namespace is None:
                pools = [by_ns[ns] for ns in sorted(by_ns)]
            else:
                pools = [by_ns.get(namespace, {})]
            items = [pool[name] for pool in pools for name in sorted(pool)]
            rv = self._rv
        if labels is not None:
            items = [o for o in items if labels(o)]
        if fields is not None:
            items = [o for o in items if fields(o)]
        return items, rv

    # ---- writes ------------------------------------------------------------------------

    def create(
        self, rt: ResourceType, namespace: str, body: Obj, opts: WriteOptions | None = None
    ) -> Obj:
        """Store a new object; `body` is owned by the store from here on."""
        if opts is not None:
            self.admission.decode(rt, body, opts)
        md = body.get("metadata")
        if not isinstance(md, dict):
            md = body["metadata"] = {}
        if rt.namespaced:
            if md.get("namespace") not in (None, "", namespace):
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            md["namespace"] = namespace
        else:
            md.pop("namespace", None)
        body["kind"], body["apiVersion"] = rt.kind, rt.api_version
        with self.lock:
            if rt.namespaced and namespace not in self._objects.get(NAMESPACES.storage, {}).get(
                "", {}
            ):
                raise errors.not_found(NAMESPACES, namespace)
            pool = self._objects.setdefault(rt.storage, {}).setdefault(namespace, {})
            asked = str(md.get("name") or "")  # what admission sees: the name comes later
            name = md.get("name")
            if not name and md.get("generateName"):
                name = self._generate_name(pool, str(md["generateName"]))
            self._validate_name(rt, name)
            assert isinstance(name, str)
            md["name"] = name
            for managed in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                md.pop(managed, None)
            if opts is None or not opts.applied:
                md.pop("managedFields", None)
            if rt.custom:
                body.pop("status", None)  # a CR's status is written through /status only
            if name in pool:
                raise errors.already_exists(rt, name)
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = now_rfc3339()
            md["generation"] = 1
            _defaults(rt, body)
            builtins.defaults(self, rt, body)
            if opts is not None:
                self.admission.admit(self, rt, namespace, asked, body, None)
                self.admission.validate(rt, name, body, None)
                if not opts.applied:
                    record_update(
                        None,
                        body,
                        self.schema(rt),
                        opts.manager,
                        rt.api_version,
                        md["creationTimestamp"],
                        "",
                        _section(rt, ""),
                    )
                if opts.dry_run:
                    return body
            self._commit(rt, namespace, name, body, None)
            builtins.after_create(self, rt, body)
            return body

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        change: Callable[[Obj], Obj],
        subresource: str = "",
        expect_rv: str | None = None,
        opts: WriteOptions | None = None,
    ) -> Obj:
        """Read-modify-write: `change(current)` returns the candidate; the server fixes it up.

        Server-owned metadata is kept; `/status` keeps all but `.status`; a CR main-resource
        write keeps `.status`. An update that leaves a deleting object without finalizers
        removes it. With `opts`, the result is validated against the old object.
        """
        with self.lock:
            old = self.get(rt, namespace, name)
            new = change(old)
            if not isinstance(new, dict):
                raise errors.bad_request("the object must be a JSON object")
            new_md = new.get("metadata")
            if not isinstance(new_md, dict):
                new_md = {}
            if expect_rv and expect_rv != meta(old).get("resourceVersion"):
                raise errors.conflict(rt, name, errors.STALE)
            if subresource == "status":
                status = new.get("status")
                new = dict(old) | {"status": status}
                if status is None:
                    del new["status"]
                if "managedFields" in new_md:
                    new["metadata"] = dict(meta(old), managedFields=new_md["managedFields"])
                if opts is not None:
                    self.admission.validate(rt, name, new, old)
                    self._record(rt, old, new, opts, subresource)
                    if opts.dry_run:
                        return new
                return self._commit(rt, namespace, name, new, old)
            new = dict(new)
            new["kind"], new["apiVersion"] = rt.kind, rt.api_version
            # A CR's main resource never writes status; a built-in one keeps it when the
            # body leaves it out (a PUT of spec only), but may change it (lenient for tests).
            if rt.custom or (rt.status_subresource and "status" not in new):
                new.pop("status", None)
                if "status" in old:
                    new["status"] = old["status"]
            md = dict(new_md)
            old_md = meta(old)
            for fixed in ("name", "namespace", "uid", "creationTimestamp", "generation"):
                if fixed in old_md:
                    md[fixed] = old_md[fixed]
            for fixed in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                md.pop(fixed, None)
                if fixed in old_md:
                    md[fixed] = old_md[fixed]
            if "deletionTimestamp" in md:
                added = set(md.get("finalizers") or []) - set(old_md.get("finalizers") or [])
                if added:
                    raise errors.invalid(
                        rt,
                        name,
                        "metadata.finalizers",
                        "no new finalizers can be added if the object is being deleted",
                    )
            if _spec_of(new) != _spec_of(old):
                md["generation"] = int(old_md.get("generation") or 1) + 1
            new["metadata"] = md
            _fold_string_data(rt, new)
            if opts is not None:
                self.admission.admit(self, rt, namespace, name, new, old)
                self.admission.validate(rt, name, new, old)
                self._record(rt, old, new, opts, subresource)
                if opts.dry_run:
                    return new
            elif "managedFields" not in md and "managedFields" in old_md:
                md["managedFields"] = old_md["managedFields"]
            if "deletionTimestamp" in md and not md.get("finalizers"):
                return self._remove(rt, namespace, name, new)
            return self._commit(rt, namespace, name, new, old)

    def _record(
        self, rt: ResourceType, old: Obj, new: Obj, opts: WriteOptions, subresource: str
    ) -> None:
        new["metadata"] = dict(meta(new))  # may still be the stored object's
        if opts.applied:
            return  # the apply already wrote managedFields
        if "managedFields" not in meta(new) and "managedFields" in meta(old):
            new["metadata"]["managedFields"] = meta(old)["managedFields"]
        record_update(
            old,
            new,
            self.schema(rt),
            opts.manager,
            rt.api_version,
            now_rfc3339(),
            opts.subresource or subresource,
            _section(rt, subresource),
        )

    def schema(self, rt: ResourceType) -> Node | None:
        """The kind's schema: built-in, or the CRD's (with ObjectMeta for metadata)."""
        if not rt.custom:
            return builtin_schema.type_of(rt)
        return self.admission.crd_node(rt)

    def apply(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        applied: Obj,
        subresource: str,
        opts: WriteOptions,
        force: bool,
    ) -> tuple[Obj, bool]:
        """Server-side apply; (object, created)."""
        if not opts.manager:
            raise errors.bad_request(
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                "is required for apply patch"
            )
        md = meta(applied)
        if applied.get("apiVersion") != rt.api_version or applied.get("kind") != rt.kind:
            raise errors.bad_request(
                f"the API version in the data ({applied.get('apiVersion')}) does not match "
                f"the expected API version ({rt.api_version})"
                if applied.get("apiVersion") != rt.api_version
                else f"the kind in the data ({applied.get('kind')}) does not match "
                f"the expected kind ({rt.kind})"
            )
        if md.get("name") not in (None, name):
            raise errors.bad_request(
                f'metadata.name: Invalid value: "{md.get("name")}": field is immutable'
            )
        if "managedFields" in md:
            raise errors.bad_request("metadata.managedFields must be nil")
        opts.applied = True
        schema = self.schema(rt)
        with self.lock:
            try:
                live = self.get(rt, namespace, name)
            except ApiError as e:
                if e.code != 404 or subresource:
                    raise
                live = None
            now = now_rfc3339()
            if live is None:
                body = apply_fields(
                    None, applied, schema, opts.manager, rt.api_version, now, force, subresource
                )
                body["metadata"] = dict(meta(body), name=name)
                return self.create(rt, namespace, body, opts), True
            try:
                result = apply_fields(
                    live, applied, schema, opts.manager, rt.api_version, now, force, subresource
                )
            except ApplyConflict as conflict:
                # kubectl moving an object from client-side to server-side apply takes over
                # what it applied before, as long as nobody changed it since.
                if opts.manager != "kubectl" or not conflict.paths <= allowed_by_last_applied(
                    live, schema
                ):
                    raise
                result = apply_fields(
                    live, applied, schema, opts.manager, rt.api_version, now, True, subresource
                )
            return self.update(
                rt, namespace, name, lambda _old: result, subresource, None, opts
            ), False

    def replace(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Obj,
        subresource: str = "",
        opts: WriteOptions | None = None,
    ) -> Obj:
        if opts is not None:
            self.admission.decode(rt, body, opts)
        md = meta(body)
        if md.get("name") != name:
            raise errors.invalid(
                rt,
                name,
                "metadata.name",
                f"the name of the object ({md.get('name')}) does not match the name on the URL ({name})",
            )
        if rt.namespaced and md.get("namespace") not in (None, "", namespace):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        rv = md.get("resourceVersion")
        return self.update(
            rt, namespace, name, lambda _old: body, subresource, str(rv) if rv else None, opts
        )

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        patch: Any,
        subresource: str = "",
        opts: WriteOptions | None = None,
    ) -> Obj:
        if rt.custom and content_type.split(";")[0].strip() == STRATEGIC_PATCH:
            # What a real API server answers for custom resources.
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            )
        expect = meta(patch).get("resourceVersion") if isinstance(patch, dict) else None

        def patched(old: Obj) -> Obj:
            result = apply_patch(content_type, old, patch, self.schema(rt))
            if opts is None:
                return result
            return self.admission.decode_patched(rt, result, opts, content_type, patch)

        return self.update(
            rt,
            namespace,
            name,
            patched,
            subresource,
            str(expect) if expect else None,
            opts,
        )

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        preconditions: Obj | None = None,
    ) -> tuple[Obj, bool]:
        """Delete, or start deleting when finalizers remain. Returns (object, gone)."""
        with self.lock:
            old = self.get(rt, namespace, name)
            md = meta(old)
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != md.get("uid"):
                raise errors.conflict(
                    rt,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {md.get('uid')}",
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != md.get("resourceVersion"):
                raise errors.conflict(rt, name, errors.STALE)
            if md.get("finalizers"):
                if "deletionTimestamp" in md:
                    return old, False
                new = dict(old)
                new["metadata"] = dict(
                    md, deletionTimestamp=now_rfc3339(), deletionGracePeriodSeconds=0
                )
                return self._commit(rt, namespace, name, new, old), False
            if rt is NAMESPACES:
                self._delete_namespace_contents(name)
            return self._remove(rt, namespace, name, dict(old)), True

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: Predicate | None,
        fields: Predicate | None,
    ) -> list[Obj]:
        with self.lock:
            items, _ = self.list_objects(rt, namespace, labels, fields)
            return [
                self.delete(rt, meta(o).get("namespace") or "", meta(o)["name"])[0] for o in items
            ]

    # ---- watch -------------------------------------------------------------------------

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: Predicate | None,
        fields: Predicate | None,
        resource_version: str | None,
        send_initial_events: bool = False,
    ) -> Watcher:
        """Snapshot-and-subscribe under one lock hold, so no event falls in between.

        No resourceVersion (or "0"), or `send_initial_events` (a watch-list): synthetic ADDED
        for every current match, and `w.initial_rv` is the resourceVersion they reflect.
        Otherwise the logged events after it; 410 Expired if the log no longer reaches back.
        """
        w = Watcher(rt, namespace, labels, fields, queue.Queue(maxsize=self._watch_queue))
        try:
            since = int(resource_version) if resource_version else 0
        except ValueError:
            raise errors.bad_request(f"invalid resourceVersion: {resource_version}") from None
        with self.lock:
            if since == 0 or send_initial_events:
                items, rv = self.list_objects(rt, namespace, labels, fields)
                w.initial = [("ADDED", o) for o in items]
                w.initial_rv = rv
            else:
                if since < self._evicted_upto:
                    raise errors.expired(since, self._evicted_upto + 1)
                start = max(0, since + 1 - self._log[0].rv) if self._log else 0
                for ev in itertools.islice(self._log, start, None):
                    if ev.key == rt.storage and ev.rv > since and (kind := w.translate(ev)):
                        w.initial.append((kind, ev.obj))
            self._watchers.setdefault(rt.storage, set()).add(w)
        return w

    def watcher_count(self) -> int:
        with self.lock:
            return sum(len(ws) for ws in self._watchers.values())

    def unwatch(self, w: Watcher) -> None:
        with self.lock:
            self._watchers.get(w.rt.storage, set()).discard(w)

    def close_all_watches(self) -> None:
        with self.lock:
            for watchers in self._watchers.values():
                for w in watchers:
                    w.closed = True
                    wake(w)
            self._watchers.clear()

    # ---- internals ---------------------------------------------------------------------

    def _commit(
        self, rt: ResourceType, namespace: str, name: str, obj: Obj, old: Obj | None
    ) -> Obj:
        self._rv += 1
        obj["metadata"] = dict(meta(obj), resourceVersion=str(self._rv))
        self._objects.setdefault(rt.storage, {}).setdefault(namespace, {})[name] = obj
        self._publish(_Event(self._rv, rt.storage, "MODIFIED" if old else "ADDED", obj, old))
        return obj

    def _remove(self, rt: ResourceType, namespace: str, name: str, obj: Obj) -> Obj:
        self._rv += 1
        obj["metadata"] = dict(meta(obj), resourceVersion=str(self._rv))
        pool = self._objects.get(rt.storage, {}).get(namespace, {})
        pool.pop(name, None)
        self._publish(_Event(self._rv, rt.storage, "DELETED", obj, None))
        return obj

    def _publish(self, ev: _Event) -> None:
        if len(self._log) == self._log.maxlen:
            self._evicted_upto = self._log[0].rv
        self._log.append(ev)
        overflowed = []
        for w in self._watchers.get(ev.key, ()):
            kind = w.translate(ev)
            if kind is None:
                continue
            try:
                w.queue.put_nowait((kind, ev.obj))
            except queue.Full:
                # A slow reader must not hold writers up: end its stream instead.
                w.closed = True
                overflowed.append(w)
        for w in overflowed:
            self._watchers[ev.key].discard(w)

    def _delete_namespace_contents(self, namespace: str) -> None:
        for rt in STORED:
            if rt.namespaced:
                for name in list(self._objects.get(rt.storage, {}).get(namespace, {})):
                    self.delete(rt, namespace, name)

    def _generate_name(self, pool: dict[str, Obj], prefix: str) -> str:
        while True:
            name = prefix + "".join(random.choices(_SUFFIX_CHARS, k=5))
            if name not in pool:
                return name

    def _validate_name(self, rt: ResourceType, name: Any) -> None:
        if not name:
            raise errors.invalid(
                rt, "", "metadata.name", "Required value: name or generateName is required"
            )
        if rt is APISERVICES and isinstance(name, str) and name.endswith("."):
            name = name[:-1]  # "v1." names the core group's APIService
        problems = objectmeta.dns1123_subdomain_problems(str(name))
        if problems:
            raise errors.invalid_fields(
                rt.kind,
                rt.group,
                str(name),
                [errors.FieldError.invalid("metadata.name", str(name), p) for p in problems],
            )


def _section(rt: ResourceType, subresource: str) -> str:
    """Which part of the object a write manages: its status, all but status, or all."""
    if subresource == "status":
        return "status"
    return "main" if rt.status_subresource else ""


def _spec_of(obj: Obj) -> Obj:
    """Everything that counts for `metadata.generation`."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def _fold_string_data(rt: ResourceType, obj: Obj) -> None:
    """A Secret's `stringData` is write-only: the server merges it into `data`, base64-encoded."""
    if rt.kind != "Secret" or rt.group != "":
        return
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = dict(obj.get("data") or {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = data


def _defaults(rt: ResourceType, obj: Obj) -> None:
    _fold_string_data(rt, obj)
    if rt.kind == "Pod" and rt.group == "":
        status = obj.get("status")
        obj["status"] = {"phase": "Pending", **(status if isinstance(status, dict) else {})}
    elif rt is NAMESPACES:
        obj["status"] = {"phase": "Active"}


def wake(w: Watcher) -> None:
    """Wake the reader blocked on `w`'s queue (it then checks `closed`)."""
    with contextlib.suppress(queue.Full):
        w.queue.put_nowait(("", {}))  # a sentinel; the reader also checks `closed`
