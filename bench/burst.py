"""A burst of pending pods, end to end: decision latency by stage and time to all bound.

    .venv/bin/python bench/burst.py --pods 1000 --topology split [--workers 3 --triggers 2]
        [--pool-workers 1 [--pool-task-timeout 3 --pool-sticky-timeout 2]]
        [--kill-worker-after 3 [--kill-pool-holder]] [--json]
    .venv/bin/python bench/burst.py --pods 1000 --topology embedded

`--topology split` (the default) runs what a cluster runs, each its own OS process on free
local ports (`sim.dev.topology`): the Temporal dev server on a sqlite file, the
simulated cluster (`python -m sim`: Kubernetes' own control plane, kubelets, fake cloud), and
`--triggers` x `cloudburst trigger` and `--workers` x `cloudburst worker` (with
`--pool-workers N`, N more as `cloudburst worker --queues pools` and the `--workers` as
`--queues claims`: a Deployment of each). One NodePool on
the fake cloud; the bench creates N pods of five mixed shapes (8 threads, as a ReplicaSet
creates in parallel batches), waits until all run, deletes them and waits until every VM is
gone. `--kill-worker-after S` SIGKILLs (`--kill-signal TERM`: stops as a rollout does) the
first worker S seconds after the first pod (with
several workers polling its queues the others carry on; with none it is started again at
once);
`--kill-pool-holder` makes it the worker that ran the pool's latest workflow task.
`--pool-task-timeout S` sets the pools' workflow task timeout (the trigger's
CLOUDBURST_POOL_TASK_TIMEOUT_S), `--pool-sticky-timeout S` the pool workers' sticky queue
timeout (CLOUDBURST_STICKY_QUEUE_TIMEOUT_S): together, what a crash of the pool's worker costs.

Per pod it reports, from its creation (the bench's clock, before the create call):
  unschedulable   kube-scheduler set PodScheduled=False/Unschedulable (a watch)
  signalled       the pool's `demand` signal carrying the pod (the pool's history)
  planned         the `plan_capacity` activity that planned it completed (the history)
  claim started   the claim whose node it runs on started (that claim's history)
  create call     the fake cloud received that VM's create call (its own record)
Decision latency = create call - created. Figures only: nothing is asserted. Exits 1 if a
pod never bound, waited without a demand signal naming it, or a VM was created twice or
left behind.

`--topology embedded` is the older single-process figure (`cloudburst demo --scenario burst`
at this size): everything in one Python process, no stage breakdown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from api.messages import claim_workflow_id
from api.nodepool.messages import PoolSignal, pool_workflow_id
from sim.dev.demo import BURST_SHAPES, run_burst
from sim.dev.topology import (
    TaskTimeouts,
    Topology,
    add_control_plane_argument,
    add_topology_options,
    admin,
    connect,
    cpu_s_split,
    kube_client,
    no_vms,
    report_failure,
    tear_down,
    without_kept,
)
from worker.payload_codec import decompressed
from worker.settings import BATCH_MAX_S

POOL = "burst"
NAMESPACE = "default"
LABEL = "bench-pool"
STAGES = ("unschedulable", "signalled", "planned", "claim_started", "create_call")
# A pod bound this soon after it was marked Unschedulable may have been dropped from its
# trigger's batch before the batch went (a batch goes within `BATCH_MAX_S`, plus the
# trigger's own lag on a busy machine).
BOUND_AT_ONCE_S = 2 * BATCH_MAX_S
# The last step (claim started → create call) in parts, per claim, from its history: its
# first workflow task waiting for the claims' worker; the task(s) up to the create activity's
# scheduling (the bootstrap and the NodeClaim's first write are local activities in it); the
# activity waiting for a slot; the activity until the fake cloud heard the call (reading the
# first-boot script's Secret, the request).
CLAIM_STEPS = ("task_picked_up", "create_scheduled", "create_started", "create_call")


@dataclass
class Report:
    ok: bool = False
    topology: str = "split"
    workers: int = 1
    pool_workers: int = 0  # workers polling the pools' queue only; `workers` the claims'
    triggers: int = 1
    # The task and sticky queue timeouts the run set (`TaskTimeouts`, seconds); the rest are
    # the product's defaults.
    timeouts: dict[str, float] = field(default_factory=dict)
    pods: int = 0
    rate: float | None = None  # pods created per second; None: as fast as 8 threads go
    pods_bound: int = 0
    seconds_to_create_pods: float | None = None
    seconds_to_all_bound: float | None = None
    seconds_to_all_gone: float | None = None
    decision_p50_s: float | None = None
    decision_p99_s: float | None = None
    # Per stage, seconds from the pod's creation: {"unschedulable": {"p50": …, "p99": …}, …}.
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    # Per step, seconds from the stage before: what each part adds.
    steps: dict[str, dict[str, float]] = field(default_factory=dict)
    # Per part of the last step (`CLAIM_STEPS`), seconds, over the claims whose nodes got pods.
    claim_steps: dict[str, dict[str, float]] = field(default_factory=dict)
    demand_signals: int = 0
    # Pods named by those signals, counted each time: each trigger sends each pod (the
    # pool plans the first copy).
    pods_in_demand_signals: int = 0
    # Pods the scheduler found no room for that no demand signal named: a pod the triggers
    # lost (it binds only if another pod's node has room). Always empty when all is well.
    waited_never_signalled: list[str] = field(default_factory=list)
    # Pods never signalled because they were bound before their batch went: room came free
    # on a node made for others (a trigger drops a bound pod from its batch). Not a problem;
    # seen when pods arrive while the first nodes are already up (`--rate`).
    bound_before_signalled: int = 0
    usage_signals: int = 0
    plans: int = 0
    claims_started: int = 0
    nodes: int = 0
    # What the claims started cost per hour (each at its first offering's price): the
    # figure batching trades against latency.
    cost_eur_per_hour: float = 0.0
    vms_created: int = 0
    vms_created_twice: list[str] = field(default_factory=list)
    vms_leaked: int = 0
    worker_killed_at_s: float | None = None
    # The pool's workflow tasks that timed out (a task left on a killed worker's sticky
    # queue, or started there): whether a kill stalled the pool or only claims.
    pool_task_timeouts: int = 0
    # How long the pool's activities waited from scheduled to started ({"p50", "p99",
    # "max"}): at once when handed back eagerly with the workflow task's answer, later
    # when left to the task queue.
    pool_activity_start_wait_s: dict[str, float] = field(default_factory=dict)
    # Whether the killed worker ran the pool's last workflow task before the kill: a kill
    # there stalls every pod still waiting, elsewhere only the claims it held.
    killed_worker_held_pool: bool | None = None
    killed_worker_pid: int | None = None
    killed_at_unix: float | None = None
    # How the worker was stopped: KILL (a crash, an OOM kill) or TERM (a rollout, a drain:
    # the worker shuts down gracefully and gives its sticky queue back at once).
    kill_signal: str = "KILL"
    # CPU seconds each process spent from the first pod until all were bound: on a 2-core
    # machine, whose time the latency is made of.
    cpu_s_during_burst: dict[str, float] = field(default_factory=dict)
    # Those seconds over the burst's wall time: how many of the machine's cores were busy
    # (near `cores`, the latency is mostly waiting for a CPU).
    cores_busy: float | None = None
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    load_average: str = ""
    problems: list[str] = field(default_factory=list)


class PodWatch:
    """When the bench saw each pod Unschedulable and bound (a watch, as the trigger has)."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self._core = k8s.CoreV1Api(api)
        self.unschedulable: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self._watch = k8s_watch.Watch()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()

    def _run(self) -> None:
        """Watch until stopped. A watch the API server ends (its timeout, a resourceVersion
        it no longer holds: an ERROR event) starts again from now, not from where it was:
        a watch without a resourceVersion first sends every pod as it is."""
        while not self._stopped.is_set():
            self._watch = k8s_watch.Watch()
            try:
                for event in self._watch.stream(
                    self._core.list_namespaced_pod,
                    NAMESPACE,
                    label_selector="app=burst",
                    timeout_seconds=600,
                    deserialize=False,  # plain JSON: the client's models cost seconds of CPU
                ):
                    if event.get("type") == "ERROR":
                        break
                    self._saw(event["object"], time.time())
            except Exception:  # a dropped watch: start it again
                time.sleep(0.1)

    def _saw(self, pod: dict[str, Any], now: float) -> None:
        name = pod["metadata"]["name"]
        if pod.get("spec", {}).get("nodeName"):
            self.bound.setdefault(name, now)
        for condition in pod.get("status", {}).get("conditions") or []:
            if (
                condition.get("type") == "PodScheduled"
                and condition.get("reason") == "Unschedulable"
            ):
                self.unschedulable.setdefault(name, now)


