"""Column generation for packings with few distinct pod shapes (pure Python, deterministic).

The pattern LP (Gilmore-Gomory): a *pattern* is one node type with a count of pods of each
shape that fit it together;

    minimise   Σ_p price_p · λ_p
    subject to Σ_p count_gp · λ_p ≥ remaining_g     for each shape g
               λ ≥ 0

is far tighter than a per-dimension cover: its optimum is usually within a node or two of the
best integral plan. Patterns are generated as needed: the LP's dual price per shape says what
a pod of that shape is worth, and a small branch and bound finds, per node type, the pattern
worth most (a bounded knapsack in cpu, memory and pods); one worth more than its node's price
enters the LP. The integral plan is then read off the LP: whole λ's are taken as they are, and
the rest by diving (round up the λ whose rounding costs least — price x (1 - λ) — re-solve,
repeat).

The LP is a revised simplex over a dense basis inverse with one row per shape: fine for the few
dozen shapes Deployments produce, too slow for hundreds (packing.py does not call this then).
Every limit here is a count (simplex pivots, branch-and-bound nodes, pricing rounds, dives,
rough operation totals), never a clock, so the same input always gives the same plan. What the
limits leave undone is returned as residual demand for the caller's greedy packer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner.shapes import BinType, Vector

Column = tuple[tuple[int, int], ...]  # (shape, count) pairs, shapes ascending
Pattern = dict[int, int]  # shape -> count

_COST_TOL = 1e-9  # relative: a column enters when it is this much cheaper than its worth
_FEAS_TOL = 1e-9  # a basic value this far below 0 is still feasible
_PIVOT_TOL = 1e-9  # smaller pivot elements are treated as 0
_UNLIMITED = 1 << 62
_DIVE_MIN = 1e-6  # a smaller λ is rounding noise, not a column in use
_REFACTOR_EVERY = 100  # pivots between re-inversions of the basis
_PRICING_SLICE = 128  # columns priced per look in the primal simplex, at least
_SEARCH_SETUP = 30  # a pattern search's fixed cost (the mix scan), in nodes
# Surrogate weights (share of cpu vs memory) tried for the knapsack bound; the tightest wins.
_SURROGATE_MIX = (0.0, 0.25, 0.5, 0.75, 1.0)
_MIX_STEPS = 6  # golden-section steps refining the best mix
_POLISH_PASSES = 8  # drop-and-refill moves on a pattern whose search ran out
_POD_WEIGHT = 1e-3  # keeps pods without cpu or memory requests from weighing nothing


def copies_that_fit(shape: Vector, room: Vector, most: int) -> int:
    """How many pods of `shape` (at most `most`) fit in `room`, dimension by dimension."""
    for need, free in zip(shape, room, strict=True):
        if need:
            most = min(most, free // need)
    return most


@dataclass(frozen=True, slots=True)
class Limits:
    """How much work one call may do; counts, so that plans are reproducible."""

    pricing_rounds: int = 60  # column generation rounds before the first rounding
    columns_per_round: int = 4  # patterns added per round (from different node types)
    searches_per_round: int = 8  # node types searched for a pattern per round, at most
    knapsack_nodes: int = 300  # branch-and-bound nodes per pattern search
    dives: int = 200  # single nodes fixed while rounding
    dive_pricing_rounds: int = 1  # pricing rounds after each dive
    pivots: int = 400  # simplex pivots per solve
    # For the whole call, what bounds its time whatever the input (the residual is then left
    # to the greedy packer), in rough operation counts: a pivot costs shapes² plus the
    # columns it prices, a pattern search (its nodes + a setup) times the shapes it weighs.
    simplex_work: int = 3_000_000
    search_work: int = 3_000_000


# ---- the master LP ------------------------------------------------------------------------


class _MasterLP:
    """min cost·λ s.t. A·λ ≥ demand, λ ≥ 0 over a growing set of columns: revised simplex with
    a dense basis inverse (one row per shape, so it stays small). Primal simplex after columns
    are added (the basis stays feasible), dual simplex after the demand drops (it stays
    optimal for the costs). A negative demand is allowed: it means "none"."""

    def __init__(self, demand: Sequence[float], diagonal: Sequence[tuple[float, float]]) -> None:
        """`diagonal[g]` = (count, price): a starting column that covers shape g alone."""
        m = self.m = len(demand)
        self.demand = [float(d) for d in demand]
        self.columns: list[Column] = []
        self.costs: list[float] = []
        self.in_basis: list[bool] = []
        self.index: dict[Column, int] = {}
        for g, (count, price) in enumerate(diagonal):
            self.add(((g, int(count)),), price)
        # Variable ids: j >= 0 a column, -(g + 1) the surplus of shape g's row.
        self.basis = list(range(m))
        self.surplus_in_basis = [False] * m
        for j in range(m):
            self.in_basis[j] = True
        self.basic_costs = [price for _, price in diagonal]
        self.inverse = [[0.0] * m for _ in range(m)]
        for g, (count, _) in enumerate(diagonal):
            self.inverse[g][g] = 1.0 / count
        self.values = [self.demand[g] / diagonal[g][0] for g in range(m)]
        self.pi = [price / count for count, price in diagonal]  # the duals, kept up to date
        self._since_refactor = 0
        self.work = 0  # rough operations so far, all solves
        self._scan_from = 0  # partial pricing resumes here

    def add(self, column: Column, cost: float) -> bool:
        """Adds a column (once per column and cost); returns whether it was new."""
        known = self.index.get(column)
        if known is not None and self.costs[known] <= cost:
            return False
        self.index[column] = len(self.columns)
        self.columns.append(column)
        self.costs.append(cost)
        self.in_basis.append(False)
        return True

    def cost(self) -> float:
        return sum(c * x for c, x in zip(self.basic_costs, self.values, strict=True))

    def solution(self) -> list[tuple[int, float]]:
        """(column, λ) for the columns in use, largest λ first."""
        used = [(v, x) for v, x in zip(self.basis, self.values, strict=True) if v >= 0 and x > 0]
        return sorted(used, key=lambda vx: (-vx[1], vx[0]))

    def reduce_demand(self, column: Column, copies: int) -> None:
        """The demand left after `copies` nodes of this column are taken out of the plan."""
        for g, a in column:
            self.demand[g] -= a * copies
        self.values = self._times_inverse(self.demand)

    def primal(self, max_pivots: int, max_work: float = math.inf) -> bool:
        """Optimise after columns were added; False if a limit ran out first."""
        costs, in_basis, columns = self.costs, self.in_basis, self.columns
        for _ in range(max_pivots):
            if self.work >= max_work:
                return False
            pi = self.pi
            enter, best = None, -_COST_TOL
            # Partial pricing: the best column of the next slice of the pool that has an
            # improving one (a full cycle without one means optimal).
            total = len(columns)
            chunk = max(_PRICING_SLICE, total // 4)
            start = self._scan_from % total
            for k in range(total):
                j = start + k
                if j >= total:
                    j -= total
                if not in_basis[j]:
                    reduced = 1.0 - sum([pi[g] * a for g, a in columns[j]]) / costs[j]
                    if reduced < best:
                        enter, best = j, reduced
                if enter is not None and (k + 1) % chunk == 0:
                    self._scan_from = j + 1
                    break
            if enter is None:
                for g in range(self.m):
                    if pi[g] < -_COST_TOL and not self.surplus_in_basis[g]:
                        enter = -(g + 1)
                        break
            if enter is None:
                return True
            alpha = self._ftran(enter)
            leave, ratio, size = -1, math.inf, 0.0
            for k, a in enumerate(alpha):
                if a > _PIVOT_TOL:
                    r = max(self.values[k], 0.0) / a
                    if r < ratio - 1e-12 or (r <= ratio + 1e-12 and a > size):
                        leave, ratio, size = k, r, a
            if leave < 0:
                return False  # unbounded: cannot happen with non-negative costs
            self._pivot(leave, enter, alpha)
        return False

    def dual(self, max_pivots: int, max_work: float = math.inf) -> bool:
        """Restore feasibility after the demand dropped; False if that did not work out."""
        costs, in_basis = self.costs, self.in_basis
        for _ in range(max_pivots):
            if self.work >= max_work:
                return False
            leave, worst = -1, -_FEAS_TOL
            for k, x in enumerate(self.values):
                if x < worst:
                    leave, worst = k, x
            if leave < 0:
                return True
            rho = self.inverse[leave]
            pi = self.pi
            enter, ratio, size = None, math.inf, 0.0
            for j, column in enumerate(self.columns):
                if in_basis[j]:
                    continue
                a_r = sum([rho[g] * a for g, a in column])
                if a_r < -_PIVOT_TOL:
                    reduced = costs[j] - sum([pi[g] * a for g, a in column])
                    r = max(reduced, 0.0) / -a_r
                    if r < ratio - 1e-15 or (r <= ratio + 1e-15 and -a_r > size):
                        enter, ratio, size = j, r, -a_r
            for g in range(self.m):
                if rho[g] > _PIVOT_TOL and not self.surplus_in_basis[g]:
                    r = max(pi[g], 0.0) / rho[g]
                    if r < ratio - 1e-15 or (r <= ratio + 1e-15 and rho[g] > size):
                        enter, ratio, size = -(g + 1), r, rho[g]
            if enter is None:
                return False
            self._pivot(leave, enter, self._ftran(enter))
        return False

    # -- internals --

    def _ftran(self, var: int) -> list[float]:
        """B⁻¹ times the variable's column."""
        if var < 0:
            g = -var - 1
            return [-row[g] for row in self.inverse]
        column = self.columns[var]
        return [sum([row[g] * a for g, a in column]) for row in self.inverse]

    def _times_inverse(self, v: Sequence[float]) -> list[float]:
        return [sum([r * x for r, x in zip(row, v, strict=True)]) for row in self.inverse]

    def _pivot(self, leave: int, enter: int, alpha: list[float]) -> None:
        p = alpha[leave]
        enter_cost = self.costs[enter] if enter >= 0 else 0.0
        reduced = enter_cost - sum([c * a for c, a in zip(self.basic_costs, alpha, strict=True)])
        pivot_row = [v / p for v in self.inverse[leave]]
        self.inverse[leave] = pivot_row
        theta = self.values[leave] / p
        for k, a in enumerate(alpha):
            if k != leave and a != 0.0:
                row = self.inverse[k]
                self.inverse[k] = [x - a * y for x, y in zip(row, pivot_row, strict=True)]
                self.values[k] -= theta * a
        self.values[leave] = theta
        self.pi = [x + reduced * y for x, y in zip(self.pi, pivot_row, strict=True)]
        self._set_basic(leave, enter, enter_cost)
        self.work += self.m * self.m + len(self.columns)
        self._since_refactor += 1
        if self._since_refactor >= _REFACTOR_EVERY:
            self._refactor()

    def _set_basic(self, row: int, var: int, cost: float) -> None:
        old = self.basis[row]
        if old >= 0:
            self.in_basis[old] = False
        else:
            self.surplus_in_basis[-old - 1] = False
        if var >= 0:
            self.in_basis[var] = True
        else:
            self.surplus_in_basis[-var - 1] = True
        self.basis[row] = var
        self.basic_costs[row] = cost

    def _refactor(self) -> None:
        """Re-invert the basis from scratch (Gauss-Jordan, partial pivoting): stops rounding
        errors of the product-form updates from piling up."""
        m = self.m
        matrix = [[0.0] * m + [1.0 if i == k else 0.0 for k in range(m)] for i in range(m)]
        for k, var in enumerate(self.basis):
            if var < 0:
                matrix[-var - 1][k] = -1.0
            else:
                for g, a in self.columns[var]:
                    matrix[g][k] = float(a)
        for c in range(m):
            pivot = max(range(c, m), key=lambda r: abs(matrix[r][c]))
            if abs(matrix[pivot][c]) < 1e-12:
                return  # keep the updated inverse rather than fail
            matrix[c], matrix[pivot] = matrix[pivot], matrix[c]
            p = matrix[c][c]
            row = matrix[c] = [v / p for v in matrix[c]]
            for r in range(m):
                if r != c:
                    f = matrix[r][c]
                    if f:
                        matrix[r] = [x - f * y for x, y in zip(matrix[r], row, strict=True)]
        self.inverse = [row[m:] for row in matrix]
        self.values = self._times_inverse(self.demand)
        self.pi = [0.0] * m
        for k, cost in enumerate(self.basic_costs):
            if cost:
                self.pi = [x + cost * y for x, y in zip(self.pi, self.inverse[k], strict=True)]
        self._since_refactor = 0


