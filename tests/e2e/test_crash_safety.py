"""The worker process SIGKILLed mid-activity: exactly one VM, the claim converges, nothing leaks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from kubernetes import client as k8s

from api import NodeClaimPhase, labels
from api.messages import ScaleDownRequest
from sim.cluster import SimulatedCluster
from tests.e2e.harness import (
    Stack,
    WorkerProcess,
    eventually,
    in_thread,
    make_pool,
    running_watcher,
    start_test_claim,
    wait_for_phase,
    workload_pod,
)
from workflows.nodeclaim import NodeClaimWorkflow


@pytest_asyncio.fixture(loop_scope="session")
async def workers(
    stack: Stack, temporal_address: str, kubeconfig: Path
) -> AsyncIterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for process in started:
        process.stop()


def spawn_worker(
    workers: list[WorkerProcess], address: str, kubeconfig: Path, stack: Stack
) -> WorkerProcess:
    process = WorkerProcess(address, kubeconfig, stack.task_queue, stack.settings.allowed_endpoints)
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