def seed(api: k8s.ApiClient, topology: Topology, pods: int, empty_ttl_s: int) -> None:
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    core.create_namespaced_secret(
        NAMESPACE,
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name="burst-cloud-token"),
            string_data={"token": topology.cloud_token},
        ),
    )
    node_class = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodeClass",
        "metadata": {"name": POOL, "namespace": NAMESPACE},
        "spec": {
            "fake": {
                "endpoint": topology.cloud_url,
                "region": "sim-1",
                "apiTokenSecretRef": {"name": "burst-cloud-token", "key": "token"},
            },
            "join": {
                "hostApiServer": f"https://127.0.0.1:{topology.kube_port}",
                "kindClusterName": POOL,
                "registrationTimeoutSeconds": 600,
            },
        },
    }
    custom.create_namespaced_custom_object(
        "cloudburst.io", "v1alpha1", NAMESPACE, "nodeclasses", node_class
    )
    pool = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": POOL, "namespace": NAMESPACE},
        "spec": {
            "nodeClassRef": POOL,
            "requirements": {"allowedProviders": ["fake"]},
            "limits": {"maxNodes": max(10, pods)},
            "template": {"labels": {LABEL: POOL}},
            "disruption": {"ttlSecondsAfterEmpty": empty_ttl_s, "budgets": [{"nodes": "100%"}]},
        },
    }
    custom.create_namespaced_custom_object(
        "cloudburst.io", "v1alpha1", NAMESPACE, "nodepools", pool
    )


