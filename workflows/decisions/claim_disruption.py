"""Why a claim's node should go now, if it should: the claim's disruption decisions.

Pure: the claim passes what it knows and `reached(key, at)`, its way of asking whether a
deadline has come (an alarm in the workflow, see workflows/alarms.py; a plain function in
tests). Karpenter splits these the same way: involuntary reasons no budget holds back
(expiry, a lost node, a forced request) and voluntary ones that wait for the pool's permit
and for do-not-disrupt pods (empty, drift, consolidation, an operator's plain request).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from api.messages import NodeObservation, ScaleDownRequest
from api.nodeclaim import ClaimDisruption, DisruptionReason
from api.nodepool.messages import DisruptionPermit

Reached = Callable[[str, datetime], bool]
# Disruptions the pool starts itself, within its budgets.
POOL_CHOSEN_REASONS = (DisruptionReason.DRIFTED, DisruptionReason.UNDERUTILIZED)
EXPIRED = DisruptionReason.EXPIRED
NODE_LOST = DisruptionReason.NODE_LOST
EMPTY = DisruptionReason.EMPTY
# The provider is reclaiming the (spot) VM: drain and delete at once, before it goes.
INTERRUPTED = DisruptionReason.INTERRUPTED


@dataclass(frozen=True)
class ClaimView:
    """What a claim knows that bears on whether its node should go."""

    disruption: ClaimDisruption
    created_at: datetime
    node: NodeObservation | None
    scale_down: ScaleDownRequest | None
    permit: DisruptionPermit | None
    # A pool budgets this claim's voluntary disruptions (None: a claim made by hand).
    budgeted: bool
    instance_gone: bool


def involuntary_reason(claim: ClaimView, reached: Reached) -> str | None:
    """Reasons no budget holds back: a forced (or unbudgeted) request, the node or its VM
    gone, a spot interruption notice, the node not Ready past its grace period, expiry."""
    request = claim.scale_down
    if request and (request.force or not claim.budgeted):
        return request.reason
    node = claim.node
    if claim.instance_gone or (node and not node.exists):
        return NODE_LOST
    if node and node.interruption:
        # The VM has minutes at most: no budget, TTL or do-not-disrupt pod can keep it.
        return INTERRUPTED
    disruption = claim.disruption
    if node and node.not_ready_since:
        grace = timedelta(seconds=disruption.node_unreachable_grace_period_seconds)
        if reached("node unreachable", node.not_ready_since + grace):
            return NODE_LOST
    if disruption.ttl_seconds_until_expired is not None:
        expires = claim.created_at + timedelta(seconds=disruption.ttl_seconds_until_expired)
        if reached("expiry", expires):
            return EXPIRED
    return None


def voluntary_reason(claim: ClaimView, reached: Reached) -> str | None:
    """Reasons that wait for a permit: the pool's choice (drift, consolidation), an
    operator's plain request, the node empty past its TTL. Drifted alone is no reason: the
    pool sends the permit once a replacement runs."""
    if claim.permit is not None and claim.permit.reason in POOL_CHOSEN_REASONS:
        return claim.permit.reason
    if claim.scale_down:
        return claim.scale_down.reason
    node = claim.node
    ttl = claim.disruption.ttl_seconds_after_empty
    empty = node.empty_since if node else None
    if empty and ttl is not None and reached("empty TTL", empty + timedelta(seconds=ttl)):
        return EMPTY
    return None
