"""The fake cloud's state: instances, catalog, injected failures, holds and stats.

Everything here is in-process and thread-safe; `sim/cloud/server.py` puts an HTTP face on it.
Instance states are derived from timestamps when read (pending until `boot_delay_s` has
passed, stopping until `delete_delay_s` has passed), so no background thread is needed.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

OPS = ("create", "get", "list", "delete", "catalog")
FAILURE_KINDS = ("unavailable", "capacity", "quota", "auth", "throttle")


class CloudError(Exception):
    """An API error as the HTTP layer will send it: status, code, message, extra headers."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


# kind -> (HTTP status, error code, message), modelled on Hetzner's error codes.
_FAILURES: dict[str, tuple[int, str, str]] = {
    "unavailable": (503, "unavailable", "service temporarily unavailable (injected)"),
    "capacity": (412, "resource_unavailable", "no capacity for this server type (injected)"),
    "quota": (403, "resource_limit_exceeded", "project limit exceeded (injected)"),
    "auth": (401, "unauthorized", "unable to authenticate (injected)"),
    "throttle": (429, "rate_limit_exceeded", "limit of requests per hour reached (injected)"),
}


@dataclass(frozen=True)
class FakeInstanceType:
    name: str
    vcpu: int
    memory_gib: float
    arch: str
    price_eur_per_hour: float
    # How many instances of this type each region holds at once (machines on premises);
    # None: as many as asked (a public cloud). A create past it is refused for capacity.
    capacity: int | None = None

    def to_json(self, regions: list[str], in_use: dict[str, int]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "vcpu": self.vcpu,
            "memory_gib": self.memory_gib,
            "arch": self.arch,
            "price_eur_per_hour": self.price_eur_per_hour,
            "regions": list(regions),
        }
        if self.capacity is not None:
            # Per region: how many more can be made now.
            out["available"] = {r: max(0, self.capacity - in_use.get(r, 0)) for r in regions}
        return out


# The fake cloud's catalog: a size ladder of general (x86_64 and arm64), memory- and
# CPU-optimised types, with their EUR prices per hour.
_INSTANCE_TABLE = """
name           vcpu   GiB  arch    EUR/h
fk-small          2     4  x86_64  0.012
fk-medium         4     8  x86_64  0.022
fk-large          8    16  x86_64  0.041
fk-xlarge        16    32  x86_64  0.079
fk-2xlarge       32    64  x86_64  0.152
fk-mem-medium     4    32  x86_64  0.048
fk-mem-large      8    64  x86_64  0.092
fk-cpu-large     16    16  x86_64  0.068
fk-arm-small      2     4  arm64   0.009
fk-arm-medium     4     8  arm64   0.017
fk-arm-large      8    16  arm64   0.032
fk-arm-xlarge    16    32  arm64   0.061
"""
DEFAULT_INSTANCE_TYPES: tuple[FakeInstanceType, ...] = tuple(
    FakeInstanceType(name, int(vcpu), int(memory_gib), arch, float(price))
    for name, vcpu, memory_gib, arch, price in (
        row.split() for row in _INSTANCE_TABLE.strip().splitlines()[1:]
    )
)


@dataclass
class _Instance:
    id: str
    name: str
    region: str
    instance_type: str
    image: str | None
    user_data: str
    labels: dict[str, str]
    created_at: datetime
    created_mono: float
    private_ip: str
    delete_requested_mono: float | None = None
    terminated: bool = False


@dataclass
class _Failure:
    op: str
    kind: str
    remaining: int | None  # None: until cleared
    region: str | None = None
    instance_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "kind": self.kind,
            "remaining": self.remaining,
            "region": self.region,
            "instance_type": self.instance_type,
        }


