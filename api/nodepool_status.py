"""NodePool status: what `kubectl get nodepools` shows (NODES READY CPU MEMORY LIMIT).

Written by the pool's workflow through an activity (`nodepools/status` patch); read by the
CRD's printer columns. Quantities are Kubernetes quantity strings ("4", "8Gi").
"""

from __future__ import annotations

from api._base import CamelModel
from api.nodeclaim import Condition

# Condition types a pool reports (Karpenter's NodePool has Ready and ValidationSucceeded).
LIMIT_REACHED = "LimitReached"
# True (a warning) while the pool's latest new nodes were chosen by prices older than
# CLOUDBURST_PRICES_MAX_AGE_HOURS; present once that has happened.
PRICES_STALE = "PricesStale"
READY = "Ready"
# Written by the trigger, which validates the spec (trigger/verdicts.py); the pool's workflow
# keeps it, and keeps Ready=False while it is False.
VALIDATION_SUCCEEDED = "ValidationSucceeded"


class NodePoolResources(CamelModel):
    """Resources of the pool's claims that are not Deleted or Failed."""

    cpu: str | None = None
    memory: str | None = None


class NodePoolStatus(CamelModel):
    nodes: int = 0
    ready_nodes: int = 0
    resources: NodePoolResources = NodePoolResources()
    conditions: list[Condition] = []


class NodePoolStatusUpdate(CamelModel):
    """What the pool workflow asks `sync_nodepool_status` to write (and to export as metrics)."""

    namespace: str
    name: str
    status: NodePoolStatus
    cpu_m: int = 0
    memory_bytes: int = 0
    # The pool's limits, for the usage-vs-limit gauges; None = unlimited.
    max_nodes: int | None = None
    limit_cpu_m: int | None = None
    limit_memory_bytes: int | None = None
