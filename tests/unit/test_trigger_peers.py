"""Which trigger tells the pools of a pod, and which triggers count as running."""

from __future__ import annotations

import collections
import uuid
from datetime import UTC, datetime, timedelta

from kubernetes import client as k8s

from trigger.peers import TriggerPeers, lease_name, trigger_for

UIDS = [str(uuid.UUID(int=index * 7919 + 1)) for index in range(2000)]
WALL = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def test_each_pod_has_one_trigger_and_the_triggers_share_evenly() -> None:
    triggers = ["trigger-a", "trigger-b", "trigger-c"]
    shares = collections.Counter(trigger_for(uid, triggers) for uid in UIDS)
    assert set(shares) == set(triggers)
    assert all(500 < count < 833 for count in shares.values()), shares
    # The order the triggers are listed in changes nothing.
    assert all(trigger_for(uid, triggers[::-1]) == trigger_for(uid, triggers) for uid in UIDS)


def test_a_trigger_that_comes_or_goes_moves_only_its_own_share() -> None:
    before = {uid: trigger_for(uid, ["trigger-a", "trigger-b"]) for uid in UIDS}
    after = {uid: trigger_for(uid, ["trigger-a", "trigger-b", "trigger-c"]) for uid in UIDS}
    moved = [uid for uid in UIDS if before[uid] != after[uid]]
    assert moved and all(after[uid] == "trigger-c" for uid in moved)
    alone = {uid: trigger_for(uid, ["trigger-a"]) for uid in UIDS}
    assert set(alone.values()) == {"trigger-a"}


def test_each_node_is_exactly_one_running_triggers() -> None:
    a, b = peers("a"), peers("b")
    assert all(a.mine(uid) and b.mine(uid) for uid in UIDS[:50])  # each alone: all its own
    a.triggers = b.triggers = sorted([a.name, b.name])
    assert all(a.mine(uid) != b.mine(uid) for uid in UIDS)


def test_lease_names_are_object_names() -> None:
    assert lease_name("Worker_Host..local-42") == "cloudburst-trigger-worker-host-local-42"
    long = lease_name("x" * 400)
    assert len(long) <= 253 and long != lease_name("x" * 401)


def lease(name: str, renewed: datetime, duration_s: int = 15) -> k8s.V1Lease:
    return k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(name=lease_name(name)),
        spec=k8s.V1LeaseSpec(renew_time=renewed, lease_duration_seconds=duration_s),
    )


def peers(identity: str = "me") -> TriggerPeers:
    return TriggerPeers(
        k8s.ApiClient(), namespace="cloudburst-system", group="g", identity=identity, duration_s=15
    )


def test_a_peer_counts_while_it_renews_and_not_after() -> None:
    me = peers()
    both = sorted([lease_name("me"), lease_name("peer")])
    assert me._running([lease("peer", WALL)], 100.0, WALL) == both
    # Renewed: still running past the first renewal's duration.
    later = WALL + timedelta(seconds=10)
    assert me._running([lease("peer", later)], 110.0, later) == both
    assert me._running([lease("peer", later)], 124.0, later) == both
    # Not renewed for a whole duration, by this trigger's own clock: gone.
    assert me._running([lease("peer", later)], 125.5, later) == [lease_name("me")]


def test_a_peer_that_cannot_be_read_counts_until_its_lease_runs_out() -> None:
    me = peers()
    both = sorted([lease_name("me"), lease_name("peer")])
    assert me._running([lease("peer", WALL)], 100.0, WALL) == both
    assert me._running(None, 110.0, WALL) == both  # the list failed: no news
    assert me._running(None, 116.0, WALL) == [lease_name("me")]


def test_a_released_lease_is_gone_at_once_and_a_stale_one_never_counts() -> None:
    me = peers()
    assert me._running([lease("peer", WALL)], 100.0, WALL) != [lease_name("me")]
    assert me._running([], 101.0, WALL) == [lease_name("me")]
    # A trigger that crashed minutes ago: its Lease is not a running trigger.
    stale = WALL - timedelta(minutes=5)
    assert me._running([lease("crashed", stale)], 102.0, WALL) == [lease_name("me")]
    assert me._long_dead == []
    # One gone for hours is deleted at the next renewal.
    ancient = WALL - timedelta(hours=2)
    assert me._running([lease("ancient", ancient)], 103.0, WALL) == [lease_name("me")]
    assert me._long_dead == [lease_name("ancient")]
