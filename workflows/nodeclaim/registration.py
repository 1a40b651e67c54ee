"""Registration and initialization: the VM's kubelet registers a Node, the Node is proven the
claim's VM, turns Ready, and is labelled; the join token goes.

Joining waits on two deadlines, each an alarm: the registration timeout (the claim fails,
visibly) and the next safety-net poll of the node. The node registers with the startup
taint; the label call syncs the claim's labels (those a kubelet may not set on itself among
them: a tenant's node label), makes sure its taints are there, and lifts the startup taint.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from activities.kube import KubeActivities
from api import events, labels
from api.messages import FailureReason, LabelNodeInput
from api.nodeclaim import ConditionType, NodeClaimPhase
from api.nodepool import ON_DEMAND
from workflows.nodeclaim import node, reporting
from workflows.nodeclaim.calls import delete_bootstrap, together
from workflows.nodeclaim.state import POLL, ClaimFailed, ClaimState
from workflows.retries import CLAIM_CALL
from workflows.timeouts import KUBE_CALL, QUICK_HEARTBEAT

_REGISTRATION_TIMEOUT = "registration timeout"


async def join(state: ClaimState) -> bool:
    """Wait for the node to turn Ready (True), a scale-down (False), or fail at the timeout."""
    state.set_phase(NodeClaimPhase.JOINING, "waiting for the node to register")
    timings = state.input.timings
    assert state.status.created_at is not None
    deadline = state.status.created_at + timedelta(seconds=timings.registration_timeout_s)
    alarms = state.alarms
    while not (state.node and state.node.exists and state.node.ready):
        state.begin_round()
        if state.scale_down:
            alarms.clear()
            return False
        await node.warn_of_stranger(state)
        if state.node and state.node.exists:
            _registered(state)
        next_poll_at = state.poll_due_at(timings.node_poll_interval_s)
        timed_out = alarms.reached(_REGISTRATION_TIMEOUT, deadline)
        poll_due = alarms.reached(POLL, next_poll_at)
        alarms.settle()
        if timed_out:
            alarms.clear()
            raise ClaimFailed(
                FailureReason.REGISTRATION_TIMEOUT,
                f"node did not become Ready within {timings.registration_timeout_s:g}s"
                + (f" ({state.last_event})" if state.stranger is not None else ""),
            )
        if poll_due:
            state.poll_taken()
            await node.poll(state)
            continue
        state.update_details()
        await workflow.wait_condition(lambda: state.dirty)
    alarms.clear()
    state.poll_taken()
    _registered(state)
    return True


async def become_ready(state: ClaimState) -> None:
    """Label the node and delete the join token side by side; then Ready."""
    # The watcher's word carries the kubelet's capacity; a look only when it did not.
    known = state.node is not None and bool(state.node.capacity)
    if known and state.node is not None:
        state.capacity_seen(dict(state.node.capacity))
    looks = [] if known else [node.poll(state)]
    await together(_label_node(state), delete_bootstrap(state), *looks)
    status = state.status
    now = workflow.now()
    status.ready_at = now
    status.set_condition(ConditionType.INITIALIZED, True, "Initialized", "labels synced", now)
    status.set_condition(ConditionType.READY, True, "Ready", "node is Ready", now)
    state.set_phase(NodeClaimPhase.READY, "node Ready; join token and script deleted")
    await reporting.publish(
        state,
        events=[
            reporting.notice(state, events.REGISTERED, f"Node {state.name} registered"),
            reporting.notice(state, events.READY, f"Node {state.name} is Ready"),
        ],
    )


async def _label_node(state: ClaimState) -> None:
    spec = state.spec
    status = state.status
    capacity_type = status.capacity_type or ON_DEMAND
    await workflow.execute_activity_method(
        KubeActivities.label_node,
        LabelNodeInput(
            node_name=state.name,
            instance_id=state.instance_id,
            labels={
                **spec.labels,
                **labels.ownership_labels(
                    state.name, namespace=state.namespace, node_pool=spec.node_pool
                ),
                labels.PROVIDER: status.provider or "",
                labels.REGION: status.region or "",
                labels.INSTANCE_TYPE: status.instance_type or "",
                labels.K8S_REGION: status.region or "",
                labels.K8S_INSTANCE_TYPE: status.instance_type or "",
                labels.CAPACITY_TYPE: capacity_type,
                labels.KARPENTER_CAPACITY_TYPE: capacity_type,
            },
            taints=spec.taints,
            namespace=state.namespace,
            claim_uid=state.input.claim.metadata.uid,
        ),
        start_to_close_timeout=KUBE_CALL,
        heartbeat_timeout=QUICK_HEARTBEAT,
        retry_policy=CLAIM_CALL,
        summary="label node",
    )


def _registered(state: ClaimState) -> None:
    if state.status.condition(ConditionType.REGISTERED) is None:
        state.status.node_name = state.name
        state.status.set_condition(
            ConditionType.REGISTERED, True, "Registered", "node joined", workflow.now()
        )
        state.event("node registered")