# ---- pricing: the pattern worth most on one node type --------------------------------------


def best_pattern(
    worth: Sequence[float],
    shapes: Sequence[Vector],
    available: Sequence[int],
    cap: Vector,
    node_limit: int,
) -> tuple[float, Pattern]:
    """The pattern worth most: max Σ worth_g · n_g over patterns n that fit `cap` with
    n_g ≤ available_g, and its worth (see _search_pattern)."""
    value, pattern, _ = _search_pattern(worth, shapes, available, cap, node_limit)
    return value, pattern


def _search_pattern(
    worth: Sequence[float],
    shapes: Sequence[Vector],
    available: Sequence[int],
    cap: Vector,
    node_limit: int,
) -> tuple[float, Pattern, int]:
    """best_pattern's answer and the branch-and-bound nodes it took.

    Branch and bound with a surrogate (a cpu/memory mix) fractional bound, started from the
    best greedy fill and polished by drop-and-refill moves when `node_limit` runs out (then
    the result is good, not proven best). Exact when the search finishes."""
    items = [
        (g, w, _copies(shapes[g], cap, available[g]))
        for g, w in enumerate(worth)
        if w > 0 and available[g] > 0
    ]
    items = [item for item in items if item[2] > 0]
    if not items:
        return 0.0, {}, 0
    scale = [float(max(c, 1)) for c in cap]
    n = len(items)
    best_value = 0.0
    best_counts: dict[int, int] = {}  # item -> count

    def weights(mix: float) -> list[float]:
        return [
            mix * shapes[g][0] / scale[0]
            + (1.0 - mix) * shapes[g][1] / scale[1]
            + _POD_WEIGHT * shapes[g][2] / scale[2]
            for g, _, _ in items
        ]

    def surrogate_bound(mix: float, fill: bool = False) -> float:
        """The fractional bound at this mix; with `fill`, also the greedy fill in its order
        (all three dimensions respected) as a starting incumbent."""
        nonlocal best_value, best_counts
        ws = weights(mix)
        order = sorted(range(n), key=lambda i: -items[i][1] / ws[i])
        if fill:
            value, counts = _greedy_fill(order, items, shapes, cap)
            if value > best_value:
                best_value, best_counts = value, counts
        room = 1.0 + _POD_WEIGHT
        bound = 0.0
        for i in order:
            _, w, most = items[i]
            if most * ws[i] <= room:
                bound += w * most
                room -= most * ws[i]
            else:
                return bound + w * room / ws[i]
        return bound

    # The tightest mix: a coarse scan, then golden-section search around the best point
    # (the bound is quasi-convex in the mix).
    best_bound, mix = min((surrogate_bound(m, fill=True), m) for m in _SURROGATE_MIX)
    lo, hi = max(0.0, mix - 0.25), min(1.0, mix + 0.25)
    for _ in range(_MIX_STEPS):
        a, b = lo + 0.382 * (hi - lo), lo + 0.618 * (hi - lo)
        if surrogate_bound(a) <= surrogate_bound(b):
            hi = b
        else:
            lo = a
    if surrogate_bound((lo + hi) / 2) < best_bound:
        mix = (lo + hi) / 2
    ws = weights(mix)
    order = sorted(range(n), key=lambda i: (-items[i][1] / ws[i], items[i][0]))
    size = [shapes[items[i][0]] for i in order]
    value = [items[i][1] for i in order]
    most = [items[i][2] for i in order]
    weight = [ws[i] for i in order]
    cap_cpu, cap_mem, cap_pods = scale
    counts = [0] * n
    found: list[int] | None = None
    nodes = 0

    def bound(i: int, cpu: int, mem: int, pods: int) -> float:
        room = mix * cpu / cap_cpu + (1.0 - mix) * mem / cap_mem + _POD_WEIGHT * pods / cap_pods
        total = 0.0
        for j in range(i, n):
            s = size[j]
            if s[0] > cpu or s[1] > mem or s[2] > pods:
                continue
            wj = weight[j]
            if most[j] * wj <= room:
                total += value[j] * most[j]
                room -= most[j] * wj
            else:
                return total + value[j] * room / wj
        return total

    def search(i: int, cpu: int, mem: int, pods: int, got: float) -> None:
        nonlocal best_value, found, nodes
        nodes += 1
        if got > best_value * (1 + 1e-12):
            best_value, found = got, counts[:]
        if i == n or nodes > node_limit:
            return
        if got + bound(i, cpu, mem, pods) <= best_value * (1 + 1e-9):
            return
        c, m, p = size[i]
        k = copies_that_fit(size[i], (cpu, mem, pods), most[i])
        for take in range(k, -1, -1):
            counts[i] = take
            search(i + 1, cpu - c * take, mem - m * take, pods - p * take, got + value[i] * take)
            if nodes > node_limit:
                break
        counts[i] = 0

    search(0, cap[0], cap[1], cap[2], 0.0)
    if found is not None:
        best_counts = {order[j]: k for j, k in enumerate(found) if k}
    if nodes > node_limit:
        best_value, best_counts = _drop_and_refill(best_value, best_counts, items, shapes, cap)
    return best_value, {items[i][0]: k for i, k in sorted(best_counts.items())}, nodes


