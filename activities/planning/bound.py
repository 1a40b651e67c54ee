"""A tight lower bound on a packing's cost, for tests and the cost benchmark (needs scipy).

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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from activities.planning.packing import BinType, Vector, undominated


def assignment_lower_bound(
    items: Sequence[Vector],
    types: Sequence[BinType],
    eligible: Sequence[Sequence[int]] | None = None,
) -> float:
    """The bound for packing `items` into any number of nodes of `types`.

    `eligible[i]` (optional) lists the `ref`s of the types item i may use.
    """
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    if not items:
        return 0.0
    refs = None if eligible is None else [frozenset(e) for e in eligible]
    groups = Counter((items[i], refs[i] if refs else None) for i in range(len(items)))
    kept = undominated(types) if eligible is None else list(types)
    scale = (1000.0, float(2**30), 1.0)
    n_types = len(kept)
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
    cost = np.zeros(n_x + n_types)
    cost[y0:] = [bt.price for bt in kept]
    eq_rows, eq_cols = [], []
    for v, (g, _) in enumerate(pairs):
        eq_rows.append(g)
        eq_cols.append(v)
    a_eq = coo_matrix(
        (np.ones(len(eq_rows)), (eq_rows, eq_cols)), shape=(len(group_list), n_x + n_types)
    )
    b_eq = np.array([float(n) for _, n in group_list])
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    row = 0
    by_type: dict[int, list[int]] = {}
    for v, (_, t) in enumerate(pairs):
        by_type.setdefault(t, []).append(v)
    for t, bt in enumerate(kept):
        variables = by_type.get(t, [])
        for d in range(3):
            for v in variables:
                rows.append(row)
                cols.append(v)
                vals.append(group_list[pairs[v][0]][0][0][d] / scale[d])
            rows.append(row)
            cols.append(y0 + t)
            vals.append(-bt.cap[d] / scale[d])
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
                    rows.append(row)
                    cols.append(v)
                    vals.append(1.0)
                rows.append(row)
                cols.append(y0 + t)
                vals.append(-float(k))
                row += 1
    a_ub = coo_matrix((vals, (rows, cols)), shape=(row, n_x + n_types))
    result = linprog(
        cost,
        A_ub=a_ub.tocsr(),
        b_ub=np.zeros(row),
        A_eq=a_eq.tocsr(),
        b_eq=b_eq,
        bounds=(0, None),
        method="highs",
    )
    if not result.success:
        raise ValueError(f"lower-bound LP failed: {result.message}")
    return float(result.fun)
