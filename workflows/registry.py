"""The workflows the worker registers.

Kept out of `workflows/__init__.py` on purpose: the sandbox loads a workflow's module afresh
for every run, package first, so a package that imported every workflow would make each new
claim execute all four modules (a third of a burst's workflow CPU went there).
"""

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
