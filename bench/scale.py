"""Many idle Ready claims on one worker: memory, CPU, history and Temporal actions.

    .venv/bin/python bench/scale.py --claims 1000 [--idle-minutes 10] [--json]

Starts the production topology as separate processes on free local ports (the helpers of
`sim.dev.topology`): the Temporal dev server on a sqlite file in a temp dir, the simulated
cluster (`python -m sim`, fake cloud, boot delay 0), ONE `cloudburst worker` and
`cloudburst trigger` (which runs the node watcher); with `--pool-workers N`, N more workers
poll the pools' task queue only and the one worker the claims' (`cloudburst worker --queues`). The N claims are made the way a pool
makes them: one NodePool with `minNodes: N` on the fake provider, so the trigger starts the
pool workflow, which plans the floor once and starts N NodeClaimWorkflows (by activity,
`start_claim_workflows`, at most 100 a batch).

Once all N claims are Ready it measures an idle window: the worker's RSS and CPU seconds
(/proc/<pid>/status and /proc/<pid>/stat), the history events each claim and the pool wrote
(from their histories, by event time) and the billed Temporal Cloud actions those events
imply (see ACTIONS below). Then it tears down (minNodes 0, every claim scaled down the way
`cloudburst claims scale-down --force` does) and waits until the fake cloud has no VM.

Prints a table (or one JSON object with --json). Exits 1 if a claim failed, N Ready was not
reached, or a VM is left after the teardown. Figures only: nothing about time is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from api import NodeClass, NodePool
from api.limits import MAX_TTL_S
from api.messages import TASK_QUEUE, ClaimTimings, ScaleDownRequest
from api.nodepool.messages import (
    DemandUpdate,
    NodePoolInput,
    PoolSignal,
    PoolSpecs,
    PoolState,
    pool_workflow_id,
)
from sim.dev.topology import (
    CLUSTER_ID,
    TaskTimeouts,
    Topology,
    add_control_plane_argument,
    add_topology_options,
    admin,
    connect,
    cpu_s,
    kube_client,
    no_vms,
    report_failure,
    rss_mb,
    tear_down,
    without_kept,
)
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.nodepool import NodePoolWorkflow

POOL = "scale"
NAMESPACE = "default"
CLAIMS = "WorkflowType = 'NodeClaimWorkflow'"
POOL_RUNS = f"WorkflowId = '{pool_workflow_id(NAMESPACE, POOL)}'"

# History event type -> billed Temporal Cloud actions (https://docs.temporal.io/cloud/actions).
# An estimate: Temporal says history events "do not always map 1:1 to Action Types", and some
# actions leave no event (queries, activity heartbeats, describe/list are not actions).
_E = EventType
ACTIONS: dict[int, int] = {
    # Workflow started: client start, Continue-As-New, child workflow start (counted once,
    # at the started run; the parent's StartChildWorkflowExecutionInitiated is not counted).
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: 1,
    # Activity started (each retry is one more: added from ACTIVITY_TASK_STARTED's attempt).
    _E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: 1,
    _E.EVENT_TYPE_TIMER_STARTED: 1,
    # Signal sent (by a client, signal-with-start or another workflow): counted at the receiver.
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: 1,
    # Local activities and side effects (and, over-counting, patch markers).
    _E.EVENT_TYPE_MARKER_RECORDED: 1,
    _E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES: 1,
    _E.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED: 1,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: 1,
}


def actions_of(event: HistoryEvent) -> int:
    billed = ACTIONS.get(event.event_type, 0)
    if event.event_type == _E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
        billed += max(0, event.activity_task_started_event_attributes.attempt - 1)
    return billed


# ---- the worker process, sampled ------------------------------------------------------------


class Sampler:
    """RSS and CPU of the worker once a second, from a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float, float]] = []  # (monotonic, rss MB, cpu s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def sample(self) -> tuple[float, float, float]:
        row = (time.monotonic(), rss_mb(self.pid)[0], cpu_s(self.pid))
        self.samples.append(row)
        return row

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.sample()

    def max_rss(self, since: float = 0.0, until: float = float("inf")) -> float:
        return max((r for t, r, _ in self.samples if since <= t <= until), default=0.0)


# ---- the cluster ----------------------------------------------------------------------------


