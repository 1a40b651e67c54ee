"""Finite inventory in the plan: an offering with `available` (machines on premises) gets at
most that many new nodes in one plan, the rest of a burst goes to the next offering (a cloud)
in the same plan, and no node falls back on a used-up offering."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.nodeclaim import Offering
from api.nodepool import NodePoolSpec
from api.planning import Plan, PlanRequest, PodDemand
from planner.packing import Bin, BinType, Budget, _use_idle_machines, pack
from planner.patterns import plan_patterns
from planner.plan import lp_lower_bound, plan_capacity
from tests.unit.test_packing import check_invariants, demand, limits_st, pods_st

MI = 2**20
GI = 2**30
PROVIDERS = ["fake", "hetzner", "scaleway"]


def offering(
    name: str, vcpu: float, gib: float, price: float, available: int | None = None, **kw: str
) -> Offering:
    fields = {"provider": "hetzner", "region": "fsn1", "arch": "x86_64", **kw}
    return Offering(
        instance_type=name,
        vcpu=vcpu,
        memory_gib=gib,
        price_eur_per_hour=price,
        available=available,
        **fields,
    )


def on_prem(name: str, vcpu: float, gib: float, available: int, price: float = 0.0) -> Offering:
    """A machine of the operator's own (the fake provider stands in for one here)."""
    return offering(name, vcpu, gib, price, available, provider="fake", region="rack-1")


def request(pods: list[PodDemand], **kw: object) -> PlanRequest:
    fields: dict[str, object] = {
        "pool_name": "burst",
        "pool": NodePoolSpec(),
        "class_providers": PROVIDERS,
        "pods": pods,
        **kw,
    }
    return PlanRequest.model_validate(fields)


def chosen(plan: Plan) -> Counter[str]:
    return Counter(n.offerings[0].key for n in plan.new_nodes)


CLOUD = offering("cx32", 4, 8, 0.0109)
CLOUD_BIG = offering("cx42", 8, 16, 0.0263)
SCW = offering("PRO2-XS", 4, 16, 0.11, provider="scaleway", region="fr-par")
PVE = on_prem("pve-4c", 4, 8, available=2)  # three 1-core pods each


def test_a_burst_larger_than_the_machines_fills_them_and_bursts_the_rest_to_the_cloud() -> None:
    pods = [demand(f"p{i}", 1000) for i in range(12)]
    req = request(pods)
    plan = plan_capacity(req, [CLOUD, CLOUD_BIG, SCW, PVE])
    check_invariants(req, plan, [CLOUD, CLOUD_BIG, SCW, PVE])
    assert chosen(plan)[PVE.key] == 2  # every machine, no more
    on_machines = [u for n in plan.new_nodes if n.offerings[0] == PVE for u in n.pod_uids]
    assert len(on_machines) == 6
    clouds = [n for n in plan.new_nodes if n.offerings[0] != PVE]
    assert clouds and all(n.offerings[0].provider == "hetzner" for n in clouds)
    assert sum(len(n.pod_uids) for n in clouds) == 6
    assert not plan.unschedulable and not plan.limited
    # The machines cost nothing: the plan pays for the cloud nodes alone.
    assert plan.cost_eur_per_hour == round(
        sum(n.offerings[0].price_eur_per_hour or 0.0 for n in clouds), 6
    )


def test_no_machine_left_sends_the_whole_burst_to_the_cloud() -> None:
    empty = on_prem("pve-4c", 4, 8, available=0)
    pods = [demand(f"p{i}", 1000) for i in range(6)]
    plan = plan_capacity(request(pods), [CLOUD, SCW, empty])
    assert plan.new_nodes and not plan.unschedulable
    assert all(o.key != empty.key for n in plan.new_nodes for o in n.offerings)


