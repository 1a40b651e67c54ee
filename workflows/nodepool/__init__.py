"""NodePoolWorkflow: the single writer of one pool's capacity, a concern a module.

`workflow.py` is the spine — the run loop and its round, the handlers of what the trigger and
the claims say, and the status query. Each round learns what time has brought
(`deadlines.py`), grants disruption permits within the budgets and replaces drifted and
underutilized nodes (`disruption.py`), plans the pods no claim covers (`planning.py`, both
through the planner's call in `calls.py`) and starts a claim per planned node (`claims.py`);
what the pool hears is taken in by `news.py`,
and what it tells the cluster — Events, the NodePool's status, the Web UI — by
`reporting.py`. `state.py` is what a run knows; decisions that need no Temporal live in
`workflows/decisions/`.
"""

from workflows.nodepool.workflow import NodePoolWorkflow

__all__ = ["NodePoolWorkflow"]
