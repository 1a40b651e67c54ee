"""Pending pods alone make nodes appear: the right number, cheapest fitting, within limits."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from temporalio.api.enums.v1 import EventType
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig

from api import NodeClaimPhase, labels
from api.messages import claim_task_queue, claim_workflow_id
from api.nodepool.messages import PoolStatus, pool_workflow_id
from api.quantity import cpu_millis, format_cpu
from sim.cluster import SimulatedCluster
from tests.e2e.harness import (
    FAST,
    Stack,
    delete_cloudburst_object,
    eventually,
    in_process_worker,
    in_thread,
    make_pool,
    nodeclaims,
    pool_pod,
    running_trigger,
    running_watcher,
    serving,
)
from tests.histories import payload_data
from worker.client import connect_temporal
from workflows.nodepool import NodePoolWorkflow


async def _task_timeout(stack: Stack, workflow_id: str) -> timedelta:
    described = await stack.temporal.get_workflow_handle(workflow_id).describe()
    return described.raw_description.execution_config.default_workflow_task_timeout.ToTimedelta()


async def pool_status(stack: Stack, pool: str) -> PoolStatus:
    handle = stack.temporal.get_workflow_handle_for(
        NodePoolWorkflow.run, pool_workflow_id("default", pool)
    )
    return await handle.query(NodePoolWorkflow.status)


async def nodepool_resource(stack: Stack, name: str) -> dict[str, Any]:
    found = await in_thread(
        stack.custom.get_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodepools",
        name,
    )
    assert isinstance(found, dict)
    return found


async def the_event(stack: Stack, pod: str, reason: str) -> k8s.CoreV1Event:
    """The one Event with this reason on the pod (waits for it; a second one fails)."""
    listing = await eventually(
        lambda: in_thread(
            stack.core.list_namespaced_event,
            "default",
            field_selector=f"involvedObject.name={pod},reason={reason}",
        ),
        lambda found: len(found.items) == 1,
    )
    event: k8s.CoreV1Event = listing.items[0]
    return event


async def pods_of(stack: Stack, pool: str) -> list[k8s.V1Pod]:
    listing = await in_thread(
        stack.core.list_namespaced_pod, "default", label_selector=f"pool={pool}"
    )
    return list(listing.items)


def all_running(count: int) -> Callable[[list[k8s.V1Pod]], bool]:
    return lambda pods: len(pods) == count and all(p.status.phase == "Running" for p in pods)


def vms_of_pool(cluster: SimulatedCluster, pool: str) -> list[dict[str, object]]:
    return cluster.cloud.list_instances(label_selector={labels.NODEPOOL: pool})


async def delete_pods(stack: Stack, pool: str) -> None:
    await in_thread(
        stack.core.delete_collection_namespaced_pod, "default", label_selector=f"pool={pool}"
    )


async def test_pending_pods_get_nodes_then_leave(stack: Stack) -> None:
    make_pool(stack.kube, "grow", empty_ttl=2)
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, stack.kube),
        # The operator's (CLOUDBURST_POOL_TASK_TIMEOUT_S, CLOUDBURST_CLAIM_TASK_TIMEOUT_S):
        # what a crash of the worker running a pool's or a claim's task costs it.
        running_trigger(
            stack,
            pool_task_timeout=timedelta(seconds=4),
            claim_task_timeout=timedelta(seconds=6),
        ),
    ):
        for index, (cpu, memory) in enumerate([("500m", "512Mi"), ("1", "1Gi"), ("1500m", "2Gi")]):
            await in_thread(
                stack.core.create_namespaced_pod,
                "default",
                pool_pod(f"grow-{index}", "grow", cpu, memory),
            )
        pods = await eventually(lambda: pods_of(stack, "grow"), all_running(3), timeout_s=90)
        nodes = {p.spec.node_name for p in pods}
        status = await pool_status(stack, "grow")
        # Every node the pool made is one the pods use: nothing was made twice or for nothing.
        assert {c.name for c in status.claims} == nodes
        # Bound pods are no longer demand, and the watcher told the pool what the scheduler
        # put on its new nodes (what it plans the rest of a burst into).
        status = await eventually(
            lambda: pool_status(stack, "grow"),
            lambda s: s.pending_pods == 0 and sum(c.bound.pods for c in s.claims) == 3,
        )
        requested_cpu_m = 0
        for pod in pods:
            requested_cpu_m += cpu_millis(str(pod.spec.containers[0].resources.requests["cpu"]))
        assert sum(claim.bound.cpu_m for claim in status.claims) == requested_cpu_m
        events = await in_thread(
            stack.core.list_namespaced_event,
            "default",
            field_selector="involvedObject.name=grow-0,reason=Nominated",
        )
        assert events.items, "no Nominated event on the pod"
        assert await _task_timeout(stack, pool_workflow_id("default", "grow")) == timedelta(
            seconds=4
        )
        for claim in status.claims:
            assert await _task_timeout(
                stack, claim_workflow_id("default", claim.name)
            ) == timedelta(seconds=6)

        await delete_pods(stack, "grow")
        await eventually(
            lambda: asyncio.sleep(0, vms_of_pool(stack.cluster, "grow")), lambda v: v == [], 90
        )


async def test_a_pool_workflow_terminated_by_hand_hears_its_waiting_pods_again(
    stack: Stack,
) -> None:
    """The trigger sends a pod when it changes. An operator terminating a pool's workflow
    (it runs on, without one) must not leave the pods its pool had heard of waiting for
    good: the trigger sends each pool its waiting pods again every `resend_s`, and the
    first such demand starts the pool anew."""
    make_pool(stack.kube, "resend", empty_ttl=2)
    workflow_id = pool_workflow_id("default", "resend")
    async with running_trigger(stack, resend_s=3) as trigger:
        await in_thread(stack.core.create_namespaced_pod, "default", pool_pod("resend-0", "resend"))
        # No worker yet: the pool's workflow heard of the pod and planned nothing.
        first = await eventually(
            lambda: stack.temporal.get_workflow_handle(workflow_id).describe(),
            lambda described: described is not None,
        )
        await stack.temporal.get_workflow_handle(workflow_id).terminate("an operator's mistake")
        async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
            await eventually(lambda: pods_of(stack, "resend"), all_running(1), timeout_s=60)
            described = await stack.temporal.get_workflow_handle(workflow_id).describe()
            assert described.run_id != first.run_id
            await delete_pods(stack, "resend")
            await eventually(
                lambda: asyncio.sleep(0, vms_of_pool(stack.cluster, "resend")),
                lambda v: v == [],
                60,
            )
            # Nothing waits: the pool hears nothing more (an idle pool's history stays still).
            sent = trigger.updates_sent
            await asyncio.sleep(7)
            assert trigger.updates_sent == sent


async def test_a_restarted_watcher_tells_the_pool_what_its_node_already_holds(
    stack: Stack,
) -> None:
    """A trigger restarted while its pool still holds a bound pod as pending (the restart
    lost the word that it was bound): the new node watcher's first report of the node says
    which pods it holds, or the pool counts the pod twice (in the node's requests and as
    nominated there) and plans it a second node."""
    make_pool(stack.kube, "relist", empty_ttl=30)
    async with in_process_worker(stack):
        async with running_trigger(stack):
            # More than half a small node: counted twice, it no longer fits its node.
            pod = pool_pod("relist-0", "relist", cpu="1500m", memory="1Gi")
            await in_thread(stack.core.create_namespaced_pod, "default", pod)
            await eventually(
                lambda: pool_status(stack, "relist"),
                lambda s: len(s.claims) == 1 and s.pending_pods == 1,
            )
        # The trigger is gone before the pod is bound. The claim sees its node Ready by its own poll; the scheduler binds the pod.
        await eventually(lambda: pods_of(stack, "relist"), all_running(1), timeout_s=60)
        status = await pool_status(stack, "relist")
        assert status.pending_pods == 1  # nobody told the pool it was bound
        async with running_watcher(stack.temporal, stack.kube):
            status = await eventually(
                lambda: pool_status(stack, "relist"), lambda s: s.pending_pods == 0
            )
            await asyncio.sleep(2)  # a replan would have started a claim by now
            status = await pool_status(stack, "relist")
            assert len(status.claims) == 1, [c.name for c in status.claims]
        await delete_pods(stack, "relist")


async def test_a_burst_writes_nominated_events_as_karpenter_does(stack: Stack) -> None:
    """Every pod of a burst gets its node, but the API server is not asked for an Event per
    pod: the first 10 Nominated Events, then 5 a second (Karpenter's rate)."""
    make_pool(stack.kube, "crowd", empty_ttl=2)
    count = 60  # more than 10 + 5 a second for the seconds a burst's plans take
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, stack.kube),
        running_trigger(stack),
    ):
        await asyncio.gather(
            *(
                in_thread(
                    stack.core.create_namespaced_pod,
                    "default",
                    pool_pod(f"crowd-{index}", "crowd", "50m", "64Mi"),
                )
                for index in range(count)
            )
        )
        await eventually(lambda: pods_of(stack, "crowd"), all_running(count), timeout_s=90)
        status = await pool_status(stack, "crowd")
        assert status.claims, "the burst made no node"
        listing = await in_thread(
            stack.core.list_namespaced_event, "default", field_selector="reason=Nominated"
        )
        nominated = {
            str(e.involved_object.name)
            for e in listing.items
            if str(e.involved_object.name).startswith("crowd-")
        }
        # The pods were planned within a second or two: 10 at once, 5 a second after.
        assert 10 <= len(nominated) < count, sorted(nominated)

        await delete_pods(stack, "crowd")
        await eventually(
            lambda: asyncio.sleep(0, vms_of_pool(stack.cluster, "crowd")), lambda v: v == [], 90
        )


