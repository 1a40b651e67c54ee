"""What operators read: a claim's phase timeline from history, clear unreachable errors, and
the claims and pools commands against a real Temporal and cluster: prices, pods on nodes,
`--watch` in a pipe, `-o json`."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

import yaml
from typer.testing import CliRunner, Result

from api import NodeClaimPhase
from api.messages import ScaleDownRequest, claim_workflow_id
from api.nodepool.messages import pool_workflow_id
from cli.main import app
from cli.manual_claims import new_claim_name
from cli.timeline import format_duration, phase_timeline
from tests.e2e.harness import (
    CLUSTER_ID,
    Stack,
    eventually,
    in_process_worker,
    in_thread,
    make_pool,
    pool_pod,
    running_trigger,
    running_watcher,
    start_test_claim,
    wait_for_phase,
)
from workflows.nodeclaim import NodeClaimWorkflow

CLI = str(Path(sys.executable).parent / "cloudburst")


async def cloudburst(stack: Stack, *args: str) -> Result:
    """The command as an operator runs it (not a terminal: CliRunner), against this stack:
    its Temporal, its cluster and its task queue."""
    env = {
        "CLOUDBURST_KUBECONFIG": str(stack.settings.kubeconfig),
        "CLOUDBURST_TASK_QUEUE": stack.task_queue,
        "CLOUDBURST_CLUSTER_ID": CLUSTER_ID,
        # What a manual claim is started with, as the trigger's pools start theirs.
        "CLOUDBURST_CLAIM_TASK_TIMEOUT_S": "7",
        "COLUMNS": None,
    }
    address = stack.temporal.service_client.config.target_host
    return await in_thread(CliRunner().invoke, app, [*args, "--temporal-address", address], env=env)


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


async def test_a_manual_claim_shows_its_price_and_reasons_as_written(stack: Stack) -> None:
    make_pool(stack.kube, "manual", empty_ttl=600)
    name = new_claim_name("manual")
    reason = "[red]lunch[/red] :fire:"  # rich markup and an emoji code: printed as written
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        created = await cloudburst(
            stack, "claims", "create", "--pool", "manual", "--offering", "fake/sim-1/fk-small",
            "--name", name,
        )  # fmt: skip
        assert created.exit_code == 0, created.output
        handle = stack.temporal.get_workflow_handle_for(
            NodeClaimWorkflow.run, claim_workflow_id("default", name)
        )
        await wait_for_phase(handle, NodeClaimPhase.READY)
        config = (await handle.describe()).raw_description.execution_config
        assert config.default_workflow_task_timeout.ToTimedelta() == timedelta(seconds=7)
        shown = await cloudburst(stack, "claims", "describe", name)
        assert shown.exit_code == 0, shown.output
        assert "€0.0120/h" in shown.output  # the fake cloud's price of fk-small
        assert "Capacity cpu=2," in " ".join(shown.output.split()), shown.output
        down = await cloudburst(stack, "claims", "scale-down", name, "--reason", reason, "--force")
        assert down.exit_code == 0, down.output
        await handle.result()
        shown = await cloudburst(stack, "claims", "describe", name)
        assert f"Deletion reason {reason}" in " ".join(shown.output.split()), shown.output
        described = await cloudburst(stack, "claims", "describe", name, "-o", "json")
    data = json.loads(described.output)
    assert data["name"] == name and data["executionStatus"] == "Completed"
    assert data["status"]["priceEurPerHour"] == 0.012
    assert data["status"]["deletionReason"] == reason
    assert [span["phase"] for span in data["timeline"]][-1] == "Deleted"


async def test_pools_describe_counts_the_pods_running_on_each_node(stack: Stack) -> None:
    """The issue's case: a node running 3 pods said PODS 0 (the column counted nominations)."""
    make_pool(stack.kube, "busy", empty_ttl=2)
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, stack.kube),
        running_trigger(stack),
    ):
        for index in range(3):
            pod = pool_pod(f"busy-{index}", "busy", cpu="100m", memory="64Mi")
            await in_thread(stack.core.create_namespaced_pod, "default", pod)

        async def claim_rows() -> dict[str, list[str]]:
            shown = await cloudburst(stack, "pools", "describe", "busy")
            assert shown.exit_code == 0, shown.output
            rows = [line.split() for line in shown.output.splitlines()]
            return {row[0]: row[3:5] for row in rows if row and row[0].startswith("busy-")}

        rows = await eventually(claim_rows, lambda rows: sorted(rows.values()) == [["3", "0"]])
        described = await cloudburst(stack, "pools", "describe", "busy", "-o", "yaml")
        (claim,) = rows
        data = yaml.safe_load(described.output)
        assert data["running_pods"] == {claim: [f"default/busy-{i}" for i in range(3)]}
        assert data["status"]["name"] == "busy" and data["status"]["ready_nodes"] == 1
        listed = json.loads((await cloudburst(stack, "pools", "list", "-o", "json")).output)
        assert "busy" in [pool["name"] for pool in listed["items"]]
        await in_thread(
            stack.core.delete_collection_namespaced_pod, "default", label_selector="pool=busy"
        )
        await eventually(claim_rows, lambda rows: rows == {}, timeout_s=60)


