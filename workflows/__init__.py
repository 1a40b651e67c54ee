"""Deterministic orchestration; the worker registers `WORKFLOWS`."""

from workflows.gc import OrphanGcWorkflow
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.nodepool import NodePoolWorkflow
from workflows.prices import PriceRefreshWorkflow

WORKFLOWS: list[type] = [
    NodeClaimWorkflow,
    NodePoolWorkflow,
    OrphanGcWorkflow,
    PriceRefreshWorkflow,
]
