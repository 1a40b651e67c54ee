"""The assignment LP bound (`planner/bound.py`, solved by HiGHS through highspy)
against the same LP written out plainly from its docstring and solved by scipy's linprog: the
value `cloudburst plan` and bench/cost.py print must not depend on which of the two solves it.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from scipy.optimize import linprog

from planner.bound import assignment_lower_bound
from planner.packing import BinType, Vector, undominated


@pytest.mark.parametrize("seed", range(40))
def test_the_bound_is_the_assignment_lp_optimum(seed: int) -> None:
    rng = random.Random(seed)
    types = [
        BinType(
            ref=r,
            price=round(rng.uniform(0.003, 1.0), 4),
            cap=(rng.choice([2000, 4000, 8000]) - 150, rng.choice([4, 8, 16]) * 2**30, 110),
        )
        for r in range(rng.randint(1, 8))
    ]
    shapes = [  # each fits every type: the planner gives the bound only pods some type hosts
        (rng.choice([250, 500, 1000, 1500]), rng.choice([256, 1024, 3072]) * 2**20, 1)
        for _ in range(3)
    ]
    items: list[Vector] = [rng.choice(shapes) for _ in range(rng.randint(1, 40))]
    eligible = None
    if seed % 2:
        subsets = [rng.sample(range(len(types)), rng.randint(1, len(types))) for _ in range(2)]
        eligible = [rng.choice(subsets) for _ in items]
    bound = assignment_lower_bound(items, types, eligible)
    assert bound == pytest.approx(_reference(items, types, eligible), rel=1e-9, abs=1e-12)


def test_no_pods_cost_nothing() -> None:
    assert assignment_lower_bound([], [BinType(ref=0, price=1.0, cap=(1000, 2**30, 110))]) == 0


def _reference(
    items: list[Vector], types: list[BinType], eligible: list[list[int]] | None
) -> float:
    """min Σ price_t·y_t over x_gt (pods of shape g on type t), y_t ≥ 0, dense."""
    groups = Counter(
        (item, frozenset(eligible[i]) if eligible else None) for i, item in enumerate(items)
    )
    kept = undominated(types) if eligible is None else types
    scale = (1000.0, float(2**30), 1.0)
    pairs = [
        (g, t)
        for g, ((shape, allowed), _) in enumerate(groups.items())
        for t, bt in enumerate(kept)
        if (allowed is None or bt.ref in allowed) and all(shape[d] <= bt.cap[d] for d in range(3))
    ]
    shapes = [shape for shape, _ in groups]
    width = len(pairs) + len(kept)
    rows: list[list[float]] = []
    for t, bt in enumerate(kept):
        on_t = [v for v, (_, pt) in enumerate(pairs) if pt == t]
        for d in range(3):
            row = [0.0] * width  # Σ size·x ≤ cap·y
            for v in on_t:
                row[v] = shapes[pairs[v][0]][d] / scale[d]
            row[len(pairs) + t] = -bt.cap[d] / scale[d]
            rows.append(row)
            for k in (1, 2, 3) if d < 2 else ():
                big = [v for v in on_t if shapes[pairs[v][0]][d] * (k + 1) > bt.cap[d]]
                if big:
                    row = [0.0] * width  # at most k pods bigger than cap/(k+1) a node
                    for v in big:
                        row[v] = 1.0
                    row[len(pairs) + t] = -float(k)
                    rows.append(row)
    a_eq = [  # Σ_t x_gt = n_g
        [1.0 if v < len(pairs) and pairs[v][0] == g else 0.0 for v in range(width)]
        for g in range(len(groups))
    ]
    result = linprog(
        [0.0] * len(pairs) + [bt.price for bt in kept],
        A_ub=rows,
        b_ub=[0.0] * len(rows),
        A_eq=a_eq,
        b_eq=[float(n) for n in groups.values()],
        bounds=(0, None),
        method="highs",
    )
    assert result.success, result.message
    return float(result.fun)