def pod_name(index: int) -> str:
    return f"burst-{index:05d}"


def burst_pod(index: int) -> k8s.V1Pod:
    cpu, memory = BURST_SHAPES[index % len(BURST_SHAPES)]
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(
            name=pod_name(index), namespace=NAMESPACE, labels={"app": "burst"}
        ),
        spec=k8s.V1PodSpec(
            node_selector={LABEL: POOL},
            termination_grace_period_seconds=0,
            containers=[
                k8s.V1Container(
                    name="app",
                    image="busybox:1.36",
                    resources=k8s.V1ResourceRequirements(requests={"cpu": cpu, "memory": memory}),
                )
            ],
        ),
    )


# ---- what the histories say -----------------------------------------------------------------


def _payload(payloads: Any) -> Any:
    return json.loads(decompressed(payloads.payloads[0]).data) if payloads.payloads else None


def _at(event: HistoryEvent) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


@dataclass
class PoolStages:
    """What the pool's history says, from every run of it."""

    signalled: dict[str, float] = field(default_factory=dict)  # pod -> first demand signal
    planned: dict[str, float] = field(default_factory=dict)  # pod -> its first plan's end
    signals: int = 0
    pods_in_signals: int = 0
    usage_signals: int = 0  # the watcher's node_usage: what was bound to its new nodes
    plans: int = 0
    cost_eur_per_hour: float = 0.0  # the claims it started, at their first offering
    task_timeouts: int = 0
    activity_start_waits: list[float] = field(default_factory=list)
    task_starts: list[tuple[float, str]] = field(default_factory=list)  # (when, worker identity)


