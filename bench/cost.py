"""Cost of the chosen plan against the LP lower bound and the seed's one-node-per-round.

    .venv/bin/python bench/cost.py

Same mixed workload and offerings as bench/packing.py (36 pod shapes; the shipped catalog
topped up to 400 types). For several pool requirement sets it prints the plan's hourly
cost, the tight LP lower bound (bound.py: assignment LP with per-pod fit and "at most k big
pods per node" cuts, solved by scipy/HiGHS), the plain fractional-cover bound (lp.py), and
the baseline "sum all pending demand into one node per round" (how the seed system works).
Aim: plan <= 1.05 x bound. Prints figures; asserts nothing.
"""

from __future__ import annotations

import time

from packing import mixed_pods, offerings, request  # bench/packing.py, beside this file

from activities.planning.plan import baseline_one_node_per_round, lp_lower_bound, plan_capacity
from api.nodepool import Requirements

SCENARIOS: list[tuple[str, Requirements]] = [
    ("any provider", Requirements()),
    ("EU only", Requirements(region_constraint="EU")),
    ("hyperscalers", Requirements(allowed_providers=["aws", "gcp", "azure"])),
    ("US, x86+arm", Requirements(region_constraint="US", arch=["x86_64", "arm64"])),
]


def main() -> None:
    offers = offerings()
    header = f"{'scenario':<15}{'pods':>6}{'nodes':>7}{'plan €/h':>11}{'LP bound':>11}{'plan/LP':>9}{'loose LP':>10}{'baseline':>11}{'base/plan':>10}{'bound s':>9}"
    print(header)
    for name, requirements in SCENARIOS:
        for n in (1000, 5000):
            req = request(mixed_pods(n), requirements)
            plan = plan_capacity(req, offers)
            start = time.perf_counter()
            bound = lp_lower_bound(req, offers)
            bound_s = time.perf_counter() - start
            loose = lp_lower_bound(req, offers, tight=False)
            base = baseline_one_node_per_round(req, offers).cost_eur_per_hour
            cost = plan.cost_eur_per_hour
            print(
                f"{name:<15}{n:>6}{len(plan.new_nodes):>7}{cost:>11.4f}{bound:>11.4f}"
                f"{cost / bound:>9.3f}{loose:>10.4f}{base:>11.4f}{base / cost:>10.1f}{bound_s:>9.2f}"
            )


if __name__ == "__main__":
    main()
