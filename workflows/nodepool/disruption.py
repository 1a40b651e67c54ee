"""Disruption, the pool's side: permits within the budgets, drift replacement, consolidation.

A claim that wants to go for a voluntary reason asks for a permit; the pool grants them first
asked first served while the strictest active budget allows, holds an empty node that pods
were just nominated to or that the pool's floor needs, and sends unasked permits where it
chooses itself: a drifted node once its replacement is Ready, an underutilized one when
consolidation finds its pods a cheaper home (replacement first, one move at a time).
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

from activities.planning.consolidation import ConsolidationActivities
from api.claims import drift_hash
from api.messages import ClaimSignal
from api.nodeclaim import DisruptionReason, NodeClaimPhase
from api.nodepool import parse_duration
from api.nodepool.messages import (
    ConsolidationDecision,
    ConsolidationInput,
    DisruptionPermit,
    PoolClaim,
)
from api.planning import PlannedNode, PodDemand, Toleration, replacement_uid
from workflows.decisions import budgets as budget_rules
from workflows.failures import cause
from workflows.nodepool import calls, claims
from workflows.nodepool.state import PoolRun
from workflows.retries import POOL_CALL
from workflows.timeouts import PLANNING, QUICK_HEARTBEAT

# The reasons `pools describe` shows the budgets' allowance for ("Manual": an operator's).
SHOWN_REASONS = (
    DisruptionReason.EMPTY,
    DisruptionReason.DRIFTED,
    DisruptionReason.UNDERUTILIZED,
    "Manual",
)


async def grant_permits(run: PoolRun) -> None:
    """Grant waiting claims their permits, first asked first served, within the budgets."""
    state = run.state
    for name, reason in list(state.disruption_queue.items()):
        # A report handled while a permit was being sent may have dropped this one.
        if name not in state.disruption_queue or allowed(run, reason) <= 0:
            continue
        claim = state.claims.get(name)
        if reason == DisruptionReason.EMPTY and claim is not None and claim.nominated:
            continue  # pods planned onto it are on their way: it will not stay empty
        if reason == DisruptionReason.EMPTY and _at_floor(run):
            # A minNodes node is empty by nature: let it go and the floor starts another,
            # which empties and goes the same way. Held until the floor is lowered.
            continue
        run.permit_granted(name, reason)
        permit = DisruptionPermit(reason=reason)
        if not await claims.tell(run, name, ClaimSignal.DISRUPTION_PERMITTED, permit):
            run.permit_undelivered(name)


def allowed(run: PoolRun, reason: str) -> int:
    """How many more nodes may be disrupted for `reason` now: the strictest active budget."""
    state = run.state
    disrupting = len(
        set(state.permits)
        | {c.name for c in state.claims.values() if c.phase == NodeClaimPhase.DELETING}
    )
    return budget_rules.disruptions_allowed(
        run.active_budgets, reason, len(state.claims), disrupting
    )


async def replace_drifted(run: PoolRun) -> None:
    """Claims built from an older template or class get a replacement first; the old one is
    disrupted (within the budgets) once its replacement is Ready."""
    state = run.state
    current = drift_hash(state.specs.pool, state.specs.node_class)
    drifted = [
        c for c in run.live_claims() if c.drift_hash and c.drift_hash != current and not c.replaces
    ]
    if not drifted:
        return
    replacing = sum(
        1 for c in state.claims.values() if c.replaces and c.phase != NodeClaimPhase.READY
    )
    for claim in drifted:
        if not claim.drifted:
            claim.drifted = True
            await claims.tell(
                run, claim.name, ClaimSignal.MARK_DRIFTED, "NodePool or NodeClass changed"
            )
        if claim.replaced_by is not None or claim.phase != NodeClaimPhase.READY:
            continue
        if allowed(run, DisruptionReason.DRIFTED) - replacing <= 0:
            break
        synthetic = PodDemand(
            uid=replacement_uid(claim.name),
            namespace=run.namespace,
            name=f"replacement for {claim.name}",
            requests=claim.requests if claim.requests.pods else claim.allocatable,
            # The node's pods tolerate its taints (a tenant pool's own, the template's):
            # the replacement is planned for them, not for a pod that tolerates none.
            tolerations=[Toleration(operator="Exists")],
        )
        try:
            plan = await calls.plan(
                run, calls.request(run, [synthetic], 0), "plan drift replacement"
            )
        except ActivityError as err:
            workflow.logger.warning("no replacement for %s: %s", claim.name, cause(err))
            break
        if plan.new_nodes:
            new = await _start_replacement(run, plan.new_nodes[0], claim.name, claim)
            if new is not None:
                replacing += 1


async def consolidate(run: PoolRun, due: bool) -> None:
    """Opt-in: every consolidateAfter, make the one move that saves the most, if any."""
    state = run.state
    disruption = state.specs.pool.disruption
    if disruption.consolidation_policy != "WhenEmptyOrUnderutilized" or not due:
        return
    busy = [c for c in state.claims.values() if c.replaces and c.phase != NodeClaimPhase.READY]
    underway = {*state.permits.values(), *state.disruption_queue.values()}
    if busy or DisruptionReason.UNDERUTILIZED in underway:
        return  # one move at a time: let the last one finish
    if allowed(run, DisruptionReason.UNDERUTILIZED) <= 0:
        return
    ready = {c.name: c for c in run.live_claims() if c.phase == NodeClaimPhase.READY}
    candidates = [
        c.name for c in ready.values() if c.replaced_by is None and c.replaces is None
    ]  # the activity judges which are old enough, by its clock
    if not candidates:
        return
    run.consolidated(workflow.now(), parse_duration(disruption.consolidate_after))
    try:
        decision = await _find_consolidation(run, candidates, ready)
    except ActivityError as err:
        state.consolidation_note = f"consolidation failed: {cause(err)}"
        return
    state.consolidation_note = decision.explanation
    state.consolidation_verdicts = decision.verdicts
    name = decision.claim_name
    if decision.action == "delete" and name:
        run.permit_offered(name, DisruptionReason.UNDERUTILIZED)
        permit = DisruptionPermit(reason=DisruptionReason.UNDERUTILIZED)
        if not await claims.tell(run, name, ClaimSignal.DISRUPTION_PERMITTED, permit):
            run.permit_undelivered(name)
    elif decision.action == "replace" and name and decision.replacement:
        await _start_replacement(
            run, decision.replacement, name, state.claims.get(name), DisruptionReason.UNDERUTILIZED
        )


async def _start_replacement(
    run: PoolRun,
    node: PlannedNode,
    replaced: str,
    replaced_claim: PoolClaim | None,
    reason: str = DisruptionReason.DRIFTED,
) -> str | None:
    """Start the replacement's claim (awaited); its name, or None if Temporal refused it."""
    started = claims.record(run, node, replaces=replaced, replace_reason=reason)
    if started.name in await claims.start(run, [started]):
        return None
    if replaced_claim is not None and replaced in run.state.claims:  # it may have ended
        replaced_claim.replaced_by = started.name
    return started.name


