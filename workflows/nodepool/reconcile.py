"""One round of the pool: what time has brought, permits, drift and consolidation, then the
pods no claim covers. A round runs whenever the pool is dirty (news or an alarm)."""

from __future__ import annotations

from workflows.decisions import pool as pool_rules
from workflows.nodepool import claims, deadlines, disruption, planning
from workflows.nodepool.state import LIVE_PHASES, PoolRun


async def reconcile(run: PoolRun) -> None:
    state = run.state
    facts = deadlines.time_facts(run)
    for key in facts.expired_offerings:
        del state.failed_offerings[key]
    for claim in state.claims.values():
        if not (claim.nominated or claim.filling) or claim.phase not in LIVE_PHASES:
            continue  # nothing to lapse, nothing nominated that could overflow
        if claim.name in facts.lapsed_nominations:
            claim.nominated.clear()
            claim.filling = False
        elif left_out := pool_rules.overflowing(claim, state.pending):
            # The scheduler filled its node with others: those left out are planned again.
            claim.nominated = [uid for uid in claim.nominated if uid not in left_out]
    if facts.config_retry_due:
        run.config_retry()
    if facts.periodic_look:
        await claims.forget_those_gone(run)
    await disruption.grant_permits(run)
    if state.deleted:
        # Nothing new for a deleted pool: no drift replacement, no consolidation's, no floor,
        # no pods (the trigger resolved them).
        state.blocked.clear()
        return
    await disruption.replace_drifted(run)
    await disruption.consolidate(run, facts.consolidation_due)
    await planning.plan_uncovered(run, facts)