def seed(api: k8s.ApiClient, topology: Topology) -> dict[str, Any]:
    """The fake cloud's token and one NodeClass; returns the NodeClass."""
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    core.create_namespaced_secret(
        NAMESPACE,
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name="scale-cloud-token"),
            string_data={"token": topology.cloud_token},
        ),
    )
    node_class = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodeClass",
        "metadata": {"name": "scale", "namespace": NAMESPACE},
        "spec": {
            "fake": {
                "endpoint": topology.cloud_url,
                "region": "sim-1",
                "apiTokenSecretRef": {"name": "scale-cloud-token", "key": "token"},
            },
            "join": {
                "hostApiServer": f"https://127.0.0.1:{topology.kube_port}",
                "kindClusterName": "scale",
                "registrationTimeoutSeconds": 1800,
            },
        },
    }
    custom.create_namespaced_custom_object(
        "cloudburst.io", "v1alpha1", NAMESPACE, "nodeclasses", node_class
    )
    return node_class


def pool_body(claims: int, empty_ttl_s: int) -> dict[str, Any]:
    """One pool holding `claims` nodes: its minNodes floor. Floor nodes are empty, so by
    default the empty TTL is the maximum: the window measures idle Ready claims, not the
    floor's handling of their empty-TTL requests (held by the pool: one signal each)."""
    return {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": POOL, "namespace": NAMESPACE},
        "spec": {
            "nodeClassRef": "scale",
            "requirements": {"allowedProviders": ["fake"]},
            "limits": {"minNodes": claims, "maxNodes": claims},
            "disruption": {"ttlSecondsAfterEmpty": empty_ttl_s, "budgets": [{"nodes": "100%"}]},
        },
    }


def create_pool(api: k8s.ApiClient, body: dict[str, Any]) -> None:
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "cloudburst.io", "v1alpha1", NAMESPACE, "nodepools", body
    )


async def start_pool_with_short_polls(
    client: Client, node_class: dict[str, Any], pool: dict[str, Any], seconds: float
) -> None:
    """Start the pool workflow as the trigger does (signal-with-start, same input), but with
    the claims' Ready poll and the pool's periodic look every `seconds`: the trigger's own
    start then finds it running. Only to observe whole safety-net cycles in a short window."""
    specs = PoolSpecs(
        pool=NodePool.model_validate(pool).spec,
        node_class_name="scale",
        node_class=NodeClass.model_validate(node_class).spec,
        observed_at=datetime.now(UTC),
    )
    timings = ClaimTimings(registration_timeout_s=1800, ready_poll_interval_s=seconds)
    await client.start_workflow(
        NodePoolWorkflow.run,
        NodePoolInput(
            namespace=NAMESPACE,
            name=POOL,
            cluster_id=CLUSTER_ID,
            claim_timings=timings,
            reconcile_interval_s=seconds,
            state=PoolState(specs=specs),
        ),
        id=pool_workflow_id(NAMESPACE, POOL),
        task_queue=TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        start_signal=PoolSignal.DEMAND,
        start_signal_args=[DemandUpdate(specs=specs)],
    )


async def count(client: Client, query: str) -> int:
    return (await client.count_workflows(query)).count


async def wait_ready(
    client: Client, claims: int, timeout_s: float, say: Any
) -> tuple[int, int, list[tuple[float, int]]]:
    """Poll visibility until `claims` claims are Ready; (ready, failed, (t, ready) curve)."""
    started = time.monotonic()
    curve: list[tuple[float, int]] = []
    ready = failed = 0
    last_said = 0.0
    while time.monotonic() - started < timeout_s:
        with contextlib.suppress(RPCError):
            ready = await count(
                client, f"{CLAIMS} AND ExecutionStatus = 'Running' AND CloudburstPhase = 'Ready'"
            )
            failed = await count(
                client,
                f"{CLAIMS} AND (CloudburstPhase = 'Failed' OR ExecutionStatus = 'Failed'"
                " OR ExecutionStatus = 'Terminated' OR ExecutionStatus = 'TimedOut')",
            )
            curve.append((time.monotonic(), ready))
            if time.monotonic() - last_said > 15:
                last_said = time.monotonic()
                say(f"{ready}/{claims} Ready, {failed} failed")
            if ready >= claims or failed:
                break
        await asyncio.sleep(1.0)
    return ready, failed, curve


# ---- histories ------------------------------------------------------------------------------


@dataclass
class Described:
    history_length: int
    history_bytes: int


