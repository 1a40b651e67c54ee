"""A NodeClaim's whole life on the real dev server and the simulated cluster."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import CancelledError

from activities.bootstrap import BootstrapActivities
from api import NodeClaimPhase, labels
from api.messages import ScaleDownRequest
from sim.cluster import SimulatedCluster
from sim.dev.stack import tell_claims_their_cluster_is_new
from tests.e2e.harness import (
    FAST,
    Stack,
    activity_types,
    eventually,
    in_process_worker,
    in_thread,
    make_pool,
    running_watcher,
    start_test_claim,
    wait_for_phase,
    workload_pod,
)
from tests.histories import payload_data
from workflows.nodeclaim import NodeClaimWorkflow


def live_vms(cluster: SimulatedCluster, claim: str) -> list[dict[str, object]]:
    return [
        vm for vm in cluster.cloud.list_instances() if vm["labels"].get(labels.NODECLAIM) == claim
    ]


async def node_exists(core: k8s.CoreV1Api, name: str) -> bool:
    try:
        await in_thread(core.read_node, name)
    except k8s.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


async def test_claim_lives_its_whole_life(stack: Stack) -> None:
    make_pool(stack.kube, "life", empty_ttl=2)
    core = stack.core
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        mark = stack.cluster.kube.audit_mark()
        name, handle = await start_test_claim(stack, "life")
        status = await wait_for_phase(handle, NodeClaimPhase.READY)

        assert status.node_name == name
        # One worker wrote the first-boot script and made the create call: it was handed
        # over in memory, never read back from its Secret.
        script = BootstrapActivities.script_secret_name("default", name)
        written = [
            r.verb
            for r in stack.cluster.kube.audit(after=mark)
            if r.resource == "secrets"
            and r.name in ("", script)
            and r.namespace == stack.settings.worker_namespace
        ]
        # Read once only, by its deletion at Ready (which deletes no token but the one the
        # script records): never before the create call.
        before_deletion = written[: written.index("delete")] if "delete" in written else written
        assert "create" in written and before_deletion.count("get") <= 1
        assert "get" not in before_deletion[:-1], written
        assert status.instance_id and status.instance_id.startswith("fake/sim-1/")
        assert {c.type for c in status.conditions} >= {"Launched", "Registered", "Ready"}
        assert status.capacity["cpu"] == "2"  # fk-small, as the kubelet reports it
        node = await in_thread(core.read_node, name)
        assert node.metadata.labels[labels.NODEPOOL] == "life"
        assert node.metadata.labels[labels.NODECLAIM] == name
        assert node.metadata.labels[labels.PROVIDER] == "fake"
        assert node.metadata.labels[labels.REGION] == "sim-1"
        assert node.metadata.labels[labels.INSTANCE_TYPE] == "fk-small"
        assert node.metadata.labels["test-pool"] == "life"
        # Once Ready, the join token and the script are gone from the cluster.
        leftovers = await in_thread(
            core.list_secret_for_all_namespaces, label_selector=f"{labels.NODECLAIM}={name}"
        )
        assert leftovers.items == []

        # The NodeClaim resource mirrors the workflow, owned by its NodePool.
        mirror = await eventually(
            lambda: in_thread(read_claim_resource, stack.kube, name),
            lambda r: r is not None and r.get("status", {}).get("phase") == "Ready",
        )
        assert mirror["spec"]["nodePool"] == "life"
        assert mirror["status"]["instanceID"] == status.instance_id
        assert mirror["metadata"]["ownerReferences"][0]["kind"] == "NodePool"
        assert labels.TERMINATION_FINALIZER in mirror["metadata"]["finalizers"]
        reasons = await claim_event_reasons(core, name)
        assert {"Launched", "Registered", "Ready"} <= reasons

        await in_thread(core.create_namespaced_pod, "default", workload_pod("life-app", name))
        pod = await eventually(
            lambda: in_thread(core.read_namespaced_pod, "life-app", "default"),
            lambda p: p.spec.node_name == name and p.status.phase == "Running",
        )
        assert pod.spec.node_name == name
        await in_thread(core.delete_namespaced_pod, "life-app", "default")

        final = await asyncio.wait_for(handle.result(), timeout=60)
        assert final.phase == NodeClaimPhase.DELETED
        assert final.deletion_reason == "Empty"
        assert not await node_exists(core, name)
        assert live_vms(stack.cluster, name) == []
        assert stack.cluster.cloud.stats()["created_by_name"][name] == 1
        assert await in_thread(read_claim_resource, stack.kube, name) is None
        assert "ScaleDownEmpty" in await claim_event_reasons(core, name)


async def test_kubectl_delete_nodeclaim_scales_the_node_down(stack: Stack) -> None:
    make_pool(stack.kube, "kubectl", empty_ttl=3600)
    custom = k8s.CustomObjectsApi(stack.kube)
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        name, handle = await start_test_claim(stack, "kubectl")
        await wait_for_phase(handle, NodeClaimPhase.READY)
        await eventually(
            lambda: in_thread(read_claim_resource, stack.kube, name), lambda r: r is not None
        )
        await in_thread(
            custom.delete_namespaced_custom_object,
            "cloudburst.io",
            "v1alpha1",
            "default",
            "nodeclaims",
            name,
        )
        final = await asyncio.wait_for(handle.result(), timeout=60)
        assert final.phase == NodeClaimPhase.DELETED
        assert final.deletion_reason == "NodeClaim deleted"
        assert live_vms(stack.cluster, name) == []
        await eventually(
            lambda: in_thread(read_claim_resource, stack.kube, name), lambda r: r is None
        )


async def test_a_node_deleted_while_no_watcher_ran_is_noticed_when_one_starts(
    stack: Stack,
) -> None:
    """No DELETED event reaches a watcher that was down: the next one must still tell the
    claim at once, not leave it Ready with no node until its slow safety-net poll."""
    make_pool(stack.kube, "unseen", empty_ttl=3600)
    slow_poll = FAST.model_copy(update={"ready_poll_interval_s": 3600})
    async with in_process_worker(stack):
        async with running_watcher(stack.temporal, stack.kube):
            name, handle = await start_test_claim(stack, "unseen", timings=slow_poll)
            await wait_for_phase(handle, NodeClaimPhase.READY)
            await eventually(
                lambda: in_thread(read_claim_resource, stack.kube, name),
                lambda r: r is not None and r.get("status", {}).get("phase") == "Ready",
            )
        await in_thread(stack.core.delete_node, name)  # as `kubectl delete node` would
        async with running_watcher(stack.temporal, stack.kube):
            final = await asyncio.wait_for(handle.result(), timeout=60)
    assert final.phase == NodeClaimPhase.DELETED
    assert final.deletion_reason == "NodeLost"
    assert live_vms(stack.cluster, name) == []


async def test_a_restarted_dev_stack_ends_the_claims_of_its_last_run(stack: Stack) -> None:
    """`make dev` keeps Temporal's db but not the simulated cluster: what it does on start
    ends a claim of the last run through its own cleanup instead of leaving it Ready."""
    make_pool(stack.kube, "lastrun", empty_ttl=3600)
    slow_poll = FAST.model_copy(update={"ready_poll_interval_s": 3600})
    async with in_process_worker(stack):
        name, handle = await start_test_claim(stack, "lastrun", timings=slow_poll)
        await wait_for_phase(handle, NodeClaimPhase.READY)
        assert await tell_claims_their_cluster_is_new(stack.temporal) >= 1
        final = await asyncio.wait_for(handle.result(), timeout=60)
    assert final.phase == NodeClaimPhase.DELETED
    assert final.deletion_reason == "NodeLost"
    assert live_vms(stack.cluster, name) == []


def read_claim_resource(kube: k8s.ApiClient, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = k8s.CustomObjectsApi(kube).get_namespaced_custom_object(  # type: ignore[assignment]
            "cloudburst.io", "v1alpha1", "default", "nodeclaims", name
        )
    except k8s.ApiException as err:
        if err.status == 404:
            return None
        raise
    return found


async def claim_event_reasons(core: k8s.CoreV1Api, name: str) -> set[str]:
    listing = await in_thread(
        core.list_namespaced_event, "default", field_selector=f"involvedObject.name={name}"
    )
    return {event.reason or "" for event in listing.items}


async def test_busy_again_cancels_the_empty_ttl(stack: Stack) -> None:
    # Longer than kube-scheduler's back-off before it binds the waiting pod to the new node.
    ttl = 15
    make_pool(stack.kube, "busy", empty_ttl=ttl)
    core = stack.core
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        name, handle = await start_test_claim(stack, "busy")
        # A pod waits for the node before it exists, so the node is busy from the start.
        await in_thread(core.create_namespaced_pod, "default", workload_pod("busy-1", name))
        await wait_for_phase(handle, NodeClaimPhase.READY)
        await eventually(
            lambda: handle.query(NodeClaimWorkflow.status),
            lambda s: (c := s.condition("Empty")) is not None and c.status == "False",
        )
        await in_thread(core.delete_namespaced_pod, "busy-1", "default")
        await eventually(
            lambda: handle.query(NodeClaimWorkflow.status),
            lambda s: (c := s.condition("Empty")) is not None and c.status == "True",
        )
        # Busy again well within the TTL: the timer must be cancelled.
        await in_thread(core.create_namespaced_pod, "default", workload_pod("busy-2", name))
        await eventually(
            lambda: handle.query(NodeClaimWorkflow.status),
            lambda s: (c := s.condition("Empty")) is not None and c.status == "False",
        )
        await asyncio.sleep(ttl + 1)  # the absence of a scale-down needs the TTL to pass
        status = await handle.query(NodeClaimWorkflow.status)
        assert status.phase == NodeClaimPhase.READY
        assert await node_exists(core, name)

        await in_thread(core.delete_namespaced_pod, "busy-2", "default")
        final = await asyncio.wait_for(handle.result(), timeout=60)
        assert final.phase == NodeClaimPhase.DELETED
        assert final.deletion_reason == "Empty"


async def test_pods_that_arrived_unseen_call_off_an_empty_scale_down(stack: Stack) -> None:
    """The claim last saw its node empty; pods were bound since. Cordoned for the scale-down,
    the node is looked at again: busy after all, it is uncordoned and nothing is evicted."""
    make_pool(stack.kube, "unseen", empty_ttl=4)
    core = stack.core
    # No watcher and no polls while Ready: the claim learns nothing new about its node.
    blind = FAST.model_copy(update={"ready_poll_interval_s": 3600, "node_poll_interval_s": 0.5})
    async with in_process_worker(stack):
        name, handle = await start_test_claim(stack, "unseen", timings=blind)
        await wait_for_phase(handle, NodeClaimPhase.READY)
        await in_thread(core.create_namespaced_pod, "default", workload_pod("unseen-1", name))

        await eventually(
            lambda: activity_types(stack.temporal, handle.id),
            lambda types: "uncordon_node" in types,
            timeout_s=30,
        )
        pod = await in_thread(core.read_namespaced_pod, "unseen-1", "default")
        assert pod.spec.node_name == name and pod.metadata.deletion_timestamp is None
        node = await in_thread(core.read_node, name)
        assert not node.spec.unschedulable
        assert labels.DISRUPTED_TAINT not in {t.key for t in node.spec.taints or []}
        assert (await handle.query(NodeClaimWorkflow.status)).phase == NodeClaimPhase.READY

        await handle.signal(
            NodeClaimWorkflow.scale_down, ScaleDownRequest(reason="test over", force=True)
        )
        final = await asyncio.wait_for(handle.result(), timeout=60)
    # The forced scale-down evicted it (a bare pod: gone for good).
    assert final.deletion_reason == "test over"


async def test_scale_down_from_the_cli(stack: Stack, temporal_address: str) -> None:
    make_pool(stack.kube, "manual", empty_ttl=3600)
    core = stack.core
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        name, handle = await start_test_claim(stack, "manual")
        await wait_for_phase(handle, NodeClaimPhase.READY)
        await in_thread(core.create_namespaced_pod, "default", workload_pod("manual-app", name))
        await eventually(
            lambda: in_thread(core.read_namespaced_pod, "manual-app", "default"),
            lambda p: p.status.phase == "Running",
        )

        code, output = await run_cli(
            "claims", "scale-down", name, "--reason", "maintenance window",
            "--temporal-address", temporal_address,
        )  # fmt: skip
        assert code == 0, output
        assert "accepted" in output

        final = await asyncio.wait_for(handle.result(), timeout=60)
        assert final.phase == NodeClaimPhase.DELETED
        assert final.deletion_reason == "maintenance window"
        # The busy node was drained through the Eviction API: the pod is gone.
        pods = await in_thread(
            core.list_namespaced_pod, "default", field_selector=f"spec.nodeName={name}"
        )
        assert pods.items == []
        assert live_vms(stack.cluster, name) == []

        code, output = await run_cli(
            "claims", "scale-down", name, "--temporal-address", temporal_address
        )
        assert code != 0
        assert "rejected" in output or "no running NodeClaim" in output


async def test_scale_down_update_is_answered(stack: Stack) -> None:
    make_pool(stack.kube, "update", empty_ttl=3600)
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        _, handle = await start_test_claim(stack, "update")
        await wait_for_phase(handle, NodeClaimPhase.READY)
        first = await handle.execute_update(
            NodeClaimWorkflow.request_scale_down, ScaleDownRequest(reason="first")
        )
        assert first.accepted
        await handle.result()


async def test_cancelling_a_claim_cleans_up(stack: Stack) -> None:
    make_pool(stack.kube, "cancel", empty_ttl=3600)
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        name, handle = await start_test_claim(stack, "cancel")
        await wait_for_phase(handle, NodeClaimPhase.READY)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), timeout=60)
        assert isinstance(failure.value.cause, CancelledError)
        assert not await node_exists(stack.core, name)
        assert live_vms(stack.cluster, name) == []


async def test_cancelling_during_create_leaves_no_vm(stack: Stack) -> None:
    make_pool(stack.kube, "cancel-early", empty_ttl=3600)
    cloud = stack.cluster.cloud
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        cloud.hold("create")
        try:
            name, handle = await start_test_claim(stack, "cancel-early")
            await eventually(
                lambda: asyncio.sleep(0, cloud.stats()), lambda s: s["creates_in_flight"] == 1
            )
            await handle.cancel()
        finally:
            cloud.release("create")
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), timeout=60)
        # The create's answer never reached the workflow; cleanup found the VM by its label.
        await eventually(lambda: asyncio.sleep(0, live_vms(stack.cluster, name)), lambda v: v == [])


async def test_registration_timeout_deletes_the_vm_and_fails(stack: Stack) -> None:
    make_pool(stack.kube, "noshow", empty_ttl=3600)
    cloud = stack.cluster.cloud
    async with in_process_worker(stack):  # no watcher, and the VM never boots in time
        timings = FAST.model_copy(update={"registration_timeout_s": 3, "node_poll_interval_s": 1})
        cloud.boot_delay_s = 3600
        try:
            name, handle = await start_test_claim(stack, "noshow", timings=timings)
            with pytest.raises(WorkflowFailureError) as failure:
                await asyncio.wait_for(handle.result(), timeout=60)
        finally:
            cloud.boot_delay_s = 0.3
        assert "did not become Ready" in str(failure.value.cause)
        status = await handle.query(NodeClaimWorkflow.status)
        assert status.phase == NodeClaimPhase.FAILED
        assert status.failure_reason == "RegistrationTimeout"
        assert live_vms(stack.cluster, name) == []


async def run_cli(*args: str) -> tuple[int, str]:
    cli = Path(sys.executable).parent / "cloudburst"
    process = await asyncio.create_subprocess_exec(
        str(cli), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()


async def test_an_idle_claims_safety_net_poll_looks_at_node_and_vm_in_one_task(
    stack: Stack,
) -> None:
    """The poll is most of an idle claim's history: both looks go out in one workflow task."""
    make_pool(stack.kube, "poll", empty_ttl=3600)
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        _, handle = await start_test_claim(stack, "poll")  # FAST: a poll every 10 s
        await wait_for_phase(handle, NodeClaimPhase.READY)

        async def scheduled() -> list[tuple[str, int]]:
            return [
                (
                    e.activity_task_scheduled_event_attributes.activity_type.name,
                    e.activity_task_scheduled_event_attributes.workflow_task_completed_event_id,
                )
                async for e in handle.fetch_history_events()
                if e.HasField("activity_task_scheduled_event_attributes")
            ]

        activities = await eventually(
            scheduled, lambda a: any(name == "get_instance" for name, _ in a), timeout_s=40
        )
        [(_, task)] = [(n, t) for n, t in activities if n == "get_instance"][:1]
        assert ("get_node_state", task) in activities, activities
        await handle.signal(NodeClaimWorkflow.scale_down, ScaleDownRequest(reason="done"))
        await asyncio.wait_for(handle.result(), timeout=60)


