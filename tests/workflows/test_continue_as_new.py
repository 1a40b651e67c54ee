"""A long-lived claim continues as new when Temporal suggests it, and keeps its state."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from kubernetes import client as k8s
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from api import NodeClaimPhase, search_attributes
from api.messages import ClaimTimings, ScaleDownRequest
from sim.cluster import SimulatedCluster
from tests.conftest import TEMPORAL_CLI
from tests.e2e.harness import (
    CLUSTER_ID,
    FAST,
    Stack,
    eventually,
    in_process_worker,
    in_thread,
    make_pool,
    new_task_queue,
    running_watcher,
    start_test_claim,
    wait_for_phase,
    workload_pod,
)
from worker.settings import Settings
from workflows.nodeclaim import NodeClaimWorkflow


@pytest_asyncio.fixture(loop_scope="session")
async def short_history_env() -> AsyncIterator[WorkflowEnvironment]:
    """Its own server: suggesting continue-as-new after 40 events would disturb other tests."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL_CLI),
        search_attributes=list(search_attributes.ALL),
        data_converter=pydantic_data_converter,
        dev_server_log_level="error",
        dev_server_extra_args=[
            "--dynamic-config-value",
            "limit.historyCount.suggestContinueAsNew=40",
        ],
    )
    try:
        yield env
    finally:
        await env.shutdown()


async def test_claim_continues_as_new_and_keeps_serving(
    short_history_env: WorkflowEnvironment,
    kube: k8s.ApiClient,
    sim_cluster: SimulatedCluster,
    kubeconfig: Path,
) -> None:
    client = short_history_env.client
    queue = new_task_queue()
    stack = Stack(
        client,
        kube,
        sim_cluster,
        queue,
        Settings(kubeconfig=kubeconfig, task_queue=queue, cluster_id=CLUSTER_ID),
    )
    make_pool(kube, "longlived", empty_ttl=3600)
    # Frequent safety-net polls make history grow while the claim just serves.
    timings: ClaimTimings = FAST.model_copy(update={"ready_poll_interval_s": 0.5})
    async with in_process_worker(stack), running_watcher(client, kube):
        name, handle = await start_test_claim(stack, "longlived", timings=timings)
        await in_thread(stack.core.create_namespaced_pod, "default", workload_pod("long-app", name))
        first = await wait_for_phase(handle, NodeClaimPhase.READY)

        runs = await eventually(
            lambda: _runs(client, handle.id), lambda count: count >= 2, timeout_s=60
        )
        assert runs >= 2
        # The new run resumed Ready with the same VM and node; it did not provision again.
        resumed = await handle.query(NodeClaimWorkflow.status)
        assert resumed.phase == NodeClaimPhase.READY
        assert resumed.instance_id == first.instance_id
        assert resumed.ready_at == first.ready_at
        assert sim_cluster.cloud.stats()["created_by_name"][name] == 1

        await handle.signal(NodeClaimWorkflow.scale_down, ScaleDownRequest(reason="end"))
        final = await asyncio.wait_for(handle.result(), timeout=60)
        assert final.phase == NodeClaimPhase.DELETED
        assert final.instance_id == first.instance_id


async def _runs(client: Client, workflow_id: str) -> int:
    return len([e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")])