async def describe_all(client: Client, ids: list[str]) -> dict[str, Described]:
    gate = asyncio.Semaphore(32)

    async def one(workflow_id: str) -> tuple[str, Described]:
        async with gate:
            info = (
                await client.get_workflow_handle(workflow_id).describe()
            ).raw_description.workflow_execution_info
            return workflow_id, Described(info.history_length, info.history_size_bytes)

    return dict(await asyncio.gather(*(one(i) for i in ids)))


async def histories(client: Client, query: str) -> dict[tuple[str, str], list[HistoryEvent]]:
    """Every run matching `query`: (workflow id, run id) -> its events."""
    runs = [(e.id, e.run_id) async for e in client.list_workflows(query)]
    gate = asyncio.Semaphore(32)

    async def one(workflow_id: str, run_id: str) -> tuple[tuple[str, str], list[HistoryEvent]]:
        async with gate:
            history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
            return (workflow_id, run_id), list(history.events)

    return dict(await asyncio.gather(*(one(w, r) for w, r in runs)))


def task_timeouts(runs: dict[tuple[str, str], list[HistoryEvent]]) -> tuple[int, int]:
    """Workflow tasks timed out: (taken by a worker and not completed in time, left on a
    worker's sticky queue past its schedule-to-start timeout and sent to the task queue)."""
    kinds = Counter(
        e.workflow_task_timed_out_event_attributes.timeout_type
        for events in runs.values()
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
    )
    return (
        kinds[TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE],
        kinds[TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START],
    )