async def signals(stack: Stack, pool: str, name: str) -> list[Any]:
    """The inputs of the signals of this name the pool's workflow has had, oldest first."""
    handle = stack.temporal.get_workflow_handle(pool_workflow_id("default", pool))
    history = await handle.fetch_history()
    return [
        json.loads(payload_data(e.workflow_execution_signaled_event_attributes.input.payloads[0]))
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and e.workflow_execution_signaled_event_attributes.signal_name == name
    ]


async def test_the_trigger_tells_a_pool_only_what_is_new(stack: Stack) -> None:
    """Every event of a watched object is not news: a pool's own status writes (and other
    pools') and the scheduler re-writing why a pod waits reach the trigger, and each was a
    signal the pool recorded, planned on and paid for. Only a spec change is."""
    make_pool(stack.kube, "quiet", empty_ttl=3600, limits={"cpu": "1"})
    async with serving(stack):
        await in_thread(
            stack.core.create_namespaced_pod,
            "default",
            pool_pod("quiet-0", "quiet", cpu="1500m"),  # more than the limit: it waits
        )
        # The pool writes its status (LimitReached), which comes back to the trigger.
        await eventually(
            lambda: nodepool_resource(stack, "quiet"),
            lambda r: any(
                c["type"] == "LimitReached" and c["status"] == "True"
                for c in r.get("status", {}).get("conditions", [])
            ),
        )
        # The scheduler re-writes why the pod waits (as when a node joins elsewhere).
        for nodes in (7, 8):
            await in_thread(
                stack.core.patch_namespaced_pod_status,
                "quiet-0",
                "default",
                {
                    "status": {
                        "conditions": [
                            {
                                "type": "PodScheduled",
                                "status": "False",
                                "reason": "Unschedulable",
                                "message": f"0/{nodes} nodes are available.",
                            }
                        ]
                    }
                },
            )
        await asyncio.sleep(3)  # well past the trigger's batch windows (0.3 s / 2 s)
        demands = await signals(stack, "quiet", "demand")
        carrying = [d for d in demands if any(p["name"] == "quiet-0" for p in d["pods"])]
        assert len(carrying) == 1, carrying
        assert await signals(stack, "quiet", "update_specs") == []

        # A spec change is news: the pool hears it once.
        make_pool(stack.kube, "quiet", empty_ttl=3600, limits={"cpu": "1", "memory": "64Gi"})
        told = await eventually(
            lambda: signals(stack, "quiet", "update_specs"), lambda found: len(found) >= 1
        )
        await asyncio.sleep(2)
        told = await signals(stack, "quiet", "update_specs")
        assert [t["pool"]["limits"]["memory"] for t in told] == ["64Gi"], told
        await delete_pods(stack, "quiet")