async def _find_consolidation(
    run: PoolRun, candidates: list[str], ready: dict[str, PoolClaim]
) -> ConsolidationDecision:
    state = run.state
    disruption = state.specs.pool.disruption
    return await workflow.execute_activity_method(
        ConsolidationActivities.find_consolidation,
        ConsolidationInput(
            pool_name=run.name,
            namespace=run.namespace,
            pool=state.specs.pool,
            node_class=state.specs.node_class,
            candidates=candidates,
            ready={name: c.offering for name, c in ready.items()},
            min_savings_eur_per_hour=disruption.consolidation_min_savings_eur_per_hour,
            failed_offerings=sorted(state.failed_offerings),
            stable_since={
                name: ready[name].ready_at or ready[name].started_at for name in candidates
            },
            min_stable_s=parse_duration(disruption.consolidate_after),
        ),
        start_to_close_timeout=PLANNING,
        heartbeat_timeout=QUICK_HEARTBEAT,
        retry_policy=POOL_CALL,
        summary="look for consolidation",
    )


def _at_floor(run: PoolRun) -> bool:
    """True when one more node going would take the pool under its minNodes."""
    state = run.state
    going = set(state.permits)
    staying = [c for c in run.live_claims() if c.name not in going]
    return len(staying) <= state.specs.pool.limits.min_nodes