async def test_a_claims_independent_steps_share_workflow_tasks(stack: Stack) -> None:
    """What need not wait goes out together: fewer round trips before the create call and a
    shorter history (the bootstrap beside the first mirror, both run inside the claim's first
    workflow task with the create call, the labels beside the Secrets' removal at Ready, the
    cordon beside the Deleting mirror, the Node beside the VM)."""
    make_pool(stack.kube, "together", empty_ttl=3600)
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        # A task whose local activities outlast 80 % of its timeout is completed early by the
        # SDK (a heartbeat) and the rest recorded in the next one: on a loaded machine a fresh
        # worker's first task can, so this claim's tasks get a timeout no delay reaches.
        _, handle = await start_test_claim(stack, "together", task_timeout=timedelta(minutes=1))
        await wait_for_phase(handle, NodeClaimPhase.READY)
        await handle.signal(NodeClaimWorkflow.scale_down, ScaleDownRequest(reason="done"))
        await asyncio.wait_for(handle.result(), timeout=60)
        # (activity, the workflow task that asked for it, its event): activities and the
        # markers of local activities (the short Kubernetes calls, `kube-calls-local`).
        scheduled: list[tuple[str, int, int]] = []
        async for e in handle.fetch_history_events():
            if e.HasField("activity_task_scheduled_event_attributes"):
                attributes = e.activity_task_scheduled_event_attributes
                name = attributes.activity_type.name
                scheduled.append((name, attributes.workflow_task_completed_event_id, e.event_id))
            elif e.HasField("marker_recorded_event_attributes"):
                marker = e.marker_recorded_event_attributes
                if marker.marker_name != "core_local_activity":
                    continue
                name = json.loads(payload_data(marker.details["data"].payloads[0]))["activity_type"]
                scheduled.append((name, marker.workflow_task_completed_event_id, e.event_id))

    def task_of(name: str, nth: int = 0) -> int:
        return [task for activity, task, _ in scheduled if activity == name][nth]

    def event_of(name: str, nth: int = 0) -> int:
        return [event for activity, _, event in scheduled if activity == name][nth]

    assert task_of("prepare_bootstrap") == task_of("sync_nodeclaim", 0), scheduled
    assert task_of("create_instance") == task_of("prepare_bootstrap"), scheduled
    assert task_of("label_node") == task_of("delete_bootstrap_secrets"), scheduled
    assert task_of("cordon_node") in {t for a, t, _ in scheduled if a == "sync_nodeclaim"}, (
        scheduled
    )
    assert task_of("delete_node") == task_of("delete_instance"), scheduled
    # The create call waits for the first mirror: PROVISIONING is shown before the launch.
    assert event_of("create_instance") > event_of("sync_nodeclaim", 0), scheduled