async def test_a_pool_deleted_and_created_again_is_planned_by_its_new_spec(stack: Stack) -> None:
    """A NodePool created again under its old name starts at generation 1, below the old
    object's: the pool's workflow (the same one) must plan by the new spec, not keep the
    deleted object's because its generation was higher."""
    make_pool(stack.kube, "reborn", empty_ttl=3600, limits={"cpu": "1"})
    async with serving(stack):
        await in_thread(
            stack.core.create_namespaced_pod,
            "default",
            pool_pod("reborn-0", "reborn", cpu="1500m"),  # more than the limit: it waits
        )
        await eventually(
            lambda: pool_status(stack, "reborn"),
            lambda s: len(s.blocked) == 1,
            timeout_s=60,
        )
        for memory in ("64Gi", "65Gi"):  # edited twice: generation 3
            make_pool(stack.kube, "reborn", empty_ttl=3600, limits={"cpu": "1", "memory": memory})
        await eventually(
            lambda: signals(stack, "reborn", "update_specs"),
            lambda told: bool(told) and told[-1]["pool"]["limits"].get("memory") == "65Gi",
        )
        deleted = await nodepool_resource(stack, "reborn")
        await in_thread(delete_cloudburst_object, stack.kube, "nodepools", "reborn")
        make_pool(stack.kube, "reborn", empty_ttl=3600)  # no limits now; generation 1
        created = await nodepool_resource(stack, "reborn")
        assert created["metadata"]["generation"] < deleted["metadata"]["generation"]

        pods = await eventually(
            lambda: pods_of(stack, "reborn"),
            lambda found: [p.status.phase for p in found] == ["Running"],
            timeout_s=60,
        )
        assert pods[0].spec.node_name
        status = await pool_status(stack, "reborn")
        assert status.blocked == {} and status.nodes == 1, status
        # The node's NodeClaim is owned by the pool that made it: the one there now.
        owners = [
            ref["uid"]
            for item in await nodeclaims(stack, "reborn")
            for ref in item["metadata"]["ownerReferences"]
        ]
        assert owners == [created["metadata"]["uid"]], owners
        await delete_pods(stack, "reborn")