async def pool_stages(client: Client) -> PoolStages:
    stages = PoolStages()
    signalled, planned = stages.signalled, stages.planned
    # Every run, newest first, each found from the one that continued it: the visibility
    # list is written after the fact and could miss a run started moments before.
    workflow_id = pool_workflow_id(NAMESPACE, POOL)
    try:
        run_id: str | None = (await client.get_workflow_handle(workflow_id).describe()).run_id
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        run_id = None
    while run_id:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        run_id = None
        plan_pods: dict[int, list[str]] = {}
        scheduled_at: dict[int, float] = {}
        async for event in handle.fetch_history_events():
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                started = event.workflow_execution_started_event_attributes
                run_id = started.continued_execution_run_id or None
            if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                scheduled = event.activity_task_started_event_attributes.scheduled_event_id
                if scheduled in scheduled_at:
                    stages.activity_start_waits.append(_at(event) - scheduled_at[scheduled])
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                stages.task_timeouts += 1
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                identity = event.workflow_task_started_event_attributes.identity
                stages.task_starts.append((_at(event), identity))
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                signalled_with = event.workflow_execution_signaled_event_attributes
                if signalled_with.signal_name == "node_usage":
                    stages.usage_signals += 1
                if signalled_with.signal_name != PoolSignal.DEMAND:
                    continue
                stages.signals += 1
                for pod in (_payload(signalled_with.input) or {}).get("pods", []):
                    stages.pods_in_signals += 1
                    _earliest(signalled, pod["name"], _at(event))
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled_at[event.event_id] = _at(event)
                attributes = event.activity_task_scheduled_event_attributes
                if attributes.activity_type.name == "plan_capacity":
                    request = _payload(attributes.input) or {}
                    plan_pods[event.event_id] = [pod["name"] for pod in request.get("pods", [])]
                elif attributes.activity_type.name == "start_claim_workflows":
                    batch = _payload(attributes.input) or {}
                    for start in batch.get("starts", []):
                        stages.cost_eur_per_hour += _first_offering_price(start["input"])
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                scheduled = event.activity_task_completed_event_attributes.scheduled_event_id
                if scheduled in plan_pods:
                    stages.plans += 1
                    for name in plan_pods.pop(scheduled):
                        _earliest(planned, name, _at(event))
            elif kind == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
                child = event.start_child_workflow_execution_initiated_event_attributes
                stages.cost_eur_per_hour += _first_offering_price(_payload(child.input) or {})
    return stages


def _earliest(moments: dict[str, float], name: str, at: float) -> None:
    """Keep a pod's first moment: the pool's runs are listed newest first."""
    moments[name] = min(at, moments.get(name, at))


def _first_offering_price(claim_input: dict[str, Any]) -> float:
    """What a started claim costs per hour (a `NodeClaimInput` as JSON)."""
    offering = claim_input.get("claim", {}).get("spec", {}).get("offerings", [{}])[0]
    return float(offering.get("priceEurPerHour") or 0.0)


async def claim_starts(client: Client, nodes: set[str]) -> dict[str, float]:
    starts: dict[str, float] = {}
    async for execution in client.list_workflows("WorkflowType = 'NodeClaimWorkflow'"):
        for node in nodes:
            if execution.id == claim_workflow_id(NAMESPACE, node) and execution.start_time:
                starts[node] = execution.start_time.timestamp()
    return starts


async def claim_step_times(
    client: Client, nodes: set[str], create_calls: dict[str, float]
) -> dict[str, list[float]]:
    """`CLAIM_STEPS` of each claim, in seconds."""
    steps: dict[str, list[float]] = defaultdict(list)
    for node in sorted(nodes):
        moments: dict[str, float] = {}
        create_scheduled_id = None
        handle = client.get_workflow_handle(claim_workflow_id(NAMESPACE, node))
        async for event in handle.fetch_history_events():
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                moments.setdefault("started", _at(event))
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                moments.setdefault("task_picked_up", _at(event))
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attributes = event.activity_task_scheduled_event_attributes
                if attributes.activity_type.name == "create_instance" and not create_scheduled_id:
                    create_scheduled_id = event.event_id
                    moments["create_scheduled"] = _at(event)
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                started = event.activity_task_started_event_attributes
                if started.scheduled_event_id == create_scheduled_id:
                    moments["create_started"] = _at(event)
                    break
        if node in create_calls:
            moments["create_call"] = create_calls[node]
        previous = moments.get("started")
        for step in CLAIM_STEPS:
            if previous is None or step not in moments:
                break
            steps[step].append(moments[step] - previous)
            previous = moments[step]
    return steps


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(percent: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(percent / 100 * len(ordered)) - 1))]

    return {"p50": round(at(50), 3), "p99": round(at(99), 3), "max": round(ordered[-1], 3)}


