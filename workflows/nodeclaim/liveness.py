"""Liveness: serve until something says the node should go, and say why.

Involuntary reasons (node lost, expired, a spot interruption, a forced scale-down) end it at
once. Voluntary ones (empty, drifted, underutilized, a plain scale-down) of a pool's claim
wait for the pool's disruption permit, and for do-not-disrupt pods to leave. Deadlines are
alarms (`workflows/alarms.py`); the decisions are `workflows/decisions/claim_disruption.py`'s. A
slow poll of the node and the VM is the safety net for a lost signal; the run continues as
new when Temporal suggests it, so an idle claim's history stays short.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from activities.compute import ComputeActivities
from activities.kube import KubeActivities
from api import events
from api.nodeclaim import ConditionType
from api.nodepool.messages import DisruptionPermit, DisruptionRequest, PoolSignal
from workflows.decisions import claim_disruption
from workflows.failures import cause
from workflows.nodeclaim import node, reporting
from workflows.nodeclaim.calls import look, on_node
from workflows.nodeclaim.state import POLL, ClaimState, instance_ref
from workflows.retries import CLAIM_CALL
from workflows.timeouts import KUBE_CALL, QUICK_HEARTBEAT


async def live(state: ClaimState) -> str:
    """Serve until a reason to go; return it."""
    timings = state.input.timings
    alarms = state.alarms
    while True:
        state.begin_round()
        await node.warn_of_stranger(state)
        next_poll_at = state.poll_due_at(timings.ready_poll_interval_s)
        forced = _involuntary(state)
        if forced:
            alarms.clear()
            return forced
        _update_empty_condition(state)
        wanted = claim_disruption.voluntary_reason(_view(state), alarms.reached)
        poll_due = alarms.reached(POLL, next_poll_at)
        alarms.settle()
        if wanted and await _may_disrupt(state, wanted):
            alarms.clear()
            return wanted
        if not wanted and state.asked is not None:
            await _ask_pool(state, PoolSignal.WITHDRAW_DISRUPTION, state.asked)
            state.asked = None
        if workflow.info().is_continue_as_new_suggested():
            await _continue_as_new(state)
        if poll_due:
            state.poll_taken()
            await _safety_net_poll(state)
            continue
        state.update_details()
        await workflow.wait_condition(lambda: state.dirty)


async def still_empty_once_cordoned(state: ClaimState) -> bool:
    """Cordon, then look again: pods the scheduler bound since the watcher last saw the node
    make it busy after all (as Karpenter validates a disruption after tainting). Busy:
    uncordon, give the permit back, and live on."""
    ref = state.node_ref()
    seen = await look(KubeActivities.cordon_and_look, ref, "taint + cordon, still empty?")
    state.cordoned = True
    if not seen.exists or seen.empty:
        return True
    await on_node(KubeActivities.uncordon_node, ref, f"uncordon: {seen.pod_count} pods arrived")
    state.cordoned = False
    node.pods_arrived(state, seen.pod_count)
    state.permit_dropped()
    if state.asked is not None and state.budgeted:
        await _ask_pool(state, PoolSignal.WITHDRAW_DISRUPTION, state.asked)
    state.asked = None
    state.event(f"empty scale-down called off: {seen.pod_count} pods arrived")
    return False


def _involuntary(state: ClaimState) -> str | None:
    """Reasons no budget holds back, each deadline reached only by its alarm."""
    reason = claim_disruption.involuntary_reason(_view(state), state.alarms.reached)
    if reason == claim_disruption.EXPIRED:
        state.status.set_condition(ConditionType.EXPIRED, True, "Expired", "", workflow.now())
    return reason


def _view(state: ClaimState) -> claim_disruption.ClaimView:
    assert state.status.created_at is not None
    return claim_disruption.ClaimView(
        disruption=state.spec.disruption,
        created_at=state.status.created_at,
        node=state.node,
        scale_down=state.scale_down,
        permit=state.permit,
        budgeted=state.budgeted,
        instance_gone=state.instance_gone,
    )


async def _may_disrupt(state: ClaimState, reason: str) -> bool:
    """True when the node may go now for `reason`: no do-not-disrupt pod, and a permit."""
    blockers = state.node.do_not_disrupt if state.node else []
    if blockers:
        message = "do-not-disrupt pods: " + ", ".join(sorted(blockers))
        if state.blocked_by != message:
            state.blocked_by = message
            state.event(f"disruption ({reason}) blocked by {message}")
            await reporting.publish(
                state,
                reason=f"DisruptionBlocked: {message}",
                events=[reporting.notice(state, events.DISRUPTION_BLOCKED, message)],
            )
        if state.asked is not None:
            await _ask_pool(state, PoolSignal.WITHDRAW_DISRUPTION, state.asked)
            state.asked = None
        state.permit_dropped()
        return False
    state.blocked_by = None
    if not state.budgeted:
        return True
    if state.permit is not None and state.permit.reason == reason:
        return True
    if state.asked != reason:
        await _ask_pool(state, PoolSignal.REQUEST_DISRUPTION, reason)
        state.asked = reason
        state.event(f"waiting for a disruption permit ({reason})")
    return False


async def _ask_pool(state: ClaimState, signal: PoolSignal, reason: str) -> None:
    pool_id = state.input.pool_workflow_id
    assert pool_id is not None
    request = DisruptionRequest(claim_name=state.name, reason=reason)
    try:
        await workflow.get_external_workflow_handle(pool_id).signal(signal, request)
    except Exception as err:  # no pool any more: nobody budgets this claim
        workflow.logger.warning("pool %s unreachable: %s", pool_id, err)
        state.permitted(DisruptionPermit(reason=reason))


async def _safety_net_poll(state: ClaimState) -> None:
    """The node and the VM, looked at side by side, in one workflow task (an idle claim's
    poll is most of its history)."""
    outcomes = await asyncio.gather(
        node.poll(state), _check_instance(state), return_exceptions=True
    )
    # A failed look fails the same way, once the other is done.
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


async def _check_instance(state: ClaimState) -> None:
    """Is the VM still there? A VM deleted behind our back means the node is lost."""
    provider = state.status.provider
    if provider is None:
        return
    try:
        found = await workflow.execute_activity_method(
            ComputeActivities.get_instance,
            instance_ref(state, provider, state.instance_id),
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=CLAIM_CALL,
            summary="is the VM still there?",
        )
    except ActivityError as err:
        if is_cancelled_exception(err):
            raise
        # An expired credential must not end a node that is fine: the next poll looks again,
        # and the node watcher still reports a node that goes.
        workflow.logger.warning("could not look for the VM: %s", cause(err))
        return
    state.instance_gone = found is None or found.state == "terminated"


async def _continue_as_new(state: ClaimState) -> None:
    await workflow.wait_condition(workflow.all_handlers_finished)
    workflow.continue_as_new(
        state.input.model_copy(
            update={
                "resume": state.status,
                "resume_node": state.observed,
                "resume_instance_id": state.instance_id,
            }
        )
    )


def _update_empty_condition(state: ClaimState) -> None:
    node_now = state.node
    empty = bool(node_now and node_now.empty_since)
    state.status.set_condition(
        ConditionType.EMPTY,
        empty,
        "Empty" if empty else "Busy",
        f"{node_now.pod_count if node_now else 0} pods",
        node_now.empty_since if node_now and node_now.empty_since else workflow.now(),
    )