def test_the_count_holds_across_pod_groups_and_shapes() -> None:
    """Pods that may use different offerings are packed group by group: the machines are
    counted across the groups, and each shape against its own count."""
    small = on_prem("pve-2c", 2, 4, available=1)
    big = on_prem("pve-8c", 8, 16, available=1)
    pinned = {
        "match_expressions": [
            {
                "key": "node.kubernetes.io/instance-type",
                "operator": "In",
                "values": ["pve-2c", "pve-8c", "cx32"],
            }
        ]
    }
    plain = [demand(f"a{i}", 1500) for i in range(8)]
    picky = [demand(f"b{i}", 1500, required_affinity=[pinned]) for i in range(8)]
    offerings = [CLOUD, CLOUD_BIG, small, big]
    req = request(plain + picky)
    plan = plan_capacity(req, offerings)
    check_invariants(req, plan, offerings)
    counts = chosen(plan)
    assert counts[small.key] <= 1 and counts[big.key] == 1
    assert not plan.unschedulable and not plan.limited
    # Alone, each group would have taken the big machine.
    for group in (plain, picky):
        assert chosen(plan_capacity(request(group), offerings))[big.key] == 1


def test_no_node_falls_back_on_a_used_up_offering() -> None:
    pods = [demand(f"p{i}", 1000) for i in range(12)]
    plan = plan_capacity(request(pods, offerings_per_node=4), [CLOUD, CLOUD_BIG, SCW, PVE])
    assert chosen(plan)[PVE.key] == 2 and len(plan.new_nodes) > 2
    for node in plan.new_nodes:
        keys = [o.key for o in node.offerings]
        if keys[0] == PVE.key:
            assert len(keys) > 1 and PVE.key not in keys[1:]  # a cloud to fail over to
        else:
            assert PVE.key not in keys  # it is used up by this plan


def test_pods_wait_when_every_offering_that_holds_them_is_used_up() -> None:
    pods = [demand(f"p{i}", 1000) for i in range(8)]
    plan = plan_capacity(request(pods, class_providers=["fake"]), [PVE])
    assert chosen(plan) == Counter({PVE.key: 2})
    waiting = [u for u in (p.uid for p in pods) if u in plan.unschedulable]
    assert len(waiting) == 8 - 2 * 3
    assert all("no machine left" in plan.unschedulable[u] for u in waiting)
    assert PVE.key in plan.unschedulable[waiting[0]]
    assert not plan.limited  # the pool's limits hold nothing back


def test_the_floor_takes_the_machines_first_then_the_cloud() -> None:
    """A static pool (minNodes = maxNodes = 3, no pods): the cheapest nodes with machines
    left, the rest on the next offering."""
    plan = plan_capacity(request([], min_new_nodes=3, max_new_nodes=3), [CLOUD, SCW, PVE])
    assert [n.offerings[0].key for n in plan.new_nodes] == [PVE.key, PVE.key, CLOUD.key]
    assert all(not n.pod_uids for n in plan.new_nodes)


def test_a_consolidation_replacement_goes_on_premises_only_while_a_machine_is_free() -> None:
    """What consolidation asks the planner for a cloud node's pods: one node, the cheapest."""
    together = [demand("pods of burst-abc", 2500, 3 * 1024)]
    free_again = on_prem("pve-4c", 4, 8, available=1)
    plan = plan_capacity(request(together, max_new_nodes=1), [CLOUD, SCW, free_again])
    assert plan.new_nodes[0].offerings[0].key == free_again.key
    used_up = on_prem("pve-4c", 4, 8, available=0)
    plan = plan_capacity(request(together, max_new_nodes=1), [CLOUD, SCW, used_up])
    assert plan.new_nodes[0].offerings[0].key == CLOUD.key
    assert all(o.key != used_up.key for o in plan.new_nodes[0].offerings)


def test_a_machine_left_idle_takes_part_of_a_cloud_nodes_pods() -> None:
    """A cloud node too big for one machine: its pods are split between the idle machine and
    a smaller cloud node, which costs less than the big one."""
    machine = BinType(ref=0, price=1e-6, cap=(3920, 6 * GI, 110), available=1)
    small = BinType(ref=1, price=0.0109, cap=(3920, 6 * GI, 110))
    big = BinType(ref=2, price=0.0263, cap=(7910, 13 * GI, 110))
    items = [(900, GI, 1)] * 8
    budget = Budget()
    bins = [Bin(big, list(range(8)), [7200, 8 * GI, 8])]
    budget.take(big)
    _use_idle_machines(bins, items, [machine, small, big], budget)
    assert sorted(b.type.ref for b in bins) == [machine.ref, small.ref]
    assert sorted(i for b in bins for i in b.items) == list(range(8))
    assert budget.left(machine) == 0