# ---- the run --------------------------------------------------------------------------------


async def run_split(args: argparse.Namespace) -> Report:
    report = Report(
        workers=args.workers,
        pool_workers=args.pool_workers,
        triggers=args.triggers,
        pods=args.pods,
        rate=args.rate,
        timeouts=TaskTimeouts.of(args).given(),
    )
    say = (
        (lambda text: print(f"• {text}", file=sys.stderr, flush=True))
        if args.verbose
        else (lambda text: None)
    )
    state = Path(tempfile.mkdtemp(prefix="cloudburst-burst-"))
    topology = Topology(
        state,
        boot_delay_s=args.boot_delay,
        workers=args.workers,
        triggers=args.triggers,
        pool_workers=args.pool_workers,
        timeouts=TaskTimeouts.of(args),
        control_plane=args.control_plane,
    )
    watch: PodWatch | None = None
    try:
        topology.temporal.start()
        topology.sim.start()
        client = await connect(topology)
        api = await asyncio.to_thread(kube_client, topology)
        for process in [*topology.workers, *topology.triggers]:
            process.start()
        await asyncio.to_thread(seed, api, topology, args.pods, args.empty_ttl)
        await asyncio.sleep(args.settle)  # the workers poll, the triggers have listed
        watch = PodWatch(api)
        watch.start()
        core = k8s.CoreV1Api(api)
        created: dict[str, float] = {}

        def create(index: int) -> None:
            pod = burst_pod(index)
            if args.rate:  # paced: pod i goes out i/rate seconds after the first
                time.sleep(max(0.0, started + index / args.rate - time.time()))
            created[pod_name(index)] = time.time()  # before the call: errs on the long side
            # The answer not made into the client's models (seconds of the bench's CPU), but
            # read: an unread answer keeps its connection out of the pool, and each pod then
            # cost the simulator a new connection and a thread to serve it.
            answer: Any = core.create_namespaced_pod(NAMESPACE, pod, _preload_content=False)
            answer.read()
            answer.release_conn()

        killer = asyncio.create_task(
            kill_worker(
                topology,
                client,
                args.kill_worker_after,
                report,
                pool_holder=args.kill_pool_holder,
                claims_worker=args.kill_claims_worker,
                graceful=args.kill_signal == "TERM",
            )
        )
        cpu0 = _cpu(topology)
        started = time.time()
        say(f"creating {args.pods} pods")
        with ThreadPoolExecutor(max_workers=8) as creators:
            loop = asyncio.get_running_loop()
            await asyncio.gather(
                *(loop.run_in_executor(creators, create, i) for i in range(args.pods))
            )
        report.seconds_to_create_pods = round(time.time() - started, 2)
        deadline = time.monotonic() + args.timeout
        while len(watch.bound) < args.pods and time.monotonic() < deadline:
            await asyncio.sleep(0.25)
        killer.cancel()
        cpu1 = _cpu(topology)
        report.cpu_s_during_burst = {
            name: round(cpu1[name] - cpu0.get(name, 0.0), 1) for name in cpu1
        }
        report.cpu_s_during_burst["bench"] = round(cpu1["bench"] - cpu0["bench"], 1)
        burst_wall_s = time.time() - started
        if burst_wall_s > 0:
            report.cores_busy = round(sum(report.cpu_s_during_burst.values()) / burst_wall_s, 2)
        report.pods_bound = len(watch.bound)
        if report.pods_bound < args.pods:
            report.problems.append(f"{args.pods - report.pods_bound} pods never bound")
        else:
            report.seconds_to_all_bound = round(max(watch.bound.values()) - started, 2)
        say(f"{report.pods_bound} bound; reading the histories")

        pods = (
            await asyncio.to_thread(core.list_namespaced_pod, NAMESPACE, label_selector="app=burst")
        ).items
        node_of = {
            p.metadata.name: p.spec.node_name
            for p in pods
            if p.metadata and p.spec and p.spec.node_name
        }
        creates = {
            name: datetime.fromisoformat(at).timestamp()
            for name, at in (await asyncio.to_thread(admin, topology, "create-times")).items()
        }
        from_pool = await pool_stages(client)
        signalled, planned = from_pool.signalled, from_pool.planned
        report.demand_signals, report.plans = from_pool.signals, from_pool.plans
        report.pods_in_demand_signals = from_pool.pods_in_signals
        report.usage_signals = from_pool.usage_signals
        report.pool_task_timeouts = from_pool.task_timeouts
        if from_pool.activity_start_waits:
            report.pool_activity_start_wait_s = _percentiles(from_pool.activity_start_waits)
        report.killed_worker_held_pool = held_pool(report, from_pool)
        report.cost_eur_per_hour = round(from_pool.cost_eur_per_hour, 4)
        starts = await claim_starts(client, set(node_of.values()))
        report.nodes = len(set(node_of.values()))
        report.claims_started = len(
            [e async for e in client.list_workflows("WorkflowType = 'NodeClaimWorkflow'")]
        )
        at_stage: dict[str, list[float]] = defaultdict(list)
        per_step: dict[str, list[float]] = defaultdict(list)
        per_pod: dict[str, dict[str, Any]] = {}
        for name, t0 in created.items():
            node = node_of.get(name)
            if node is None:
                continue
            moments = {
                "unschedulable": watch.unschedulable.get(name),
                "signalled": signalled.get(name),
                "planned": planned.get(name),
                "claim_started": starts.get(node),
                "create_call": creates.get(node),
            }
            per_pod[name] = {
                "node": node,
                "created": t0,
                **{stage: (m - t0 if m else None) for stage, m in moments.items()},
                "bound": (watch.bound[name] - t0) if name in watch.bound else None,
            }
            previous = t0
            for stage in STAGES:
                moment = moments[stage]
                if moment is None:
                    continue
                at_stage[stage].append(moment - t0)
                per_step[stage].append(moment - previous)
                previous = moment
        never_signalled = [
            name for name in watch.unschedulable if name in created and name not in signalled
        ]
        bound_at_once = [
            name
            for name in never_signalled
            if watch.bound.get(name, float("inf")) - watch.unschedulable[name] <= BOUND_AT_ONCE_S
        ]
        report.bound_before_signalled = len(bound_at_once)
        report.waited_never_signalled = sorted(set(never_signalled) - set(bound_at_once))
        if report.waited_never_signalled:
            report.problems.append(
                f"{len(report.waited_never_signalled)} pods waited and were never signalled"
            )
        if args.per_pod:
            Path(args.per_pod).write_text(json.dumps(per_pod, indent=1))
        by_claim = await claim_step_times(client, set(node_of.values()), creates)
        report.claim_steps = {s: _percentiles(v) for s, v in by_claim.items() if v}
        report.stages = {s: _percentiles(v) for s, v in at_stage.items() if v}
        report.steps = {s: _percentiles(v) for s, v in per_step.items() if v}
        decision = at_stage.get("create_call", [])
        if decision:
            report.decision_p50_s = report.stages["create_call"]["p50"]
            report.decision_p99_s = report.stages["create_call"]["p99"]

        # ---- teardown: the pods go, the empty nodes follow
        say("deleting the pods; waiting for every VM to go")
        teardown_t0 = time.monotonic()
        await asyncio.to_thread(
            core.delete_collection_namespaced_pod, NAMESPACE, label_selector="app=burst"
        )
        left = await no_vms(topology, args.timeout)
        report.vms_leaked = len(left)
        if left:
            report.problems.append(f"{len(left)} VMs left after the pods went")
        else:
            report.seconds_to_all_gone = round(time.monotonic() - teardown_t0, 1)
        stats = await asyncio.to_thread(admin, topology, "stats")
        by_name: dict[str, int] = stats.get("created_by_name", {})
        report.vms_created = sum(by_name.values())
        report.vms_created_twice = sorted(n for n, times in by_name.items() if times > 1)
        if report.vms_created_twice:
            report.problems.append(f"{len(report.vms_created_twice)} VMs created twice")
    except Exception as err:  # a report with the cause and the logs, not a bare traceback
        report_failure(topology, report.problems, err)
    finally:
        if watch:
            watch.stop()
        report.load_average = tear_down(
            topology, state, keep=args.keep_state, problems=report.problems
        )
    report.ok = not without_kept(report.problems)
    return report


