"""What the packers work on: a pod's or a node's size as a vector, and a node type."""

from __future__ import annotations

from dataclasses import dataclass

Vector = tuple[int, int, int]  # cpu millicores, memory bytes, pods


@dataclass(frozen=True, slots=True)
class BinType:
    """A node type: `ref` is the caller's handle (an index into its offering list)."""

    ref: int
    price: float
    cap: Vector  # what pods may use (after overhead)
    raw_cpu_m: int = 0  # counted against the pool's cpu limit
    raw_memory: int = 0  # counted against the pool's memory limit
    # How many nodes of this type can be made at most (free machines on premises); None:
    # as many as wanted (a public cloud). Counted per type, by the budget's `stock`.
    available: int | None = None
