"""What operators read: a claim's phase timeline from history, and clear unreachable errors."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest_asyncio
from kubernetes import client as k8s
from temporalio.client import Client
from typer.testing import CliRunner

from api import NodeClaimPhase
from api.messages import ScaleDownRequest
from cli.main import app
from cli.timeline import format_duration, phase_timeline
from sim.cluster import SimulatedCluster
from tests.e2e.harness import (
    CLUSTER_ID,
    Stack,
    in_process_worker,
    make_pool,
    new_task_queue,
    running_watcher,
    start_test_claim,
    wait_for_phase,
)
from worker.settings import Settings
from workflows.nodeclaim import NodeClaimWorkflow


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    temporal_client: Client, kube: k8s.ApiClient, sim_cluster: SimulatedCluster, kubeconfig: Path
) -> Stack:
    queue = new_task_queue()
    settings = Settings(kubeconfig=kubeconfig, task_queue=queue, cluster_id=CLUSTER_ID)
    return Stack(temporal_client, kube, sim_cluster, queue, settings)


async def test_timeline_follows_the_phases_with_durations(stack: Stack) -> None:
    make_pool(stack.kube, "timeline", empty_ttl=600)
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        _, handle = await start_test_claim(stack, "timeline")
        await wait_for_phase(handle, NodeClaimPhase.READY)
        running = await phase_timeline(stack.temporal, handle.id)
        assert running[-1].phase == "Ready" and running[-1].until is None  # ongoing
        await handle.execute_update(
            NodeClaimWorkflow.request_scale_down, ScaleDownRequest(reason="Manual", force=True)
        )
        await handle.result()

    timeline = await phase_timeline(stack.temporal, handle.id)
    phases = [span.phase for span in timeline]
    assert phases[0] == "Pending" and phases[-1] == "Deleted"
    assert phases.index("Provisioning") < phases.index("Ready") < phases.index("Deleting")
    for earlier, later in itertools.pairwise(timeline):
        assert earlier.until == later.since
    assert timeline[-1].until is not None  # closed: the last phase has an end too
    assert all(span.duration().total_seconds() >= 0 for span in timeline)


def test_format_duration() -> None:
    from datetime import timedelta

    assert format_duration(timedelta(seconds=5)) == "5s"
    assert format_duration(timedelta(minutes=3, seconds=7)) == "3m07s"
    assert format_duration(timedelta(hours=2, minutes=1)) == "2h01m00s"


def test_every_temporal_command_says_clearly_when_temporal_is_unreachable() -> None:
    runner = CliRunner()
    for args in (
        ["claims", "list"],
        ["claims", "describe", "x-abcde"],
        ["claims", "scale-down", "x-abcde"],
        ["pools", "list"],
        ["pools", "describe", "x"],
    ):
        result = runner.invoke(app, [*args, "--temporal-address", "127.0.0.1:9"])
        assert result.exit_code == 1, (args, result.output)
        assert "cannot reach Temporal at 127.0.0.1:9" in result.output, (args, result.output)
