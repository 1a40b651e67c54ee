"""`plan_capacity`, pure: pending pods + offerings -> in-flight assignments and new nodes.

Its stages, one way (planner/__init__.py): prepare (`_prepare`: the offerings the pool may
use, and per pod those it may land on, by its node selector/affinity on offering labels; pods
no offering can ever host are reported) → place in flight (`_place_in_flight`: in-flight
nodes' free room first, first-fit decreasing) → partition (`_partitions`) → pack
(`packing.pack`, within the pool's remaining limits and each offering's count) → floor
(`_floor_bins`) → fallbacks (`_planned_node`: each node's ranked fallback offerings, all of
which fit its pods) → cost.

Finite inventory: an offering with `available` (on-premises machines, room on the hosts) gets
at most that many new nodes in the whole plan, counted per offering across every group of
pods and the floor's empty nodes; once it is used up the rest of the burst goes to the next
cheapest offering (a cloud) in the same plan, and no node lists a used-up offering among its
fallbacks. The count is the provider's, for that shape alone: where shapes share hosts (one
Proxmox cluster's room holds either two 4-core or four 2-core VMs) the plan may promise the
same room to two shapes. The provider then refuses the second create (a capacity error), the
claim fails over to its next offering, and the provider's next `instance_types()`, read by
the next plan, says what is really left. The same holds for a machine promised by two plans
made before the first one's VM exists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from api.nodeclaim import Offering
from api.planning import Plan, PlannedNode, PlanRequest, PodDemand, Resources
from api.quantity import format_cpu, format_memory
from cluster.requirements import offering_filter, pool_can_host
from planner.node_size import GIB, OverheadFn, kube_reserved, usable_capacity
from planner.packing import (
    Bin,
    BinType,
    Budget,
    Vector,
    lower_bound,
    one_node_per_round,
    pack,
)
from planner.regions import offering_allowed

# What the packer counts a free node at (on-premises machines default to a price of 0): its
# scores divide by prices, and a node that costs a little keeps it from spreading pods over
# more free machines than they need, which leaves fewer for the rest of the burst.
FREE_NODE_PRICE = 1e-6


def plan_capacity(
    request: PlanRequest,
    offerings: Sequence[Offering],
    per_node_overhead: OverheadFn = kube_reserved,
) -> Plan:
    """The cheapest plan found for the pending pods within the pool's limits."""
    prep = _prepare(request, offerings, per_node_overhead)
    plan = Plan(unschedulable=prep.unschedulable)
    remaining = _place_in_flight(request, prep, plan)
    budget = Budget(
        nodes=request.max_new_nodes,
        cpu_m=request.remaining_cpu_m,
        memory=request.remaining_memory_bytes,
    )
    packed: list[tuple[Bin, list[PodDemand], tuple[int, ...]]] = []
    for eligible, pods in _partitions(remaining, prep):
        types = [prep.bin_types[i] for i in eligible]
        bins, held = pack([prep.shape[p.uid] for p in pods], types, budget)
        for i in held:
            _held_back(pods[i], types, prep, budget, plan)
        packed += [(b, pods, eligible) for b in bins]
    everything = tuple(range(len(prep.offerings)))
    packed += [(b, [], everything) for b in _floor_bins(request, prep, budget)]
    # Fallbacks are chosen once every node is planned: an offering a later node used up is
    # no node's fallback.
    plan.new_nodes = [
        _planned_node(b, pods, eligible, prep, request, budget) for b, pods, eligible in packed
    ]
    plan.cost_eur_per_hour = round(
        sum(n.offerings[0].price_eur_per_hour or 0.0 for n in plan.new_nodes), 6
    )
    return plan


def baseline_one_node_per_round(
    request: PlanRequest,
    offerings: Sequence[Offering],
    per_node_overhead: OverheadFn = kube_reserved,
) -> Plan:
    """The seed system's strategy, for comparison: each round asks for one node the size of
    all remaining demand (the cheapest offering that holds it); when none is that big, takes
    the biggest offering, fills it largest pod first, and goes again. Ignores the limits and
    the offerings' counts."""
    prep = _prepare(request, offerings, per_node_overhead)
    plan = Plan(unschedulable=prep.unschedulable)
    remaining = _place_in_flight(request, prep, plan)
    for eligible, pods in _partitions(remaining, prep):
        types = [prep.bin_types[i] for i in eligible]
        for b in one_node_per_round([prep.shape[p.uid] for p in pods], types):
            plan.new_nodes.append(
                PlannedNode(
                    offerings=[prep.offerings[b.type.ref]],
                    pod_uids=[pods[i].uid for i in b.items],
                    requests=_res(b.used),
                )
            )
    plan.cost_eur_per_hour = round(
        sum(n.offerings[0].price_eur_per_hour or 0.0 for n in plan.new_nodes), 6
    )
    return plan