def when(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime(tzinfo=UTC)


@dataclass
class EventTally:
    events: int = 0
    actions: int = 0
    workflow_tasks: int = 0
    by_type: Counter[str] = field(default_factory=Counter)

    def add(self, event: HistoryEvent) -> None:
        self.events += 1
        self.actions += actions_of(event)
        if event.event_type == _E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            self.workflow_tasks += 1
        self.by_type[EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")] += 1


def tally(
    runs: dict[tuple[str, str], list[HistoryEvent]], start: datetime, end: datetime
) -> EventTally:
    result = EventTally()
    for events in runs.values():
        for event in events:
            if start <= when(event) < end:
                result.add(event)
    return result


def peak_task_rate(
    runs: dict[tuple[str, str], list[HistoryEvent]], start: datetime, end: datetime
) -> tuple[float, int]:
    """(mean workflow tasks/s over [start, end), the busiest second's count)."""
    per_second: Counter[int] = Counter()
    for events in runs.values():
        for event in events:
            if event.event_type == _E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                moment = when(event)
                if start <= moment < end:
                    per_second[int(moment.timestamp())] += 1
    seconds = max(1e-9, (end - start).total_seconds())
    return sum(per_second.values()) / seconds, max(per_second.values(), default=0)


# ---- the run --------------------------------------------------------------------------------


@dataclass
class Report:
    ok: bool = False
    claims: int = 0
    idle_minutes: float = 0.0
    ready: int = 0
    failed: int = 0
    seconds_to_all_ready: float | None = None
    seconds_to_first_ready: float | None = None
    seconds_to_half_ready: float | None = None
    rss_mb_at_all_ready: float = 0.0
    rss_mb_max: float = 0.0  # over the whole run, sampled once a second
    rss_mb_max_idle: float = 0.0
    rss_mb_end_idle: float = 0.0
    rss_mb_peak_hwm: float = 0.0  # the kernel's VmHWM at the end of the idle window
    worker_cpu_s_ramp: float = 0.0
    worker_cpu_s_idle: float = 0.0
    # With --pool-workers: the workers polling only the pools' queue (the figures above are
    # the claims' worker's).
    pool_workers: int = 0
    pool_worker_rss_mb_at_all_ready: float = 0.0
    pool_worker_cpu_s_ramp: float = 0.0
    worker_cpu_percent_idle: float = 0.0
    idle_seconds: float = 0.0
    # Idle window, from the histories (by event time).
    claim_events_per_claim_hour: float = 0.0
    claim_events_per_claim_hour_max: float = 0.0
    claim_actions_per_claim_hour: float = 0.0
    claim_idle_event_types: dict[str, int] = field(default_factory=dict)
    pool_events_per_hour: float = 0.0
    pool_actions_per_hour: float = 0.0
    pool_idle_event_types: dict[str, int] = field(default_factory=dict)
    actions_per_node_hour_idle: float = 0.0  # claims' and pool's, per claim
    # With --poll-seconds: the same rates scaled to the default intervals (claims' Ready
    # poll 4 h, the pool's periodic look 30 min), i.e. per safety-net cycle x cycles/hour.
    poll_seconds: float | None = None
    claim_events_per_claim_hour_at_defaults: float | None = None
    claim_actions_per_claim_hour_at_defaults: float | None = None
    pool_events_per_hour_at_defaults: float | None = None
    pool_actions_per_hour_at_defaults: float | None = None
    workflow_tasks_per_s_idle: float = 0.0
    # Up to all Ready.
    workflow_tasks_per_s_ramp_mean: float = 0.0
    workflow_tasks_busiest_second_ramp: int = 0
    claim_events_to_ready_mean: float = 0.0
    claim_actions_to_ready_mean: float = 0.0
    pool_events_to_ready: int = 0
    pool_actions_to_ready: int = 0
    pool_runs: int = 0
    # Sizes at the end of the idle window (describe).
    history_bytes_claims: int = 0
    history_bytes_per_claim_mean: float = 0.0
    history_bytes_pool: int = 0
    claim_history_length_mean: float = 0.0
    db_bytes: int = 0
    # Teardown.
    seconds_to_no_vm: float | None = None
    # Over the whole run: a pool task that timed out is a pool that could not decide.
    pool_task_timeouts: int = 0
    claim_task_timeouts: int = 0
    # Tasks a busy worker did not poll from its sticky queue in time: each went to the task
    # queue, for any worker to take (replaying, if that worker had not cached the workflow).
    pool_sticky_timeouts: int = 0
    claim_sticky_timeouts: int = 0
    vms_created: int = 0
    vms_leaked: int = 0
    load_average: str = ""
    problems: list[str] = field(default_factory=list)


async def run(args: argparse.Namespace) -> Report:
    report = Report(claims=args.claims, idle_minutes=args.idle_minutes)
    say = (
        (lambda text: print(f"• {text}", file=sys.stderr, flush=True))
        if args.verbose
        else (lambda text: None)
    )
    state = Path(tempfile.mkdtemp(prefix="cloudburst-scale-"))
    topology = Topology(
        state,
        boot_delay_s=0.0,
        pool_workers=args.pool_workers,
        timeouts=TaskTimeouts.of(args),
        control_plane=args.control_plane,
    )
    report.pool_workers = args.pool_workers
    sampler: Sampler | None = None
    try:
        topology.temporal.start()
        topology.sim.start()
        client = await connect(topology)
        api = await asyncio.to_thread(kube_client, topology)
        for worker in topology.workers:
            worker.start()
        topology.trigger.start()
        # The last worker is the one that runs the claims (the first, with --pool-workers,
        # runs only pools).
        claims_worker, *_ = reversed(topology.workers)
        pool_workers = topology.workers[: args.pool_workers]
        assert claims_worker.popen is not None
        pid = claims_worker.popen.pid
        pool_pids = [w.popen.pid for w in pool_workers if w.popen is not None]
        sampler = Sampler(pid)
        sampler.start()
        await asyncio.sleep(3)  # the worker and the trigger connect
        wall_start = datetime.now(UTC)
        t0 = time.monotonic()
        cpu_t0 = cpu_s(pid)
        pool_cpu_t0 = sum(cpu_s(p) for p in pool_pids)
        node_class = await asyncio.to_thread(seed, api, topology)
        pool = pool_body(args.claims, args.empty_ttl)
        if args.poll_seconds:
            await start_pool_with_short_polls(client, node_class, pool, args.poll_seconds)
        await asyncio.to_thread(create_pool, api, pool)
        say(f"pool {POOL} created with minNodes {args.claims}")
        ready, failed, curve = await wait_ready(client, args.claims, args.ready_timeout, say)
        t_ready = time.monotonic()
        wall_ready = datetime.now(UTC)
        report.ready, report.failed = ready, failed
        report.worker_cpu_s_ramp = round(cpu_s(pid) - cpu_t0, 1)
        report.rss_mb_at_all_ready = round(sampler.sample()[1], 1)
        report.pool_worker_cpu_s_ramp = round(sum(cpu_s(p) for p in pool_pids) - pool_cpu_t0, 1)
        report.pool_worker_rss_mb_at_all_ready = round(sum(rss_mb(p)[0] for p in pool_pids), 1)
        first = next((t for t, n in curve if n > 0), None)
        half = next((t for t, n in curve if n >= args.claims / 2), None)
        report.seconds_to_first_ready = round(first - t0, 1) if first else None
        report.seconds_to_half_ready = round(half - t0, 1) if half else None
        if ready >= args.claims and not failed:
            report.seconds_to_all_ready = round(t_ready - t0, 1)
        else:
            report.problems.append(f"{ready}/{args.claims} Ready, {failed} failed")
        say(f"{ready} Ready after {t_ready - t0:.1f} s; idle for {args.idle_minutes} min")

        # ---- the idle window
        claim_ids = [
            e.id async for e in client.list_workflows(f"{CLAIMS} AND ExecutionStatus = 'Running'")
        ]
        before = await describe_all(client, claim_ids)
        idle_t0 = time.monotonic()
        idle_wall0 = datetime.now(UTC)
        idle_cpu0 = cpu_s(pid)
        deadline = idle_t0 + args.idle_minutes * 60
        while time.monotonic() < deadline:
            await asyncio.sleep(min(30.0, max(0.0, deadline - time.monotonic())))
            say(
                f"idle {time.monotonic() - idle_t0:.0f} s, worker RSS {sampler.samples[-1][1]:.0f} MB"
            )
        idle_t1 = time.monotonic()
        idle_wall1 = datetime.now(UTC)
        report.idle_seconds = round(idle_t1 - idle_t0, 1)
        report.worker_cpu_s_idle = round(cpu_s(pid) - idle_cpu0, 2)
        report.worker_cpu_percent_idle = round(
            100 * report.worker_cpu_s_idle / report.idle_seconds, 2
        )
        end_rss, end_hwm = rss_mb(pid)
        report.rss_mb_end_idle = round(end_rss, 1)
        report.rss_mb_peak_hwm = round(end_hwm, 1)
        report.rss_mb_max_idle = round(max(sampler.max_rss(idle_t0, idle_t1), end_rss), 1)
        after = await describe_all(client, claim_ids)
        hours = report.idle_seconds / 3600

        # ---- histories
        claim_runs = await histories(client, CLAIMS)
        pool_runs = await histories(client, POOL_RUNS)
        report.pool_runs = len(pool_runs)
        idle_claims = tally(claim_runs, idle_wall0, idle_wall1)
        idle_pool = tally(pool_runs, idle_wall0, idle_wall1)
        n = max(1, len(claim_ids))
        report.claim_events_per_claim_hour = round(idle_claims.events / n / hours, 2)
        report.claim_actions_per_claim_hour = round(idle_claims.actions / n / hours, 2)
        grown = [after[i].history_length - before[i].history_length for i in claim_ids]
        report.claim_events_per_claim_hour_max = round(max(grown, default=0) / hours, 2)
        report.claim_idle_event_types = dict(idle_claims.by_type.most_common())
        report.pool_events_per_hour = round(idle_pool.events / hours, 1)
        report.pool_actions_per_hour = round(idle_pool.actions / hours, 1)
        report.pool_idle_event_types = dict(idle_pool.by_type.most_common())
        report.actions_per_node_hour_idle = round(
            (idle_claims.actions + idle_pool.actions) / n / hours, 2
        )
        if args.poll_seconds:
            report.poll_seconds = args.poll_seconds
            claim_scale = args.poll_seconds / ClaimTimings().ready_poll_interval_s
            pool_scale = (
                args.poll_seconds / NodePoolInput.model_fields["reconcile_interval_s"].default
            )
            report.claim_events_per_claim_hour_at_defaults = round(
                report.claim_events_per_claim_hour * claim_scale, 2
            )
            report.claim_actions_per_claim_hour_at_defaults = round(
                report.claim_actions_per_claim_hour * claim_scale, 2
            )
            report.pool_events_per_hour_at_defaults = round(
                report.pool_events_per_hour * pool_scale, 2
            )
            report.pool_actions_per_hour_at_defaults = round(
                report.pool_actions_per_hour * pool_scale, 2
            )
        report.workflow_tasks_per_s_idle = round(
            (idle_claims.workflow_tasks + idle_pool.workflow_tasks) / report.idle_seconds, 3
        )
        everything = {**claim_runs, **pool_runs}
        mean_rate, busiest = peak_task_rate(everything, wall_start, wall_ready)
        report.workflow_tasks_per_s_ramp_mean = round(mean_rate, 1)
        report.workflow_tasks_busiest_second_ramp = busiest
        to_ready_claims = tally(claim_runs, wall_start, idle_wall0)
        to_ready_pool = tally(pool_runs, wall_start, idle_wall0)
        report.claim_events_to_ready_mean = round(to_ready_claims.events / n, 1)
        report.claim_actions_to_ready_mean = round(to_ready_claims.actions / n, 1)
        report.pool_events_to_ready = to_ready_pool.events
        report.pool_actions_to_ready = to_ready_pool.actions
        report.history_bytes_claims = sum(d.history_bytes for d in after.values())
        report.history_bytes_per_claim_mean = round(report.history_bytes_claims / n)
        report.claim_history_length_mean = round(
            statistics.mean(d.history_length for d in after.values()) if after else 0, 1
        )
        pool_desc = await describe_all(client, [pool_workflow_id(NAMESPACE, POOL)])
        report.history_bytes_pool = sum(d.history_bytes for d in pool_desc.values())
        report.db_bytes = sum(p.stat().st_size for p in state.glob("temporal.db*"))
        report.rss_mb_max = round(sampler.max_rss(), 1)

        # ---- teardown: the floor goes to 0, every claim is scaled down as the CLI does
        say("tearing down")
        teardown_t0 = time.monotonic()
        custom = k8s.CustomObjectsApi(api)
        await asyncio.to_thread(
            custom.patch_namespaced_custom_object,
            "cloudburst.io",
            "v1alpha1",
            NAMESPACE,
            "nodepools",
            POOL,
            {"spec": {"limits": {"minNodes": 0}}},
        )
        await asyncio.sleep(2)
        await scale_down_all(client)
        leaked = await no_vms(topology, args.teardown_timeout)
        report.vms_leaked = len(leaked)
        if not leaked:
            report.seconds_to_no_vm = round(time.monotonic() - teardown_t0, 1)
        else:
            report.problems.append(f"{len(leaked)} VMs left after the teardown")
        pool_timeouts = task_timeouts(await histories(client, POOL_RUNS))
        report.pool_task_timeouts, report.pool_sticky_timeouts = pool_timeouts
        claim_timeouts = task_timeouts(await histories(client, CLAIMS))
        report.claim_task_timeouts, report.claim_sticky_timeouts = claim_timeouts
        if report.pool_task_timeouts:
            report.problems.append(
                f"the pool's workflow task timed out {report.pool_task_timeouts} time(s)"
            )
        with contextlib.suppress(Exception):
            stats = await asyncio.to_thread(admin, topology, "stats")
            report.vms_created = sum(stats.get("created_by_name", {}).values())
    except Exception as err:  # a report with the cause and the logs, not a bare traceback
        report_failure(topology, report.problems, err)
    finally:
        if sampler:
            sampler.stop()
        report.load_average = tear_down(
            topology, state, keep=args.keep_state, problems=report.problems
        )
    report.ok = not without_kept(report.problems)
    return report


async def scale_down_all(client: Client) -> None:
    """`cloudburst claims scale-down --force` on every running claim."""
    ids = [e.id async for e in client.list_workflows(f"{CLAIMS} AND ExecutionStatus = 'Running'")]
    gate = asyncio.Semaphore(32)

    async def one(workflow_id: str) -> None:
        async with gate:
            handle = client.get_workflow_handle_for(NodeClaimWorkflow.run, workflow_id)
            with contextlib.suppress(WorkflowUpdateFailedError, RPCError):
                await handle.execute_update(
                    NodeClaimWorkflow.request_scale_down,
                    ScaleDownRequest(reason="Manual", force=True),
                )

    await asyncio.gather(*(one(i) for i in ids))


def table(report: Report) -> str:
    hours_note = f"{report.idle_seconds:.0f} s idle"
    rows = [
        ("claims Ready / asked / failed", f"{report.ready} / {report.claims} / {report.failed}"),
        (
            "time to first / half / all Ready",
            f"{report.seconds_to_first_ready} / "
            f"{report.seconds_to_half_ready} / {report.seconds_to_all_ready} s",
        ),
        ("worker RSS at all Ready", f"{report.rss_mb_at_all_ready} MB"),
        *(
            [
                (
                    f"pool worker(s) ({report.pool_workers}): RSS at all Ready, CPU ramp",
                    f"{report.pool_worker_rss_mb_at_all_ready} MB, "
                    f"{report.pool_worker_cpu_s_ramp} s",
                )
            ]
            if report.pool_workers
            else []
        ),
        (
            "worker RSS max idle / end idle",
            f"{report.rss_mb_max_idle} / {report.rss_mb_end_idle} MB",
        ),
        (
            "worker RSS max (run, 1 s samples) / VmHWM",
            f"{report.rss_mb_max} / {report.rss_mb_peak_hwm} MB",
        ),
        (
            "worker CPU ramp / idle",
            f"{report.worker_cpu_s_ramp} s / {report.worker_cpu_s_idle} s "
            f"({report.worker_cpu_percent_idle} % of a core, {hours_note})",
        ),
        (
            "claim events / claim-hour idle (mean, max)",
            f"{report.claim_events_per_claim_hour}, {report.claim_events_per_claim_hour_max}",
        ),
        ("claim actions / claim-hour idle", f"{report.claim_actions_per_claim_hour}"),
        ("pool events / hour idle", f"{report.pool_events_per_hour}"),
        ("pool actions / hour idle", f"{report.pool_actions_per_hour}"),
        ("actions / node-hour idle (claims + pool)", f"{report.actions_per_node_hour_idle}"),
        (
            f"at the default intervals (--poll-seconds {report.poll_seconds}): claim events, "
            "actions / claim-hour; pool events, actions / hour",
            f"{report.claim_events_per_claim_hour_at_defaults}, "
            f"{report.claim_actions_per_claim_hour_at_defaults}; "
            f"{report.pool_events_per_hour_at_defaults}, {report.pool_actions_per_hour_at_defaults}",
        ),
        ("workflow tasks/s idle", f"{report.workflow_tasks_per_s_idle}"),
        (
            "workflow tasks/s ramp mean / busiest second",
            f"{report.workflow_tasks_per_s_ramp_mean}"
            f" / {report.workflow_tasks_busiest_second_ramp}",
        ),
        (
            "claim events / actions to Ready (mean)",
            f"{report.claim_events_to_ready_mean} / {report.claim_actions_to_ready_mean}",
        ),
        (
            "pool events / actions to all Ready",
            f"{report.pool_events_to_ready} / "
            f"{report.pool_actions_to_ready} ({report.pool_runs} runs)",
        ),
        (
            "history bytes: claims (mean) / pool",
            f"{report.history_bytes_claims} "
            f"({report.history_bytes_per_claim_mean}) / {report.history_bytes_pool}",
        ),
        ("dev-server db bytes", f"{report.db_bytes}"),
        ("teardown to no VM", f"{report.seconds_to_no_vm} s"),
        (
            "workflow task timeouts: pool / claims (and on a sticky queue)",
            f"{report.pool_task_timeouts} ({report.pool_sticky_timeouts}) / "
            f"{report.claim_task_timeouts} ({report.claim_sticky_timeouts})",
        ),
        ("VMs created / leaked", f"{report.vms_created} / {report.vms_leaked}"),
        ("load average at end", report.load_average),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines.append(f"idle claim event types: {report.claim_idle_event_types}")
    lines.append(f"idle pool event types:  {report.pool_idle_event_types}")
    lines.append("OK" if report.ok else f"FAILED: {'; '.join(report.problems)}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=1000)
    add_control_plane_argument(parser)
    parser.add_argument("--idle-minutes", type=float, default=10.0)
    parser.add_argument("--ready-timeout", type=float, default=1800.0, help="seconds")
    parser.add_argument("--teardown-timeout", type=float, default=900.0, help="seconds")
    parser.add_argument(
        "--empty-ttl",
        type=int,
        default=MAX_TTL_S,
        help="the pool's ttlSecondsAfterEmpty (default: the maximum, 10 years)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=float,
        default=None,
        help="claims' Ready poll and the pool's periodic look every this many seconds instead "
        "of the defaults (4 h, 30 min): to observe whole safety-net cycles in a short window",
    )
    add_topology_options(parser, claims_workers="the one worker")
    parser.add_argument("--keep-state", action="store_true", help="keep logs and the db")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)
    report = asyncio.run(run(args))
    print(json.dumps(asdict(report)) if args.json else table(report))
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
