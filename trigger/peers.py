"""Triggers side by side share the nodes they tell about, without a leader.

Each trigger holds a Lease of its own in the install namespace and renews it; every renewal
it also lists its group's Leases (the triggers of the same Temporal namespace and task
queue). The triggers it saw renewing within a Lease's duration are the running ones, and
`trigger_for` gives each node (by name) to one of them: that trigger alone tells the
node's claim of its changes (`observe_node`) and its pool of what was bound there and of
pods leaving it. A claim hears each change of its node once, not once per replica: a
signal is a billed action on Temporal Cloud and a workflow task of the claim's.

Demand is not shared: every trigger sends every pool its pending pods, and the pool plans
the first copy to arrive (the second names nothing new). Sharing it was measured: each
pool then waits on one trigger, the slower of two at any moment, and a 1,000-pod burst's
decisions came later (docs/benchmarks-history.md "Burst").

A trigger that stops releases its Lease; one that dies stops renewing it, and within the
duration the others see it gone, take its nodes and tell each of their claims its node's
state again. Nothing here is agreed: two triggers that see the running set differently for
a moment both tell about some nodes (harmless: a claim takes its node's latest state), and
a trigger that cannot read the Leases tells about every node, as a lone trigger does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

GROUP_LABEL = "cloudburst.io/trigger-group"
COMPONENT_LABEL = "app.kubernetes.io/component"
# A peer's Lease not renewed for this long is deleted by whoever sees it (a crash leaves it).
FORGET_AFTER = timedelta(hours=1)


def trigger_for(key: str, triggers: list[str]) -> str:
    """Which of the running triggers tells about this node (by name): rendezvous hashing,
    so a trigger's share moves only when that trigger comes or goes. A hash, not Python's
    `hash`, so every process agrees."""
    return max(
        triggers,
        key=lambda trigger: hashlib.blake2b(f"{trigger}/{key}".encode(), digest_size=8).digest(),
    )


def default_identity() -> str:
    """The host name: a pod's name in a cluster, the same across its container's restarts,
    so a restarted trigger renews its own Lease at once instead of waiting for it to run
    out. Triggers side by side on one machine need `CLOUDBURST_TRIGGER_ID` each (with the
    same one they share a Lease, and each tells about every node: no harm, no sharing)."""
    return socket.gethostname()


def lease_name(identity: str) -> str:
    """`cloudburst-trigger-<identity>` as a valid object name: lower-case letters, digits
    and dashes (a host name's dots become dashes), a long one cut and told apart by a hash."""
    cleaned = re.sub(r"[^a-z0-9]+", "-", identity.lower()).strip("-") or "trigger"
    name = f"cloudburst-trigger-{cleaned}"
    if len(name) > 253:
        digest = hashlib.blake2b(identity.encode(), digest_size=6).hexdigest()
        name = f"{name[:240].rstrip('-')}-{digest}"
    return name


def group_label(temporal_namespace: str, task_queue: str) -> str:
    """A label value naming the triggers that share nodes: those of one task queue."""
    return hashlib.blake2b(f"{temporal_namespace}/{task_queue}".encode(), digest_size=8).hexdigest()


def _micro_time(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parsed_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


@dataclass
class _Seen:
    renewed: str  # the Lease's renewTime as written (compared, never trusted as a clock)
    changed_at: float  # monotonic, when this trigger saw it change
    duration_s: float


class TriggerPeers:
    """This trigger's Lease, and the running triggers of its group as it last saw them."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        namespace: str,
        group: str,
        identity: str | None = None,
        duration_s: int,
    ) -> None:
        self._coordination = k8s.CoordinationV1Api(api_client)
        self._namespace = namespace
        self._group = group
        self._identity = identity or default_identity()
        self.name = lease_name(self._identity)
        self._duration_s = duration_s
        self._renew_every_s = duration_s / 3  # three chances to renew within the duration
        self._seen: dict[str, _Seen] = {}
        self._failing = False
        self._long_dead: list[str] = []  # peers' Leases to delete at the next renewal
        self._listeners: list[Callable[[], None]] = []
        self.triggers: list[str] = [self.name]

    def mine(self, key: str) -> bool:
        """Whether this trigger tells about the node (`trigger_for`; all of them alone)."""
        return self.triggers == [self.name] or trigger_for(key, self.triggers) == self.name

    def on_change(self, listener: Callable[[], None]) -> None:
        """Called (in the event loop, at once after `triggers` changed) when triggers come or
        go."""
        self._listeners.append(listener)

    async def run(self, stop: asyncio.Event) -> None:
        """Renew, look, and share anew whenever the running triggers change; release the
        Lease when `stop` is set."""
        try:
            while not stop.is_set():
                leases = await asyncio.to_thread(self._renew_and_list)
                triggers = self._running(leases, time.monotonic(), datetime.now(UTC))
                if triggers != self.triggers:
                    log.info("triggers sharing the nodes: %s", ", ".join(triggers))
                    self.triggers = triggers
                    for listener in self._listeners:
                        listener()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self._renew_every_s)
        finally:
            await asyncio.to_thread(self._release)

    def _renew_and_list(self) -> list[Any] | None:
        """The group's Leases after renewing this trigger's, or None when either failed
        (logged once until it works again)."""
        for name in self._long_dead:
            try:
                self._coordination.delete_namespaced_lease(name, self._namespace)
            except Exception as err:  # another trigger may have deleted it first
                log.debug("could not delete the Lease %s: %s", name, err)
        self._long_dead.clear()
        try:
            self._renew()
            listing = self._coordination.list_namespaced_lease(
                self._namespace, label_selector=f"{GROUP_LABEL}={self._group}"
            )
        except Exception as err:
            if not self._failing:
                log.warning(
                    "trigger Leases in %s not kept (%s): this trigger tells about every node "
                    "until they are",
                    self._namespace,
                    getattr(err, "reason", None) or err,
                )
            self._failing = True
            return None
        if self._failing:
            log.info("trigger Leases in %s kept again", self._namespace)
        self._failing = False
        return list(listing.items)

    def _renew(self) -> None:
        """Renew this trigger's Lease, with its group and duration as configured now (a
        restart may have changed either), or create it."""
        now = _micro_time(datetime.now(UTC))
        labels = {GROUP_LABEL: self._group, COMPONENT_LABEL: "trigger"}
        spec = {
            "holderIdentity": self._identity,
            "leaseDurationSeconds": self._duration_s,
            "renewTime": now,
        }
        try:
            self._coordination.patch_namespaced_lease(
                self.name, self._namespace, {"metadata": {"labels": labels}, "spec": spec}
            )
        except ApiException as err:
            if err.status != 404:
                raise
            self._coordination.create_namespaced_lease(
                self._namespace,
                k8s.V1Lease(
                    metadata=k8s.V1ObjectMeta(name=self.name, labels=labels),
                    spec=k8s.V1LeaseSpec(
                        holder_identity=self._identity,
                        lease_duration_seconds=self._duration_s,
                        acquire_time=now,
                        renew_time=now,
                    ),
                ),
            )

    def _running(self, leases: list[Any] | None, now: float, wall: datetime) -> list[str]:
        """This trigger, and each peer whose Lease this trigger saw renewed within its
        duration. A Lease seen for the first time counts from its renewTime (another
        machine's clock, so only to skip one long dead); after that, from when this trigger
        saw it change, as client-go's leader election judges a holder."""
        for lease in leases or []:
            name = lease.metadata.name
            if name == self.name:
                continue
            renewed_at = _parsed_time(lease.spec.renew_time)
            renewed = str(lease.spec.renew_time)
            duration = float(lease.spec.lease_duration_seconds or self._duration_s)
            seen = self._seen.get(name)
            if seen is None:
                age = (wall - renewed_at).total_seconds() if renewed_at else float("inf")
                if age > 2 * duration:
                    if renewed_at is None or wall - renewed_at > FORGET_AFTER:
                        self._long_dead.append(name)
                    continue
                self._seen[name] = _Seen(renewed, now, duration)
            elif seen.renewed != renewed:
                self._seen[name] = _Seen(renewed, now, duration)
        if leases is not None:
            listed = {lease.metadata.name for lease in leases}
            for name in [name for name in self._seen if name not in listed]:
                del self._seen[name]  # released (a trigger that stopped)
        alive = [
            name for name, seen in self._seen.items() if now - seen.changed_at < seen.duration_s
        ]
        return sorted({self.name, *alive})

    def _release(self) -> None:
        """Stopping: the others take this trigger's nodes at their next look, not after
        the Lease's duration."""
        try:
            self._coordination.delete_namespaced_lease(self.name, self._namespace)
        except Exception as err:
            log.info("could not release the Lease %s: %s", self.name, err)
