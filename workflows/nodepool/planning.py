"""Planning, the pool's side: the pods no claim covers (and the floor's missing nodes) go to
the planning activity, which bin-packs them and ranks offerings within what the limits
leave; the pool nominates pods to claims and starts a claim per new node.

A burst arrives in parts, so the pool starts at once the nodes a part fills, and holds a node
its pods fill only partly back (by alarm, up to `partial_node_hold_s`) for the rest of the
burst to be planned with it. A plan that fails, or claims failing on the configuration, leave
the pods waiting, each told why.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from api.events import KubeEvent
from api.planning import PlannedNode
from workflows.decisions import pool as pool_rules
from workflows.failures import cause
from workflows.nodepool import calls, claims, reporting
from workflows.nodepool.deadlines import HOLD, PLAN_RETRY, TimeFacts
from workflows.nodepool.state import PoolRun

PLANNING_FAILED = "planning failed"
CONFIG_BLOCKED = "claims fail on the configuration"
# A plan that failed (a bad credential, the recommender down for good) is tried this often.
_PLANNING_RETRY_S = 15.0


async def plan_uncovered(run: PoolRun, facts: TimeFacts) -> None:
    """Plan the pods no live claim covers and the floor's missing nodes; start their claims."""
    state = run.state
    live = run.live_claims()
    nominated = {uid for claim in live for uid in claim.nominated}
    uncovered = [pod for uid, pod in state.pending.items() if uid not in nominated]
    missing_floor = max(0, state.specs.pool.limits.min_nodes - len(live))
    if (
        state.hold_until is not None
        and not facts.hold_over
        and {pod.uid for pod in uncovered} == run.held
    ):
        return  # only the pods held back are uncovered: they wait for company, or the alarm
    if not uncovered and not missing_floor:
        run.nothing_blocked()
        state.plan_retry_at = None
        if state.hold_until is not None:
            state.hold_until = None
            run.alarms.cancel(HOLD)
        return
    if state.config_error:
        # Another claim would fail the same way: the pods wait, and say why.
        reporting.record_events(
            run, reporting.waiting(run, uncovered, f"{CONFIG_BLOCKED}: {state.config_error}")
        )
        return
    try:
        made = await calls.plan(
            run, calls.request(run, uncovered, missing_floor), f"plan {len(uncovered)} pods"
        )
    except ActivityError as err:
        # A configuration error (e.g. the recommender refuses our credentials) must not end
        # the pool: the pods wait, say why, and the retry's alarm wakes the pool.
        state.plan_retry_at = workflow.now() + timedelta(seconds=_PLANNING_RETRY_S)
        run.alarms.reached(PLAN_RETRY, state.plan_retry_at)
        reporting.record_events(
            run, reporting.waiting(run, uncovered, f"{PLANNING_FAILED}: {cause(err)}")
        )
        return
    state.plan_retry_at = None
    run.last_plan = made
    # The pool acts on the pods the cluster has pending, not on what it was told.
    run.pods_not_pending(made.not_pending)
    if made.new_nodes:  # the prices a pool is judged by: those it launched with
        state.stale_prices = made.stale_prices
    # Signals handled while planning may have resolved pods or ended claims: only what is
    # still pending is nominated.
    nominations: list[KubeEvent] = []
    for uid, claim_name in made.assignments.items():
        if claim_name in state.claims and uid in state.pending:
            run.nominated(claim_name, uid)
            nominations.append(reporting.nominated(run, uid, claim_name))
    # The nodes past this run's starts stay unplanned: the next run plans their pods.
    launching = _launch_now(run, made.new_nodes, facts.hold_over)[: run.starts_left]
    if launching and state.config_error:
        # A claim failed on the configuration while this plan was made: the plan's new nodes
        # would fail the same way. Their pods wait with the others, and say why.
        waiting = [
            state.pending[uid]
            for node in launching
            for uid in node.pod_uids
            if uid in state.pending
        ]
        reporting.record_events(
            run,
            reporting.nominations_to_write(run, nominations)
            + reporting.waiting(run, waiting, f"{CONFIG_BLOCKED}: {state.config_error}")
            + reporting.blocked(run, made),
        )
        return
    recorded = [claims.record(run, node, for_min_nodes=not node.pod_uids) for node in launching]
    claims.start_aside(run, recorded)
    for started in recorded:
        nominations += [
            reporting.nominated(run, uid, started.name)
            for uid in started.node.pod_uids
            if uid in state.pending
        ]
    reporting.record_events(
        run, reporting.nominations_to_write(run, nominations) + reporting.blocked(run, made)
    )


def _launch_now(run: PoolRun, planned: list[PlannedNode], hold_over: bool) -> list[PlannedNode]:
    """The planned nodes to start now. While a burst is arriving, nodes its pods fill only
    partly wait (by alarm, at most `partial_node_hold_s` from the first held) so that the rest
    of the burst is packed with them. Their pods stay uncovered meanwhile, and are planned
    again with the next pods that arrive (or whatever else uncovers pods), or when the alarm
    rings."""
    state = run.state
    held = pool_rules.partly_filled(planned) if run.input.partial_node_hold_s > 0 else []
    if not held or hold_over:
        run.held = set()
        if state.hold_until is not None:
            state.hold_until = None
            run.alarms.cancel(HOLD)
        return planned
    run.held = {uid for node in held for uid in node.pod_uids}
    if state.hold_until is None:
        state.hold_until = workflow.now() + timedelta(seconds=run.input.partial_node_hold_s)
        run.alarms.reached(HOLD, state.hold_until)
    return [node for node in planned if all(node is not h for h in held)]
