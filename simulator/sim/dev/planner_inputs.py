"""Synthetic planning inputs the planner's benches share (bench/packing.py, bench/cost.py): the
shipped catalog's offerings topped up with plausible synthetic types, and bursts of pending
pods of 36 mixed shapes (6 cpu x 6 memory sizes, like Karpenter's scheduling benchmark) or of
a shape each. Deterministic for a seed."""

from __future__ import annotations

import random

from api.nodeclaim import Offering
from api.nodepool import NodePoolSpec, Requirements
from api.planning import PlanRequest, PodDemand, Resources
from planner.catalog import Catalog

PROVIDERS = ["aws", "gcp", "azure", "hetzner", "scaleway", "digitalocean", "ovh"]
CPU_M = [100, 250, 500, 1000, 1500, 2000]
MEMORY_MI = [128, 256, 512, 1024, 2048, 4096]


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