async def kill_worker(
    topology: Topology,
    client: Client,
    after_s: float | None,
    report: Report,
    *,
    pool_holder: bool = False,
    claims_worker: bool = False,
    graceful: bool = False,
) -> None:
    """SIGKILL a worker `after_s` into the burst: the first, or (`pool_holder`) the one that
    ran the pool's latest workflow task — the kill that stalls every waiting pod — or
    (`claims_worker`) the first that runs claims (the first of all unless pools have
    workers of their own): the kill that stalls the claims it held. With
    `graceful`, SIGTERM instead (what a rollout or a node drain sends), and wait for it to
    exit as Kubernetes would, up to its grace period."""
    if after_s is None:
        return
    t0 = time.monotonic()
    await asyncio.sleep(after_s)
    victim = topology.worker
    if claims_worker:
        victim = next(w for w in topology.workers if topology.queues[w.name] != "pools")
    if pool_holder:
        holder = await _pool_holder_pid(client)
        victim = next((w for w in topology.workers if w.popen and w.popen.pid == holder), victim)
    report.killed_worker_pid = victim.popen.pid if victim.popen else None
    report.kill_signal = "TERM" if graceful else "KILL"
    report.killed_at_unix = time.time()
    if graceful:
        await asyncio.to_thread(victim.stop)
    else:
        victim.kill()
    report.worker_killed_at_s = round(time.monotonic() - t0, 2)
    if not any(
        w is not victim and topology.queues[w.name] == topology.queues[victim.name]
        for w in topology.workers
    ):
        victim.start()  # the only one polling its queues: a Deployment would start it again


