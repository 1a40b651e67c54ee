"""Who last held a shared bare-metal machine, and its wipe between tenants (docs/security.md,
"Bare metal between tenants").

A Redfish machine serves claim after claim, and claims of different namespaces may reach the
same hardware (two NodeClasses naming one BMC, or the operator moving a machine from one
namespace to another in `CLOUDBURST_INVENTORY_OWNERS`). Its disks keep what the last holder
left: kubelet keys, images, emptyDirs. So the worker keeps, per machine, a record in its own
namespace that no tenant can write (`activities/machine_ledger.py`): the namespace and claim
that hold or last held it, and where its wipe stands. The decisions on it are here, pure:

- a claim may take a machine that is clean, that its own namespace released, or that it
  holds itself (a resumed create); never one another claim holds, one being wiped, or one
  another namespace released unwiped (`may_take`);
- with a wipe configured (`CLOUDBURST_MACHINE_WIPE_IMAGE_URL`), a returned machine boots the
  operator's wipe image once and is clean only when the wipe reports done: the wipe image
  powers the machine off when every disk is wiped, and the worker saw it running first
  (`wipe_step`); without one, it is released to its own namespace alone.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace

# What the record says of the machine.
HELD = "Held"  # a claim holds it (from before its record on the seed server is written)
RELEASED = "Released"  # returned unwiped: only its last namespace may take it again
WIPING = "Wiping"  # returned, its wipe running: nobody may take it
CLEAN = "Clean"  # wiped (or never held): anyone the inventory gives it may take it
STATES = (HELD, RELEASED, WIPING, CLEAN)

# A wipe whose power-on was never seen land is started again after this long (the BMC lost
# the request, or the worker restarted between the two).
WIPE_RESTART_AFTER_S = 300.0


@dataclass(frozen=True)
class MachineRecord:
    """One machine's record. `namespace`, `claim_uid`: who holds it or held it last (empty
    when clean). `wipe_started_at`: when its wipe was (last) started, epoch seconds;
    `wipe_seen_on`: the worker saw it running the wipe since."""

    machine: str
    state: str = CLEAN
    namespace: str = ""
    claim_uid: str = ""
    wipe_started_at: float | None = None
    wipe_seen_on: bool = False

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> MachineRecord:
        """A record as stored (`to_data`); an unknown state reads as held, by nobody known:
        nobody takes a machine whose record is not understood."""
        state = str(data.get("state") or "")
        started = data.get("wipeStartedAt")
        try:
            started_at = float(started) if started not in (None, "") else None  # type: ignore[arg-type]
        except (TypeError, ValueError):
            started_at = None
        return cls(
            machine=str(data.get("machine") or ""),
            state=state if state in STATES else HELD,
            namespace=str(data.get("namespace") or ""),
            claim_uid=str(data.get("claimUid") or ""),
            wipe_started_at=started_at,
            wipe_seen_on=bool(data.get("wipeSeenOn")),
        )

    def to_data(self) -> dict[str, object]:
        data: dict[str, object] = {"machine": self.machine, "state": self.state}
        if self.namespace:
            data["namespace"] = self.namespace
        if self.claim_uid:
            data["claimUid"] = self.claim_uid
        if self.wipe_started_at is not None:
            data["wipeStartedAt"] = self.wipe_started_at
        if self.wipe_seen_on:
            data["wipeSeenOn"] = True
        return data


def machine_key(bmc_host_key: str, system_id: str | None) -> str:
    """The record's key for the hardware behind a BMC (`inventory_key` of its address) and
    the system's identity as that BMC reports it (its UUID): the same machine whatever a
    NodeClass calls it. A hash: a ConfigMap's data
    key allows only `[-._a-zA-Z0-9]`."""
    digest = hashlib.sha256(f"{bmc_host_key}/{system_id or ''}".encode()).hexdigest()
    return f"machine-{digest[:24]}"


def may_take(record: MachineRecord | None, namespace: str, claim_uid: str) -> str | None:
    """None when the claim (`namespace`, `claim_uid`) may take the machine; else why not, in
    words that name no other tenant."""
    if record is None or record.state == CLEAN:
        return None
    if record.state == HELD:
        if record.claim_uid and (record.namespace, record.claim_uid) == (namespace, claim_uid):
            return None
        return "held by another claim"
    if record.state == WIPING:
        return "being wiped before its next holder"
    if record.namespace == namespace:
        return None
    return (
        "returned unwiped by another namespace: set CLOUDBURST_MACHINE_WIPE_IMAGE_URL so that "
        "returned machines are wiped, or mark it clean once wiped (docs/security.md)"
    )


def taken(machine: str, namespace: str, claim_uid: str) -> MachineRecord:
    return MachineRecord(machine=machine, state=HELD, namespace=namespace, claim_uid=claim_uid)


def released(record: MachineRecord) -> MachineRecord:
    """Returned without a wipe: its namespace alone may take it again."""
    return replace(record, state=RELEASED, claim_uid="", wipe_started_at=None, wipe_seen_on=False)


def wiping(record: MachineRecord, started_at: float | None) -> MachineRecord:
    """To be wiped: nobody takes it from here on. `started_at` None: its wipe image is not
    booted yet (the machine is still powering off from its last holder)."""
    return replace(record, state=WIPING, wipe_started_at=started_at, wipe_seen_on=False)


def seen_running(record: MachineRecord) -> MachineRecord:
    return replace(record, wipe_seen_on=True)


def cleaned(machine: str) -> MachineRecord:
    return MachineRecord(machine=machine, state=CLEAN)


class WipeStep(enum.Enum):
    """What to do with a machine being wiped, from its power state now."""

    WAIT = "wait"  # running, seen before: the wipe is under way
    SEEN_RUNNING = "seen-running"  # running, first seen: record it
    DONE = "done"  # off after it was seen running: the wipe image finished and powered off
    # Off and not booted yet, or never seen running for long (the power-on was lost): boot
    # the wipe image (again).
    START_AGAIN = "start-again"


def wipe_step(record: MachineRecord, power: str, now: float) -> WipeStep:
    """The next step of `record`'s wipe (state `WIPING`), its machine's power `power`
    ("On", "Off", "PoweringOn", …; "" when the BMC did not answer)."""
    started = record.wipe_started_at
    if started is None:
        # Not booted yet: what runs now is its last holder's system, still powering off.
        return WipeStep.START_AGAIN if power == "Off" else WipeStep.WAIT
    if power == "On":
        return WipeStep.WAIT if record.wipe_seen_on else WipeStep.SEEN_RUNNING
    if power == "Off":
        if record.wipe_seen_on:
            return WipeStep.DONE
        if now - started >= WIPE_RESTART_AFTER_S:
            return WipeStep.START_AGAIN
    return WipeStep.WAIT
