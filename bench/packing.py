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
import random
import statistics
import time

from api.nodeclaim import Offering
from api.nodepool import NodePoolSpec, Requirements
from api.planning import PlanRequest, PodDemand, Resources
from planner.catalog import Catalog
from planner.plan import plan_capacity

PROVIDERS = ["aws", "gcp", "azure", "hetzner", "scaleway", "digitalocean", "ovh"]
CPU_M = [100, 250, 500, 1000, 1500, 2000]
MEMORY_MI = [128, 256, 512, 1024, 2048, 4096]
KARPENTER_PODS_PER_S = 1300


def offerings(count: int = 400, seed: int = 7, spot: bool = False) -> list[Offering]:
    """`count` on-demand offerings (the catalog's, topped up), plus with `spot` the catalog's
    spot offerings (which only pools allowing spot may use)."""
    catalog = Catalog.load().all_offerings()
    out = [o for o in catalog if o.capacity_type == "on-demand"]
    rnd = random.Random(seed)
    while len(out) < count:  # top up with plausible synthetic types
        vcpu = rnd.choice([2, 4, 8, 16, 32, 48, 64])
        gib = vcpu * rnd.choice([1, 2, 4, 8])
        price = round((vcpu * 0.021 + gib * 0.0028) * rnd.uniform(0.8, 1.3), 5)
        out.append(
            Offering(
                provider=rnd.choice(PROVIDERS),
                region=f"synthetic-{len(out) % 5}",
                instance_type=f"syn-{len(out)}",
                vcpu=vcpu,
                memory_gib=gib,
                price_eur_per_hour=price,
            )
        )
    return out[:count] + ([o for o in catalog if o.capacity_type == "spot"] if spot else [])


def mixed_pods(n: int, seed: int = 1, distinct: bool = False) -> list[PodDemand]:
    rnd = random.Random(seed)
    pods = []
    for i in range(n):
        if distinct:
            cpu, mem = rnd.randint(50, 2000), rnd.randint(64, 4096)
        else:
            cpu, mem = rnd.choice(CPU_M), rnd.choice(MEMORY_MI)
        pods.append(
            PodDemand(
                uid=f"pod-{i}",
                namespace="bench",
                name=f"pod-{i}",
                requests=Resources(cpu_m=cpu, memory_bytes=mem * 2**20, pods=1),
            )
        )
    return pods


def request(pods: list[PodDemand], requirements: Requirements | None = None) -> PlanRequest:
    return PlanRequest(
        pool_name="bench",
        pool=NodePoolSpec(requirements=requirements or Requirements()),
        class_providers=PROVIDERS,
        pods=pods,
    )


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