async def test_deleting_a_nodepool_takes_its_nodes_with_it(stack: Stack) -> None:
    """`kubectl delete nodepool`, as with Karpenter: the pool owns its NodeClaims, so the
    garbage collector deletes them, and each deletion is a scale-down (drain, then the VM)."""
    make_pool(stack.kube, "doomed", empty_ttl=3600)  # never empty long enough to go by itself
    async with serving(stack):
        await in_thread(stack.core.create_namespaced_pod, "default", pool_pod("doomed-0", "doomed"))
        await eventually(
            lambda: pods_of(stack, "doomed"),
            lambda found: [p.status.phase for p in found] == ["Running"],
            timeout_s=60,
        )
        [vm] = vms_of_pool(stack.cluster, "doomed")
        [claim] = await eventually(
            lambda: nodeclaims(stack, "doomed"),
            lambda found: len(found) == 1 and "nodeName" in found[0].get("status", {}),
            timeout_s=30,
        )

        await in_thread(delete_cloudburst_object, stack.kube, "nodepools", "doomed")

        await eventually(
            lambda: asyncio.sleep(0, vms_of_pool(stack.cluster, "doomed")), lambda v: v == [], 90
        )
        await eventually(lambda: nodeclaims(stack, "doomed"), lambda found: found == [], 30)
        nodes = await in_thread(stack.core.list_node)
        assert claim["status"]["nodeName"] not in {n.metadata.name for n in nodes.items}, vm
        await delete_pods(stack, "doomed")


