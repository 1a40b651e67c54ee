"""What the pool asks the planner for, and what its NodePool status says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from api.nodeclaim import NodeClaimPhase, Offering
from api.nodeclass import FakeClass, JoinSettings, NodeClassSpec
from api.nodepool import NodePoolSpec
from api.nodepool.messages import PoolClaim, PoolSpecs, PoolState
from api.planning import PlannedNode, PodDemand, Resources
from workflows.decisions.pool import (
    events_allowed,
    fill,
    held,
    overflowing,
    partly_filled,
    plan_request,
    pod_view,
    pool_status,
    start_batches,
    waiting_reasons,
)

NOW = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
SMALL = Offering(provider="fake", region="sim-1", instance_type="fk-small", vcpu=2, memory_gib=4)


def state(limits: dict[str, object] | None = None) -> PoolState:
    pool = NodePoolSpec.model_validate({"limits": limits or {}})
    return PoolState(
        specs=PoolSpecs(
            pool=pool,
            node_class_name="sample",
            node_class=NodeClassSpec(
                fake=FakeClass(), join=JoinSettings(host_api_server="https://127.0.0.1:6443")
            ),
        )
    )


def pod(uid: str, cpu_m: int = 500) -> PodDemand:
    return PodDemand(
        uid=uid, namespace="default", name=uid, requests=Resources(cpu_m=cpu_m, pods=1)
    )


def claim(name: str, phase: NodeClaimPhase, nominated: list[str] | None = None) -> PoolClaim:
    return PoolClaim(
        name=name,
        phase=phase,
        offering=SMALL,
        allocatable=Resources(cpu_m=1900, memory_bytes=3 * 2**30, pods=110),
        nominated=nominated or [],
        started_at=NOW,
    )


def test_nodes_on_their_way_carry_what_is_nominated_ready_ones_are_left_out() -> None:
    pool = state()
    pool.pending = {"a": pod("a", 700), "b": pod("b")}
    live = [
        claim("p-1", NodeClaimPhase.PROVISIONING, ["a", "gone"]),
        claim("p-2", NodeClaimPhase.READY),
    ]
    request = plan_request("p", "default", pool, live, [pod("b")], 0)
    [on_its_way] = request.in_flight
    assert on_its_way.claim_name == "p-1"
    assert on_its_way.used.cpu_m == 700  # a pod no longer pending does not count
    assert [p.uid for p in request.pods] == ["b"]


def test_a_ready_node_the_scheduler_is_still_filling_offers_the_room_left_on_it() -> None:
    pool = state()
    pool.pending = {"a": pod("a", 700), "b": pod("b")}
    filling = claim("p-2", NodeClaimPhase.READY, ["a"])
    filling.filling, filling.bound = True, Resources(cpu_m=300, pods=1)
    request = plan_request("p", "default", pool, [filling], [pod("b")], 0)
    [offered] = request.in_flight
    assert (offered.claim_name, offered.used.cpu_m, offered.used.pods) == ("p-2", 1000, 2)


def test_the_limits_leave_what_the_live_claims_do_not_hold() -> None:
    pool = state({"maxNodes": 3, "cpu": "5", "memory": "10Gi"})
    live = [claim("p-1", NodeClaimPhase.READY), claim("p-2", NodeClaimPhase.JOINING)]
    request = plan_request("p", "default", pool, live, [pod("x")], 0)
    assert request.max_new_nodes == 1
    assert request.remaining_cpu_m == 1000
    assert request.remaining_memory_bytes == 2 * 2**30
    assert held(live) == (4000, 8 * 2**30)


def test_over_the_limits_leaves_nothing_never_less() -> None:
    pool = state({"maxNodes": 1, "cpu": "1"})
    live = [claim("p-1", NodeClaimPhase.READY), claim("p-2", NodeClaimPhase.READY)]
    request = plan_request("p", "default", pool, live, [], 1)
    assert request.max_new_nodes == 0 and request.remaining_cpu_m == 0
    assert request.min_new_nodes == 1


def test_status_counts_nodes_and_says_when_pods_wait_on_limits() -> None:
    pool = state({"maxNodes": 2})
    pool.claims = {
        "p-1": claim("p-1", NodeClaimPhase.READY),
        "p-2": claim("p-2", NodeClaimPhase.PROVISIONING),
    }
    pool.blocked = {"x": "LimitReached: pool limits maxNodes=2"}
    status = pool_status(pool, NOW)
    assert (status.nodes, status.ready_nodes) == (2, 1)
    assert status.resources.cpu == "4" and status.resources.memory == "8Gi"
    ready, limit = status.conditions
    assert (ready.type, ready.status) == ("Ready", "True")
    assert (limit.status, limit.reason) == ("True", "PodsWaiting")
    assert limit.message == "1 pods wait: pool limits maxNodes=2 (2 in use)"


def test_a_condition_keeps_its_transition_time_while_it_holds() -> None:
    pool = state()
    pool.published_status = pool_status(pool, NOW)
    later = pool_status(pool, NOW + timedelta(minutes=5))
    assert later.conditions[0].last_transition_time == NOW
    pool.config_error = "Secret default/tailscale-auth not found"
    failing = pool_status(pool, NOW + timedelta(minutes=6))
    ready = failing.conditions[0]
    assert (ready.status, ready.reason) == ("False", "ClaimsFailing")
    assert "tailscale-auth" in ready.message
    assert ready.last_transition_time == NOW + timedelta(minutes=6)


def test_old_prices_raise_a_warning_that_stays_once_shown() -> None:
    pool = state()
    before = pool_status(pool, NOW)
    # A pool whose prices were never old says nothing about them.
    assert "PricesStale" not in {c.type for c in before.conditions}

    pool.stale_prices = ["aws prices as of 2024-06-01 are older than 168 h"]
    pool.published_status = pool_status(pool, NOW)
    [stale] = [c for c in pool.published_status.conditions if c.type == "PricesStale"]
    assert (stale.status, stale.reason) == ("True", "OldPrices")
    assert "aws prices as of 2024-06-01" in stale.message and "catalog status" in stale.message

    pool.stale_prices = []  # the next nodes were planned with fresh prices
    [current] = [c for c in pool_status(pool, NOW).conditions if c.type == "PricesStale"]
    assert (current.status, current.reason, current.message) == ("False", "CurrentPrices", "")


def planned(pods: int, cpu_m: int, *, room_pods: int = 10, room_cpu_m: int = 4000) -> PlannedNode:
    return PlannedNode(
        offerings=[SMALL],
        pod_uids=[f"p{i}" for i in range(pods)],
        requests=Resources(cpu_m=cpu_m, memory_bytes=0, pods=pods),
        allocatable=Resources(cpu_m=room_cpu_m, memory_bytes=2**30, pods=room_pods),
    )


def test_a_node_is_as_full_as_its_most_used_resource() -> None:
    assert fill(planned(pods=2, cpu_m=3800)) == 0.95  # few pods, nearly all the cpu
    assert fill(planned(pods=9, cpu_m=100)) == 0.9  # little cpu, nearly all the pod slots
    assert fill(planned(pods=1, cpu_m=400)) == 0.1


def test_only_nodes_their_pods_fill_little_wait_for_more_of_a_burst() -> None:
    full, sparse = planned(pods=8, cpu_m=3200), planned(pods=1, cpu_m=500)
    floor = PlannedNode(offerings=[SMALL], pod_uids=[], requests=Resources())
    assert partly_filled([full, sparse, floor]) == [sparse]  # minNodes' empty node goes at once


def bound_claim(nominated: list[str], bound: Resources) -> PoolClaim:
    taken = claim("p-1", NodeClaimPhase.READY, nominated)
    taken.bound = bound
    return taken


def test_nominations_that_no_longer_fit_beside_what_the_scheduler_bound_are_let_go() -> None:
    pending = {uid: pod(uid, 600) for uid in ("a", "b", "c")}
    # 1900m allocatable, 1000m bound by the scheduler (other pods): room for one of three.
    taken = bound_claim(["a", "gone", "b", "c"], Resources(cpu_m=1000, pods=2))
    assert overflowing(taken, pending) == ["b", "c"]  # the first nominated keeps its place


def test_nominations_stay_while_the_scheduler_has_bound_nothing_there() -> None:
    pending = {uid: pod(uid, 600) for uid in ("a", "b", "c", "d")}
    # Nominated beyond what the estimate holds, but nothing bound yet: the grace decides.
    assert overflowing(bound_claim(["a", "b", "c", "d"], Resources()), pending) == []


def test_nominated_events_come_ten_at_once_then_five_a_second() -> None:
    granted, allowance = events_allowed(None, NOW, 1000)
    assert granted == 10  # a burst's first round: Karpenter's burst of 10
    granted, allowance = events_allowed(allowance, NOW + timedelta(milliseconds=500), 1000)
    assert granted == 2  # half a second later: 2.5 tokens, whole Events only
    granted, allowance = events_allowed(allowance, NOW + timedelta(seconds=1), 3)
    assert granted == 3  # the half token left is kept: 0.5 + 2.5
    granted, allowance = events_allowed(allowance, NOW + timedelta(hours=1), 1000)
    assert granted == 10  # an idle hour refills the bucket, never beyond its burst
    granted, _ = events_allowed(allowance, NOW + timedelta(hours=1), 1)
    assert granted == 0


def test_a_round_of_usual_claims_starts_in_batches_of_a_hundred() -> None:
    assert start_batches([4_500] * 250, 100, 1_000_000) == [
        range(0, 100),
        range(100, 200),
        range(200, 250),
    ]


def test_claims_with_a_large_node_class_start_in_smaller_batches_and_a_huge_one_alone() -> None:
    """A NodeClass filled to its bounds makes each claim's input large: a batch of 100 such
    inputs would not fit Temporal's payload limit, and the pool's task would fail on every
    retry. One input over the bound still goes (alone): a batch is never empty."""
    assert start_batches([300_000] * 7, 100, 1_000_000) == [range(0, 3), range(3, 6), range(6, 7)]
    assert start_batches([10, 2_000_000, 10], 100, 1_000_000) == [
        range(0, 1),
        range(1, 2),
        range(2, 3),
    ]
    assert start_batches([], 100, 1_000_000) == []


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=3_000_000), max_size=300),
    max_claims=st.integers(min_value=1, max_value=120),
)
def test_batches_keep_every_claim_once_in_order_within_both_bounds(
    sizes: list[int], max_claims: int
) -> None:
    batches = start_batches(sizes, max_claims, 1_000_000)
    assert [i for batch in batches for i in batch] == list(range(len(sizes)))
    for batch in batches:
        assert 1 <= len(batch) <= max_claims
        assert len(batch) == 1 or sum(sizes[i] for i in batch) <= 1_000_000


def specs(pool_gen: int, class_gen: int, pool_uid: str = "", class_uid: str = "") -> PoolSpecs:
    return state().specs.model_copy(
        update={
            "pool_generation": pool_gen,
            "class_generation": class_gen,
            "pool_uid": pool_uid,
            "class_uid": class_uid,
        }
    )


def test_an_older_generation_of_the_same_pool_never_replaces_a_newer_one() -> None:
    current = specs(3, 2, "pool-a", "class-a")
    assert not specs(2, 2, "pool-a", "class-a").supersedes(current)
    assert not specs(3, 1, "pool-a", "class-a").supersedes(current)
    assert specs(3, 2, "pool-a", "class-a").supersedes(current)  # the same, told again
    assert not specs(3, 2, "pool-a", "class-a").edited_since(current)
    assert specs(4, 2, "pool-a", "class-a").edited_since(current)


def test_a_pool_or_class_created_again_replaces_the_deleted_one_whatever_its_generation() -> None:
    """Created again under its name, an object starts at generation 1."""
    current = specs(3, 2, "pool-a", "class-a")
    for recreated in (specs(1, 2, "pool-b", "class-a"), specs(3, 1, "pool-a", "class-b")):
        assert recreated.supersedes(current) and recreated.edited_since(current)


def test_specs_without_uids_are_ordered_by_generation_alone() -> None:
    """A trigger from before uids were sent, or a pool that never heard one."""
    assert specs(2, 1).supersedes(specs(1, 1, "pool-a", "class-a"))
    assert not specs(1, 1).supersedes(specs(2, 1, "pool-a", "class-a"))
    assert not specs(1, 1, "pool-b", "class-b").supersedes(specs(2, 1))


def test_a_pod_waiting_on_the_limits_reads_them_with_what_the_live_claims_hold() -> None:
    pool = state({"maxNodes": 2, "cpu": "4"})
    pool.claims = {
        "a": claim("a", NodeClaimPhase.READY, nominated=["p1"]),
        "b": claim("b", NodeClaimPhase.PROVISIONING),
        "gone": claim("gone", NodeClaimPhase.DELETED),
    }
    pool.pending = {uid: pod(uid) for uid in ("p1", "p2")}
    pool.blocked = {"p2": "LimitReached: pool limits maxNodes=2 (2 in use), cpu=4 (4 in use)"}
    nominated = pod_view(pool, set(), "p1")
    assert (nominated.nominated_to, nominated.claim_phase) == ("a", NodeClaimPhase.READY)
    assert nominated.limits == "pool limits maxNodes=2 (2 in use), cpu=4 (4 in use)"
    waiting = pod_view(pool, set(), "p2")
    assert waiting.nominated_to is None and waiting.blocked == pool.blocked["p2"]
    assert pod_view(pool, {"p2"}, "p2").held_until == pool.hold_until
    assert not pod_view(pool, set(), "never-told").known


def test_the_web_ui_lists_the_commonest_reasons_pods_wait_with_one_pod_to_explain() -> None:
    pool = state()
    pool.pending = {uid: pod(uid) for uid in ("p1", "p2", "p3")}
    pool.blocked = {"p1": "LimitReached: x", "p2": "LimitReached: x", "p3": "no offering"}
    assert waiting_reasons(pool, most=3) == [
        ("LimitReached: x", 2, "default/p1"),
        ("no offering", 1, "default/p3"),
    ]
    assert waiting_reasons(pool, most=1) == [("LimitReached: x", 2, "default/p1")]
