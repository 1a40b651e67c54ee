"""Who may take a shared machine, and where its wipe stands (cluster/machine_hygiene.py)."""

from __future__ import annotations

import pytest

from cluster import machine_hygiene as h
from cluster.machine_hygiene import MachineRecord, WipeStep

A, B = "team-a", "team-b"


def test_a_clean_or_unknown_machine_is_anyones() -> None:
    assert h.may_take(None, B, "uid-b") is None
    assert h.may_take(h.cleaned("m"), B, "uid-b") is None


def test_a_held_machine_is_its_claims_alone() -> None:
    held = h.taken("m", A, "uid-a")
    assert h.may_take(held, A, "uid-a") is None  # a resumed create
    assert h.may_take(held, A, "uid-a2") == "held by another claim"
    assert h.may_take(held, B, "uid-b") == "held by another claim"


def test_a_machine_released_unwiped_goes_back_to_its_namespace_alone() -> None:
    """Fails if a release forgot its namespace: team-b would take team-a's disks."""
    returned = h.released(h.taken("m", A, "uid-a"))
    assert returned.state == h.RELEASED and returned.namespace == A and not returned.claim_uid
    assert h.may_take(returned, A, "uid-a2") is None
    why = h.may_take(returned, B, "uid-b")
    assert why is not None and A not in why and "CLOUDBURST_MACHINE_WIPE_IMAGE_URL" in why


def test_nobody_takes_a_machine_being_wiped_not_even_its_last_namespace() -> None:
    wiping = h.wiping(h.taken("m", A, "uid-a"), None)
    assert h.may_take(wiping, A, "uid-a") is not None
    assert h.may_take(wiping, B, "uid-b") is not None


def test_a_record_not_understood_keeps_the_machine_from_everyone() -> None:
    garbled = MachineRecord.from_data({"state": "Borrowed", "namespace": A})
    assert garbled.state == h.HELD
    assert h.may_take(garbled, A, "") is not None


def test_a_record_reads_back_as_written() -> None:
    record = h.seen_running(h.wiping(h.taken("m", A, "uid-a"), 1234.5))
    assert MachineRecord.from_data(record.to_data()) == record
    assert MachineRecord.from_data({"wipeStartedAt": "soon"}).wipe_started_at is None


@pytest.mark.parametrize(
    ("started", "seen", "power", "now", "step"),
    [
        # Not booted yet: its last holder's system is still powering off.
        (None, False, "On", 0.0, WipeStep.WAIT),
        (None, False, "PoweringOff", 0.0, WipeStep.WAIT),
        (None, False, "Off", 0.0, WipeStep.START_AGAIN),
        # Booted: running is the wipe under way, first seen then waited on.
        (100.0, False, "On", 110.0, WipeStep.SEEN_RUNNING),
        (100.0, True, "On", 9000.0, WipeStep.WAIT),
        # Off after it was seen running: the wipe image's report.
        (100.0, True, "Off", 400.0, WipeStep.DONE),
        # Off and never seen running: the power-on is still to land, or was lost.
        (100.0, False, "Off", 110.0, WipeStep.WAIT),
        (100.0, False, "Off", 100.0 + h.WIPE_RESTART_AFTER_S, WipeStep.START_AGAIN),
        # A BMC that does not answer decides nothing.
        (100.0, True, "", 9000.0, WipeStep.WAIT),
    ],
)
def test_the_wipe_is_done_only_when_the_machine_powers_off_after_running_it(
    started: float | None, seen: bool, power: str, now: float, step: WipeStep
) -> None:
    """Fails if an Off before the wipe image ran counted as done (a machine handed on with
    its disks as they were)."""
    record = h.wiping(h.taken("m", A, "uid-a"), started)
    if seen:
        record = h.seen_running(record)
    assert h.wipe_step(record, power, now) is step


def test_one_machine_has_one_key_whatever_a_nodeclass_calls_it() -> None:
    assert h.machine_key("bmc:10.0.9.21", "1") == h.machine_key("bmc:10.0.9.21", "1")
    assert h.machine_key("bmc:10.0.9.21", "1") != h.machine_key("bmc:10.0.9.21", "2")
    assert len(h.machine_key("bmc:x", None)) < 64
