"""NodePool status: what `kubectl get nodepools` shows (NODES READY CPU MEMORY LIMIT).

Written by the pool's workflow through an activity (`nodepools/status` patch); read by the
CRD's printer columns. Quantities are Kubernetes quantity strings ("4", "8Gi").
"""

from __future__ import annotations

from api._base import CamelModel
from api.nodeclaim import Condition

# Condition types a pool reports (Karpenter's NodePool has Ready and ValidationSucceeded).
LIMIT_REACHED = "LimitReached"
READY = "Ready"


class NodePoolResources(CamelModel):
    """Resources of the pool's claims that are not Deleted or Failed."""

    cpu: str | None = None
    memory: str | None = None


class NodePoolStatus(CamelModel):
    nodes: int = 0
    ready_nodes: int = 0
    resources: NodePoolResources = NodePoolResources()
    conditions: list[Condition] = []