async def _pool_holder_pid(client: Client) -> int | None:
    """The pid of the worker that started the pool's latest workflow task (`pid@host`)."""
    handle = client.get_workflow_handle(pool_workflow_id(NAMESPACE, POOL))
    identity = None
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            identity = event.workflow_task_started_event_attributes.identity
    pid = identity.split("@")[0] if identity else ""
    return int(pid) if pid.isdigit() else None


def held_pool(report: Report, pool: PoolStages) -> bool | None:
    """Whether the last of the pool's workflow tasks before the kill started on the killed
    worker (an SDK worker's identity is `pid@host`)."""
    if report.killed_at_unix is None or report.killed_worker_pid is None:
        return None
    before = [start for start in pool.task_starts if start[0] <= report.killed_at_unix]
    if not before:
        return False
    return max(before)[1].split("@")[0] == str(report.killed_worker_pid)


# Kubernetes' own control plane (etcd, kube-apiserver, its controllers, the scheduler, KWOK),
# apart from the simulator process that runs it.
CONTROL_PLANE_CPU = "control plane"


def _cpu(topology: Topology) -> dict[str, float]:
    """CPU seconds so far of each process of the topology (the control plane's processes
    apart), and of this one."""
    used: dict[str, float] = {}
    for process in topology.all:
        if process.popen and not process.exited():
            rest, control_plane = cpu_s_split(process.popen.pid)
            used[process.name] = rest
            if control_plane:
                used[CONTROL_PLANE_CPU] = control_plane
    own = os.times()
    return {**used, "bench": own.user + own.system}  # not its children: they are above