async def test_a_deleted_nodepool_launches_nothing_for_the_pods_it_left_waiting(
    stack: Stack,
) -> None:
    """Its workflow outlives it (its claims go by the garbage collector), but the pods it
    held back by a limit are not its any more: once its node is gone and the limit free, it
    must not plan them a node of a pool that no longer exists (which the garbage collector
    would delete again, and so on)."""
    make_pool(stack.kube, "gone", empty_ttl=3600, limits={"maxNodes": 1, "cpu": "2"})
    async with serving(stack):
        for index in range(2):
            await in_thread(
                stack.core.create_namespaced_pod,
                "default",
                pool_pod(f"gone-{index}", "gone", cpu="1500m", memory="1Gi"),
            )
        await eventually(
            lambda: pool_status(stack, "gone"),
            lambda s: s.nodes == 1 and len(s.blocked) == 1,
            timeout_s=60,
        )
        await eventually(
            lambda: pods_of(stack, "gone"),
            lambda pods: len([p for p in pods if p.status.phase == "Running"]) == 1,
        )

        await in_thread(delete_cloudburst_object, stack.kube, "nodepools", "gone")

        await eventually(
            lambda: asyncio.sleep(0, vms_of_pool(stack.cluster, "gone")), lambda v: v == [], 90
        )
        status = await eventually(
            lambda: pool_status(stack, "gone"), lambda s: s.nodes == 0, timeout_s=30
        )
        assert status.pending_pods == 0 and status.blocked == {}, status
        await asyncio.sleep(5)  # a re-plan would have launched by now (the pool's FAST timings)
        launched = [
            n for n in stack.cluster.cloud.stats()["created_by_name"] if n.startswith("gone-")
        ]
        assert len(launched) == 1, launched
        assert vms_of_pool(stack.cluster, "gone") == []
        await delete_pods(stack, "gone")


async def test_a_deleted_nodepool_keeps_no_floor(stack: Stack) -> None:
    """Its minNodes floor went with it: the node the garbage collector takes is not made
    again."""
    make_pool(stack.kube, "floored-gone", empty_ttl=3600, limits={"minNodes": 1})
    async with serving(stack):
        await eventually(
            lambda: asyncio.sleep(0, vms_of_pool(stack.cluster, "floored-gone")),
            lambda v: len(v) == 1,
            60,
        )

        await in_thread(delete_cloudburst_object, stack.kube, "nodepools", "floored-gone")

        await eventually(
            lambda: asyncio.sleep(0, vms_of_pool(stack.cluster, "floored-gone")),
            lambda v: v == [],
            90,
        )
        await asyncio.sleep(5)  # a floor kept would have launched again by now
        created = stack.cluster.cloud.stats()["created_by_name"]
        assert len([n for n in created if n.startswith("floored-gone-")]) == 1, created
        assert vms_of_pool(stack.cluster, "floored-gone") == []


async def test_limits_hold_and_blocked_demand_is_reported(stack: Stack) -> None:
    make_pool(stack.kube, "capped", empty_ttl=3600, limits={"maxNodes": 1, "cpu": "2"})
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, stack.kube),
        running_trigger(stack),
    ):
        for index in range(3):
            await in_thread(
                stack.core.create_namespaced_pod,
                "default",
                pool_pod(f"capped-{index}", "capped", cpu="1500m", memory="1Gi"),
            )
        status = await eventually(
            lambda: pool_status(stack, "capped"),
            lambda s: s.nodes == 1 and len(s.blocked) == 2,
            timeout_s=60,
        )
        assert all(reason.startswith("LimitReached") for reason in status.blocked.values()), status
        await eventually(
            lambda: pods_of(stack, "capped"),
            lambda pods: len([p for p in pods if p.status.phase == "Running"]) == 1,
        )
        # Demand held back by a limit is not dropped and produces no second node, also once
        # the node is Ready and the pods the scheduler could not place there are planned again.
        status = await eventually(
            lambda: pool_status(stack, "capped"),
            lambda s: all(not c.nominated for c in s.claims) and len(s.blocked) == 2,
            timeout_s=60,
        )
        assert status.nodes == 1 and len(status.blocked) == 2, status
        assert len(vms_of_pool(stack.cluster, "capped")) == 1
        events = await in_thread(
            stack.core.list_namespaced_event, "default", field_selector="reason=LimitReached"
        )
        assert any(e.involved_object.name.startswith("capped-") for e in events.items)
        assert any(e.involved_object.kind == "NodePool" for e in events.items), events.items

        # `kubectl get nodepools` reads the pool's status: one Ready node, the limit reached.
        resource = await eventually(
            lambda: nodepool_resource(stack, "capped"),
            lambda r: r.get("status", {}).get("readyNodes") == 1,
        )
        pool_status_ = resource["status"]
        assert pool_status_["nodes"] == 1
        offering = status.claims[0].offering
        assert pool_status_["resources"]["cpu"] == format_cpu(int((offering.vcpu or 0) * 1000))
        conditions = {c["type"]: c for c in pool_status_["conditions"]}
        assert conditions["LimitReached"]["status"] == "True", conditions
        assert "2 pods wait" in conditions["LimitReached"]["message"], conditions
        assert "maxNodes=1" in conditions["LimitReached"]["message"], conditions

        await delete_pods(stack, "capped")
        # Once nothing waits, the condition clears.
        await eventually(
            lambda: nodepool_resource(stack, "capped"),
            lambda r: any(
                c["type"] == "LimitReached" and c["status"] == "False"
                for c in r["status"]["conditions"]
            ),
        )