async def test_pools_list_names_pools_that_do_not_answer_and_only_lists_its_own(
    stack: Stack,
) -> None:
    """A pool no worker serves is named on stderr (exit 1) instead of hanging or failing the
    command; pools of other task queues (other Cloudburst installs) are not listed."""
    make_pool(stack.kube, "mute")
    make_pool(stack.kube, "talks")
    async with running_trigger(stack):  # starts both pools' workflows; no worker yet
        for pool in ("mute", "talks"):
            pod = pool_pod(f"{pool}-0", pool, cpu="100m", memory="64Mi")
            await in_thread(stack.core.create_namespaced_pod, "default", pod)

        async def running_pools() -> set[str]:
            query = (
                "WorkflowType = 'NodePoolWorkflow' AND ExecutionStatus = 'Running'"
                f" AND TaskQueue = '{stack.task_queue}'"
            )
            return {e.id async for e in stack.temporal.list_workflows(query)}

        await eventually(running_pools, lambda ids: len(ids) == 2)
    shown = await cloudburst(stack, "pools", "list")
    assert shown.exit_code == 1
    for pool in ("mute", "talks"):
        assert f"error: pool {pool_workflow_id('default', pool)}: no answer" in shown.stderr
    async with in_process_worker(stack):
        shown = await cloudburst(stack, "pools", "list", "-o", "json")
    assert shown.exit_code == 0, shown.stderr
    assert sorted(p["name"] for p in json.loads(shown.stdout)["items"]) == ["mute", "talks"]
    for pool in ("mute", "talks"):
        await in_thread(stack.core.delete_namespaced_pod, f"{pool}-0", "default")


async def test_claims_list_watch_streams_a_line_per_change_into_a_pipe(stack: Stack) -> None:
    make_pool(stack.kube, "watched")
    name, handle = await start_test_claim(stack, "watched")  # no worker: it stays Pending
    address = stack.temporal.service_client.config.target_host
    # Started with SIGINT ignored, as a shell starts a background job: Ctrl-C (or `kill
    # -INT`) must still end the watch, between two lists, with status 0.
    ignoring = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        process = await asyncio.create_subprocess_exec(
            CLI, "claims", "list", "--watch", "--interval", "0.2", "--pool", "watched",
            "--temporal-address", address,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "COLUMNS": "80"},
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, ignoring)
    assert process.stdout is not None and process.stderr is not None

    async def next_line_about(claim: str) -> list[str]:
        while True:
            line = (await asyncio.wait_for(process.stdout.readline(), timeout=30)).decode()
            assert line, "the watch ended"
            if line.split()[1:2] == [claim]:
                return line.split()

    try:
        header = (await asyncio.wait_for(process.stdout.readline(), timeout=30)).decode()
        assert header.split() == [
            "NAMESPACE",
            "NAME",
            "NODEPOOL",
            "PROVIDER",
            "REGION",
            "INSTANCE",
            "PHASE",
            "AGE",
        ]
        assert (await next_line_about(name))[:4] == ["default", name, "watched", "Pending"]
        await handle.terminate("the watch test is done with it")
        # As it ended:
        assert (await next_line_about(name))[:4] == ["default", name, "watched", "Pending"]
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), timeout=30) == 0
        assert "Traceback" not in (await process.stderr.read()).decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    listed = await cloudburst(stack, "claims", "list", "--all", "--pool", "watched", "-o", "json")
    (item,) = json.loads(listed.output)["items"]
    assert item["name"] == name and item["nodePool"] == "watched"
    assert item["executionStatus"] == "Terminated" and item["phase"] == "Pending"
    assert item["workflowId"] == claim_workflow_id("default", name) and item["closedAt"]
