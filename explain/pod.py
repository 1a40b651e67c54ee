"""`cloudburst explain pod`: every pool's verdict for the pod, the pool's own view of it
(nominated to a claim, held back, or why it waits), that claim, and the pod's Events.

The pool verdicts are the trigger's own (`cluster/matching.py`); what the pool did with the pod
is its `pod` query's answer. The summary is the one line that says what the pod waits for.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from api.explain import ClaimView, EventView, PodExplanation, PoolPodView, PoolVerdictView
from api.labels import NODECLAIM, NODEPOOL, NODEPOOL_NAMESPACE
from cluster.matching import Match
from cluster.pods import is_daemonset_pod, is_finished_pod, is_unschedulable
from explain.common import duration_text, price_text


def pool_verdicts(match: Match) -> list[PoolVerdictView]:
    return [
        PoolVerdictView(
            pool=v.name,
            serves_namespace=v.serves,
            hosts=v.hosts,
            reason=v.why,
            weight=v.weight,
            chosen=v.pool == match.chosen,
        )
        for v in match.verdicts
    ]


def explain_pod(
    pod: Any,
    match: Match,
    *,
    worker_namespace: str,
    in_pool: PoolPodView | None = None,
    pool_unanswered: str | None = None,
    claim: ClaimView | None = None,
    node_labels: dict[str, str] | None = None,
    events: list[EventView] | None = None,
    now: datetime,
) -> PodExplanation:
    """The answer for one pod (the client's V1Pod), from what was read about it."""
    meta, spec = pod.metadata, pod.spec
    chosen = f"{match.chosen[0]}/{match.chosen[1]}" if match.chosen else None
    summary = _summary(
        pod, match, chosen, worker_namespace, in_pool, pool_unanswered, claim, node_labels, now
    )
    return PodExplanation(
        pod=f"{meta.namespace}/{meta.name}",
        phase=(pod.status.phase if pod.status else None) or "Unknown",
        node_name=spec.node_name,
        summary=summary,
        pools=pool_verdicts(match),
        chosen_pool=chosen,
        in_pool=in_pool,
        pool_unanswered=pool_unanswered,
        claim=claim,
        events=events or [],
    )


def _summary(
    pod: Any,
    match: Match,
    chosen: str | None,
    worker_namespace: str,
    in_pool: PoolPodView | None,
    pool_unanswered: str | None,
    claim: ClaimView | None,
    node_labels: dict[str, str] | None,
    now: datetime,
) -> str:
    meta, spec = pod.metadata, pod.spec
    if spec.node_name:
        labels = node_labels or {}
        if NODECLAIM in labels:
            owner = f"{labels.get(NODEPOOL_NAMESPACE, '?')}/{labels.get(NODEPOOL, '?')}"
            return f"running on node {spec.node_name}, a node of NodePool {owner}"
        return f"running on node {spec.node_name}"
    if is_finished_pod(pod):
        return f"finished ({pod.status.phase}): nothing to place"
    if meta.deletion_timestamp:
        return "being deleted: nothing to place"
    if is_daemonset_pod(pod):
        return "a DaemonSet's pod: the DaemonSet controller places it on every node, not a pool"
    if spec.scheduling_gates:
        gates = ", ".join(g.name for g in spec.scheduling_gates)
        return f"held by scheduling gates ({gates}): the scheduler has not tried it yet"
    if not is_unschedulable(pod):
        return (
            "pending, but not marked Unschedulable by the scheduler (yet): pools plan only for "
            "pods the scheduler could not place"
        )
    if chosen is None:
        return "no NodePool takes it: " + match.reason(meta.namespace, worker_namespace)
    if pool_unanswered is not None:
        return f"NodePool {chosen} takes it; the pool did not answer: {pool_unanswered}"
    if in_pool is None or not in_pool.known:
        return (
            f"NodePool {chosen} takes it, but has not heard of it yet (the trigger tells the "
            "pool within seconds of the pod going Unschedulable; is a trigger running?)"
        )
    return _in_pool_summary(chosen, in_pool, claim, now)


def _in_pool_summary(chosen: str, view: PoolPodView, claim: ClaimView | None, now: datetime) -> str:
    if view.nominated_to:
        if claim is not None:
            age = f", {duration_text(claim.age_s)} old" if claim.age_s is not None else ""
            where = f"{claim.offering} {price_text(claim)}" if claim.offering else "its offering"
            return (
                f"waiting for NodeClaim {claim.namespace}/{claim.name} ({claim.phase}{age}) "
                f"of NodePool {chosen}: {where}"
            )
        offering = view.offering.key if view.offering else "?"
        phase = view.claim_phase.value if view.claim_phase else "?"
        return f"waiting for NodeClaim {view.nominated_to} ({phase}) on {offering}"
    if view.blocked:
        return f"NodePool {chosen} cannot place it: {view.blocked}"
    if view.config_error:
        return f"NodePool {chosen} holds new claims back: {view.config_error}"
    if view.held_until is not None:
        left = (view.held_until - now).total_seconds()
        return (
            f"NodePool {chosen} holds its node back {duration_text(left)} more for the rest of "
            "the burst (a node its pods fill only partly)"
        )
    return f"NodePool {chosen} is planning it"
