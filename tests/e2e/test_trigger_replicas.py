"""Triggers side by side share the pods (trigger/peers.py): each pod reaches its pool from
one of them, and the pods of one that crashed from the other once its Lease expires."""

from __future__ import annotations

import asyncio
import collections
import itertools
from pathlib import Path
from typing import TypeVar

from kubernetes import client as k8s
from temporalio.api.enums.v1 import EventType

from api.messages import NodeObservation, claim_workflow_id
from api.nodepool.messages import DemandUpdate, pool_workflow_id, trigger_for
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
from trigger.peers import TriggerPeers, group_label, lease_name

T = TypeVar("T")

POOL = "replicas"
LATER_POOL = "replicas-later"  # no node yet: its pods wait for a trigger to tell it
# Long enough that a loaded CI machine never misses three renewals of a live trigger (it
# would take the other's share for a moment and tell some pods twice), short for the test.
LEASE_S = 6


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


async def _times_told(stack: Stack, pool: str) -> collections.Counter[str]:
    """How many demand signals named each pod, from the pool's history."""
    updates = await _signals(stack, pool_workflow_id("default", pool), "demand", DemandUpdate)
    return collections.Counter(pod.uid for update in updates for pod in update.pods)


async def _observations_told_twice(stack: Stack, pool: str) -> list[NodeObservation]:
    """Node observations a claim of the pool got again with nothing changed."""
    twice: list[NodeObservation] = []
    for claim in await nodeclaims(stack, pool):
        name = claim["metadata"]["name"]
        observations = await _signals(
            stack, claim_workflow_id(name), "observe_node", NodeObservation
        )
        # Each trigger stamps its own clock on when it saw the node empty and sent it.
        seen = [o.model_dump(exclude={"observed_at", "empty_since"}) for o in observations]
        twice += [
            observations[index + 1]
            for index, (before, now) in enumerate(itertools.pairwise(seen))
            if before == now
        ]
    return twice


async def test_two_triggers_tell_each_pod_once_and_take_over_a_crashed_ones_share(
    stack: Stack, temporal_address: str, kubeconfig: Path
) -> None:
    make_pool(stack.kube, POOL, empty_ttl=3600)
    make_pool(stack.kube, LATER_POOL, empty_ttl=3600)
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
    both = [lease_name("crashing"), lease_name("staying")]
    crashing.start()
    try:
        async with (
            in_process_worker(stack),
            running_watcher(stack.temporal, stack.kube, peers),
            running_trigger(stack, peers=peers),
        ):
            await eventually(lambda: asyncio.sleep(0, peers.triggers), lambda t: t == both, 60)

            uids = [await _create_pod(stack, POOL, f"{POOL}-{index}") for index in range(8)]
            await eventually(
                lambda: _pods(stack, POOL),
                lambda pods: all(p.status.phase == "Running" for p in pods),
                90,
            )
            told = await _times_told(stack, POOL)
            # Once each, not once per trigger; and both triggers had a share to tell.
            assert {uid: told[uid] for uid in uids} == dict.fromkeys(uids, 1)
            shares = collections.Counter(trigger_for(uid, both) for uid in uids)
            assert set(shares) == set(both), shares
            # And each claim heard about its node from one trigger, not from both.
            assert await _observations_told_twice(stack, POOL) == []

            crashing.kill()  # no Lease released: the other waits for it to expire
            orphans: list[str] = []
            for index in itertools.count():
                name = f"{LATER_POOL}-{index}"
                uid = await _create_pod(stack, LATER_POOL, name)
                if trigger_for(uid, both) == lease_name("crashing"):
                    orphans.append(uid)
                    if len(orphans) == 2:
                        break
                else:  # the staying trigger's own share: not what this part is about
                    await in_thread(stack.core.delete_namespaced_pod, name, "default")
            await eventually(
                lambda: _pods(stack, LATER_POOL),
                lambda pods: len(pods) == 2 and all(p.status.phase == "Running" for p in pods),
                90,
            )
            assert peers.triggers == [lease_name("staying")]
            told = await _times_told(stack, LATER_POOL)
            assert all(told[uid] >= 1 for uid in orphans), told
    finally:
        crashing.stop()
        for pool in (POOL, LATER_POOL):
            await in_thread(
                stack.core.delete_collection_namespaced_pod,
                "default",
                label_selector=f"pool={pool}",
            )
