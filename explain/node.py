"""`cloudburst explain node`: why a node is still here.

The reasons a node stays, in the order they bite: its claim is not Ready yet (or is already
going); pods run on it (and what consolidation found: the cheaper replacement, or why none
fits); the empty-TTL still runs; do-not-disrupt pods; a disruption it waits for a budget or a
permit for; drift waiting for its replacement; expiry. Read from the claim's and the pool's
queries and the cluster (its Node, the pods on it, the NodePool).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from api.explain import Blocker, ClaimView, EventView, NodeExplanation
from api.nodeclaim import ClaimDisruption, ConditionType, NodeClaimPhase, NodeClaimStatus
from api.nodepool import NodePoolSpec
from api.nodepool.messages import PoolStatus
from cluster.pods import is_do_not_disrupt, is_left_alone
from explain.common import duration_text


def explain_node(
    node_name: str,
    *,
    claim: ClaimView | None,
    status: NodeClaimStatus | None,
    disruption: ClaimDisruption | None,
    pods: list[Any],
    pool: str | None,
    pool_spec: NodePoolSpec | None,
    pool_status: PoolStatus | None,
    pool_unanswered: str | None = None,
    events: list[EventView] | None = None,
    now: datetime,
) -> NodeExplanation:
    """The answer for one node, from what was read about it (`pods`: the client's V1Pods
    bound to it)."""
    workload = [p for p in pods if not is_left_alone(p)]
    pinned = [f"{p.metadata.namespace}/{p.metadata.name}" for p in workload if is_do_not_disrupt(p)]
    answer = NodeExplanation(
        node=node_name,
        claim=claim,
        pool=pool,
        summary="",
        workload_pods=[f"{p.metadata.namespace}/{p.metadata.name}" for p in workload],
        do_not_disrupt=pinned,
        pool_unanswered=pool_unanswered,
        events=events or [],
    )
    if claim is None or status is None:
        answer.summary = (
            "not a Cloudburst node (no NodeClaim of its name): another autoscaler or an "
            "operator keeps it"
        )
        return answer
    blockers = answer.blockers
    _phase(status, blockers)
    if pinned:  # first: these keep it whatever else changes
        blockers.append(
            Blocker(kind="DoNotDisrupt", message="do-not-disrupt pods: " + ", ".join(pinned))
        )
    _empty(answer, status, disruption, now)
    if pool_status is not None:
        _pool_side(answer, claim.name, pool_status)
    _consolidation(answer, claim.name, pool_spec, pool_status)
    _drift(answer, claim.name, status, pool_status)
    _expiry(answer, status, disruption, now)
    answer.summary = (
        blockers[0].message if blockers else "nothing keeps it: it may go at the next look"
    )
    return answer


def _phase(status: NodeClaimStatus, blockers: list[Blocker]) -> None:
    phase = status.phase
    if phase == NodeClaimPhase.DELETING:
        why = status.deletion_reason or "?"
        blockers.append(
            Blocker(kind="Deleting", message=f"already going ({why}): draining, then deleted")
        )
    elif phase.is_final:
        blockers.append(Blocker(kind="Gone", message=f"its claim is {phase.value}"))
    elif phase != NodeClaimPhase.READY:
        blockers.append(
            Blocker(
                kind="NotReady",
                message=f"its claim is {phase.value}: a node is disrupted only once Ready",
            )
        )


def _empty(
    answer: NodeExplanation,
    status: NodeClaimStatus,
    disruption: ClaimDisruption | None,
    now: datetime,
) -> None:
    """Busy, or empty since when, and how long the empty-TTL still runs."""
    if answer.workload_pods:
        count = len(answer.workload_pods)
        shown = ", ".join(answer.workload_pods[:5]) + (" …" if count > 5 else "")
        answer.blockers.append(Blocker(kind="NotEmpty", message=f"{count} pods run on it: {shown}"))
        return
    condition = status.condition(ConditionType.EMPTY)
    if condition is None or condition.status != "True":
        return
    answer.empty_since = condition.last_transition_time
    ttl = disruption.ttl_seconds_after_empty if disruption else None
    if ttl is None:
        answer.blockers.append(
            Blocker(
                kind="EmptyTTL",
                message="empty, and ttlSecondsAfterEmpty is unset: empty nodes stay",
            )
        )
        return
    left = (answer.empty_since + timedelta(seconds=ttl) - now).total_seconds()
    answer.empty_ttl_remaining_s = max(0.0, left)
    if left > 0:
        answer.blockers.append(
            Blocker(
                kind="EmptyTTL",
                message=f"empty for {duration_text(ttl - left)}: goes in {duration_text(left)} "
                f"(ttlSecondsAfterEmpty={ttl})",
            )
        )


def _pool_side(answer: NodeExplanation, name: str, pool: PoolStatus) -> None:
    """A disruption asked for and waiting on a budget, or permitted and under way."""
    answer.disruptions_allowed = dict(pool.disruptions_allowed)
    answer.permit = pool.permits.get(name)
    answer.queued_for = pool.disruption_queue.get(name)
    if answer.queued_for is not None:
        reason = answer.queued_for
        allowed = pool.disruptions_allowed.get(reason, pool.disruptions_allowed.get("Manual", 0))
        active = [b for b in pool.budgets if b.active]
        budgets = (
            ", ".join(
                f"nodes={b.nodes}"
                + (f" for {','.join(b.reasons)}" if b.reasons else "")
                + (f" ({b.schedule} for {b.duration})" if b.schedule else "")
                for b in active
            )
            or "none active"
        )
        answer.blockers.append(
            Blocker(
                kind="Budget",
                message=f"waits for a disruption budget ({reason}): {allowed} more may go now "
                f"(budgets: {budgets}; {len(pool.permits)} disrupting)",
            )
        )
    elif answer.permit is not None:
        answer.blockers.append(
            Blocker(kind="Permitted", message=f"permitted to go ({answer.permit}): draining soon")
        )
    blocked = pool.disruption_blocked.get(name)
    if blocked and not answer.do_not_disrupt:
        answer.blockers.append(Blocker(kind="DoNotDisrupt", message=blocked))


def _consolidation(
    answer: NodeExplanation, name: str, spec: NodePoolSpec | None, pool: PoolStatus | None
) -> None:
    if spec is not None and spec.disruption.consolidation_policy == "WhenEmpty":
        answer.consolidation = (
            "off: the pool's consolidationPolicy is WhenEmpty (WhenEmptyOrUnderutilized moves "
            "pods off underused nodes)"
        )
    elif pool is not None:
        answer.consolidation = pool.consolidation_verdicts.get(name) or (
            f"not looked at yet (the pool's last look: {pool.consolidation or 'none'})"
        )
    if answer.workload_pods and answer.consolidation:
        answer.blockers.append(
            Blocker(kind="Consolidation", message=f"consolidation: {answer.consolidation}")
        )


def _drift(
    answer: NodeExplanation, name: str, status: NodeClaimStatus, pool: PoolStatus | None
) -> None:
    condition = status.condition(ConditionType.DRIFTED)
    if condition is None or condition.status != "True":
        return
    answer.drifted = True
    claim = next((c for c in pool.claims if c.name == name), None) if pool else None
    if claim is not None and claim.replaced_by:
        message = f"drifted ({condition.message}): replaced by {claim.replaced_by} once it is Ready"
    else:
        message = f"drifted ({condition.message}): waits for a budget to start its replacement"
    answer.blockers.append(Blocker(kind="Drifted", message=message))


def _expiry(
    answer: NodeExplanation,
    status: NodeClaimStatus,
    disruption: ClaimDisruption | None,
    now: datetime,
) -> None:
    ttl = disruption.ttl_seconds_until_expired if disruption else None
    if ttl is None or status.created_at is None:
        return
    answer.expires_at = status.created_at + timedelta(seconds=ttl)
    left = (answer.expires_at - now).total_seconds()
    answer.blockers.append(
        Blocker(
            kind="Expiry",
            message=f"expires in {duration_text(left)} (ttlSecondsUntilExpired={ttl}), "
            "whatever runs on it",
        )
    )
