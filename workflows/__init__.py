"""Deterministic orchestration; the worker registers `WORKFLOWS`."""

from workflows.gc import OrphanGcWorkflow
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.nodepool import NodePoolWorkflow

WORKFLOWS: list[type] = [NodeClaimWorkflow, NodePoolWorkflow, OrphanGcWorkflow]