# ---- properties ---------------------------------------------------------------------------

inventory_st = st.lists(
    st.builds(
        offering,
        name=st.text("abcdefgh", min_size=3, max_size=6),
        vcpu=st.sampled_from([1, 2, 4, 8, 16]),
        gib=st.sampled_from([1, 2, 4, 8, 16, 32]),
        price=st.sampled_from([0.0, 0.0, 0.004]) | st.floats(0.005, 1.0).map(lambda p: round(p, 4)),
        available=st.none() | st.integers(0, 3),
        provider=st.sampled_from(PROVIDERS),
        region=st.sampled_from(["fsn1", "fr-par", "rack-1"]),
    ),
    min_size=1,
    max_size=10,
    unique_by=lambda o: o.key,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    offerings=inventory_st,
    pods=pods_st,
    limits=limits_st,
    floor=st.integers(0, 3),
    per_node=st.integers(1, 4),
)
def test_no_plan_makes_more_nodes_of_an_offering_than_it_has(
    offerings: list[Offering],
    pods: list[PodDemand],
    limits: dict[str, int | None],
    floor: int,
    per_node: int,
) -> None:
    req = request(pods, min_new_nodes=floor, offerings_per_node=per_node, **limits)
    plan = plan_capacity(req, offerings)
    check_invariants(req, plan, offerings)
    counts = chosen(plan)
    for o in offerings:
        if o.available is not None:
            assert counts[o.key] <= o.available, o.key
            if counts[o.key] == o.available:  # used up: nobody's fallback
                assert all(o.key not in [f.key for f in n.offerings[1:]] for n in plan.new_nodes)
    held = [why for why in plan.unschedulable.values() if why.startswith("no machine left")]
    if all(v is None for v in limits.values()) and not held:
        # The bound ignores the counts: a relaxation, still below every plan.
        assert plan.cost_eur_per_hour >= lp_lower_bound(request(pods), offerings) - 1e-6


shape_st = st.tuples(
    st.sampled_from([100, 250, 500, 1000, 1500, 2000, 3700]),
    st.sampled_from([128, 512, 1024, 2048, 4096]).map(lambda m: m * MI),
    st.just(1),
)
finite_types_st = st.lists(
    st.tuples(
        st.sampled_from([1930, 3920, 7910]),
        st.sampled_from([2900, 6200, 13600]),
        st.floats(0.005, 0.5).map(lambda p: round(p, 4)),
        st.none() | st.integers(0, 4),
    ),
    min_size=1,
    max_size=5,
).map(
    lambda ts: [
        BinType(ref=i, price=p, cap=(c, m * MI, 110), available=n)
        for i, (c, m, p, n) in enumerate(ts)
    ]
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(shape_st, min_size=1, max_size=60), types=finite_types_st)
def test_pack_and_the_pattern_plan_keep_each_types_count(
    items: list[tuple[int, int, int]], types: list[BinType]
) -> None:
    items = [i for i in items if any(all(i[d] <= t.cap[d] for d in range(3)) for t in types)]
    if not items:
        return
    bins, held = pack(items, types, Budget())
    used = Counter(b.type.ref for b in bins)
    for t in types:
        if t.available is not None:
            assert used[t.ref] <= t.available
    assert sorted([i for b in bins for i in b.items] + held) == list(range(len(items)))
    shapes = sorted(set(items))
    counts = [items.count(s) for s in shapes]
    planned = plan_patterns(shapes, counts, types, stock={})
    if planned is not None:
        made = Counter(t.ref for t, _ in planned.nodes)
        assert all(made[t.ref] <= t.available for t in types if t.available is not None)
