"""Packing throughput of `plan_capacity`: pods/s for 1k, 5k and 10k mixed pending pods.

    .venv/bin/python bench/packing.py [--repeat 3]

Offerings: the shipped catalog (all seven providers, every region: ~380 instance types x
regions) topped up to 400 with synthetic types. Pods: "mixed" draws each pod's requests from
6 cpu x 6 memory sizes (36 shapes, like Karpenter's scheduling benchmark); "distinct" gives
every pod its own shape (the worst case for shape grouping). Karpenter's published
scheduling benchmark does ~1,300 pods/s at 1k pods. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time

from planner.plan import plan_capacity
from sim.dev.planner_inputs import mixed_pods, offerings, request

KARPENTER_PODS_PER_S = 1300


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    offers = offerings()
    print(
        f"{len(offers)} offerings; best of {args.repeat} runs; Karpenter ~{KARPENTER_PODS_PER_S} pods/s at 1k"
    )
    print(
        f"{'workload':<10}{'pods':>7}{'seconds':>10}{'pods/s':>10}{'x Karpenter':>13}{'nodes':>7}"
    )
    for workload in ("mixed", "distinct"):
        for n in (1000, 5000, 10000):
            req = request(mixed_pods(n, distinct=workload == "distinct"))
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                plan = plan_capacity(req, offers)
                times.append(time.perf_counter() - start)
            best = min(times)
            print(
                f"{workload:<10}{n:>7}{best:>10.3f}{n / best:>10,.0f}"
                f"{n / best / KARPENTER_PODS_PER_S:>13.1f}{len(plan.new_nodes):>7}"
                f"   (median {statistics.median(times):.3f}s)"
            )


if __name__ == "__main__":
    main()
