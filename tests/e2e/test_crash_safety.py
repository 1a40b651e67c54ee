"""Worker processes SIGKILLed mid-activity (exactly one VM, the claim converges, nothing
leaks), and pools and claims on worker processes of their own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from kubernetes import client as k8s
from temporalio.api.enums.v1 import PendingWorkflowTaskState

from api import NodeClaimPhase, labels
from api.messages import ScaleDownRequest, claim_task_queue, claim_workflow_id
from api.nodepool.messages import pool_workflow_id
from sim.cluster import SimulatedCluster
from tests.e2e.harness import (
    Stack,
    WorkerProcess,
    eventually,
    in_thread,
    make_pool,
    pool_pod,
    running_trigger,
    running_watcher,
    start_test_claim,
    wait_for_phase,
    workload_pod,
)
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.nodepool import NodePoolWorkflow


@pytest_asyncio.fixture(loop_scope="session")
async def workers(
    stack: Stack, temporal_address: str, kubeconfig: Path
) -> AsyncIterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for process in started:
        process.stop()


def spawn_worker(
    workers: list[WorkerProcess],
    address: str,
    kubeconfig: Path,
    stack: Stack,
    queues: str = "all",
) -> WorkerProcess:
    process = WorkerProcess(
        address, kubeconfig, stack.task_queue, stack.settings.allowed_endpoints, queues
    )
    process.start()
    workers.append(process)
    return process


def vms_of(cluster: SimulatedCluster, claim: str) -> list[dict[str, object]]:
    return [
        vm for vm in cluster.cloud.list_instances() if vm["labels"].get(labels.NODECLAIM) == claim
    ]


async def test_worker_killed_during_create_instance(
    stack: Stack, workers: list[WorkerProcess], temporal_address: str, kubeconfig: Path
) -> None:
    make_pool(stack.kube, "crash-create", empty_ttl=3600)
    cloud = stack.cluster.cloud
    async with running_watcher(stack.temporal, stack.kube):
        first = spawn_worker(workers, temporal_address, kubeconfig, stack)
        cloud.hold("create")
        try:
            name, handle = await start_test_claim(stack, "crash-create")
            # The cloud has accepted the create; its answer is held back while we kill.
            await eventually(
                lambda: asyncio.sleep(0, cloud.stats()), lambda s: s["creates_in_flight"] == 1
            )
            first.kill()
        finally:
            cloud.release("create")

        spawn_worker(workers, temporal_address, kubeconfig, stack)
        status = await wait_for_phase(handle, NodeClaimPhase.READY, timeout_s=90)
        assert status.instance_id is not None
        assert cloud.stats()["created_by_name"][name] == 1, "a retried create made a second VM"
        assert len(vms_of(stack.cluster, name)) == 1

        await handle.signal(NodeClaimWorkflow.scale_down, ScaleDownRequest(reason="test over"))
        final = await asyncio.wait_for(handle.result(), timeout=90)
        assert final.phase == NodeClaimPhase.DELETED
        assert vms_of(stack.cluster, name) == []
        assert cloud.stats()["created_by_name"][name] == 1


async def test_worker_killed_during_drain(
    stack: Stack, workers: list[WorkerProcess], temporal_address: str, kubeconfig: Path
) -> None:
    make_pool(stack.kube, "crash-drain", empty_ttl=3600, grace=600)
    core = stack.core
    policy = k8s.PolicyV1Api(stack.kube)
    async with running_watcher(stack.temporal, stack.kube):
        first = spawn_worker(workers, temporal_address, kubeconfig, stack)
        name, handle = await start_test_claim(stack, "crash-drain")
        await in_thread(core.create_namespaced_pod, "default", workload_pod("guarded", name))
        await wait_for_phase(handle, NodeClaimPhase.READY, timeout_s=90)
        await eventually(
            lambda: in_thread(core.read_namespaced_pod, "guarded", "default"),
            lambda p: p.status.phase == "Running",
        )
        # A PDB that allows no disruption holds the drain (evictions answer 429).
        budget = k8s.V1PodDisruptionBudget(
            metadata=k8s.V1ObjectMeta(name="guarded", namespace="default"),
            spec=k8s.V1PodDisruptionBudgetSpec(
                min_available=1, selector=k8s.V1LabelSelector(match_labels={"app": "guarded"})
            ),
        )
        await in_thread(policy.create_namespaced_pod_disruption_budget, "default", budget)
        try:
            await handle.signal(NodeClaimWorkflow.scale_down, ScaleDownRequest(reason="drain me"))
            await wait_for_phase(handle, NodeClaimPhase.DELETING)
            node = await eventually(
                lambda: in_thread(core.read_node, name), lambda n: bool(n.spec.unschedulable)
            )
            assert any(t.key == labels.DISRUPTED_TAINT for t in node.spec.taints or [])
            await asyncio.sleep(1)  # let the drain hit the budget at least once
            first.kill()
        finally:
            await in_thread(policy.delete_namespaced_pod_disruption_budget, "guarded", "default")

        # The pod is still there: nothing evicted it while no worker ran.
        pod = await in_thread(core.read_namespaced_pod, "guarded", "default")
        assert pod.spec.node_name == name

        spawn_worker(workers, temporal_address, kubeconfig, stack)
        final = await asyncio.wait_for(handle.result(), timeout=120)
        assert final.phase == NodeClaimPhase.DELETED
        pods = await in_thread(
            core.list_namespaced_pod, "default", field_selector=f"spec.nodeName={name}"
        )
        assert pods.items == []
        assert vms_of(stack.cluster, name) == []
        assert stack.cluster.cloud.stats()["created_by_name"][name] == 1


async def test_pools_and_claims_on_workers_of_their_own(
    stack: Stack, workers: list[WorkerProcess], temporal_address: str, kubeconfig: Path
) -> None:
    """`cloudburst worker --queues pools` and `--queues claims`, as two Deployments: the
    pools' worker plans and starts claims but never runs one, and a SIGKILL of the claims'
    worker leaves the pool answering and planning."""
    make_pool(stack.kube, "split-queues", empty_ttl=3600)
    pool = stack.temporal.get_workflow_handle_for(
        NodePoolWorkflow.run, pool_workflow_id("default", "split-queues")
    )
    async with running_watcher(stack.temporal, stack.kube), running_trigger(stack):
        spawn_worker(workers, temporal_address, kubeconfig, stack, queues="pools")
        await in_thread(
            stack.core.create_namespaced_pod, "default", pool_pod("split-0", "split-queues")
        )
        status = await eventually(
            lambda: pool.query(NodePoolWorkflow.status), lambda s: len(s.claims) == 1
        )
        claim = stack.temporal.get_workflow_handle(
            claim_workflow_id("default", status.claims[0].name)
        )
        # Started on the claims' queue, which no worker polls yet: its first task waits there.
        await asyncio.sleep(2)
        described = await claim.describe()
        assert described.task_queue == claim_task_queue(stack.task_queue)
        assert described.raw_description.pending_workflow_task.state == (
            PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED
        )
        assert stack.cluster.cloud.stats()["created_by_name"].get(status.claims[0].name) is None

        claims_worker = spawn_worker(workers, temporal_address, kubeconfig, stack, "claims")
        await eventually(
            lambda: in_thread(stack.core.read_namespaced_pod, "split-0", "default"),
            lambda p: p.status.phase == "Running",
            timeout_s=90,
        )
        claims_worker.kill()
        # The pool runs on: a second pod is planned, its claim waits for a claims' worker.
        await in_thread(
            stack.core.create_namespaced_pod,
            "default",
            pool_pod("split-1", "split-queues", cpu="3"),
        )
        status = await eventually(
            lambda: pool.query(NodePoolWorkflow.status), lambda s: len(s.claims) == 2
        )
        spawn_worker(workers, temporal_address, kubeconfig, stack, "claims")
        await eventually(
            lambda: in_thread(stack.core.read_namespaced_pod, "split-1", "default"),
            lambda p: p.status.phase == "Running",
            timeout_s=90,
        )
        for pod in ("split-0", "split-1"):
            await in_thread(stack.core.delete_namespaced_pod, pod, "default")
        for name in [c.name for c in status.claims]:
            handle = stack.temporal.get_workflow_handle_for(
                NodeClaimWorkflow.run, claim_workflow_id("default", name)
            )
            await handle.signal(NodeClaimWorkflow.scale_down, ScaleDownRequest(reason="test over"))
            assert (await asyncio.wait_for(handle.result(), 90)).phase == NodeClaimPhase.DELETED