async def test_min_nodes_are_kept_without_pods(stack: Stack) -> None:
    make_pool(stack.kube, "floor", empty_ttl=3600, limits={"minNodes": 1, "maxNodes": 3})
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, stack.kube),
        running_trigger(stack),
    ):
        status = await eventually(
            lambda: pool_status(stack, "floor"),
            lambda s: s.ready_nodes == 1,
            timeout_s=60,
        )
        assert status.nodes == 1
        assert len(vms_of_pool(stack.cluster, "floor")) == 1
        # A new node that took no pod is no news for its pool: no node_usage signal.
        await asyncio.sleep(1)  # several of the watcher's reporting intervals (0.25 s)
        assert await signals(stack, "floor", "node_usage") == []


async def test_capacity_failure_moves_to_the_next_offering_and_is_remembered(
    stack: Stack,
) -> None:
    make_pool(stack.kube, "failover", empty_ttl=3600)
    cloud = stack.cluster.cloud
    cheapest = "fk-small"
    cloud.inject_failure("create", "capacity", times=None, instance_type=cheapest)
    try:
        async with (
            in_process_worker(stack),
            running_watcher(stack.temporal, stack.kube),
            running_trigger(stack),
        ):
            await in_thread(
                stack.core.create_namespaced_pod,
                "default",
                pool_pod("failover-0", "failover", cpu="1800m"),
            )
            pods = await eventually(lambda: pods_of(stack, "failover"), all_running(1), 90)
            status = await pool_status(stack, "failover")
            assert any(key.endswith(f"/{cheapest}") for key in status.failed_offerings)
            [first] = vms_of_pool(stack.cluster, "failover")
            assert first["instance_type"] != cheapest
            assert pods[0].spec.node_name == first["name"]

            # fk-small works again, but within the failure TTL the pool does not try it:
            # the pods that need a new node get the next offering.
            cloud.clear_failures()
            for index in (1, 2):
                await in_thread(
                    stack.core.create_namespaced_pod,
                    "default",
                    pool_pod(f"failover-{index}", "failover", cpu="1900m"),
                )
            await eventually(lambda: pods_of(stack, "failover"), all_running(3), 90)
            types = [vm["instance_type"] for vm in vms_of_pool(stack.cluster, "failover")]
            assert len(types) >= 2
            assert cheapest not in types
    finally:
        cloud.clear_failures()
    await delete_pods(stack, "failover")


async def test_a_failed_claims_pods_are_planned_again(stack: Stack) -> None:
    make_pool(stack.kube, "replan", empty_ttl=3600)
    cloud = stack.cluster.cloud
    timings = FAST.model_copy(update={"registration_timeout_s": 3, "node_poll_interval_s": 1})
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, stack.kube),
        running_trigger(stack, timings=timings),
    ):
        cloud.boot_delay_s = 3600  # the first VM never boots: its claim times out and fails
        try:
            await in_thread(
                stack.core.create_namespaced_pod, "default", pool_pod("replan-0", "replan")
            )
            try:
                first = await eventually(
                    lambda: pool_status(stack, "replan"), lambda s: s.nodes == 1, timeout_s=60
                )
            except AssertionError:
                events = await in_thread(
                    stack.core.list_namespaced_event,
                    "default",
                    field_selector="involvedObject.name=replan-0",
                )
                raise AssertionError(
                    f"no claim for the pending pod: {[e.message for e in events.items]}"
                ) from None
            first_claim = first.claims[0].name
            await eventually(
                lambda: pool_status(stack, "replan"),
                lambda s: first_claim not in {c.name for c in s.claims},
                timeout_s=30,
            )
        finally:
            cloud.boot_delay_s = 0.3
        pods = await eventually(lambda: pods_of(stack, "replan"), all_running(1), 90)
        assert pods[0].spec.node_name != first_claim
        final = await stack.temporal.get_workflow_handle(
            claim_workflow_id("default", first_claim)
        ).describe()
        assert final.status is not None and final.status.name == "FAILED"
    await delete_pods(stack, "replan")