def _greedy_fill(
    order: Sequence[int],
    items: Sequence[tuple[int, float, int]],
    shapes: Sequence[Vector],
    cap: Vector,
) -> tuple[float, dict[int, int]]:
    """As many of each item as still fit, in this order."""
    cpu, mem, pods = cap
    value = 0.0
    counts: dict[int, int] = {}
    for i in order:
        g, w, k = items[i]
        c, m, p = shapes[g]
        k = copies_that_fit(shapes[g], (cpu, mem, pods), k)
        if k > 0:
            counts[i] = k
            value += w * k
            cpu -= c * k
            mem -= m * k
            pods -= p * k
    return value, counts


def _drop_and_refill(
    value: float,
    counts: dict[int, int],
    items: Sequence[tuple[int, float, int]],
    shapes: Sequence[Vector],
    cap: Vector,
) -> tuple[float, dict[int, int]]:
    """Local search on a pattern: take one pod out, refill the room by worth, keep it if the
    pattern is worth more; a few passes at most."""
    by_worth = sorted(range(len(items)), key=lambda i: (-items[i][1], i))
    for _ in range(_POLISH_PASSES):
        improved = False
        free = list(cap)
        for i, k in counts.items():
            shape = shapes[items[i][0]]
            for d in range(3):
                free[d] -= shape[d] * k
        for out in sorted(counts):
            shape = shapes[items[out][0]]
            room = [free[d] + shape[d] for d in range(3)]
            gain = -items[out][1]
            added: dict[int, int] = {}
            for i in by_worth:
                if i == out:
                    continue
                g, w, most = items[i]
                s = shapes[g]
                k = most - counts.get(i, 0)
                for d in range(3):
                    if s[d]:
                        k = min(k, room[d] // s[d])
                if k > 0:
                    added[i] = k
                    gain += w * k
                    for d in range(3):
                        room[d] -= s[d] * k
            if gain > value * 1e-9:
                counts = dict(counts)
                counts[out] -= 1
                if not counts[out]:
                    del counts[out]
                for i, k in added.items():
                    counts[i] = counts.get(i, 0) + k
                value += gain
                improved = True
                break
        if not improved:
            break
    return value, counts


# ---- column generation and rounding --------------------------------------------------------


@dataclass(slots=True)
class PatternPlan:
    nodes: list[tuple[BinType, Pattern]]  # each node's type and its pods per shape
    residual: list[int]  # pods per shape the limits left unplaced
    lp_cost: float  # the first pattern LP's optimum (a lower bound when pricing was exact)
    # The nodes (a prefix of `nodes`) from the first LP's whole λ's: with the rest packed
    # greedily they are a second candidate, which now and then beats the dive.
    whole_count: int = 0


def plan_patterns(
    shapes: Sequence[Vector],
    counts: Sequence[int],
    types: Sequence[BinType],
    seeds: Sequence[Pattern] = (),
    limits: Limits = Limits(),
    stock: dict[int, int] | None = None,
) -> PatternPlan | None:
    """An integral plan from the pattern LP; None if some shape fits no type.

    `seeds` are patterns known to be good (a greedy plan's nodes): they start the LP close to
    its optimum. Each node gets the cheapest type its pods fit that has machines left: a type
    with an `available` count makes at most that many nodes, or what `stock` (type ref ->
    nodes left, as the packer's budget keeps it) says; the LP prices every type as if it
    never ran out. When no type with machines left holds a node's pods, rounding stops and
    the rest is residual, for the caller's packer."""
    left = dict(stock or {})
    by_price = sorted(types, key=lambda t: (t.price, t.ref))
    diagonal: list[tuple[float, float]] = []
    for g, shape in enumerate(shapes):
        # The type that holds a pod of this shape for the least money.
        options = [
            (t.price / k, k, t.price)
            for t in by_price
            if (k := _copies(shape, t.cap, max(counts[g], 1))) > 0
        ]
        if not options:
            return None
        _, k, price = min(options)
        diagonal.append((float(k), price))
    lp = _MasterLP([float(c) for c in counts], diagonal)
    fit = [[_copies(shape, t.cap, _UNLIMITED) for shape in shapes] for t in by_price]
    work = [0]
    for pattern in seeds:
        _add_pattern(lp, pattern, shapes, by_price)
    remaining = list(counts)
    _generate(lp, shapes, remaining, by_price, fit, limits, limits.pricing_rounds, work)
    lp_cost = lp.cost()
    nodes: list[tuple[BinType, Pattern]] = []

    def take(j: int, copies: int) -> bool:
        """Takes `copies` nodes of column j; False when no type with machines left holds
        its pods."""
        column = lp.columns[j]
        for _ in range(copies):
            pattern = {g: min(a, remaining[g]) for g, a in column if remaining[g] > 0}
            if not pattern:
                break
            chosen = _cheapest_fitting(_used(pattern, shapes), by_price, left)
            if chosen is None:
                return False
            if chosen.available is not None:
                left[chosen.ref] = left.get(chosen.ref, chosen.available) - 1
            for g, a in pattern.items():
                remaining[g] -= a
            nodes.append((chosen, pattern))
        # Uncapped, so that the LP's demand goes negative where a pattern over-covers: taking
        # whole λ's then leaves the basis feasible (the rest of each λ still covers the rest).
        lp.reduce_demand(column, copies)
        return True

    dives = 0
    whole_count: int | None = None
    while any(remaining) and dives < limits.dives:
        solution = [
            (j, x)
            for j, x in lp.solution()
            if x > _DIVE_MIN and any(remaining[g] for g, _ in lp.columns[j])
        ]
        if not solution:
            break
        whole = [(j, int(x + _FEAS_TOL)) for j, x in solution if x >= 1 - _FEAS_TOL]
        if whole:
            if not all([take(j, copies) for j, copies in whole]):
                break
        else:
            if whole_count is None:
                whole_count = len(nodes)
            # Round up the column whose rounding costs least: a big node at λ 0.7 wastes
            # more than a small one at λ 0.3.
            dives += 1
            j = min(solution, key=lambda jx: (lp.costs[jx[0]] * (1 - jx[1]), jx[0]))[0]
            if not take(j, 1) or not lp.dual(limits.pivots, limits.simplex_work):
                break
        _generate(lp, shapes, remaining, by_price, fit, limits, limits.dive_pricing_rounds, work)
    return PatternPlan(
        nodes, remaining, lp_cost, len(nodes) if whole_count is None else whole_count
    )


def _generate(
    lp: _MasterLP,
    shapes: Sequence[Vector],
    remaining: Sequence[int],
    types: Sequence[BinType],
    fit: Sequence[Sequence[int]],
    limits: Limits,
    rounds: int,
    work: list[int],
) -> None:
    """Re-optimise the LP, adding the patterns its duals say are worth more than they cost.

    `fit[t][g]`: how many pods of shape g a node of type t holds, alone. `work[0]`: the
    search work spent so far for this plan."""
    _optimise(lp, limits)
    for _ in range(rounds):
        pi = lp.pi
        wanted = [g for g, w in enumerate(pi) if w > 0 and remaining[g] > 0]
        # Ratio orders per dimension are the same for every type: sorted once per round.
        by_dim = [_by_ratio(wanted, pi, shapes, d) for d in (0, 1)]
        # The most promising types first: an upper bound on what a node of each is worth.
        promise = []
        for t, bin_type in enumerate(types):
            ceiling = _worth_ceiling(pi, shapes, remaining, bin_type.cap, fit[t], by_dim)
            if ceiling > bin_type.price * (1 + _COST_TOL):
                promise.append((-ceiling / bin_type.price, bin_type.price, t))
        promise.sort()
        added = 0
        for _, price, t in promise[: limits.searches_per_round]:
            if work[0] >= limits.search_work:
                break
            available = [min(f, r) for f, r in zip(fit[t], remaining, strict=True)]
            value, pattern, nodes = _search_pattern(
                pi, shapes, available, types[t].cap, limits.knapsack_nodes
            )
            work[0] += (nodes + _SEARCH_SETUP) * len(wanted)
            if value > price * (1 + _COST_TOL) and lp.add(_column(pattern), price):
                added += 1
                if added >= limits.columns_per_round:
                    break
        if not added:
            return
        _optimise(lp, limits)


def _optimise(lp: _MasterLP, limits: Limits) -> bool:
    return lp.primal(limits.pivots, limits.simplex_work)


def _by_ratio(
    wanted: Sequence[int], pi: Sequence[float], shapes: Sequence[Vector], d: int
) -> list[int]:
    """Shapes by worth per unit of dimension d, best first (free ones first of all)."""

    def ratio(g: int) -> float:
        return pi[g] / shapes[g][d] if shapes[g][d] else math.inf

    return sorted(wanted, key=lambda g: (-ratio(g), g))


def _worth_ceiling(
    pi: Sequence[float],
    shapes: Sequence[Vector],
    remaining: Sequence[int],
    cap: Vector,
    fit: Sequence[int],
    by_dim: Sequence[Sequence[int]],
) -> float:
    """Upper bound on a node's worth: the cpu and the memory fractional knapsacks, the lower."""
    ceiling = math.inf
    for d, order in enumerate(by_dim):
        room = cap[d]
        total = 0.0
        for g in order:
            most = min(fit[g], remaining[g])
            if most <= 0:
                continue
            size = shapes[g][d]
            if most * size <= room:
                total += pi[g] * most
                room -= most * size
            else:
                total += pi[g] * room / size
                break
        ceiling = min(ceiling, total)
    return ceiling


def _add_pattern(
    lp: _MasterLP, pattern: Pattern, shapes: Sequence[Vector], by_price: Sequence[BinType]
) -> None:
    if pattern:
        chosen = _cheapest_fitting(_used(pattern, shapes), by_price)
        if chosen is not None:
            lp.add(_column(pattern), chosen.price)


def _column(pattern: Pattern) -> Column:
    return tuple(sorted((g, a) for g, a in pattern.items() if a))


def _used(pattern: Pattern, shapes: Sequence[Vector]) -> Vector:
    cpu = mem = pods = 0
    for g, a in pattern.items():
        s = shapes[g]
        cpu += s[0] * a
        mem += s[1] * a
        pods += s[2] * a
    return cpu, mem, pods


def _cheapest_fitting(
    used: Vector, by_price: Sequence[BinType], left: dict[int, int] | None = None
) -> BinType | None:
    """The cheapest type that holds `used` and, with `left`, has machines left."""
    for t in by_price:
        if used[0] <= t.cap[0] and used[1] <= t.cap[1] and used[2] <= t.cap[2]:
            if left is not None and t.available is not None and left.get(t.ref, t.available) < 1:
                continue
            return t
    return None


def _copies(shape: Vector, cap: Vector, most: int) -> int:
    for d in range(3):
        if shape[d]:
            most = min(most, cap[d] // shape[d])
    return max(most, 0)
