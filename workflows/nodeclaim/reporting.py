"""What a claim tells: its pool (a `claim_report` at each change), the NodeClaim resource and
its Events (the mirror). Both go out side by side in one workflow task."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from activities.mirror import MirrorActivities
from api import events
from api.events import KubeEvent, ObjectRef
from api.messages import FailureReason, MirrorInput
from api.nodeclaim import Offering
from api.nodepool import API_VERSION, ON_DEMAND
from api.nodepool.messages import ClaimReport, PoolSignal
from workflows.decisions import claim_disruption
from workflows.failures import cause
from workflows.nodeclaim.calls import kube_call, together
from workflows.nodeclaim.state import ClaimState
from workflows.retries import SHOWING

# Reason the claim is deleted -> the Event reason users filter on.
_DELETION_EVENTS: dict[str, str] = {
    claim_disruption.EMPTY: events.SCALE_DOWN_EMPTY,
    claim_disruption.EXPIRED: events.EXPIRED,
    claim_disruption.NODE_LOST: events.NODE_LOST,
    claim_disruption.INTERRUPTED: events.INTERRUPTED,
}


async def publish(
    state: ClaimState,
    *,
    offering: Offering | None = None,
    failed_offering: str | None = None,
    reason: str = "",
    events: list[KubeEvent] | None = None,
    remove: bool = False,
    failure_reason: FailureReason | None = None,
    keep: bool = False,
    to_pool: bool = True,
    new: bool = False,
) -> None:
    """Show the change: to the pool that started the claim, on the NodeClaim resource
    (`new`: its first showing; `remove`: its last, `keep` leaving it Failed)."""
    pool_id = state.input.pool_workflow_id if to_pool else None
    report = None
    if pool_id is not None:
        report = ClaimReport(
            claim_name=state.name,
            phase=state.status.phase,
            offering=offering,
            failed_offering=failed_offering,
            reason=reason,
            at=workflow.now(),
            failure_reason=failure_reason.value if failure_reason else None,
        )
    # Both taken now: what the claim is at this moment, whatever arrives meanwhile.
    mirror = MirrorInput(
        claim=state.claim.model_copy(update={"status": state.status.model_copy(deep=True)}),
        events=events or [],
        remove=remove,
        keep=keep,
        new=new,
    )
    await together(_report_to_pool(pool_id, report), _mirror(state, mirror))


async def _report_to_pool(pool_id: str | None, report: ClaimReport | None) -> None:
    if pool_id is None or report is None:
        return
    try:
        handle = workflow.get_external_workflow_handle(pool_id)
        await handle.signal(PoolSignal.CLAIM_REPORT, report)
    except Exception as err:  # the pool is gone: the claim's own life goes on
        workflow.logger.warning("could not report to pool %s: %s", pool_id, err)


async def _mirror(state: ClaimState, mirror: MirrorInput) -> None:
    try:
        shown = await kube_call(
            MirrorActivities.sync_nodeclaim,
            mirror,
            retry_policy=SHOWING,
            summary="mirror NodeClaim resource",
        )
    except ActivityError as err:
        if is_cancelled_exception(err):
            raise
        # A mirror that cannot be written must not stop the node's life.
        workflow.logger.warning("NodeClaim mirror not updated: %s", cause(err))
        return
    if shown.uid:
        state.resource_uid = shown.uid


def deletion_event(state: ClaimState, reason: str) -> KubeEvent:
    event_reason = _DELETION_EVENTS.get(reason, "ScaleDown")
    message = f"Deleting node {state.name}: {reason}"
    if event_reason in (events.NODE_LOST, events.INTERRUPTED):
        return warning(state, event_reason, message)
    return notice(state, event_reason, message)


def notice(state: ClaimState, reason: str, message: str) -> KubeEvent:
    return KubeEvent(regarding=_ref(state), reason=reason, message=message)


def warning(state: ClaimState, reason: str, message: str) -> KubeEvent:
    return KubeEvent(regarding=_ref(state), reason=reason, message=message, type="Warning")


def _ref(state: ClaimState) -> ObjectRef:
    return ObjectRef(
        kind="NodeClaim", name=state.name, namespace=state.namespace, api_version=API_VERSION
    )


def offering_key(state: ClaimState) -> str | None:
    """The offering the claim's VM runs on ("provider/region/type[/spot]"), once known."""
    status = state.status
    if not status.provider or not status.region or not status.instance_type:
        return None
    return Offering(
        provider=status.provider,
        region=status.region,
        instance_type=status.instance_type,
        capacity_type=status.capacity_type or ON_DEMAND,
    ).key