def lp_lower_bound(
    request: PlanRequest,
    offerings: Sequence[Offering],
    per_node_overhead: OverheadFn = kube_reserved,
    *,
    tight: bool = True,
) -> float:
    """A lower bound on the hourly cost of new nodes for every pod some offering can host.
    Valid for plans without in-flight nodes or limits.

    tight=True (needs highspy, a dev extra): the strengthened assignment LP of bound.py, which
    respects which offerings each pod fits and may use. tight=False: the plain fractional
    cover LP (lp.py, pure Python; much looser when pods are large against cheap nodes).
    Both ignore the offerings' counts (`available`) and count each node at its offering's
    own price (a free one at 0): a relaxation of what a plan must obey, so still a lower
    bound on every plan, one that counts machines included (only looser: as if the cheap
    machines never ran out)."""
    prep = _prepare(request, offerings, per_node_overhead)
    pods = [p for p in request.pods if p.uid in prep.eligible]
    items = [prep.shape[p.uid] for p in pods]
    types = [
        replace(t, price=float(o.price_eur_per_hour or 0.0), available=None)
        for t, o in zip(prep.bin_types, prep.offerings, strict=True)
    ]
    if not tight:
        return lower_bound(items, types)
    from planner.bound import assignment_lower_bound

    return assignment_lower_bound(items, types, [prep.eligible[p.uid] for p in pods])


# ---- preparation --------------------------------------------------------------------------


@dataclass
class _Prepared:
    offerings: list[Offering]  # the usable candidates, cheapest first
    bin_types: list[BinType]  # parallel to offerings (ref = index)
    shape: dict[str, Vector]  # pod uid -> (cpu, memory, pods)
    eligible: dict[str, tuple[int, ...]]  # pod uid -> candidate indices it may use
    filters: dict[str, Callable[[Offering], bool] | None]
    unschedulable: dict[str, str]


def _prepare(
    request: PlanRequest, offerings: Sequence[Offering], overhead: OverheadFn
) -> _Prepared:
    candidates, excluded = _candidates(request, offerings)
    bin_types: list[BinType] = []
    usable: list[Offering] = []
    for offering in candidates:
        cap = usable_capacity(offering, overhead(offering))
        if cap.cpu_m <= 0 or cap.memory_bytes <= 0 or cap.pods <= 0:
            continue
        bin_types.append(
            BinType(
                ref=len(usable),
                price=max(float(offering.price_eur_per_hour or 0.0), FREE_NODE_PRICE),
                cap=(cap.cpu_m, cap.memory_bytes, cap.pods),
                raw_cpu_m=round(float(offering.vcpu or 0) * 1000),
                raw_memory=int(float(offering.memory_gib or 0) * GIB),
                available=offering.available,
            )
        )
        usable.append(offering)
    prep = _Prepared(usable, bin_types, {}, {}, {}, {})
    everything = tuple(range(len(usable)))
    pool_reasons: dict[str, str | None] = {}
    eligible_cache: dict[str, tuple[int, ...]] = {}
    filter_cache: dict[str, Callable[[Offering], bool] | None] = {}
    for pod in request.pods:
        prep.shape[pod.uid] = _shape(pod.requests)
        plain = not pod.node_selector and not pod.required_affinity
        if plain and not request.pool.template.taints:
            reason = None
        else:
            key = _placement_key(pod, with_tolerations=True)
            if key not in pool_reasons:
                pool_reasons[key] = pool_can_host(request.pool_name, request.pool, pod)
            reason = pool_reasons[key]
        if reason is not None:
            prep.unschedulable[pod.uid] = f"pool {request.pool_name}: {reason}"
            continue
        if plain:
            eligible, test = everything, None
        else:
            key = _placement_key(pod, with_tolerations=False)
            if key not in eligible_cache:
                # One filter per distinct placement rule, shared by the pods that have it.
                filter_cache[key] = test = offering_filter(request.pool_name, request.pool, pod)
                eligible_cache[key] = (
                    everything if test is None else tuple(i for i in everything if test(usable[i]))
                )
            eligible, test = eligible_cache[key], filter_cache[key]
        prep.filters[pod.uid] = test
        shape = prep.shape[pod.uid]
        if not usable:
            prep.unschedulable[pod.uid] = _no_offering_reason(request, offerings, excluded)
        elif not eligible:
            prep.unschedulable[pod.uid] = (
                f"no allowed offering ({len(usable)}) matches the pod's node selector/affinity "
                "on instance type, region, zone, arch, provider or capacity type"
            )
        elif not any(_fits(shape, bin_types[i].cap) for i in eligible):
            prep.unschedulable[pod.uid] = _too_big_reason(
                shape, [bin_types[i] for i in eligible], usable
            )
        else:
            prep.eligible[pod.uid] = eligible
    return prep