def table(report: Report) -> str:
    lines = [
        f"{report.pods} pods{f' at {report.rate:g}/s' if report.rate else ''}, "
        f"{report.workers} worker(s)"
        + (f" + {report.pool_workers} for pools only" if report.pool_workers else "")
        + f", {report.triggers} trigger(s)"
        + "".join(
            f", {kind.replace('_', ' ')} timeout {s:g} s" for kind, s in report.timeouts.items()
        )
        + f" (load {report.load_average})",
        f"  created in {report.seconds_to_create_pods} s; all bound after "
        f"{report.seconds_to_all_bound} s; every VM gone {report.seconds_to_all_gone} s "
        "after the pods went",
        f"  decision latency p50 {report.decision_p50_s} s / p99 {report.decision_p99_s} s",
        f"  {report.demand_signals} demand signals ({report.pods_in_demand_signals} pods in "
        f"them) and {report.usage_signals} node_usage signals, "
        f"{report.plans} plans, "
        f"{report.claims_started} claims (€{report.cost_eur_per_hour}/h), "
        f"{report.nodes} nodes with pods, "
        f"{report.vms_created} VMs created, {len(report.vms_created_twice)} twice, "
        f"{report.vms_leaked} leaked",
        "",
        f"  {'stage':<15} {'since created p50/p99':>24} {'this step p50/p99':>22}",
    ]
    for stage in STAGES:
        total, step = report.stages.get(stage), report.steps.get(stage)
        if total and step:
            lines.append(
                f"  {stage:<15} {total['p50']:>11.3f} / {total['p99']:<10.3f}"
                f" {step['p50']:>9.3f} / {step['p99']:<10.3f}"
            )
    parts = [
        f"{step.replace('_', ' ')} {report.claim_steps[step]['p50']:.3f} / "
        f"{report.claim_steps[step]['p99']:.3f}"
        for step in CLAIM_STEPS
        if step in report.claim_steps
    ]
    if parts:
        lines.append("  claim started → create call, per claim p50/p99: " + ", ".join(parts))
    if wait := report.pool_activity_start_wait_s:
        lines.append(
            f"  pool's activities, scheduled → started: p50 {wait['p50']:.3f} s, "
            f"p99 {wait['p99']:.3f} s, max {wait['max']:.3f} s"
        )
    lines.append(
        "  CPU s during the burst: "
        + ", ".join(f"{name} {cpu}" for name, cpu in report.cpu_s_during_burst.items())
        + (
            f" ({report.cores_busy} of {report.cores} cores busy)"
            if report.cores_busy is not None
            else ""
        )
    )
    if report.worker_killed_at_s is not None:
        holder = "it held the pool" if report.killed_worker_held_pool else "the pool ran elsewhere"
        lines.append(
            f"  worker SIG{report.kill_signal}ed {report.worker_killed_at_s} s into the burst"
            f" ({holder}; the "
            f"pool's workflow tasks timed out {report.pool_task_timeouts} time(s))"
        )
    lines += [f"  problem: {p}" for p in report.problems]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--topology", choices=("split", "embedded"), default="split")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--triggers", type=int, default=1)
    add_topology_options(parser, claims_workers="the --workers")
    parser.add_argument("--kill-worker-after", type=float, default=None, help="seconds")
    parser.add_argument(
        "--kill-pool-holder",
        action="store_true",
        help="kill the worker running the pool's workflow (not the first worker)",
    )
    parser.add_argument(
        "--kill-claims-worker",
        action="store_true",
        help="kill the first worker that runs claims (not a --pool-workers one)",
    )
    parser.add_argument(
        "--kill-signal",
        choices=("KILL", "TERM"),
        default="KILL",
        help="KILL: a crash; TERM: a rollout (graceful shutdown)",
    )
    parser.add_argument(
        "--rate", type=float, default=None, help="pods created per second (default: at once)"
    )
    parser.add_argument("--boot-delay", type=float, default=0.0, help="the VMs' boot, seconds")
    add_control_plane_argument(parser)
    parser.add_argument("--empty-ttl", type=int, default=5, help="the pool's, seconds")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before the burst")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per phase")
    parser.add_argument("--keep-state", action="store_true", help="keep logs and the db")
    parser.add_argument(
        "--per-pod", metavar="FILE", help="write each pod's moments (seconds from its creation)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)
    if args.topology == "embedded":
        embedded = asyncio.run(
            run_burst(
                lambda text: print(f"• {text}", file=sys.stderr),
                args.pods,
                boot_delay_s=args.boot_delay,
                timeout_s=args.timeout,
            )
        )
        print(json.dumps(embedded.as_dict(), indent=None if args.json else 2))
        sys.exit(0 if embedded.ok else 1)
    report = asyncio.run(run_split(args))
    print(json.dumps(asdict(report)) if args.json else table(report))
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
