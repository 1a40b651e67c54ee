"""Expiry after hours is a durable timer: a claim with a six-hour TTL expires when its
clock says six hours have passed, without the test waiting six hours.

Time-skipping V2 gives each workflow its own virtual clock: the claim provisions in real time
(the simulated kubelet boots its node as usual), then the test moves the claim's clock forward.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from kubernetes import client as k8s
from temporalio.testing import WorkflowEnvironment

from api import NodeClaimPhase
from sim.cluster import SimulatedCluster
from tests.e2e.harness import (
    FAST,
    in_process_worker,
    make_pool,
    running_watcher,
    stack_on,
    start_test_claim,
    wait_for_phase,
)

SIX_HOURS = 6 * 3600


async def test_a_six_hour_ttl_expires_on_the_claims_clock(
    skipping_env: WorkflowEnvironment,
    kube: k8s.ApiClient,
    sim_cluster: SimulatedCluster,
    kubeconfig: Path,
) -> None:
    client = skipping_env.client
    stack = stack_on(client, kube, sim_cluster, kubeconfig)
    make_pool(kube, "sixhours", empty_ttl=SIX_HOURS * 10)
    k8s.CustomObjectsApi(kube).patch_namespaced_custom_object(
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodepools",
        "sixhours",
        {"spec": {"disruption": {"ttlSecondsUntilExpired": SIX_HOURS}}},
    )
    # Rare safety-net polls: each one is real work between the skipped stretches.
    timings = FAST.model_copy(update={"ready_poll_interval_s": 1800})
    async with in_process_worker(stack), running_watcher(client, kube):
        _, handle = await start_test_claim(stack, "sixhours", timings=timings)
        ready = await wait_for_phase(handle, NodeClaimPhase.READY)
        assert ready.created_at is not None

        # Five hours on: still serving.
        await skipping_env.fast_forward(handle, timedelta(hours=5))
        five_hours_on = await wait_for_phase(handle, NodeClaimPhase.READY)
        assert five_hours_on.deletion_reason is None

        # Past six hours: expired, drained and deleted like any other expiry.
        await skipping_env.fast_forward(handle, timedelta(hours=1, minutes=5))
        final = await asyncio.wait_for(handle.result(), timeout=120)

    assert final.phase == NodeClaimPhase.DELETED
    assert final.deletion_reason == "Expired"
    assert final.deleted_at is not None
    lived = final.deleted_at - ready.created_at
    assert timedelta(seconds=SIX_HOURS) <= lived < timedelta(hours=7), lived
    assert (
        sim_cluster.cloud.list_instances(label_selector={"cloudburst.io/nodepool": "sixhours"})
        == []
    )
