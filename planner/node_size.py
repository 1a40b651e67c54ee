"""What pods may use on a node of an offering: its size less what the kubelet and the system
keep (the overhead a plan counts per node, `OverheadFn`)."""

from __future__ import annotations

from collections.abc import Callable

from api.nodeclaim import Offering
from api.planning import Resources

MAX_PODS_PER_NODE = 110  # the kubelet's default --max-pods
EVICTION_THRESHOLD_BYTES = 100 * 2**20  # kubelet's default memory.available<100Mi
GIB = 2**30

OverheadFn = Callable[[Offering], Resources]


def kube_reserved(offering: Offering) -> Resources:
    """What the kubelet and system keep for themselves on a node of this size.

    The GKE/Karpenter table: cpu 6% of the first core, 1% of the next, 0.5% of the next 2,
    0.25% above 4; memory 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8, 6%
    of the next 112, 2% above 128 GiB; plus the 100Mi hard-eviction threshold.
    """
    cores = float(offering.vcpu or 0)
    gib = float(offering.memory_gib or 0)
    cpu = _tiered(cores * 1000, [(1000, 0.06), (1000, 0.01), (2000, 0.005), (None, 0.0025)])
    memory = _tiered(
        gib * GIB,
        [(4 * GIB, 0.25), (4 * GIB, 0.20), (8 * GIB, 0.10), (112 * GIB, 0.06), (None, 0.02)],
    )
    return Resources(cpu_m=int(cpu + 0.999), memory_bytes=int(memory) + EVICTION_THRESHOLD_BYTES)


def usable_capacity(offering: Offering, overhead: Resources) -> Resources:
    """What pods may use on a node of this offering: its size minus the overhead."""
    return Resources(
        cpu_m=round(float(offering.vcpu or 0) * 1000) - overhead.cpu_m,
        memory_bytes=int(float(offering.memory_gib or 0) * GIB) - overhead.memory_bytes,
        pods=MAX_PODS_PER_NODE - overhead.pods,
    )


def _tiered(amount: float, tiers: list[tuple[float | None, float]]) -> float:
    total = 0.0
    for size, rate in tiers:
        part = amount if size is None else min(amount, size)
        total += part * rate
        amount -= part
        if amount <= 0:
            break
    return total
