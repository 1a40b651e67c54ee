"""The fractional covering LP behind the packer's choices and the cost lower bound.

    minimise   Σ_t price_t · y_t
    subject to Σ_t cap_t[d] · y_t ≥ demand[d]   for each dimension d (cpu, memory, pods)
               y ≥ 0

It is the LP relaxation of "buy nodes whose capacity covers the demand" (pods may be split
across nodes, nodes bought by fractions), so its optimum is a lower bound on any plan's cost.
With only three dimensions its dual has three variables, so a plain dictionary simplex on
the dual (which starts feasible at u = 0 since prices are ≥ 0) solves it in a handful of
pivots, with no numeric library. The dual values are prices per unit of each dimension: the
packer uses them to score how well a node is filled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

_EPS = 1e-12


class InfeasibleCover(ValueError):
    """Some dimension has demand but no node type provides it."""


def cover_lp(
    demand: Sequence[float], caps: Sequence[Sequence[float]], prices: Sequence[float]
) -> tuple[float, list[float]]:
    """(minimal fractional cost, dual price per unit of each dimension)."""
    n = len(demand)
    m = len(caps)
    # Dual: maximise demand·u subject to caps_t·u ≤ price_t, u ≥ 0. Dictionary form:
    # slack_t = rhs_t - Σ_j table[t][j]·x_j, where x_j are the current non-basic variables.
    rhs = [float(p) for p in prices]
    table = [[float(v) for v in cap] for cap in caps]
    objective = [float(d) for d in demand]
    value = 0.0
    column_var = list(range(n))  # labels: 0..n-1 the duals, n.. the slacks
    row_var = [n + t for t in range(m)]
    for _ in range(50 * (n + m)):
        # Bland's rule (smallest label) never cycles; with three columns it is cheap.
        entering = min(
            (j for j in range(n) if objective[j] > _EPS), key=column_var.__getitem__, default=None
        )
        if entering is None:
            break
        leaving = _ratio_test(table, rhs, row_var, entering)
        if leaving is None:
            raise InfeasibleCover("a dimension with demand has no capacity in any node type")
        value += objective[entering] * _pivot(table, rhs, objective, leaving, entering)
        column_var[entering], row_var[leaving] = row_var[leaving], column_var[entering]
    duals = [0.0] * n
    for t, label in enumerate(row_var):
        if label < n:
            duals[label] = max(0.0, rhs[t])
    return value, duals


def _ratio_test(
    table: list[list[float]], rhs: list[float], row_var: list[int], j: int
) -> int | None:
    best: int | None = None
    best_ratio = math.inf
    for t, row in enumerate(table):
        a = row[j]
        if a > _EPS:
            ratio = rhs[t] / a
            if ratio < best_ratio - 1e-15 or (
                best is not None and ratio <= best_ratio + 1e-15 and row_var[t] < row_var[best]
            ):
                best, best_ratio = t, min(ratio, best_ratio)
    return best


def _pivot(
    table: list[list[float]], rhs: list[float], objective: list[float], r: int, j: int
) -> float:
    """Swap column j's variable with row r's; returns the entering variable's new value."""
    row = table[r]
    p = row[j]
    n = len(row)
    new_row = [v / p for v in row]
    new_row[j] = 1.0 / p
    new_rhs = rhs[r] / p
    table[r] = new_row
    rhs[r] = new_rhs
    for t, other in enumerate(table):
        if t == r:
            continue
        a = other[j]
        if a == 0.0:
            continue
        for k in range(n):
            other[k] -= a * new_row[k]
        other[j] = -a * new_row[j]
        rhs[t] -= a * new_rhs
    d = objective[j]
    for k in range(n):
        objective[k] -= d * new_row[k]
    objective[j] = -d * new_row[j]
    return new_rhs
