"""A claim's disruption reasons, decided from what it knows and which deadlines have come."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api.messages import NodeObservation, ScaleDownRequest
from api.nodeclaim import ClaimDisruption
from api.nodepool.messages import DisruptionPermit
from workflows.decisions.claim_disruption import ClaimView, involuntary_reason, voluntary_reason

BORN = datetime(2026, 11, 24, 8, 0, tzinfo=UTC)


def view(**changes: object) -> ClaimView:
    fields: dict[str, object] = {
        "disruption": ClaimDisruption(ttl_seconds_after_empty=30, ttl_seconds_until_expired=3600),
        "created_at": BORN,
        "node": NodeObservation(node_name="n", exists=True, ready=True, observed_at=BORN),
        "scale_down": None,
        "permit": None,
        "budgeted": True,
        "instance_gone": False,
    }
    fields.update(changes)
    return ClaimView(**fields)  # type: ignore[arg-type]


class Deadlines:
    """`reached` for tests: the deadlines that have come, and every one asked about."""

    def __init__(self, *come: str) -> None:
        self.come = set(come)
        self.asked: dict[str, datetime] = {}

    def __call__(self, key: str, at: datetime) -> bool:
        self.asked[key] = at
        return key in self.come


def test_a_live_busy_node_stays_and_its_expiry_is_watched() -> None:
    deadlines = Deadlines()
    assert involuntary_reason(view(), deadlines) is None
    assert voluntary_reason(view(), deadlines) is None
    assert deadlines.asked == {"expiry": BORN + timedelta(hours=1)}


def test_expiry_comes_only_when_its_deadline_does() -> None:
    assert involuntary_reason(view(), Deadlines("expiry")) == "Expired"


def test_a_forced_or_unbudgeted_request_goes_at_once_a_plain_one_waits() -> None:
    plain = ScaleDownRequest(reason="tidy")
    forced = ScaleDownRequest(reason="now", force=True)
    assert involuntary_reason(view(scale_down=forced), Deadlines()) == "now"
    assert involuntary_reason(view(scale_down=plain, budgeted=False), Deadlines()) == "tidy"
    assert involuntary_reason(view(scale_down=plain), Deadlines()) is None
    assert voluntary_reason(view(scale_down=plain), Deadlines()) == "tidy"


def test_a_node_or_vm_gone_is_lost_at_once_not_ready_after_its_grace() -> None:
    gone = NodeObservation(node_name="n", exists=False, observed_at=BORN)
    assert involuntary_reason(view(node=gone), Deadlines()) == "NodeLost"
    assert involuntary_reason(view(instance_gone=True), Deadlines()) == "NodeLost"
    since = BORN + timedelta(minutes=5)
    sick = NodeObservation(node_name="n", exists=True, not_ready_since=since, observed_at=since)
    deadlines = Deadlines()
    assert involuntary_reason(view(node=sick), deadlines) is None
    assert deadlines.asked["node unreachable"] == since + timedelta(seconds=120)
    assert involuntary_reason(view(node=sick), Deadlines("node unreachable")) == "NodeLost"


def test_empty_counts_from_when_the_node_emptied() -> None:
    since = BORN + timedelta(minutes=10)
    empty = NodeObservation(
        node_name="n", exists=True, ready=True, empty_since=since, observed_at=since
    )
    deadlines = Deadlines()
    assert voluntary_reason(view(node=empty), deadlines) is None
    assert deadlines.asked["empty TTL"] == since + timedelta(seconds=30)
    assert voluntary_reason(view(node=empty), Deadlines("empty TTL")) == "Empty"


def test_the_pools_choice_comes_before_anything_voluntary_drift_alone_does_not() -> None:
    chosen = DisruptionPermit(reason="Underutilized")
    assert voluntary_reason(view(permit=chosen), Deadlines()) == "Underutilized"
    assert voluntary_reason(view(permit=DisruptionPermit(reason="Empty")), Deadlines()) is None


def test_a_spot_interruption_notice_ends_the_node_at_once_whatever_holds_it() -> None:
    # Budgeted, busy, protected by a do-not-disrupt pod, not expired: the VM goes anyway.
    node = NodeObservation(
        node_name="n",
        exists=True,
        ready=True,
        pod_count=3,
        do_not_disrupt=["default/batch-1"],
        interruption="spot-itn",
        observed_at=BORN,
    )
    assert involuntary_reason(view(node=node), Deadlines()) == "Interrupted"
    # A node already gone is lost, not interrupted: nothing is left to drain.
    gone = node.model_copy(update={"exists": False})
    assert involuntary_reason(view(node=gone), Deadlines()) == "NodeLost"