async def test_a_pod_no_pool_can_host_is_told_why_then_served_when_a_pool_appears(
    stack: Stack,
) -> None:
    make_pool(stack.kube, "elsewhere", empty_ttl=3600)
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, stack.kube),
        running_trigger(stack),
    ):
        await in_thread(
            stack.core.create_namespaced_pod, "default", pool_pod("orphan-0", "latecomer")
        )
        event = await the_event(stack, "orphan-0", "NoMatchingNodePool")
        assert event.type == "Warning"
        # Each pool says why it cannot host the pod: here, the pod's nodeSelector.
        message = str(event.message)
        assert "default/elsewhere" in message and "test-pool" in message, message

        # A pool that can host it appears: the waiting pod gets a node, nobody touching it.
        make_pool(stack.kube, "latecomer", empty_ttl=3600)
        pods = await eventually(lambda: pods_of(stack, "latecomer"), all_running(1), 90)
        assert pods[0].metadata.name == "orphan-0"
    await delete_pods(stack, "latecomer")


async def test_a_planning_error_is_reported_and_the_pool_carries_on(stack: Stack) -> None:
    make_pool(stack.kube, "misconf", empty_ttl=3600)
    cloud = stack.cluster.cloud
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, stack.kube),
        running_trigger(stack),
    ):
        # The cloud refuses our credentials: planning cannot list its instance types.
        cloud.inject_failure("catalog", "auth", times=None)
        try:
            await in_thread(
                stack.core.create_namespaced_pod, "default", pool_pod("misconf-0", "misconf")
            )
            event = await the_event(stack, "misconf-0", "FailedProvisioning")
            assert "planning failed" in str(event.message), event.message
            assert "authenticate" in str(event.message), event.message
        finally:
            cloud.clear_failures()
        # The pool did not fail with it: once the credentials work, the pod gets its node.
        pods = await eventually(lambda: pods_of(stack, "misconf"), all_running(1), 90)
        assert pods[0].spec.node_name
        described = await stack.temporal.get_workflow_handle(
            pool_workflow_id("default", "misconf")
        ).describe()
        assert described.status is not None and described.status.name == "RUNNING"
    await delete_pods(stack, "misconf")


async def test_two_triggers_create_each_node_once(stack: Stack) -> None:
    make_pool(stack.kube, "twins", empty_ttl=3600)
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, stack.kube),
        running_trigger(stack),
        running_trigger(stack, idle_s=0.1),
    ):
        for index in range(4):
            await in_thread(
                stack.core.create_namespaced_pod,
                "default",
                pool_pod(f"twins-{index}", "twins", cpu="1", memory="1Gi"),
            )
        pods = await eventually(lambda: pods_of(stack, "twins"), all_running(4), 90)
        await asyncio.sleep(1)  # give a duplicate plan the chance to show up
        used = {p.spec.node_name for p in pods}
        vms = vms_of_pool(stack.cluster, "twins")
        assert {vm["name"] for vm in vms} == used
        status = await pool_status(stack, "twins")
        assert all(c.phase == NodeClaimPhase.READY for c in status.claims)
    await delete_pods(stack, "twins")


