"""Cost of the chosen plan against lower bounds and the seed's one-node-per-round.

    .venv/bin/python bench/cost.py [--sizes 1000] [--exact]

Same mixed workload and offerings as bench/packing.py (sim/dev/planner_inputs.py) (36 pod shapes; the shipped catalog
topped up to 400 types). For several pool requirement sets it prints the plan's hourly
cost, the tight LP lower bound (bound.py: assignment LP with per-pod fit and "at most k big
pods per node" cuts, solved by HiGHS through highspy), the plain fractional-cover bound (lp.py), and
the baseline "sum all pending demand into one node per round" (how the seed system works).
Aim: plan <= 1.05 x bound. The "spot" rows are the same bursts with `capacityType: [spot,
on-demand]` (the catalog's AWS/GCP/Azure spot prices): what allowing spot saves per hour
against the on-demand rows above them. Prints figures; asserts nothing.

--exact adds the pattern LP (Gilmore-Gomory) solved to optimality by column generation with
exact pricing (a MILP knapsack per node type, HiGHS): a lower bound that, unlike bound.py,
knows pods are whole, so it shows how far the plan really is from the optimum. It also
prints the best integral plan made of the generated patterns (a MILP over them; an upper
bound on the optimum). Slow: about half a minute per row.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator

from api.nodeclaim import Offering
from api.nodepool import Requirements
from api.planning import PlanRequest
from planner.packing import BinType, Vector, undominated
from planner.plan import (
    _prepare,  # the planner's own node types and pod shapes, for the exact check
    baseline_one_node_per_round,
    kube_reserved,
    lp_lower_bound,
    plan_capacity,
)
from sim.dev.planner_inputs import mixed_pods, offerings, request

SCENARIOS: list[tuple[str, Requirements]] = [
    ("any provider", Requirements()),
    ("EU only", Requirements(region_constraint="EU")),
    ("hyperscalers", Requirements(allowed_providers=["aws", "gcp", "azure"])),
    ("US, x86+arm", Requirements(region_constraint="US", arch=["x86_64", "arm64"])),
]
# The same bursts with spot allowed (AWS, GCP, Azure sell it): the plan prefers it.
SPOT = ["spot", "on-demand"]
SPOT_SCENARIOS: list[tuple[str, Requirements]] = [
    ("any, spot", Requirements(capacity_type=SPOT)),
    ("hyper, spot", Requirements(allowed_providers=["aws", "gcp", "azure"], capacity_type=SPOT)),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000", help="pod counts, comma-separated")
    parser.add_argument("--exact", action="store_true", help="add the pattern LP bound")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    on_demand = offerings()
    with_spot = offerings(spot=True)
    header = f"{'scenario':<15}{'pods':>6}{'nodes':>7}{'plan €/h':>11}{'plan s':>8}{'LP bound':>11}{'plan/LP':>9}{'loose LP':>10}{'baseline':>11}{'base/plan':>10}"
    if args.exact:
        header += f"{'pattern LP':>12}{'plan/pat':>9}{'best int':>10}{'int/LP':>8}"
    print(header)
    for name, requirements in SCENARIOS + SPOT_SCENARIOS:
        offers = with_spot if "spot" in requirements.capacity_type else on_demand
        for n in sizes:
            req = request(mixed_pods(n), requirements)
            start = time.perf_counter()
            plan = plan_capacity(req, offers)
            plan_s = time.perf_counter() - start
            bound = lp_lower_bound(req, offers)
            loose = lp_lower_bound(req, offers, tight=False)
            base = baseline_one_node_per_round(req, offers).cost_eur_per_hour
            cost = plan.cost_eur_per_hour
            line = (
                f"{name:<15}{n:>6}{len(plan.new_nodes):>7}{cost:>11.4f}{plan_s:>8.2f}"
                f"{bound:>11.4f}{cost / bound:>9.3f}{loose:>10.4f}{base:>11.4f}{base / cost:>10.1f}"
            )
            if args.exact:
                with _quiet_stdout():  # HiGHS's MIP prints progress notes from C
                    lp, best = pattern_bounds(req, offers)
                line += f"{lp:>12.4f}{cost / lp:>9.3f}{best:>10.4f}{best / bound:>8.3f}"
            print(line, flush=True)


def pattern_bounds(req: PlanRequest, offers: list[Offering]) -> tuple[float, float]:
    """(pattern LP optimum, cheapest integral plan from its patterns), both with scipy/HiGHS.

    Pricing is exact (a MILP per node type), so the LP optimum is a lower bound on every
    plan. Assumes every pod may use every offering (true for the bench's plain pods)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, linprog, milp

    prep = _prepare(req, offers, kube_reserved)
    assert len(set(prep.eligible.values())) == 1, "pods with placement rules"
    types = undominated(prep.bin_types)
    demand = Counter(prep.shape[p.uid] for p in req.pods if p.uid in prep.eligible)
    shapes, counts = list(demand), np.array([float(c) for c in demand.values()])
    sizes = np.array([[s[d] for s in shapes] for d in range(3)], dtype=float)

    def copies(shape: Vector, t: BinType) -> int:
        return min(t.cap[d] // shape[d] for d in range(3) if shape[d])

    columns: list[np.ndarray] = []
    prices: list[float] = []
    for g, shape in enumerate(shapes):  # start: each shape alone, on every type
        for t in types:
            if (k := min(copies(shape, t), int(counts[g]))) > 0:
                column = np.zeros(len(shapes))
                column[g] = k
                columns.append(column)
                prices.append(t.price)
    while True:
        a = np.array(columns).T
        lp = linprog(prices, A_ub=-a, b_ub=-counts, bounds=(0, None), method="highs")
        duals = -lp.ineqlin.marginals
        added = False
        for t in types:
            most = [min(copies(s, t), int(counts[g])) for g, s in enumerate(shapes)]
            best = milp(
                -duals,
                constraints=LinearConstraint(sizes, -np.inf, np.array(t.cap, dtype=float)),
                integrality=np.ones(len(shapes)),
                bounds=Bounds(0, np.array(most, dtype=float)),
            )
            if best.x is not None and -best.fun > t.price * (1 + 1e-9):
                columns.append(np.round(best.x))
                prices.append(t.price)
                added = True
        if not added:
            break
    a = np.array(columns).T
    integral = milp(
        prices,
        constraints=LinearConstraint(a, counts, np.inf),
        integrality=np.ones(len(prices)),
        options={"time_limit": 60},
    )
    return float(lp.fun), float(integral.fun)


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


if __name__ == "__main__":
    main()
