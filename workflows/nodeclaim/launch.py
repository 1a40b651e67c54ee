"""Launch: the join token and first-boot script, then a VM on the first offering that works.

The offerings are the pool's ranking, cheapest first. For each: render the script for it
(the node registers with its provider, region and instance-type labels; the join token is
reused across renders), create the VM. A capacity error or a provider that keeps failing
moves on to the next offering (the pool hears of the failed one); a configuration error
fails the claim; none left fails it too.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from activities.bootstrap import BootstrapActivities
from activities.compute import ComputeActivities
from api import errors, events, labels
from api import search_attributes as sa
from api.messages import BootstrapInput, CreateInstanceInput, FailureReason, InstanceInfo
from api.nodeclaim import ConditionType, NodeClaimPhase, Offering
from workflows.failures import cause, error_type, is_fatal
from workflows.nodeclaim import reporting
from workflows.nodeclaim.calls import all_of, kube_call
from workflows.nodeclaim.state import ClaimFailed, ClaimState
from workflows.retries import CLAIM_CALL, VM_CREATE
from workflows.timeouts import HEARTBEAT, VM_CALL


async def provision(state: ClaimState) -> None:
    """Pending → Provisioning → a VM created (or a scale-down asked before any was)."""
    # The run's start, a moment in history, dates the claim (deadlines count from it).
    state.status.created_at = state.status.created_at or workflow.info().start_time
    state.set_phase(NodeClaimPhase.PROVISIONING, "preparing join token and first-boot script")
    # The mirror goes beside the first bootstrap, and lands before the launch is reported
    # (or the claim goes on to fail, if the bootstrap cannot be). Only the mirror: the pool
    # that started this claim counts it live already.
    showing = asyncio.create_task(reporting.publish(state, to_pool=False, new=True))
    launching = asyncio.create_task(_launch_first_that_works(state, showing))
    await all_of([showing, launching])
    launching.result()


async def _launch_first_that_works(state: ClaimState, showing: asyncio.Task[None]) -> None:
    failures: list[str] = []
    for offering in state.spec.offerings:
        if state.scale_down:
            return  # nothing launched yet: the claim sees the request and is deleted
        await _prepare_bootstrap(state, offering)
        if not showing.done():
            await showing  # Provisioning is shown before whatever the launch says
        state.launched_on.append(offering)
        try:
            instance = await _create_instance(state, offering)
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            failures.append(f"{offering.key}: {cause(err)}")
            state.event(f"create failed on {offering.key}: {cause(err)}")
            if error_type(err) == errors.CAPACITY_ERROR:
                await reporting.publish(
                    state,
                    failed_offering=offering.key,
                    reason=cause(err),
                    events=[reporting.warning(state, events.FAILED_PROVISIONING, cause(err))],
                )
            if error_type(err) == errors.INVALID_CONFIGURATION:
                raise ClaimFailed(FailureReason.INVALID_CONFIG, cause(err)) from err
            continue
        _launched(state, offering, instance)
        await reporting.publish(
            state,
            offering=offering,
            events=[reporting.notice(state, events.LAUNCHED, f"Launched {offering.key}")],
        )
        return
    raise ClaimFailed(
        FailureReason.NO_CAPACITY, "no offering could be created: " + "; ".join(failures)
    )


async def _prepare_bootstrap(state: ClaimState, offering: Offering) -> None:
    spec = state.spec
    try:
        refs = await kube_call(
            BootstrapActivities.prepare_bootstrap,
            BootstrapInput(
                claim_name=state.name,
                namespace=state.namespace,
                node_pool=spec.node_pool,
                node_class_name=state.input.node_class_name,
                node_class=state.input.node_class,
                labels={
                    **spec.labels,
                    **labels.ownership_labels(
                        state.name, namespace=state.namespace, node_pool=spec.node_pool
                    ),
                },
                taints=spec.taints,
                offering=offering,
                claim_uid=state.input.claim.metadata.uid,
            ),
            retry_policy=CLAIM_CALL,
            summary=f"bootstrap token + script Secret for {offering.key}",
        )
    except ActivityError as err:
        if is_cancelled_exception(err) or not is_fatal(err):
            raise
        # A missing Secret, a script too large: the NodeClass needs fixing.
        raise ClaimFailed(FailureReason.INVALID_CONFIG, cause(err)) from err
    state.bootstrap_stored(refs)
    state.event("token created, script stored in Secret " + refs.script_secret)


async def _create_instance(state: ClaimState, offering: Offering) -> InstanceInfo:
    assert state.bootstrap is not None
    return await workflow.execute_activity_method(
        ComputeActivities.create_instance,
        CreateInstanceInput(
            claim_name=state.name,
            namespace=state.namespace,
            node_pool=state.spec.node_pool,
            node_class_name=state.input.node_class_name,
            node_class=state.input.node_class,
            offering=offering,
            cluster_id=state.input.cluster_id,
            bootstrap=state.bootstrap,
            claim_uid=state.input.claim.metadata.uid,
        ),
        start_to_close_timeout=VM_CALL,
        heartbeat_timeout=HEARTBEAT,
        retry_policy=VM_CREATE,
        summary=f"create VM {offering.key}",
    )


def _launched(state: ClaimState, offering: Offering, instance: InstanceInfo) -> None:
    status = state.status
    state.instance_id = instance.instance_id
    status.instance_id = instance.instance_id
    status.provider_id = instance.instance_id
    status.provider = offering.provider
    status.region = offering.region
    status.instance_type = offering.instance_type
    status.price_eur_per_hour = offering.price_eur_per_hour
    status.price_source = offering.price_source
    status.price_as_of = offering.price_as_of
    status.capacity_type = offering.capacity_type
    estimate = dict(status.capacity)
    if offering.vcpu is not None:
        estimate["cpu"] = f"{offering.vcpu:g}"
    if offering.memory_gib is not None:
        estimate["memory"] = f"{offering.memory_gib:g}Gi"
    state.capacity_seen(estimate)
    status.set_condition(
        ConditionType.LAUNCHED, True, "Launched", f"VM {instance.instance_id}", workflow.now()
    )
    workflow.upsert_search_attributes(
        [
            sa.PROVIDER.value_set(offering.provider),
            sa.REGION.value_set(offering.region),
            sa.INSTANCE_TYPE.value_set(offering.instance_type),
            # Known from the start (the claim names its node): searchable from launch.
            sa.NODE_NAME.value_set(state.name),
        ]
    )
    state.event(f"VM {instance.instance_id} created with the first-boot script")
