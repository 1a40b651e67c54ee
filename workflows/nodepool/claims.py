"""The pool's claims: recording a claim for a planned node, starting their workflows, telling
them things, and forgetting those that ended without a word.

A round's claims start from one activity (`start_claim_workflows`), in batches, beside the
pool's next steps: Temporal records child starts under the pool's lock one by one, and the
pool's next workflow task waited behind them. A claim is counted from the moment it is
recorded; one Temporal refuses to start is forgotten, and its pods are planned again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from activities.claim_workflows import ClaimWorkflowActivities
from api.claims import CLAIM_SUFFIX_ALPHABET, DRIFT_HASH_ANNOTATION, drift_hash, new_claim
from api.gc import ClaimState, ClaimStatesInput
from api.messages import ClaimSignal, ClaimStart, ClaimStarts, NodeClaimInput, claim_workflow_id
from api.nodeclaim import DisruptionReason, NodeClaimPhase
from api.nodepool.messages import PoolClaim
from api.planning import PlannedNode
from workflows.decisions import pool as pool_rules
from workflows.failures import cause
from workflows.nodepool.state import ClaimToStart, PoolRun
from workflows.retries import CLAIM_STARTS, FEW_TRIES
from workflows.timeouts import KUBE_CALL, QUICK_HEARTBEAT

# Claims one `start_claim_workflows` activity starts, and their inputs' JSON together (each
# carries its NodeClass: ~4.5 KB usually, far more for a class filled to its bounds). Over
# 512 KB a payload goes compressed, but JSON with copies further apart than zlib's 32 KB
# window barely shrinks: the bound keeps a batch far below Temporal's 2 MB payload limit,
# past which the pool's task would fail on every retry.
_STARTS_PER_ACTIVITY = 100
_STARTS_BYTES_PER_ACTIVITY = 1_000_000


def record(
    run: PoolRun,
    node: PlannedNode,
    *,
    for_min_nodes: bool = False,
    replaces: str | None = None,
    replace_reason: str = DisruptionReason.DRIFTED,
) -> ClaimToStart:
    """A new claim for the planned node, counted by the pool from now on (claims recorded
    side by side each see the others' names, and news about one that arrives before its
    start is confirmed finds it)."""
    run.starts_left = max(0, run.starts_left - 1)
    state = run.state
    specs = state.specs
    name = _new_name(run)
    current_hash = drift_hash(specs.pool, specs.node_class)
    claim = new_claim(
        name=name,
        namespace=run.namespace,
        pool_name=run.name,
        pool=specs.pool,
        node_class_name=specs.node_class_name,
        offerings=node.offerings,
        cpu_m=node.requests.cpu_m,
        memory_bytes=node.requests.memory_bytes,
        pods=node.requests.pods,
        annotations={DRIFT_HASH_ANNOTATION: current_hash},
        pool_uid=specs.pool_uid or None,
    )
    run.claim_recorded(
        PoolClaim(
            name=name,
            phase=NodeClaimPhase.PENDING,
            offering=node.offerings[0],
            allocatable=node.allocatable if node.allocatable.pods else node.requests,
            # Only real pending pods: a drift replacement is planned for a synthetic one.
            nominated=[uid for uid in node.pod_uids if uid in state.pending],
            started_at=workflow.now(),
            for_min_nodes=for_min_nodes,
            requests=node.requests,
            drift_hash=current_hash,
            replaces=replaces,
            replace_reason=replace_reason,
        )
    )
    return ClaimToStart(name, claim, node)


def start_aside(run: PoolRun, claims: list[ClaimToStart]) -> None:
    """Start the claims beside the pool's next steps, in batches (`pool_rules.start_batches`)."""
    starts = [_start_of(run, claim) for claim in claims]
    sizes = [len(start.model_dump_json()) for start in starts]
    for batch in pool_rules.start_batches(sizes, _STARTS_PER_ACTIVITY, _STARTS_BYTES_PER_ACTIVITY):
        _aside(run, start(run, claims[batch.start : batch.stop], starts[batch.start : batch.stop]))


