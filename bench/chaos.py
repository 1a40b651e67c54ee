"""Chaos soak: the production topology as separate processes, killed at random.

    .venv/bin/python bench/chaos.py [--waves 12] [--pods 3] [--json] [--histories DIR]

Builds what a cluster runs, each in its own OS process on free local ports: the Temporal dev
server on a persistent database, the simulated cluster (`python -m sim`), `cloudburst
worker` and `cloudburst trigger`. Then it sends waves of pending pods to two pools, holds
them until every pod runs, deletes them so that the nodes empty and go — while it SIGKILLs
the worker and the trigger at random moments (each restarted after a pause) and the Temporal
server a few times, and an operator keeps asking the pools and claims for their status (as
`cloudburst pools describe` and the Web UI do: a query is what rebuilds a workflow in a new
worker's cache). Finally it waits for everything to settle and prints the verdict:

    lifecycles completed, kills by process, VMs created / leaked / created twice for one
    claim, claims stuck, workflows failed or terminated, workflow tasks failed (from every
    history; apart: tasks Temporal refused because a signal came in as they closed a run,
    `close_races`), pods never bound, bind latency p50/max

and exits 1 if anything leaked, was made twice, got stuck, or failed (a workflow or one of
its tasks). `--histories DIR` writes every pool and claim history there (the test replays
them with today's code). tests/e2e/test_chaos.py runs a short soak; the long one is in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from temporalio.client import Client, WorkflowQueryFailedError

from api.errors import QUERY_REFUSED_DURING_TAKEOVER as REFUSAL
from api.nodepool.messages import pool_workflow_id
from sim.dev.topology import (
    POOLS,
    BindWatch,
    Process,
    Report,
    TaskTimeouts,
    Topology,
    add_control_plane_argument,
    add_topology_options,
    cloud_instances,
    connect,
    kube_client,
    seed,
    verdict,
    wave_pod,
)
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.nodepool import NodePoolWorkflow


class Chaos:
    """Kills the worker and the trigger at random, and the Temporal server a few times."""

    def __init__(self, topology: Topology, rng: random.Random, args: argparse.Namespace) -> None:
        self.topology, self.rng, self.args = topology, rng, args
        self.kills: Counter[str] = Counter()
        self.timeline: list[tuple[float, str]] = []  # (monotonic time, process killed)

    async def run(self, stop: asyncio.Event) -> None:
        server_kills_left = self.args.server_kills
        while not stop.is_set():
            await self._sleep(stop, self.rng.uniform(*self.args.kill_every))
            if stop.is_set():
                return
            roll = self.rng.random()
            if server_kills_left and roll < self.args.server_kill_chance:
                server_kills_left -= 1
                await self._bounce(self.topology.temporal, pause=(0.5, 2.0))
            elif roll < 0.75:
                # Any worker: with --pool-workers, a pools' one or the claims' one (with one
                # worker no draw, so a seed kills as it did before there could be more).
                workers = self.topology.workers
                victim = self.rng.choice(workers) if len(workers) > 1 else workers[0]
                await self._bounce(victim, pause=(0.2, 3.0))
            else:
                await self._bounce(self.topology.trigger, pause=(0.2, 3.0))

    async def _bounce(self, process: Process, pause: tuple[float, float]) -> None:
        process.kill()
        self.kills[process.name] += 1
        self.timeline.append((time.monotonic(), process.name))
        await asyncio.sleep(self.rng.uniform(*pause))
        process.start()

    @staticmethod
    async def _sleep(stop: asyncio.Event, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)


def slowest_binds(
    watch: BindWatch, timeline: list[tuple[float, str]], count: int = 5
) -> list[dict[str, Any]]:
    """The `count` slowest pods to bind, each with the kills that fell while it waited."""
    waits = sorted(
        ((watch.bound[n] - watch.created[n], n) for n in watch.created if n in watch.bound),
        reverse=True,
    )[:count]
    rows = []
    for seconds, name in waits:
        start, end = watch.created[name], watch.bound[name]
        during = Counter(process for at, process in timeline if start <= at <= end)
        rows.append(
            {"pod": name, "seconds": round(seconds, 2), "kills_while_waiting": dict(during)}
        )
    return rows


async def operator(client: Client, stop: asyncio.Event, report: Report) -> None:
    """Asks the pools and the running claims how they are, as people and the Web UI do."""

    async def ask(query: Awaitable[object]) -> None:
        try:
            await asyncio.wait_for(query, timeout=5)
            report.queries += 1
        except WorkflowQueryFailedError as err:
            if str(err) == REFUSAL:
                report.queries_refused += 1

    while not stop.is_set():
        for pool in POOLS:
            with contextlib.suppress(Exception):
                pool_handle = client.get_workflow_handle_for(
                    NodePoolWorkflow.run, pool_workflow_id("default", pool)
                )
                await ask(pool_handle.query(NodePoolWorkflow.status))
        with contextlib.suppress(Exception):
            async for execution in client.list_workflows(
                "WorkflowType = 'NodeClaimWorkflow' AND ExecutionStatus = 'Running'", limit=5
            ):
                claim_handle = client.get_workflow_handle_for(NodeClaimWorkflow.run, execution.id)
                await ask(claim_handle.query(NodeClaimWorkflow.status))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.5)


async def run_waves(
    api: k8s.ApiClient, watch: BindWatch, args: argparse.Namespace, report: Report
) -> None:
    core = k8s.CoreV1Api(api)
    for wave in range(args.waves):
        names = []
        for pool in POOLS:
            for index in range(args.pods):
                name = f"w{wave}-{pool}-{index}"
                await asyncio.to_thread(core.create_namespaced_pod, "default", wave_pod(name, pool))
                watch.created[name] = time.monotonic()
                names.append(name)
        report.pods_created += len(names)
        deadline = time.monotonic() + args.wave_timeout
        while time.monotonic() < deadline and not all(n in watch.bound for n in names):
            await asyncio.sleep(0.5)
        await asyncio.sleep(args.hold)
        for name in names:
            with contextlib.suppress(k8s.ApiException):
                await asyncio.to_thread(
                    core.delete_namespaced_pod, name, "default", grace_period_seconds=0
                )
        report.waves += 1
        # The nodes empty and go before the next wave, so each wave is new lifecycles.
        await nodes_gone(api, args.wave_timeout)
        await asyncio.sleep(args.gap)


async def nodes_gone(api: k8s.ApiClient, timeout_s: float) -> None:
    core = k8s.CoreV1Api(api)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            nodes = await asyncio.to_thread(core.list_node, label_selector="chaos.io/lane")
            if not nodes.items:
                return
        await asyncio.sleep(1)


async def settle(
    client: Client, topology: Topology, timeout_s: float
) -> tuple[list[str], list[dict[str, Any]]]:
    """Wait until no claim runs and no VM is left; what is still there at the deadline."""
    deadline = time.monotonic() + timeout_s
    running: list[str] = []
    vms: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            running = [
                e.id
                async for e in client.list_workflows(
                    "WorkflowType = 'NodeClaimWorkflow' AND ExecutionStatus = 'Running'"
                )
            ]
            vms = cloud_instances(topology)
            if not running and not vms:
                break
        await asyncio.sleep(2)
    return running, vms


async def soak(args: argparse.Namespace) -> Report:
    report = Report()
    started = time.monotonic()
    rng = random.Random(args.seed)
    state = Path(tempfile.mkdtemp(prefix="cloudburst-chaos-"))
    topology = Topology(
        state,
        args.boot_delay,
        pool_workers=args.pool_workers,
        timeouts=TaskTimeouts.of(args),
        control_plane=args.control_plane,
    )
    histories = Path(args.histories) if args.histories else None
    if histories:
        histories.mkdir(parents=True, exist_ok=True)
    try:
        topology.temporal.start()
        topology.sim.start()
        client = await connect(topology)
        api = await asyncio.to_thread(kube_client, topology)
        await asyncio.to_thread(seed, api, topology, args.empty_ttl)
        for worker in topology.workers:
            worker.start()
        topology.trigger.start()
        watch = BindWatch(api)
        watch.start()
        stop = asyncio.Event()
        chaos = Chaos(topology, rng, args)
        background = [
            asyncio.create_task(chaos.run(stop)),
            asyncio.create_task(operator(client, stop, report)),
        ]
        await run_waves(api, watch, args, report)
        stop.set()
        await asyncio.gather(*background)
        watch.stop()
        report.kills = dict(chaos.kills)
        for process in (topology.temporal, *topology.workers, topology.trigger):
            if process.popen is None or process.popen.poll() is not None:
                process.start()  # a kill at the very end: everything is up for the settling
        client = await connect(topology)
        running, vms = await settle(client, topology, args.settle_timeout)
        report.claims_stuck = running
        report.vms_leaked = len(vms)
        await verdict(client, topology, histories, report)
        latencies = [watch.bound[n] - watch.created[n] for n in watch.created if n in watch.bound]
        report.pods_never_bound = len(watch.created) - len(latencies)
        if latencies:
            report.bind_latency_p50_s = round(statistics.median(latencies), 2)
            report.bind_latency_max_s = round(max(latencies), 2)
        report.slowest_binds = slowest_binds(watch, chaos.timeline)
    finally:
        topology.stop()
    report.seconds = round(time.monotonic() - started, 1)
    problems = report.problems
    if report.vms_leaked:
        problems.append(f"{report.vms_leaked} VMs leaked")
    if report.vms_created_twice:
        problems.append(f"VMs created twice: {report.vms_created_twice}")
    if report.claims_stuck:
        problems.append(f"claims stuck: {report.claims_stuck}")
    if report.workflows_failed:
        problems.append(f"workflows failed: {report.workflows_failed}")
    if report.workflow_tasks_failed:
        problems.append(f"workflow tasks failed: {report.workflow_tasks_failed}")
    if report.pods_never_bound:
        problems.append(f"{report.pods_never_bound} pods never bound")
    report.ok = not problems
    if not args.keep_state:
        with contextlib.suppress(OSError):
            for path in sorted(state.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            state.rmdir()
    else:
        problems.append(f"state kept in {state}") if not report.ok else None
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waves", type=int, default=12)
    parser.add_argument("--pods", type=int, default=3, help="pods a wave sends each pool")
    parser.add_argument("--hold", type=float, default=2.0, help="seconds pods run once bound")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between waves")
    parser.add_argument("--wave-timeout", type=float, default=90.0)
    parser.add_argument("--settle-timeout", type=float, default=300.0)
    parser.add_argument("--empty-ttl", type=int, default=3)
    parser.add_argument("--boot-delay", type=float, default=0.5)
    add_control_plane_argument(parser)
    parser.add_argument(
        "--kill-every", type=float, nargs=2, default=(4.0, 12.0), metavar=("MIN", "MAX")
    )
    parser.add_argument("--server-kills", type=int, default=2)
    parser.add_argument("--server-kill-chance", type=float, default=0.08)
    add_topology_options(parser, claims_workers="the one worker")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--histories", help="write every pool and claim history here")
    parser.add_argument("--keep-state", action="store_true", help="keep logs and the db")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = asyncio.run(soak(args))
    if args.json:
        print(json.dumps(asdict(report)))
    else:
        print(json.dumps(asdict(report), indent=2))
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