@dataclass
class _Hold:
    release: threading.Event = field(default_factory=threading.Event)


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeCloud:
    """A small, Hetzner-like cloud. Methods raise `CloudError` exactly where the API would."""

    def __init__(
        self,
        *,
        regions: list[str] | None = None,
        instance_types: list[FakeInstanceType] | None = None,
        boot_delay_s: float = 1.0,
        delete_delay_s: float = 0.2,
        token: str | None = None,
    ) -> None:
        self.regions = list(regions or ["sim-1", "sim-2"])
        self.types = {t.name: t for t in (instance_types or DEFAULT_INSTANCE_TYPES)}
        self.boot_delay_s = boot_delay_s
        self.delete_delay_s = delete_delay_s
        self.token = token
        self._lock = threading.Lock()
        self._instances: dict[str, _Instance] = {}
        self._ids = itertools.count(1)
        self._failures: list[_Failure] = []
        self._holds: dict[str, _Hold] = {}
        self._in_flight: Counter[str] = Counter()
        self._creates_attempted = 0
        self._created_by_name: Counter[str] = Counter()
        self._deleted = 0
        # name -> when the first create for it arrived (full precision, for latency figures)
        self._first_created_at: dict[str, datetime] = {}

    # ---- auth and failure injection -------------------------------------------------

    def check_auth(self, authorization: str | None) -> None:
        """Refuse a request whose bearer token is wrong, when the cloud has a token."""
        if self.token is None:
            return
        if authorization != f"Bearer {self.token}":
            raise CloudError(401, "unauthorized", "unable to authenticate")

    def inject_failure(
        self,
        op: str,
        kind: str,
        times: int | None = 1,
        *,
        region: str | None = None,
        instance_type: str | None = None,
    ) -> None:
        """Make the next `times` matching `op` calls fail with `kind` (None: until cleared)."""
        if op not in OPS:
            raise ValueError(f"op must be one of {OPS}, not {op!r}")
        if kind not in FAILURE_KINDS:
            raise ValueError(f"kind must be one of {FAILURE_KINDS}, not {kind!r}")
        with self._lock:
            self._failures.append(_Failure(op, kind, times, region, instance_type))

    def clear_failures(self) -> None:
        with self._lock:
            self._failures.clear()

    def failures(self) -> list[dict[str, Any]]:
        with self._lock:
            return [f.to_json() for f in self._failures]

    def _maybe_fail(
        self, op: str, region: str | None = None, instance_type: str | None = None
    ) -> None:
        """Called with the lock held: raise the first matching injected failure."""
        for failure in self._failures:
            if failure.op != op:
                continue
            if failure.region is not None and failure.region != region:
                continue
            if failure.instance_type is not None and failure.instance_type != instance_type:
                continue
            if failure.remaining is not None:
                failure.remaining -= 1
                if failure.remaining <= 0:
                    self._failures.remove(failure)
            status, code, message = _FAILURES[failure.kind]
            headers = {"Retry-After": "1"} if failure.kind == "throttle" else {}
            raise CloudError(status, code, message, headers=headers)

    # ---- holds (crash tests) --------------------------------------------------------

    def hold(self, op: str = "create") -> None:
        """Requests for `op` do their work at once but do not answer until `release`.

        That is the window in which a crashed caller has made a VM without knowing its id.
        """
        with self._lock:
            if op not in self._holds:
                self._holds[op] = _Hold()

    def release(self, op: str | None = None) -> None:
        """Let held requests answer (one op, or all) and stop holding."""
        with self._lock:
            ops = [op] if op is not None else list(self._holds)
            holds = [self._holds.pop(o) for o in ops if o in self._holds]
        for h in holds:
            h.release.set()

    def _wait_if_held(self, op: str) -> None:
        """Called without the lock: block while `op` is held."""
        with self._lock:
            h = self._holds.get(op)
            if h is None:
                return
            self._in_flight[op] += 1
        try:
            h.release.wait()
        finally:
            with self._lock:
                self._in_flight[op] -= 1

    # ---- instances --------------------------------------------------------------------

    def _state(self, inst: _Instance, now: float) -> str:
        if inst.terminated:
            return "terminated"
        if inst.delete_requested_mono is not None:
            return "stopping"
        if now - inst.created_mono < self.boot_delay_s:
            return "pending"
        return "running"

    def _purge(self, now: float) -> None:
        """Called with the lock held: forget instances whose deletion has finished."""
        gone = [
            i.id
            for i in self._instances.values()
            if i.delete_requested_mono is not None
            and now - i.delete_requested_mono >= self.delete_delay_s
        ]
        for iid in gone:
            del self._instances[iid]
            self._deleted += 1

    def _to_json(self, inst: _Instance, now: float, *, with_user_data: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": inst.id,
            "name": inst.name,
            "region": inst.region,
            "instance_type": inst.instance_type,
            "image": inst.image,
            "labels": dict(inst.labels),
            "state": self._state(inst, now),
            "created_at": _rfc3339(inst.created_at),
            "private_ip": inst.private_ip,
        }
        if with_user_data:
            out["user_data"] = inst.user_data
        return out

    def create_instance(
        self,
        *,
        name: str,
        region: str,
        instance_type: str,
        image: str | None = None,
        user_data: str = "",
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        with self._lock:
            self._creates_attempted += 1
            self._maybe_fail("create", region, instance_type)
            bad: list[dict[str, str]] = []
            if not name:
                bad.append({"name": "name", "message": "name is required"})
            if region not in self.regions:
                bad.append({"name": "region", "message": f"unknown region {region!r}"})
            if instance_type not in self.types:
                bad.append(
                    {"name": "instance_type", "message": f"unknown instance type {instance_type!r}"}
                )
            if bad:
                fields = ", ".join(b["name"] for b in bad)
                raise CloudError(
                    400,
                    "invalid_input",
                    f"invalid input in field(s): {fields} ({'; '.join(b['message'] for b in bad)})",
                    details={"fields": bad},
                )
            now = time.monotonic()
            self._purge(now)
            if any(i.name == name for i in self._instances.values()):
                raise CloudError(
                    409, "uniqueness_error", f"an instance named {name!r} already exists"
                )
            capacity = self.types[instance_type].capacity
            if capacity is not None and self._in_use(instance_type).get(region, 0) >= capacity:
                raise CloudError(
                    412,
                    "resource_unavailable",
                    f"no {instance_type} left in {region}: all {capacity} are in use",
                )
            n = next(self._ids)
            inst = _Instance(
                id=f"i-{n:04d}",
                name=name,
                region=region,
                instance_type=instance_type,
                image=image,
                user_data=user_data,
                labels=dict(labels or {}),
                created_at=datetime.now(UTC),
                created_mono=now,
                private_ip=f"10.{(n >> 16) & 0xFF}.{(n >> 8) & 0xFF}.{n & 0xFF}",
            )
            self._instances[inst.id] = inst
            self._created_by_name[name] += 1
            self._first_created_at.setdefault(name, inst.created_at)
            out = self._to_json(inst, now, with_user_data=False)
        # Recorded before the (possibly held) answer, as a real cloud would.
        self._wait_if_held("create")
        return out

    def get_instance(self, instance_id: str, *, with_user_data: bool = False) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            inst = self._instances.get(instance_id)
            self._maybe_fail(
                "get", inst.region if inst else None, inst.instance_type if inst else None
            )
            if inst is None:
                raise CloudError(404, "not_found", f"instance {instance_id!r} not found")
            out = self._to_json(inst, now, with_user_data=with_user_data)
        self._wait_if_held("get")
        return out

    def list_instances(
        self,
        *,
        label_selector: dict[str, str] | None = None,
        name: str | None = None,
        with_user_data: bool = False,
    ) -> list[dict[str, Any]]:
        with self._lock:
            self._maybe_fail("list")
            now = time.monotonic()
            self._purge(now)
            out = [
                self._to_json(i, now, with_user_data=with_user_data)
                for i in self._instances.values()
                if (name is None or i.name == name)
                and all(i.labels.get(k) == v for k, v in (label_selector or {}).items())
            ]
        self._wait_if_held("list")
        return out

    def delete_instance(self, instance_id: str) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            inst = self._instances.get(instance_id)
            self._maybe_fail(
                "delete", inst.region if inst else None, inst.instance_type if inst else None
            )
            if inst is None:
                raise CloudError(404, "not_found", f"instance {instance_id!r} not found")
            if inst.delete_requested_mono is None:
                inst.delete_requested_mono = now
            out = self._to_json(inst, now, with_user_data=False)
        self._wait_if_held("delete")
        return out

    def instance_types(self) -> list[dict[str, Any]]:
        with self._lock:
            self._maybe_fail("catalog")
            self._purge(time.monotonic())
            return [
                t.to_json(self.regions, self._in_use(t.name) if t.capacity is not None else {})
                for t in self.types.values()
            ]

    def set_capacity(self, instance_type: str, capacity: int | None) -> None:
        """How many instances of this type each region holds from now on (None: unlimited);
        instances already made stay."""
        with self._lock:
            self.types[instance_type] = replace(self.types[instance_type], capacity=capacity)

    def _in_use(self, instance_type: str) -> dict[str, int]:
        """Called with the lock held: per region, the instances of this type that hold a
        machine (every one not yet gone, stopping ones included)."""
        counts: Counter[str] = Counter(
            i.region
            for i in self._instances.values()
            if i.instance_type == instance_type and not i.terminated
        )
        return dict(counts)

    # ---- test and kubelet helpers (not part of the public cloud API) ---------------------

    def running_instances(self) -> list[dict[str, Any]]:
        """Running instances with their user data: what the simulated kubelets boot from."""
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            return [
                self._to_json(i, now, with_user_data=True)
                for i in self._instances.values()
                if self._state(i, now) == "running"
            ]

    def peek(self, instance_id: str) -> dict[str, Any] | None:
        """One instance with its user data, bypassing injected failures and holds.

        The kubelets read VMs "from inside": API faults injected for the provider must not
        stop a booted VM from joining.
        """
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            inst = self._instances.get(instance_id)
            return None if inst is None else self._to_json(inst, now, with_user_data=True)

    def instance_states(self) -> dict[str, str]:
        """id -> state of every instance the cloud still knows (cheap, for the kubelets)."""
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            return {i.id: self._state(i, now) for i in self._instances.values()}

    def delete_behind_our_back(self, instance_id: str) -> bool:
        """Remove a VM at once, as if someone deleted it in the cloud console."""
        with self._lock:
            inst = self._instances.pop(instance_id, None)
            if inst is None:
                return False
            self._deleted += 1
            return True

    def terminate(self, instance_id: str) -> bool:
        """Mark a VM terminated (it crashed / was stopped) but keep it listed."""
        with self._lock:
            inst = self._instances.get(instance_id)
            if inst is None:
                return False
            inst.terminated = True
            return True

    def create_times(self) -> dict[str, datetime]:
        """When the first create of each instance name arrived (for decision-latency figures)."""
        with self._lock:
            return dict(self._first_created_at)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            states = Counter(self._state(i, now) for i in self._instances.values())
            return {
                "creates_attempted": self._creates_attempted,
                "created_by_name": dict(self._created_by_name),
                "instances_created": sum(self._created_by_name.values()),
                "live_instances": len(self._instances),
                "states": dict(states),
                "deleted_instances": self._deleted,
                "creates_in_flight": self._in_flight["create"],
                "in_flight": {k: v for k, v in self._in_flight.items() if v},
                "holds": sorted(self._holds),
                "failures": [f.to_json() for f in self._failures],
            }
