"""Triggers side by side share the nodes (trigger/peers.py): each claim hears its node's
changes from one of them, and the claims of one that crashed from the other once its Lease
runs out. (Both send every pool its demand: the first to arrive is planned.)"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import TypeVar

from kubernetes import client as k8s
from temporalio.api.enums.v1 import EventType

from api import labels
from api.messages import NodeObservation, claim_workflow_id
from cluster.tenancy import DEFAULT_WORKER_NAMESPACE
from tests.e2e.harness import (
    Stack,
    TriggerProcess,
    eventually,
    in_process_worker,
    in_thread,
    make_pool,
    nodeclaims,
    pool_pod,
    running_trigger,
    running_watcher,
)
from trigger.peers import TriggerPeers, group_label, lease_name, trigger_for

T = TypeVar("T")

STAYING, CRASHING = lease_name("staying"), lease_name("crashing")
BOTH = sorted([STAYING, CRASHING])
# Long enough that a loaded CI machine never misses three renewals of a live trigger (it
# would take the other's nodes for a moment and tell about some twice), short for the test.
LEASE_S = 6
# Past kube-scheduler's longest back-off (podMaxBackoffSeconds, 10 s): the node empties only
# after its pod had every chance to be bound.
EMPTY_TTL_S = 12


async def _pods(stack: Stack, pool: str) -> list[k8s.V1Pod]:
    listing = await in_thread(
        stack.core.list_namespaced_pod, "default", label_selector=f"pool={pool}"
    )
    return list(listing.items)


async def _create_pod(stack: Stack, pool: str, name: str) -> str:
    created = await in_thread(
        stack.core.create_namespaced_pod, "default", pool_pod(name, pool, cpu="250m")
    )
    return str(created.metadata.uid)


async def _signals(stack: Stack, workflow_id: str, name: str, kind: type[T]) -> list[T]:
    """The workflow's signals of that name, decoded, in the order it got them."""
    handle = stack.temporal.get_workflow_handle(workflow_id)
    signals: list[T] = []
    async for event in handle.fetch_history_events():
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            continue
        attributes = event.workflow_execution_signaled_event_attributes
        if attributes.signal_name == name:
            [signal] = await stack.temporal.data_converter.decode(attributes.input.payloads, [kind])
            signals.append(signal)
    return signals


async def _observations_told_twice(stack: Stack, pool: str) -> list[NodeObservation]:
    """Node observations a claim of the pool got again with nothing changed."""
    twice: list[NodeObservation] = []
    for claim in await nodeclaims(stack, pool):
        name = claim["metadata"]["name"]
        observations = await _signals(
            stack, claim_workflow_id("default", name), "observe_node", NodeObservation
        )
        # Each trigger stamps its own clock on when it saw the node empty and sent it.
        seen = [o.model_dump(exclude={"observed_at", "empty_since"}) for o in observations]
        twice += [
            observations[index + 1]
            for index, (before, now) in enumerate(itertools.pairwise(seen))
            if before == now
        ]
    return twice


async def test_two_triggers_tell_each_node_once_and_take_over_a_crashed_ones_nodes(
    stack: Stack, temporal_address: str, kubeconfig: Path
) -> None:
    crashing = TriggerProcess(
        temporal_address,
        kubeconfig,
        stack.task_queue,
        stack.settings.allowed_endpoints,
        identity="crashing",
        lease_s=LEASE_S,
    )
    peers = TriggerPeers(
        stack.kube,
        namespace=DEFAULT_WORKER_NAMESPACE,
        group=group_label("default", stack.task_queue),
        identity="staying",
        duration_s=LEASE_S,
    )
    pools: list[str] = []
    crashing.start()
    try:
        async with (
            in_process_worker(stack),
            running_watcher(stack.temporal, stack.kube, peers),
            running_trigger(stack),
        ):
            await eventually(lambda: asyncio.sleep(0, peers.triggers), lambda t: t == BOTH, 60)

            # A pool each, so a node each, until both triggers have a node to tell about.
            node_of: dict[str, str] = {}  # pool -> its node
            while {trigger_for(node, BOTH) for node in node_of.values()} != set(BOTH):
                assert len(pools) < 10, node_of
                pool = f"replicas-{len(pools)}"
                pools.append(pool)
                make_pool(stack.kube, pool, empty_ttl=EMPTY_TTL_S)
                await _create_pod(stack, pool, f"{pool}-pod")
                [pod] = await eventually(
                    lambda pool=pool: _pods(stack, pool),  # type: ignore[misc]
                    lambda pods: len(pods) == 1 and pods[0].status.phase == "Running",
                    90,
                )
                node_of[pool] = str(pod.spec.node_name)
            for pool in pools:
                assert await _observations_told_twice(stack, pool) == [], pool

            crashing.kill()  # no Lease released: the other waits for it to run out
            orphaned = next(p for p, node in node_of.items() if trigger_for(node, BOTH) == CRASHING)
            await in_thread(stack.core.delete_namespaced_pod, f"{orphaned}-pod", "default")
            # The trigger still running takes the crashed one's nodes once its Lease ran out
            # (the claim's own safety-net poll could let the node go even sooner: wait for
            # the takeover itself, not only for its effect).
            await eventually(lambda: asyncio.sleep(0, peers.triggers), lambda t: t == [STAYING], 60)
            # Its claim hears the node went empty and lets it go after the pool's empty TTL.
            await eventually(
                lambda: asyncio.sleep(
                    0,
                    stack.cluster.cloud.list_instances(label_selector={labels.NODEPOOL: orphaned}),
                ),
                lambda vms: vms == [],
                90,
            )
    finally:
        crashing.stop()
        for pool in pools:
            await in_thread(
                stack.core.delete_collection_namespaced_pod,
                "default",
                label_selector=f"pool={pool}",
            )
