"""Multi-dimensional bin packing (cpu, memory, pods) over node types, cheapest plan first.

Pure and integer-exact: a bin's items never exceed its type's capacity in any dimension, and
the budget (max nodes, cpu, memory counted by the node's raw size, and each type's count of
nodes that can still be made: an on-premises inventory) is never exceeded.

How a node type is chosen (the plan's total cost, not the per-node price, is what counts):
1. the fractional covering LP of the remaining demand gives a price per core, per GiB and per
   pod slot (its dual); a node's *value* is what its packed pods are worth at those prices;
2. every node type is filled greedily with the remaining pods (largest first) and scored
   value ÷ price — 1.0 means "as good as the LP optimum"; the best wins. Types are tried in
   order of their best possible score, so most are pruned without a fill;
3. the winning fill is repeated as many times as the remaining pods allow (identical nodes
   are opened in one step, which is what makes 10k pods fast), then the LP is re-solved.
Then an improvement pass replaces a node by the cheapest type that still fits its pods,
merges pairs of under-used nodes into one cheaper node, and re-packs the pods of the 8, 16
and 32 emptiest nodes together (kept when cheaper). Types with a count (machines on premises)
are used up to it and no further; machines the plan leaves idle beside nodes without a count
get those nodes' pods re-packed with them, kept when cheaper.

That greedy plan is 10-25% above the optimum when pods are large against the cheapest nodes
(a few pods per node): its early nodes use up the pods that would have complemented later
ones. So with up to 64 distinct pod shapes, column generation (patterns.py) plans the whole
demand at once — per-shape LP prices, patterns from a small branch and bound, then rounding —
seeded with the greedy plan's nodes; whichever plan is cheaper (and within the limits) wins.
Both are deterministic, with work limits that are counts, not clocks.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from planner.lp import cover_lp
from planner.patterns import copies_that_fit, plan_patterns
from planner.shapes import BinType, Vector

_GIB = 2**30
# Units the LP works in: cores, GiB, pods (keeps the numbers near 1).
_SCALE = (1000.0, float(_GIB), 1.0)
_MERGE_CANDIDATES = 24
_REPEAT_DIVISOR = 4
# The balanced fill costs (pods per node times shapes); above this many shapes only the
# largest-first fills run (mixed workloads from Deployments have a few dozen shapes).
_BALANCED_MAX_GROUPS = 64
_SCORING_WINDOW = 256
# Column generation's LP has a row per shape: beyond this many it is the slow part.
_PATTERN_MAX_GROUPS = 64
# Ruin and recreate: how many of the emptiest nodes are re-packed together, in turn.
_REPACK_SIZES = (8, 16, 32)


@dataclass(slots=True)
class Bin:
    type: BinType
    items: list[int]
    used: list[int]  # cpu, memory, pods


@dataclass(slots=True)
class Budget:
    """What the pool's limits still allow (None = unlimited) and what each finite type has
    left; shared across pack() calls, so that one plan's partitions share both."""

    nodes: int | None = None
    cpu_m: int | None = None
    memory: int | None = None
    # type ref -> nodes of it still to be had; a finite type not in it has its `available`.
    stock: dict[int, int] = field(default_factory=dict)

    def copies(self, t: BinType, *, with_stock: bool = True) -> int | float:
        """How many more nodes of this type fit the budget (`with_stock=False`: the pool's
        limits alone)."""
        limit: int | float = math.inf
        if self.nodes is not None:
            limit = min(limit, self.nodes)
        if self.cpu_m is not None and t.raw_cpu_m > 0:
            limit = min(limit, self.cpu_m // t.raw_cpu_m)
        if self.memory is not None and t.raw_memory > 0:
            limit = min(limit, self.memory // t.raw_memory)
        left = self.left(t)
        if with_stock and left is not None:
            limit = min(limit, left)
        return max(0, limit)

    def left(self, t: BinType) -> int | None:
        """Nodes of this type still to be had; None: unbounded."""
        return self.stock.get(t.ref, t.available) if t.available is not None else None

    def allows_swap(self, old: BinType, new: BinType) -> bool:
        cpu_ok = self.cpu_m is None or new.raw_cpu_m - old.raw_cpu_m <= self.cpu_m
        mem_ok = self.memory is None or new.raw_memory - old.raw_memory <= self.memory
        left = self.left(new)
        stock_ok = new.ref == old.ref or left is None or left >= 1
        return cpu_ok and mem_ok and stock_ok

    def take(self, t: BinType, count: int = 1) -> None:
        if self.nodes is not None:
            self.nodes -= count
        if self.cpu_m is not None:
            self.cpu_m -= t.raw_cpu_m * count
        if self.memory is not None:
            self.memory -= t.raw_memory * count
        left = self.left(t)
        if left is not None:
            self.stock[t.ref] = left - count

    def give_back(self, t: BinType, count: int = 1) -> None:
        self.take(t, -count)

    def inventory(self) -> Budget:
        """The stock alone, copied: a trial packing that ignores the pool's limits (the
        caller checks its result against them with `_affordable`) still counts machines."""
        return Budget(stock=dict(self.stock))


@dataclass(slots=True)
class _Groups:
    """Items grouped by identical shape, largest first; counts shrink as items are placed."""

    shapes: list[Vector]
    members: list[list[int]]
    counts: list[int] = field(default_factory=list)
    # Other orders to try a fill in (by cpu, by memory): mixing them finds tighter nodes.
    orders: list[list[int]] = field(default_factory=list)


def pack(
    items: Sequence[Vector], types: Sequence[BinType], budget: Budget
) -> tuple[list[Bin], list[int]]:
    """Pack every item into new bins; returns (bins, items the budget held back).

    Every item must fit at least one type (the caller reports the others as unschedulable).
    """
    given = list(types)
    types = undominated(types)
    if not items:
        return [], []
    groups = _group(items, types)
    shapes, counts = list(groups.shapes), list(groups.counts)
    group_of = {i: g for g, members in enumerate(groups.members) for i in members}
    bins, limited = _pack_greedy(groups, types, budget)
    _improve(bins, types, budget)
    _repack_emptiest(bins, items, types, budget)
    if limited:
        return bins, limited
    if len(items) > 1 and len(shapes) <= _PATTERN_MAX_GROUPS:
        # Column generation over the shapes: usually much closer to the optimum than the
        # greedy fills, which stay the fallback (and seed its LP).
        seeds = [dict(Counter(group_of[i] for i in b.items)) for b in bins]
        # The machines the greedy plan's nodes hold are the trial's to use again.
        inventory = budget.inventory()
        for b in bins:
            inventory.give_back(b.type)
        candidate = _pack_patterns(items, types, shapes, counts, seeds, inventory)
        if (
            candidate is not None
            and _cost(candidate) < _cost(bins) - 1e-12
            and _affordable(candidate, bins, budget)
        ):
            bins = _swap(bins, candidate, budget)
    # The plan is never dearer than the seed's one-node-per-round strategy: on a few awkward
    # shapes that one big node can win, and then it is the plan.
    baseline = one_node_per_round(items, given)
    if _cost(baseline) < _cost(bins) - 1e-12 and _affordable(baseline, bins, budget):
        bins = _swap(bins, baseline, budget)
    _use_idle_machines(bins, items, types, budget)
    return bins, limited


def _pack_greedy(
    groups: _Groups, types: Sequence[BinType], budget: Budget
) -> tuple[list[Bin], list[int]]:
    """Node after node: the type and fill that score best at the LP's prices (see above)."""
    bins: list[Bin] = []
    limited: list[int] = []
    checked: list[BinType] | None = None
    while True:
        active = [g for g, c in enumerate(groups.counts) if c]
        if not active:
            break
        affordable = [t for t in types if budget.copies(t) >= 1]
        if affordable != checked:
            # Groups no affordable type can hold are held back by the limits.
            for g in active:
                if not any(_fits(groups.shapes[g], t.cap) for t in affordable):
                    limited.extend(_take(groups, g, groups.counts[g]))
            active = [g for g in active if groups.counts[g]]
            checked = affordable
        if not active:
            break
        chosen, fill = _best_fill(groups, active, affordable)
        # Repeat the fill, but re-choose often: a pattern repeated too long uses up the pods
        # that would complement later nodes.
        copies = min(groups.counts[g] // n for g, n in fill)
        copies = max(1, -(-copies // _REPEAT_DIVISOR))
        copies = int(min(copies, budget.copies(chosen)))
        for _ in range(copies):
            bins.append(_take_fill(groups, chosen, fill))
        budget.take(chosen, copies)
    return bins, limited


def _pack_patterns(
    items: Sequence[Vector],
    types: Sequence[BinType],
    shapes: Sequence[Vector],
    counts: Sequence[int],
    seeds: Sequence[dict[int, int]],
    inventory: Budget,
) -> list[Bin] | None:
    """The pattern LP's plan (patterns.py), its leftovers packed greedily; limits ignored,
    the `inventory`'s stock kept (the LP itself prices every type as unbounded: a node whose
    cheapest type is out of stock gets the cheapest that is not)."""
    planned = plan_patterns(shapes, counts, types, seeds, stock=dict(inventory.stock))
    if planned is None:
        return None
    candidates = [planned.nodes]
    if planned.whole_count < len(planned.nodes):
        candidates.append(planned.nodes[: planned.whole_count])
    best: list[Bin] | None = None
    for nodes in candidates:
        groups = _group(items, types)  # the same shapes in the same order, all items unplaced
        bins = [_take_fill(groups, chosen, sorted(pattern.items())) for chosen, pattern in nodes]
        trial = inventory.inventory()
        for chosen, _ in nodes:
            trial.take(chosen)
        rest, limited = _pack_greedy(groups, types, trial)
        if limited:
            return None
        bins.extend(rest)
        _improve(bins, types, trial)
        _repack_emptiest(bins, items, types, trial)
        if best is None or _cost(bins) < _cost(best) - 1e-12:
            best = bins
    return best


def _take_fill(groups: _Groups, chosen: BinType, fill: Sequence[tuple[int, int]]) -> Bin:
    taken: list[int] = []
    used = [0, 0, 0]
    for g, n in fill:
        taken.extend(_take(groups, g, n))
        shape = groups.shapes[g]
        used[0] += shape[0] * n
        used[1] += shape[1] * n
        used[2] += shape[2] * n
    return Bin(chosen, taken, used)


def _swap(old: list[Bin], new: list[Bin], budget: Budget) -> list[Bin]:
    for b in old:
        budget.give_back(b.type)
    for b in new:
        budget.take(b.type)
    return new


def one_node_per_round(items: Sequence[Vector], types: Sequence[BinType]) -> list[Bin]:
    """The seed system's strategy: each round, one node for all remaining demand — the
    cheapest type that holds it, or else the biggest type that holds the largest pod left,
    filled largest pod first. Ignores limits; every item must fit some type."""
    by_price = sorted(types, key=lambda t: t.price)
    groups = _group(items, types, order_by_shape=True)
    bins: list[Bin] = []
    while True:
        active = [g for g, c in enumerate(groups.counts) if c]
        if not active:
            return bins
        total = [sum(groups.shapes[g][d] * groups.counts[g] for g in active) for d in range(3)]
        chosen = cheapest_fitting(total, by_price)
        if chosen is None:
            first = groups.shapes[active[0]]
            chosen = max((t for t in types if _fits(first, t.cap)), key=lambda t: (t.cap, -t.price))
        fill, used = _fill(groups, active, chosen.cap)
        taken = [i for g, n in fill for i in _take(groups, g, n)]
        bins.append(Bin(chosen, taken, list(used)))


def _cheaper_fitting(
    used: Sequence[int], by_price: Sequence[BinType], below: float
) -> list[BinType]:
    """The types cheaper than `below` that hold `used`, cheapest first, up to the first one
    without a count: a finite type may be out of stock, nothing dearer than an unbounded
    one is worth trying."""
    out: list[BinType] = []
    for t in by_price:
        if t.price >= below:
            break
        if used[0] <= t.cap[0] and used[1] <= t.cap[1] and used[2] <= t.cap[2]:
            out.append(t)
            if t.available is None:
                break
    return out


def cheapest_fitting(used: Sequence[int], types: Sequence[BinType]) -> BinType | None:
    """The cheapest type whose capacity holds `used` (types sorted by price)."""
    for t in types:
        if used[0] <= t.cap[0] and used[1] <= t.cap[1] and used[2] <= t.cap[2]:
            return t
    return None


def lower_bound(items: Sequence[Vector], types: Sequence[BinType]) -> float:
    """The LP relaxation's cost: no packing of these items into these types is cheaper."""
    if not items or not types:
        return 0.0
    demand = [sum(i[d] for i in items) / _SCALE[d] for d in range(3)]
    value, _ = cover_lp(demand, [_scaled(t.cap) for t in types], [t.price for t in types])
    return value


# ---- choosing a node type -----------------------------------------------------------------


def _best_fill(
    groups: _Groups, active: list[int], types: Sequence[BinType]
) -> tuple[BinType, list[tuple[int, int]]]:
    demand = [0.0, 0.0, 0.0]
    for g in active:
        shape, count = groups.shapes[g], groups.counts[g]
        for d in range(3):
            demand[d] += shape[d] * count / _SCALE[d]
    _, duals = cover_lp(demand, [_scaled(t.cap) for t in types], [t.price for t in types])
    # A sliver of each dimension's cheapest unit price breaks ties the LP leaves open
    # (a resource it prices at zero is still worth something to the pods left over).
    cheapest = [
        min((t.price / (t.cap[d] / _SCALE[d]) for t in types if t.cap[d] > 0), default=0.0)
        for d in range(3)
    ]
    weights = [(duals[d] + 1e-3 * cheapest[d]) / _SCALE[d] for d in range(3)]

    def worth(v: Sequence[int]) -> float:
        return v[0] * weights[0] + v[1] * weights[1] + v[2] * weights[2]

    ranked = sorted(types, key=lambda t: (-worth(t.cap) / t.price, t.price))
    many = len(active) > _BALANCED_MAX_GROUPS
    # With many distinct shapes, each fill scans them all: one order only, and scoring looks
    # at a window of the largest shapes (the chosen type's fill below scans everything).
    orders = [active[:_SCORING_WINDOW] if many else active]
    if not many:
        orders += [[g for g in order if groups.counts[g]] for order in groups.orders]
    best: tuple[float, float, BinType, list[tuple[int, int]]] | None = None
    for t in ranked:
        if best is not None and worth(t.cap) / t.price <= best[0]:
            break  # no fill can beat the best: its score is at most this
        fills = [_fill(groups, order, t.cap) for order in orders]
        if len(active) <= _BALANCED_MAX_GROUPS:
            fills.append(_fill_balanced(groups, active, t.cap))
        for fill, used in fills:
            if not fill:
                continue
            score = worth(used) / t.price
            if best is None or score > best[0] or (score == best[0] and t.price < best[1]):
                best = (score, t.price, t, fill)
    assert best is not None, "every active group fits some affordable type"
    if many:
        return best[2], _fill(groups, active, best[2].cap)[0]
    return best[2], best[3]


def _fill(groups: _Groups, active: list[int], cap: Vector) -> tuple[list[tuple[int, int]], Vector]:
    """Greedy: largest shapes first, as many of each as still fit."""
    free_cpu, free_mem, free_pods = cap
    fill: list[tuple[int, int]] = []
    shapes, counts = groups.shapes, groups.counts
    for g in active:
        cpu, mem, pods = shapes[g]
        if cpu > free_cpu or mem > free_mem or pods > free_pods:
            continue
        n = copies_that_fit(shapes[g], (free_cpu, free_mem, free_pods), counts[g])
        if n > 0:
            fill.append((g, n))
            free_cpu -= cpu * n
            free_mem -= mem * n
            free_pods -= pods * n
            if not free_pods:
                break
    return fill, (cap[0] - free_cpu, cap[1] - free_mem, cap[2] - free_pods)


def _fill_balanced(
    groups: _Groups, active: list[int], cap: Vector
) -> tuple[list[tuple[int, int]], Vector]:
    """One pod at a time, the shape that best matches the room left (the dot product of
    their shares of the node): pairs cpu-heavy pods with memory-heavy ones, which a
    largest-first fill does not."""
    free = list(cap)
    norms = [1.0 / c if c else 0.0 for c in cap]
    taken: dict[int, int] = {}
    shapes, counts = groups.shapes, groups.counts
    left = {g: counts[g] for g in active}
    while left:
        best, best_score = -1, -1.0
        for g in list(left):
            cpu, mem, pods = shapes[g]
            if cpu > free[0] or mem > free[1] or pods > free[2]:
                del left[g]  # it will not fit later either: room only shrinks
                continue
            score = (
                cpu * free[0] * norms[0] * norms[0]
                + mem * free[1] * norms[1] * norms[1]
                + pods * free[2] * norms[2] * norms[2]
            )
            if score > best_score:
                best, best_score = g, score
        if best < 0:
            break
        cpu, mem, pods = shapes[best]
        free[0] -= cpu
        free[1] -= mem
        free[2] -= pods
        taken[best] = taken.get(best, 0) + 1
        left[best] -= 1
        if not left[best]:
            del left[best]
    fill = sorted(taken.items())
    return fill, (cap[0] - free[0], cap[1] - free[1], cap[2] - free[2])


# ---- improvement pass ---------------------------------------------------------------------


def _improve(bins: list[Bin], types: Sequence[BinType], budget: Budget) -> None:
    """Cheaper type per node, then merge pairs of the emptiest nodes while that saves money."""
    by_price = sorted(types, key=lambda t: t.price)
    cache: dict[tuple[int, int, int, int], list[BinType]] = {}
    for b in bins:
        key = (b.type.ref, b.used[0], b.used[1], b.used[2])
        if key not in cache:
            cache[key] = _cheaper_fitting(b.used, by_price, b.type.price)
        for better in cache[key]:
            if budget.allows_swap(b.type, better):
                budget.give_back(b.type)
                budget.take(better)
                b.type = better
                break
    merged = True
    while merged and len(bins) > 1:
        merged = False
        # The emptiest nodes (by share of their dominant dimension) are the merge candidates.
        order = sorted(range(len(bins)), key=lambda i: _utilisation(bins[i]))[:_MERGE_CANDIDATES]
        for x in range(len(order)):
            a = bins[order[x]]
            for y in range(x + 1, len(order)):
                b = bins[order[y]]
                used = [a.used[d] + b.used[d] for d in range(3)]
                together = a.type.price + b.type.price - 1e-12
                for target in _cheaper_fitting(used, by_price, together):
                    budget.give_back(a.type)
                    budget.give_back(b.type)
                    if budget.copies(target) < 1:
                        budget.take(a.type)
                        budget.take(b.type)
                        continue
                    budget.take(target)
                    bins[order[x]] = Bin(target, a.items + b.items, used)
                    del bins[order[y]]
                    merged = True
                    break
                if merged:
                    break
            if merged:
                break


def _repack_emptiest(
    bins: list[Bin], items: Sequence[Vector], types: Sequence[BinType], budget: Budget
) -> None:
    """Ruin and recreate: the pods of the k emptiest nodes, packed afresh together, replace
    those nodes when that is cheaper (and affordable)."""
    for k in _REPACK_SIZES:
        if k > len(bins):
            break
        order = sorted(range(len(bins)), key=lambda i: (_utilisation(bins[i]), i))[:k]
        _repack(bins, order, items, types, budget)


def _use_idle_machines(
    bins: list[Bin], items: Sequence[Vector], types: Sequence[BinType], budget: Budget
) -> None:
    """Machines left idle while the plan pays for nodes without a count (the pattern LP
    prices every type as unbounded, so its plan may leave some): the pods of those nodes, the
    emptiest k and then all of them, packed afresh with the idle machines in reach; kept when
    cheaper."""
    for k in (*_REPACK_SIZES, None):
        if not any((budget.left(t) or 0) > 0 for t in types):
            return
        unbounded = [i for i, b in enumerate(bins) if b.type.available is None]
        if not unbounded:
            return
        order = sorted(unbounded, key=lambda i: (_utilisation(bins[i]), i))
        _repack(bins, order if k is None else order[:k], items, types, budget)


def _repack(
    bins: list[Bin],
    order: Sequence[int],
    items: Sequence[Vector],
    types: Sequence[BinType],
    budget: Budget,
) -> None:
    """The pods of the nodes at `order`, packed afresh together (greedy, then the improvement
    pass), replace those nodes when that is cheaper and affordable."""
    old = [bins[i] for i in order]
    pool = [i for b in old for i in b.items]
    # The machines the old nodes hold are the new ones' to use.
    trial = budget.inventory()
    for b in old:
        trial.give_back(b.type)
    sub, held = _pack_greedy(_group([items[i] for i in pool], types), types, trial)
    if held:
        return  # the stock left cannot hold them all another way
    _improve(sub, types, trial)
    new = [Bin(b.type, [pool[i] for i in b.items], b.used) for b in sub]
    if _cost(new) < _cost(old) - 1e-12 and _affordable(new, old, budget):
        _swap(old, new, budget)
        keep = set(order)
        bins[:] = [b for i, b in enumerate(bins) if i not in keep] + new


def _utilisation(b: Bin) -> float:
    cap = b.type.cap
    return max(b.used[d] / cap[d] for d in range(3) if cap[d] > 0)


# ---- helpers ------------------------------------------------------------------------------


def undominated(types: Sequence[BinType]) -> list[BinType]:
    """Drop a type when another is no dearer and at least as big in every dimension, and
    never runs out (a finite one may be used up: what it dominates is then the next best)."""
    ordered = sorted(types, key=lambda t: (t.price, -t.cap[0], -t.cap[1], -t.cap[2], t.ref))
    kept: list[BinType] = []
    for t in ordered:
        if not any(
            k.available is None
            and k.price <= t.price
            and k.cap[0] >= t.cap[0]
            and k.cap[1] >= t.cap[1]
            and k.cap[2] >= t.cap[2]
            and k.raw_cpu_m <= t.raw_cpu_m
            and k.raw_memory <= t.raw_memory
            for k in kept
        ):
            kept.append(t)
    return kept


def _group(
    items: Sequence[Vector], types: Sequence[BinType], *, order_by_shape: bool = False
) -> _Groups:
    index: dict[Vector, int] = {}
    shapes: list[Vector] = []
    members: list[list[int]] = []
    for i, shape in enumerate(items):
        g = index.get(shape)
        if g is None:
            g = index[shape] = len(shapes)
            shapes.append(shape)
            members.append([])
        members[g].append(i)
    # Largest first, by the share of the biggest node type each dimension takes.
    top = [max((t.cap[d] for t in types), default=1) or 1 for d in range(3)]
    if order_by_shape:  # the plain (cpu, memory, pods) descending order of the seed
        order = sorted(range(len(shapes)), key=lambda g: shapes[g], reverse=True)
    else:
        order = sorted(
            range(len(shapes)),
            key=lambda g: (-max(shapes[g][d] / top[d] for d in range(3)), shapes[g]),
        )
    groups = _Groups(
        shapes=[shapes[g] for g in order],
        # Reversed so that _take pops from the end and hands out items in input order.
        members=[members[g][::-1] for g in order],
    )
    groups.counts = [len(m) for m in groups.members]
    n = len(order)
    for d in (0, 1):
        groups.orders.append(
            sorted(range(n), key=lambda g: (-groups.shapes[g][d], groups.shapes[g]))
        )
    return groups


def _take(groups: _Groups, g: int, n: int) -> list[int]:
    members = groups.members[g]
    taken = members[-n:][::-1] if n else []
    del members[len(members) - n :]
    groups.counts[g] -= n
    return taken


def _cost(bins: Sequence[Bin]) -> float:
    return sum(b.type.price for b in bins)


def _affordable(new: Sequence[Bin], old: Sequence[Bin], budget: Budget) -> bool:
    """Whether swapping `old` (already taken from the budget) for `new` stays within it."""
    if budget.nodes is not None and len(new) - len(old) > budget.nodes:
        return False
    wanted = Counter(b.type.ref for b in new)
    wanted.subtract(b.type.ref for b in old)
    finite = {b.type.ref: b.type for b in new if b.type.available is not None}
    for ref, t in finite.items():
        left = budget.left(t)
        if left is not None and wanted[ref] > left:
            return False
    cpu = sum(b.type.raw_cpu_m for b in new) - sum(b.type.raw_cpu_m for b in old)
    mem = sum(b.type.raw_memory for b in new) - sum(b.type.raw_memory for b in old)
    return (budget.cpu_m is None or cpu <= budget.cpu_m) and (
        budget.memory is None or mem <= budget.memory
    )


def _fits(shape: Vector, cap: Vector) -> bool:
    return shape[0] <= cap[0] and shape[1] <= cap[1] and shape[2] <= cap[2]


def _scaled(v: Vector) -> list[float]:
    return [v[0] / _SCALE[0], v[1] / _SCALE[1], v[2] / _SCALE[2]]
