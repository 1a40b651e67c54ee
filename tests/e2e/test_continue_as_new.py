"""A long-lived claim continues as new when Temporal suggests it, and keeps its state."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from kubernetes import client as k8s
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from api import NodeClaimPhase, search_attributes
from api.messages import ClaimTimings, ScaleDownRequest
from api.nodepool.messages import pool_workflow_id
from sim.cluster import SimulatedCluster
from tests.conftest import TEMPORAL_CLI
from tests.e2e.harness import (
    FAST,
    eventually,
    in_process_worker,
    in_thread,
    make_pool,
    pool_pod,
    running_trigger,
    running_watcher,
    stack_on,
    start_test_claim,
    wait_for_phase,
    workload_pod,
)
from tests.payload_keys import SEALED_CONVERTER
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.nodepool import NodePoolWorkflow


@pytest_asyncio.fixture(loop_scope="session")
async def short_history_env() -> AsyncIterator[WorkflowEnvironment]:
    """Its own server: suggesting continue-as-new after 40 events would disturb other tests."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL_CLI),
        search_attributes=list(search_attributes.ALL),
        data_converter=SEALED_CONVERTER,
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
    stack = stack_on(client, kube, sim_cluster, kubeconfig)
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


async def test_pool_continues_as_new_and_keeps_its_claims(
    short_history_env: WorkflowEnvironment,
    kube: k8s.ApiClient,
    sim_cluster: SimulatedCluster,
    kubeconfig: Path,
) -> None:
    """Its state crosses over: the claims it started, the demand they cover. No node twice."""
    client = short_history_env.client
    stack = stack_on(client, kube, sim_cluster, kubeconfig)
    make_pool(kube, "renewed", empty_ttl=1)
    pool_id = pool_workflow_id("default", "renewed")
    async with in_process_worker(stack), running_watcher(client, kube), running_trigger(stack):
        for index in range(3):
            pod = pool_pod(f"renewed-{index}", "renewed", cpu="1500m", memory="1Gi")
            await in_thread(stack.core.create_namespaced_pod, "default", pod)
        listing = await eventually(
            lambda: in_thread(
                stack.core.list_namespaced_pod, "default", label_selector="pool=renewed"
            ),
            lambda found: (
                len(found.items) == 3 and all(p.status.phase == "Running" for p in found.items)
            ),
            timeout_s=90,
        )
        nodes = {p.spec.node_name for p in listing.items}
        await eventually(lambda: _runs(client, pool_id), lambda count: count >= 2, timeout_s=60)
        status = await client.get_workflow_handle_for(NodePoolWorkflow.run, pool_id).query(
            NodePoolWorkflow.status
        )
        # The new run knows every claim the old one started, and started none again.
        assert {c.name for c in status.claims} == nodes
        assert sorted(sim_cluster.cloud.stats()["created_by_name"].get(n, 0) for n in nodes) == [
            1
        ] * len(nodes)

        # Claims report to the new run: once empty, the nodes go and the pool forgets them.
        await in_thread(
            stack.core.delete_collection_namespaced_pod, "default", label_selector="pool=renewed"
        )
        await eventually(
            lambda: client.get_workflow_handle_for(NodePoolWorkflow.run, pool_id).query(
                NodePoolWorkflow.status
            ),
            lambda s: s.nodes == 0,
            timeout_s=90,
        )
    assert (
        sim_cluster.cloud.list_instances(label_selector={"cloudburst.io/nodepool": "renewed"}) == []
    )