def test_burst_demo_end_to_end() -> None:
    """`cloudburst demo --scenario burst`: N pods → bound → deleted → nodes gone, no VM leaked."""
    import subprocess

    cli = Path(sys.executable).parent / "cloudburst"
    result = subprocess.run(
        [
            str(cli),
            "demo",
            "--scenario",
            "burst",
            "--pods",
            "12",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.returncode == 0, (report, result.stderr[-2000:])
    assert report["ok"] is True
    assert report["pods_bound"] == 12 and report["pods_pending"] == 0
    assert report["vms_leaked"] == 0
    assert report["nodes_peak"] >= 1
    assert report["decision_p50_s"] is not None


async def test_a_pod_deleted_while_no_trigger_runs_is_not_planned_again(stack: Stack) -> None:
    """The pool hears a full resync when a trigger starts: a pod deleted meanwhile does not
    stay pending in the pool (where, its nomination lapsed, it would get a node again)."""
    make_pool(stack.kube, "phantom", empty_ttl=3600)
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        async with running_trigger(stack):
            await in_thread(
                stack.core.create_namespaced_pod, "default", pool_pod("phantom-0", "phantom")
            )
            await eventually(
                lambda: pool_status(stack, "phantom"), lambda s: len(s.claims) == 1, timeout_s=60
            )
        # No trigger now: the pod goes before its node is Ready, and nobody tells the pool.
        await in_thread(
            stack.core.delete_namespaced_pod, "phantom-0", "default", grace_period_seconds=0
        )
        status = await pool_status(stack, "phantom")
        assert status.pending_pods == 1
        async with running_trigger(stack):
            status = await eventually(
                lambda: pool_status(stack, "phantom"), lambda s: s.pending_pods == 0
            )
            # Past the nomination grace (15 s): still the one claim, for no pod.
            await asyncio.sleep(17)
            status = await pool_status(stack, "phantom")
            assert len(status.claims) == 1, [c.name for c in status.claims]


async def test_pools_listed_again_keep_the_pods_still_pending(stack: Stack) -> None:
    """A NodePool re-list (a watch error, hours later) resyncs every pool: the resync must
    carry the pods still pending, not tell the pool it has none."""
    make_pool(stack.kube, "relisted", limits={"cpu": "1"})  # the pod below can never fit
    async with in_process_worker(stack), running_trigger(stack) as trigger:
        pod = pool_pod("relisted-0", "relisted", cpu="1500m")
        await in_thread(stack.core.create_namespaced_pod, "default", pod)
        await eventually(lambda: pool_status(stack, "relisted"), lambda s: s.pending_pods == 1)
        listed = await in_thread(
            stack.custom.list_cluster_custom_object, "cloudburst.io", "v1alpha1", "nodepools"
        )
        await trigger._apply("nodepool", "SYNC", listed["items"])  # as its watch does
        sent = trigger.updates_sent
        await eventually(lambda: asyncio.sleep(0, trigger.updates_sent), lambda n: n > sent)
        status = await pool_status(stack, "relisted")
        assert status.pending_pods == 1
    await in_thread(stack.core.delete_namespaced_pod, "relisted-0", "default")


async def test_claims_waking_together_keep_their_pool_in_the_workers_cache(stack: Stack) -> None:
    """Claims have a task queue of their own: however many wake at once, they never push
    their pool out of the worker's cache (an evicted pool replays its whole history, which
    timed a pool's task out during a 300-claim teardown)."""
    # The worker's own metrics, as an operator's dashboard reads them (a cache of two).
    metrics = MetricBuffer(10_000)
    settings = stack.settings.model_copy(
        update={
            "temporal_address": stack.temporal.service_client.config.target_host,
            "max_cached_workflows": 2,
        }
    )
    client = await connect_temporal(
        settings, runtime=Runtime(telemetry=TelemetryConfig(metrics=metrics))
    )
    make_pool(stack.kube, "waking", empty_ttl=1)
    async with serving(dataclasses.replace(stack, temporal=client, settings=settings)):
        for index in range(4):
            # Too big to share a node: a claim each.
            pod = pool_pod(f"waking-{index}", "waking", cpu="20", memory="1Gi")
            await in_thread(stack.core.create_namespaced_pod, "default", pod)
        await eventually(lambda: pods_of(stack, "waking"), all_running(4), timeout_s=90)
        await delete_pods(stack, "waking")
        await eventually(
            lambda: asyncio.sleep(0, vms_of_pool(stack.cluster, "waking")), lambda v: v == [], 90
        )
    evicted = collections.Counter[str]()
    for update in metrics.retrieve_updates():
        if update.metric.name == "temporal_sticky_cache_total_forced_eviction":
            evicted[str(update.attributes["task_queue"])] += int(update.value)
    # Four claims woke together through their lives on a cache of two: they pushed each
    # other out, and never the pool (the only workflow on its queue).
    assert evicted[claim_task_queue(stack.task_queue)] > 0, evicted
    assert evicted[stack.task_queue] == 0, evicted