def _candidates(
    request: PlanRequest, offerings: Sequence[Offering]
) -> tuple[list[Offering], dict[str, int]]:
    failed = set(request.failed_offerings)
    seen: set[str] = set()
    out: list[Offering] = []
    excluded: dict[str, int] = {}
    for offering in offerings:
        if offering.key in seen:
            continue
        seen.add(offering.key)
        if offering.key in failed:
            why: str | None = "recently failed"
        elif offering.vcpu is None or offering.memory_gib is None:
            why = "size unknown"
        else:
            why = offering_allowed(offering, request.pool.requirements, request.class_providers)
        if why is None:
            out.append(offering)
        else:
            excluded[why] = excluded.get(why, 0) + 1
    out.sort(key=lambda o: (o.price_eur_per_hour or 0.0, o.key))
    return out, excluded


def _place_in_flight(request: PlanRequest, prep: _Prepared, plan: Plan) -> list[PodDemand]:
    """First-fit decreasing onto the free room of in-flight claims; returns the pods left."""
    schedulable = [p for p in request.pods if p.uid in prep.eligible]
    if not request.in_flight:
        return schedulable
    free = [
        [
            n.allocatable.cpu_m - n.used.cpu_m,
            n.allocatable.memory_bytes - n.used.memory_bytes,
            n.allocatable.pods - n.used.pods,
        ]
        for n in request.in_flight
    ]
    allowed_cache: dict[tuple[int, int], bool] = {}
    left: list[PodDemand] = []
    for pod in sorted(schedulable, key=lambda p: prep.shape[p.uid], reverse=True):
        shape = prep.shape[pod.uid]
        test = prep.filters.get(pod.uid)
        for n, room in enumerate(free):
            if not _fits(shape, room):
                continue
            if test is not None:
                key = (id(test), n)
                if key not in allowed_cache:
                    allowed_cache[key] = test(request.in_flight[n].offering)
                if not allowed_cache[key]:
                    continue
            for d in range(3):
                room[d] -= shape[d]
            plan.assignments[pod.uid] = request.in_flight[n].claim_name
            break
        else:
            left.append(pod)
    return left


def _partitions(
    pods: list[PodDemand], prep: _Prepared
) -> list[tuple[tuple[int, ...], list[PodDemand]]]:
    """Pods grouped by the offerings they may use; each group is packed on its own."""
    groups: dict[tuple[int, ...], list[PodDemand]] = {}
    for pod in pods:
        groups.setdefault(prep.eligible[pod.uid], []).append(pod)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))


# ---- output -------------------------------------------------------------------------------


def _planned_node(
    b: Bin,
    pods: list[PodDemand],
    eligible: tuple[int, ...],
    prep: _Prepared,
    request: PlanRequest,
    budget: Budget,
) -> PlannedNode:
    chosen = b.type
    ranked = [chosen.ref]
    want = max(0, request.offerings_per_node - 1)
    # Failover alternatives: they must hold the same pods and keep the pool within its limits
    # if this node switches to them; other providers first (an outage is usually per provider).
    fitting = [
        i
        for i in eligible
        if i != chosen.ref
        and _fits(b.used, prep.bin_types[i].cap)
        and budget.allows_swap(chosen, prep.bin_types[i])
    ]
    providers = {prep.offerings[chosen.ref].provider}
    picked: list[int] = []
    twin = _on_demand_twin(prep.offerings[chosen.ref], fitting, prep.offerings)
    if twin is not None and want:
        # A spot node falls back to the same shape on demand when spot capacity runs out.
        picked.append(twin)
    for i in fitting:  # eligible is cheapest-first
        if len(picked) >= want:
            break
        if prep.offerings[i].provider not in providers:
            providers.add(prep.offerings[i].provider)
            picked.append(i)
    for i in fitting:
        if len(picked) >= want:
            break
        if i not in picked:
            picked.append(i)
    ranked += sorted(picked, key=lambda i: (prep.bin_types[i].price, i))
    if twin is not None and twin in ranked:
        # Right after the spot offering, whatever cheaper alternatives were picked.
        ranked.remove(twin)
        ranked.insert(1, twin)
    return PlannedNode(
        offerings=[prep.offerings[i] for i in ranked],
        pod_uids=[pods[i].uid for i in b.items],
        requests=_res(b.used),
        # What the chosen offering leaves for pods: the pool fills the rest while it boots.
        allocatable=_res(chosen.cap),
    )


