"""NodeClaimWorkflow: one burst node's whole life, a phase a module.

`workflow.py` is the spine — the workflow's state, its handlers and `run`, which steps
through the phases: `launch.py` (join token, first-boot script, the VM), `registration.py`
(the node registers, is proven the claim's VM, is labelled: Ready), `liveness.py` (serve
until a reason to go, within the pool's budgets), `termination.py` (cordon, drain, delete
Node and VM; a failure's cleanup). `node.py` is the claim's view of its node (the watcher's
signals, its own polls, whether the Node is its VM), `reporting.py` what it tells the pool,
the NodeClaim resource and the Web UI, `calls.py` how it calls activities, `state.py` what it
knows. Decisions that need no Temporal live in `workflows/decisions/`.
"""

from workflows.nodeclaim.workflow import NodeClaimWorkflow

__all__ = ["NodeClaimWorkflow"]