async def start(
    run: PoolRun, batch: list[ClaimToStart], built: list[ClaimStart] | None = None
) -> set[str]:
    """Start the claims' workflows (`built`: their starts, if made already); the names of
    those Temporal refused, which are forgotten (their pods are planned again)."""
    state = run.state
    starts = ClaimStarts(starts=built or [_start_of(run, claim) for claim in batch])
    run.unconfirmed.update(claim.name for claim in batch)
    try:
        result = await workflow.execute_activity_method(
            ClaimWorkflowActivities.start_claim_workflows,
            starts,
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=CLAIM_STARTS,
            summary=f"start {len(batch)} claims",
        )
    except BaseException:
        for claim in batch:
            run.claim_dropped(claim.name)
        raise
    finally:
        run.unconfirmed.difference_update(claim.name for claim in batch)
    if result.pool_gone:
        # What the trigger will say too (`DemandUpdate.pool_deleted`): the cluster said it first.
        run.pool_deleted()
    for claim in batch:
        if claim.name in result.refused:
            workflow.logger.warning(
                "claim %s was not started: %s", claim.name, result.refused[claim.name]
            )
            run.claim_dropped(claim.name)
            run.wake()
            continue
        state.claims_started += 1
        run.pods_unblocked(claim.node.pod_uids)
    return set(result.refused)


async def tell(run: PoolRun, claim_name: str, signal: ClaimSignal, arg: object) -> bool:
    """Signal one of the pool's claims; False when it is gone."""
    handle = workflow.get_external_workflow_handle(claim_workflow_id(run.namespace, claim_name))
    try:
        await handle.signal(signal, arg)
    except Exception as err:  # the claim is gone
        workflow.logger.warning("claim %s did not take %s: %s", claim_name, signal, err)
        return False
    return True


async def forget_those_gone(run: PoolRun) -> None:
    """Forget the claims whose workflow is no longer running. A claim reports its end itself;
    one that could not (terminated by hand, failed outside its own error handling) would
    otherwise hold its nominated pods and count against the limits for good. A local
    activity: one event on the periodic look, which an idle pool pays."""
    names = [name for name in run.state.claims if name not in run.unconfirmed]
    if not names:
        return
    ids = {name: claim_workflow_id(run.namespace, name) for name in names}
    try:
        states = await workflow.execute_local_activity_method(
            ClaimWorkflowActivities.claim_workflow_states,
            ClaimStatesInput(workflow_ids=list(ids.values())),
            start_to_close_timeout=KUBE_CALL,
            retry_policy=FEW_TRIES,
            summary=f"which of {len(names)} claims still run",
        )
    except ActivityError as err:
        workflow.logger.warning("the claims could not be checked: %s", cause(err))
        return  # the next look asks again
    run.forgotten_by_look = {}
    for name, workflow_id in ids.items():
        running = states.states.get(workflow_id) == ClaimState.RUNNING
        if running or name in run.unconfirmed:
            continue
        if forgotten := claim_closed(run, name):
            run.forgotten_by_look[name] = forgotten.drift_hash


def claim_closed(run: PoolRun, name: str) -> PoolClaim | None:
    """Forget a claim whose workflow ended: the claim, or None if it was not known."""
    claim = run.claim_dropped(name)
    if claim is None:
        return None
    workflow.logger.warning("claim %s ended without a final report", name)
    run.forget_disruption(claim)
    run.wake()
    return claim


def made_from_when_forgotten(run: PoolRun, name: str) -> str:
    """The drift hash of a claim the latest look forgot, whose final report came after all;
    it is forgotten for good."""
    return run.forgotten_by_look.pop(name)


def _aside(run: PoolRun, starting: Coroutine[Any, Any, Any]) -> None:
    task = asyncio.create_task(starting)
    run.starting.add(task)

    def ended(done: asyncio.Task[Any]) -> None:
        run.starting.discard(done)
        failure = None if done.cancelled() else done.exception()
        if failure is not None:
            # The claims are forgotten (`start`): their pods are planned again.
            workflow.logger.warning("a claim did not start: %s", failure)
            run.wake()

    task.add_done_callback(ended)


def _start_of(run: PoolRun, claim: ClaimToStart) -> ClaimStart:
    specs = run.state.specs
    return ClaimStart(
        input=NodeClaimInput(
            claim=claim.claim,
            node_class_name=specs.node_class_name,
            node_class=specs.node_class,
            cluster_id=run.input.cluster_id,
            timings=run.input.claim_timings,
            pool_workflow_id=workflow.info().workflow_id,
        ),
        task_queue=run.claims_queue,
        task_timeout_s=run.input.claim_task_timeout_s,
        pool_name=run.name,
    )


def _new_name(run: PoolRun) -> str:
    # workflow.random() is seeded by Temporal: the same names on replay.
    rng = workflow.random()
    while True:
        suffix = "".join(rng.choice(CLAIM_SUFFIX_ALPHABET) for _ in range(5))
        name = f"{run.name}-{suffix}"
        if name not in run.state.claims:
            return name
