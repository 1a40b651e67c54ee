"""What the pool hears, taken in: the trigger's demand and specs, the watcher's usage reports,
its claims' reports. Each only changes the state and marks the pool dirty; the next round
decides what to do about it. Keyed by pod uid and claim name, so a repeat changes nothing."""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

from api.claims import drift_hash
from api.messages import FailureReason
from api.nodeclaim import NodeClaimPhase
from api.nodepool.messages import ClaimReport, DemandUpdate, NodeUsage, PoolSpecs
from workflows.nodepool import claims, reporting
from workflows.nodepool.state import LIVE_PHASES, PoolRun

# Claims that fail on their configuration hold new claims back this long, doubling.
_CONFIG_BACKOFF_S = 30.0
_CONFIG_BACKOFF_MAX_S = 600.0


def demand(run: PoolRun, update: DemandUpdate) -> None:
    state = run.state
    if update.specs:
        apply_specs(run, update.specs)
    if update.pool_deleted:
        run.pool_deleted()
    if update.full_resync:
        listed = {pod.uid for pod in update.pods}
        for uid in [uid for uid in state.pending if uid not in listed]:
            run.pod_resolved(uid)
    run.pods_pending(update.pods)
    for uid in update.resolved:
        run.pod_resolved(uid)
    run.wake()


def node_usage(run: PoolRun, usage: NodeUsage) -> None:
    """What the scheduler put on the pool's new nodes (the latest figures replace the
    earlier ones)."""
    state = run.state
    for uid in usage.bound:
        if uid in state.pending:
            run.pod_resolved(uid)
    for name, requested in usage.requested.items():
        claim = state.claims.get(name)
        if claim is not None:
            claim.bound = requested
    run.wake()


def claim_report(run: PoolRun, report: ClaimReport) -> None:
    state = run.state
    name = report.claim_name
    # The claim's own time of the report: a value in history, never the pool's clock.
    at = report.at or workflow.now()
    if report.failed_offering:
        until = at + timedelta(seconds=run.input.failed_offering_ttl_s)
        run.offering_failed(report.failed_offering, until)
    claim = state.claims.get(name)
    if claim is None:
        if report.phase == NodeClaimPhase.FAILED and name in run.forgotten_by_look:
            # The look found it ended a moment before its report landed: the failure still
            # counts (a configuration error holds the next claims back).
            _claim_failed(run, report, at, claims.made_from_when_forgotten(run, name))
            run.wake()
        return
    if report.phase == NodeClaimPhase.READY and claim.ready_at is None:
        run.claim_ready(claim, at)
    claim.phase = report.phase
    if report.offering:
        claim.offering = report.offering
    if report.phase == NodeClaimPhase.READY and claim.replaces in state.claims:
        # The replacement is up: the replaced node may now go, within the budgets.
        run.replaced_may_go(claim.replaces, claim.replace_reason)
    if report.reason.startswith("DisruptionBlocked"):
        run.disruption_blocked_by(name, report.reason)
    elif report.phase == NodeClaimPhase.READY:
        run.disruption_unblocked(name)
    if report.phase == NodeClaimPhase.FAILED:
        _claim_failed(run, report, at, claim.drift_hash)
    if report.phase not in LIVE_PHASES:
        run.forget_disruption(claim)
    if report.phase.is_final:
        run.claim_dropped(name)
    run.wake()


def apply_specs(run: PoolRun, specs: PoolSpecs) -> None:
    state = run.state
    current = state.specs
    if state.deleted and specs.pool_uid and specs.pool_uid != current.pool_uid:
        # A NodePool created again under the name (a late word from the deleted one, the
        # same uid, does not bring it back).
        run.pool_created_again()
    if not specs.supersedes(current):
        return
    if (specs.pool, specs.node_class) != (current.pool, current.node_class):
        # Whatever the failed claims tripped on may be fixed now: try again at once.
        end_config_backoff(run)
    if specs.edited_since(current):
        # Edited (or created again: a new object has no status yet), perhaps from a spec the
        # trigger marked invalid on the resource: the status is written again even if the
        # pool's own view of it is the same.
        reporting.rewrite_status(run)
    state.specs = specs


def end_config_backoff(run: PoolRun) -> None:
    run.config_retry()
    run.state.config_failures = 0


def _claim_failed(run: PoolRun, report: ClaimReport, at: datetime, made_from: str) -> None:
    """A claim failed. On its configuration (a missing Secret, a NodeClass the cloud refuses)
    the next claim would fail the same way: new claims are held back, doubling the wait,
    until the specs change. Other failures (capacity everywhere) just re-plan, and so does a
    configuration failure of a claim made from specs changed since (`made_from`, its drift
    hash): the change may be the fix."""
    if report.failure_reason != FailureReason.INVALID_CONFIG.value:
        return
    state = run.state
    if made_from and made_from != drift_hash(state.specs.pool, state.specs.node_class):
        workflow.logger.info(
            "claim %s failed on specs changed since: %s", report.claim_name, report.reason
        )
        return
    state.config_failures += 1
    backoff = min(_CONFIG_BACKOFF_S * 2 ** (state.config_failures - 1), _CONFIG_BACKOFF_MAX_S)
    run.config_failing(report.reason, at + timedelta(seconds=backoff))
