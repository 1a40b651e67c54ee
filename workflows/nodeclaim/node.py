"""The claim's view of its node: the watcher's `observe_node` signals, the claim's own polls,
and whether the Node named like the claim is its VM at all.

A Node is the claim's only if its providerID names the claim's VM (`cluster/node_identity`):
any other Node of that name — a kubelet registered under it with another machine's join
token, or one whose providerID nobody set — is observed as no node, so the claim never
counts it registered, never labels, drains or deletes it, and says so once in a Warning
Event naming both ids.
"""

from __future__ import annotations

from temporalio import workflow

from activities.kube import KubeActivities
from api import events
from api.messages import NodeObservation
from cluster.node_identity import stranger_message
from workflows.nodeclaim import reporting
from workflows.nodeclaim.calls import look
from workflows.nodeclaim.state import ClaimState


def observed(state: ClaimState, observation: NodeObservation) -> None:
    """Take the watcher's word about the node (`observe_node`), if it is news."""
    if observation.node_name != state.name:
        return  # about another node: not this claim's business
    # Ordered by the watcher's clock, never against our own polls: a clock skew between the
    # two must not make a fresh transition look stale.
    last = state.last_signal_at
    if last is not None and observation.observed_at < last:
        return  # an older snapshot overtaken by a newer one
    state.last_signal_at = observation.observed_at
    previous = state.observed
    if (
        previous
        and previous.empty_since
        and observation.empty_since
        and previous.exists == observation.exists
    ):
        # Still empty: keep the earlier start, so a watcher restart never extends the TTL.
        observation = observation.model_copy(
            update={"empty_since": min(previous.empty_since, observation.empty_since)}
        )
    state.observed = observation
    state.observations += 1
    state.wake()


def pods_arrived(state: ClaimState, pod_count: int) -> None:
    """Pods were bound to the node after it was last seen empty (a look once cordoned found
    them): it is busy, and its emptiness starts again from the next observation."""
    seen = state.node
    if seen is not None:
        state.observed = seen.model_copy(update={"empty_since": None, "pod_count": pod_count})


async def poll(state: ClaimState) -> None:
    """Look at the node (the safety net beside the watcher's signals)."""
    seen = state.observations
    node = await look(KubeActivities.get_node_state, state.node_ref(), "poll node (safety net)")
    if node.capacity and state.is_its_vm(node.provider_id):
        state.capacity_seen(node.capacity)
    if state.observations != seen:
        return  # the watcher spoke while we looked: its word is at least as new
    # Dated by the activity's clock, a value in history, not by ours.
    now = node.observed_at or workflow.now()
    previous = state.observed
    empty_since = None
    if node.exists and node.empty:
        empty_since = previous.empty_since if previous and previous.empty_since else now
    not_ready_since = None
    if node.exists and not node.ready:
        not_ready_since = (previous.not_ready_since if previous else None) or now
    state.observed = NodeObservation(
        node_name=state.name,
        exists=node.exists,
        ready=node.ready,
        not_ready_since=not_ready_since,
        empty_since=empty_since,
        pod_count=node.pod_count,
        do_not_disrupt=node.do_not_disrupt,
        observed_at=now,
        interruption=node.interruption,
        capacity=node.capacity,
        provider_id=node.provider_id,
    )


async def warn_of_stranger(state: ClaimState) -> None:
    """A Warning Event, once per stranger, when a Node of the claim's name is not its VM."""
    stranger = state.stranger
    if stranger is None or stranger == state.stranger_told:
        return
    state.stranger_told = stranger
    message = stranger_message(state.name, stranger or None, state.instance_id)
    state.event(message)
    await reporting.publish(
        state, events=[reporting.warning(state, events.NODE_NOT_CLAIMED, message)]
    )
