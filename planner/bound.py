"""A tight lower bound on a packing's cost, for `cloudburst plan`, tests and the cost benchmark
(needs highspy, the HiGHS solver's own Python package, from the dev extra).

The LP relaxation of the assignment formulation, strengthened so that it is not fooled by
pods that cannot really be split:

    minimise   Σ_t price_t · y_t                        (y_t: nodes of type t, fractional)
    subject to Σ_t x_gt = n_g                            (x_gt: pods of shape g on type t)
               Σ_g size_gd · x_gt ≤ cap_td · y_t         (each dimension d)
               Σ_{g: size_gd > cap_td/(k+1)} x_gt ≤ k·y_t   for k = 1, 2, 3
               x_gt = 0 when one pod of shape g does not fit type t (or may not use it)

The third family is valid for every integral packing (k+1 pods each bigger than
1/(k+1) of a dimension cannot share a node), so the optimum is still a lower bound on any
plan, but much closer to it than the plain fractional cover (lp.py), which lets a pod of
1.2 cores fill two nodes of 0.6. Dominated types (another no dearer and no smaller) are
dropped first: any plan can use the dominating type instead.

HiGHS is given the model as scipy's `linprog(method="highs")` gives it (the same rows and
columns in the same order, dual simplex), without importing scipy.optimize, which costs a
command several times what the solve does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import highspy
from highspy._core import _Highs

from planner.packing import BinType, Vector, undominated


def assignment_lower_bound(
    items: Sequence[Vector],
    types: Sequence[BinType],
    eligible: Sequence[Sequence[int]] | None = None,
) -> float:
    """The bound for packing `items` into any number of nodes of `types`.

    `eligible[i]` (optional) lists the `ref`s of the types item i may use.
    """
    if not items:
        return 0.0
    refs = None if eligible is None else [frozenset(e) for e in eligible]
    groups = Counter((items[i], refs[i] if refs else None) for i in range(len(items)))
    kept = undominated(types) if eligible is None else list(types)
    scale = (1000.0, float(2**30), 1.0)
    pairs: list[tuple[int, int]] = []  # (group, type) for x variables
    group_list = list(groups.items())
    for g, ((shape, allowed), _) in enumerate(group_list):
        for t, bt in enumerate(kept):
            if allowed is not None and bt.ref not in allowed:
                continue
            if all(shape[d] <= bt.cap[d] for d in range(3)):
                pairs.append((g, t))
    n_x = len(pairs)
    y0 = n_x  # y_t is variable y0 + t
    cost = [0.0] * n_x + [bt.price for bt in kept]
    entries: list[tuple[int, int, float]] = []  # (column, row, value)
    row = 0
    by_type: dict[int, list[int]] = {}
    for v, (_, t) in enumerate(pairs):
        by_type.setdefault(t, []).append(v)
    for t, bt in enumerate(kept):
        variables = by_type.get(t, [])
        for d in range(3):
            for v in variables:
                entries.append((v, row, group_list[pairs[v][0]][0][0][d] / scale[d]))
            entries.append((y0 + t, row, -bt.cap[d] / scale[d]))
            row += 1
            if d == 2:
                continue
            for k in (1, 2, 3):
                big = [
                    v for v in variables if group_list[pairs[v][0]][0][0][d] * (k + 1) > bt.cap[d]
                ]
                if not big:
                    continue
                for v in big:
                    entries.append((v, row, 1.0))
                entries.append((y0 + t, row, -float(k)))
                row += 1
    n_ub = row
    for v, (g, _) in enumerate(pairs):  # Σ_t x_gt = n_g, after the ≤ rows
        entries.append((v, n_ub + g, 1.0))
    counts = [float(n) for _, n in group_list]
    return _solve(
        cost,
        entries,
        row_lower=[-highspy.kHighsInf] * n_ub + counts,
        row_upper=[0.0] * n_ub + counts,
    )


def _solve(
    cost: list[float],
    entries: list[tuple[int, int, float]],
    row_lower: list[float],
    row_upper: list[float],
) -> float:
    """min cost·x subject to row_lower ≤ A·x ≤ row_upper, x ≥ 0 (A given by its entries)."""
    n_cols, n_rows = len(cost), len(row_lower)
    entries.sort()
    start = [0] * (n_cols + 1)
    for column, _, _ in entries:
        start[column + 1] += 1
    for column in range(n_cols):
        start[column + 1] += start[column]
    lp = highspy.HighsLp()
    lp.num_col_ = n_cols
    lp.num_row_ = n_rows
    lp.col_cost_ = cost
    lp.col_lower_ = [0.0] * n_cols
    lp.col_upper_ = [highspy.kHighsInf] * n_cols
    lp.row_lower_ = row_lower
    lp.row_upper_ = row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_col_ = n_cols
    lp.a_matrix_.num_row_ = n_rows
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = [r for _, r, _ in entries]
    lp.a_matrix_.value_ = [value for _, _, value in entries]
    # `highspy.Highs` writes HiGHS's banner to stdout as it is made, before an option can
    # turn it off (and `cloudburst plan -o json` prints to stdout); the solver class under
    # it, which highspy exports beside it, is made silent.
    solver = _Highs()
    solver.setOptionValue("output_flag", False)
    solver.setOptionValue("simplex_strategy", highspy.simplex_constants.kSimplexStrategyDual)
    solver.passModel(lp)
    solver.run()
    status = solver.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise ValueError(f"lower-bound LP failed: {solver.modelStatusToString(status)}")
    return float(solver.getInfo().objective_function_value)
