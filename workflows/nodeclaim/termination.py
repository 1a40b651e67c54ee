"""Termination: taint and cordon, drain, delete the Node and the VM, confirm the VM is gone;
and a failed claim's cleanup, after it has said why it failed.

Whatever ends a claim, no node or VM it may have started outlives it: the VM is deleted by
id, or found by the claim's label on every provider a create was called on, and that delete
is retried until it succeeds. Only the claim's own Node is touched (`node.py`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

from activities.compute import ComputeActivities
from activities.kube import KubeActivities
from activities.tailscale import TailscaleActivities
from api import events
from api.messages import DrainInput, TailnetDeviceRef
from api.nodeclaim import ConditionType, NodeClaimPhase
from workflows.decisions import claim_disruption
from workflows.failures import cause
from workflows.nodeclaim import reporting
from workflows.nodeclaim.calls import delete_bootstrap, on_node, together
from workflows.nodeclaim.state import ClaimFailed, ClaimState, instance_ref
from workflows.retries import CLAIM_CALL, SHOWING, VM_DELETE
from workflows.timeouts import HEARTBEAT, KUBE_CALL, QUICK_HEARTBEAT, VM_CALL


async def delete(state: ClaimState, reason: str) -> None:
    """Deleting → Deleted: cordon, drain, delete Node and VM, remove the tailnet device."""
    status = state.status
    now = workflow.now()
    status.deletion_reason = reason
    status.set_condition(ConditionType.DISRUPTING, True, reason, "", now)
    state.set_phase(NodeClaimPhase.DELETING, f"deleting: {reason}")
    interrupted = reason == claim_disruption.INTERRUPTED
    if interrupted:
        notice = state.node.interruption if state.node else None
        status.set_condition(
            ConditionType.INTERRUPTED, True, "Interrupted", f"provider notice: {notice}", now
        )
    showing = reporting.publish(
        state,
        reason=reason,
        events=[reporting.deletion_event(state, reason)],
        # Spot capacity of this type is being reclaimed: the pool plans elsewhere for a
        # while (its failed-offering cache), as Karpenter does after an interruption.
        failed_offering=reporting.offering_key(state) if interrupted else None,
    )
    await together(showing, _cordon_and_drain(state, reason, now))
    # Drained: the Node and the VM go together (a kubelet left running without its Node
    # object would register it again; Karpenter even ends the VM first).
    await together(
        on_node(KubeActivities.delete_node, state.node_ref(), "delete Node"),
        _delete_instances(state),
    )
    await _remove_tailnet_device(state)
    await delete_bootstrap(state)
    status.deleted_at = workflow.now()
    state.set_phase(NodeClaimPhase.DELETED, f"node and VM deleted ({reason})")
    await reporting.publish(state, reason=reason, remove=True)


async def fail(state: ClaimState, failure: ClaimFailed) -> None:
    """Say so first — the NodeClaim (Ready=False, reason, message), an Event, the pool (which
    forgets the claim and plans its pods again) — then clean up. A cleanup step that fails
    is logged; the error the claim fails with is always the first cause."""
    status = state.status
    status.failure_reason = failure.reason.value
    status.failure_message = failure.message
    status.set_condition(
        ConditionType.READY, False, failure.reason.value, failure.message, workflow.now()
    )
    state.set_phase(NodeClaimPhase.FAILED, f"failed: {failure.message}")
    await reporting.publish(
        state,
        reason=failure.message,
        failure_reason=failure.reason,
        events=[reporting.warning(state, events.FAILED_PROVISIONING, failure.message)],
    )
    for step in (
        lambda: on_node(KubeActivities.delete_node, state.node_ref(), "delete Node"),
        lambda: _delete_instances(state),  # retries every error until the VM is gone
        lambda: _remove_tailnet_device(state),
        lambda: delete_bootstrap(state),
    ):
        try:
            await step()
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            workflow.logger.warning("cleanup after failure: %s", cause(err))
    # The resource stays, Failed, for `kubectl get nodeclaims` to show why.
    await reporting.publish(
        state, reason=failure.message, failure_reason=failure.reason, remove=True, keep=True
    )
    raise ApplicationError(failure.message, type=failure.reason.value, non_retryable=True)


async def _cordon_and_drain(state: ClaimState, reason: str, now: datetime) -> None:
    if state.node is None or not state.node.exists or reason == claim_disruption.NODE_LOST:
        return  # no node of its own to drain
    if not state.cordoned:  # cordoned already to check it was still empty
        await on_node(KubeActivities.cordon_node, state.node_ref(), "taint + cordon")
    grace = state.spec.disruption.termination_grace_period_seconds
    timings = state.input.timings
    request = state.scale_down
    drained = await workflow.execute_activity_method(
        KubeActivities.drain_node,
        DrainInput(
            node_name=state.name,
            instance_id=state.instance_id,
            force_after=now + timedelta(seconds=grace),
            grace_s=grace,
            poll_interval_s=timings.drain_poll_interval_s,
            eviction_retry_s=timings.eviction_retry_s,
            hold_do_not_disrupt=not (request and request.force),
        ),
        start_to_close_timeout=timedelta(seconds=grace + 300),
        heartbeat_timeout=HEARTBEAT,
        retry_policy=CLAIM_CALL,
        summary="drain (Eviction API)",
    )
    state.event(
        f"drained: {drained.evicted} evicted, {drained.forced} forced, "
        f"{drained.left_alone} DaemonSet/mirror pods left"
    )


async def _delete_instances(state: ClaimState) -> None:
    """Delete every VM this claim may have made, found by id or else by the claim label."""
    providers = {o.provider for o in state.launched_on}
    if state.status.provider:
        providers.add(state.status.provider)
    for provider in sorted(providers):
        instance_id = state.instance_id if provider == state.status.provider else None
        await workflow.execute_activity_method(
            ComputeActivities.delete_instance,
            instance_ref(state, provider, instance_id),
            start_to_close_timeout=VM_CALL,
            heartbeat_timeout=HEARTBEAT,
            retry_policy=VM_DELETE,
            summary=f"delete VM on {provider}",
        )
    state.event("VM deleted and confirmed gone")


async def _remove_tailnet_device(state: ClaimState) -> None:
    """With per-node keys (Tailscale OAuth), the node's device leaves the tailnet with it.
    A failure is logged, not raised: the device is ephemeral and ages out anyway."""
    tailscale = state.input.node_class.tailscale
    if tailscale is None or not tailscale.minted:
        return
    try:
        await workflow.execute_activity_method(
            TailscaleActivities.remove_tailnet_device,
            TailnetDeviceRef(
                node_name=state.name,
                namespace=state.namespace,
                node_class_name=state.input.node_class_name,
                node_class=state.input.node_class,
            ),
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=SHOWING,
            summary="remove the node from the tailnet",
        )
    except ActivityError as err:
        if is_cancelled_exception(err):
            raise
        workflow.logger.warning("tailnet device not removed: %s", cause(err))