def _on_demand_twin(chosen: Offering, fitting: list[int], offerings: list[Offering]) -> int | None:
    """The on-demand offering of a spot offering's provider, region and type, if usable."""
    if not chosen.spot:
        return None
    return next(
        (
            i
            for i in fitting
            if not offerings[i].spot
            and (offerings[i].provider, offerings[i].region, offerings[i].instance_type)
            == (chosen.provider, chosen.region, chosen.instance_type)
        ),
        None,
    )


def _floor_bins(request: PlanRequest, prep: _Prepared, budget: Budget) -> list[Bin]:
    """`min_new_nodes` empty nodes (the pool's minNodes floor): the cheapest offerings with
    machines left."""
    bins: list[Bin] = []
    for _ in range(request.min_new_nodes):
        chosen = next((t for t in prep.bin_types if budget.copies(t) >= 1), None)
        if chosen is None:
            break
        budget.take(chosen)
        bins.append(Bin(chosen, [], [0, 0, 0]))
    return bins


def _held_back(
    pod: PodDemand, types: list[BinType], prep: _Prepared, budget: Budget, plan: Plan
) -> None:
    """A pod the packer could not place: held by the pool's limits, or (when the limits
    would allow a node that holds it) by the offerings' counts, all used up."""
    shape = prep.shape[pod.uid]
    fitting = [t for t in types if _fits(shape, t.cap)]
    if not any(budget.copies(t, with_stock=False) >= 1 for t in fitting):
        plan.limited.append(pod.uid)
        return
    used_up = [
        f"{prep.offerings[t.ref].key} ({t.available} available)"
        for t in fitting
        if t.available is not None
    ]
    plan.unschedulable[pod.uid] = (
        "no machine left: every offering that holds the pod is used up by this plan or out "
        f"of stock ({', '.join(used_up[:3])}{', ...' if len(used_up) > 3 else ''})"
    )


def _no_offering_reason(
    request: PlanRequest, offerings: Sequence[Offering], excluded: dict[str, int]
) -> str:
    r = request.pool.requirements
    detail = ", ".join(f"{n} by {why}" for why, n in sorted(excluded.items())) or "none offered"
    return (
        f"no usable offering among {len(offerings)} ({detail}); pool requirements: arch "
        f"{r.arch}, regionConstraint {r.region_constraint}, maxPriceEurPerHour "
        f"{r.max_price_eur_per_hour}, allowedProviders {r.allowed_providers or 'any'}, "
        f"capacityType {r.capacity_type}; "
        f"NodeClass providers {request.class_providers}"
    )


def _too_big_reason(shape: Vector, types: list[BinType], offerings: list[Offering]) -> str:
    largest = max(types, key=lambda t: (t.cap[0], t.cap[1]))
    roomiest = max(types, key=lambda t: (t.cap[1], t.cap[0]))
    return (
        f"requests cpu {format_cpu(shape[0])}, memory {format_memory(shape[1])} fit no allowed "
        f"offering after overhead (most cpu: {offerings[largest.ref].key} with "
        f"{format_cpu(largest.cap[0])}/{format_memory(largest.cap[1])}; most memory: "
        f"{offerings[roomiest.ref].key} with {format_cpu(roomiest.cap[0])}/"
        f"{format_memory(roomiest.cap[1])})"
    )


# ---- helpers ------------------------------------------------------------------------------


def _shape(r: Resources) -> Vector:
    return (max(0, r.cpu_m), max(0, r.memory_bytes), max(1, r.pods))


def _res(v: Sequence[int]) -> Resources:
    return Resources(cpu_m=v[0], memory_bytes=v[1], pods=v[2])


def _fits(shape: Sequence[int], cap: Sequence[int]) -> bool:
    return shape[0] <= cap[0] and shape[1] <= cap[1] and shape[2] <= cap[2]


def _placement_key(pod: PodDemand, *, with_tolerations: bool) -> str:
    parts = [repr(sorted(pod.node_selector.items())), repr(pod.required_affinity)]
    if with_tolerations:
        parts.append(repr(pod.tolerations))
    return "|".join(parts)
