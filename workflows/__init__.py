"""Deterministic orchestration; the worker registers `WORKFLOWS`."""

from workflows.nodeclaim import NodeClaimWorkflow

WORKFLOWS: list[type] = [NodeClaimWorkflow]
