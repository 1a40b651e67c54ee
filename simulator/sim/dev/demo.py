"""`cloudburst demo --scenario lifecycle`: one claim's whole life on the embedded stack, checked.

`--provider P` runs that life through provider P's real module and SDK against P's local
stand-in (`sim/clouds/<P>.py`), whose VMs the simulated kubelets boot.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client as k8s
from temporalio.client import WorkflowFailureError

from api import NodeClaimPhase, NodeClaimStatus, labels
from cli.manual_claims import build_claim, load_pool, start_claim
from sim.cluster import ControlPlane
from sim.dev.stack import (
    SAMPLE_POOL,
    EmbeddedStack,
    StackOptions,
    cheapest_offering,
    embedded_stack,
    free_port,
    standin_offering,
)
from workflows.nodeclaim import NodeClaimWorkflow

Say = Callable[[str], None]
T = TypeVar("T")


@dataclass
class LifecycleReport:
    ok: bool = False
    provider: str = "fake"
    offering: str = ""
    instance_id: str = ""
    claim: str = ""
    claims_ready: int = 0
    claims_deleted: int = 0
    vms_created: int = 0
    vms_leaked: int = 0
    pods_bound: int = 0
    seconds_to_ready: float | None = None
    seconds_to_deleted: float | None = None
    # Events in the claim's whole history: what Temporal stores, replays and bills for.
    history_events: int | None = None
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def run_lifecycle(
    say: Say,
    state_dir: Path | None = None,
    provider: str = "fake",
    control_plane: ControlPlane = "kubernetes",
) -> LifecycleReport:
    with tempfile.TemporaryDirectory(prefix="cloudburst-demo-") as tmp:
        options = StackOptions(
            state_dir=state_dir or Path(tmp),
            temporal_port=free_port(),
            ui_port=None,
            persistent=False,
            boot_delay_s=0.5,
            ready_delay_s=0.5,
            empty_ttl_s=3,
            cluster_id="cloudburst-demo",
            clouds=[] if provider == "fake" else [provider],
            control_plane=control_plane,
        )
        where = "" if provider == "fake" else f", {provider} stand-in"
        say(
            "starting the embedded stack (Temporal dev server, simulated cluster"
            f"{where}, worker, watcher)"
        )
        async with embedded_stack(options) as stack:
            return await _lifecycle(stack, say, provider)


async def _lifecycle(
    stack: EmbeddedStack, say: Say, provider: str = "fake", claim_name: str | None = None
) -> LifecycleReport:
    report = LifecycleReport(provider=provider)
    started = time.monotonic()
    context = load_pool(stack.api_client, "default", SAMPLE_POOL)
    if provider == "fake":
        offering = cheapest_offering(stack.cluster)
    else:
        offering = await asyncio.to_thread(standin_offering, stack.cluster, provider)
    report.offering = offering.key
    claim = build_claim(context, [offering], claim_name or f"{SAMPLE_POOL}-demo1")
    report.claim = claim.metadata.name
    handle = await start_claim(
        stack.temporal,
        stack.api_client,
        context,
        claim,
        task_queue=stack.settings.task_queue,
        cluster_id=stack.settings.cluster_id,
        task_timeout=stack.settings.claim_task_timeout(),
    )
    say(f"started NodeClaim {claim.metadata.name} on {offering.key}")

    status = await _until(
        lambda: handle.query(NodeClaimWorkflow.status),
        lambda s: s.phase in (NodeClaimPhase.READY, NodeClaimPhase.FAILED, NodeClaimPhase.DELETED),
        timeout_s=120,
    )
    if status is None or status.phase != NodeClaimPhase.READY:
        report.problems.append(f"claim never became Ready (last phase {status and status.phase})")
        return report
    report.claims_ready = 1
    report.instance_id = status.instance_id or ""
    report.seconds_to_ready = round(time.monotonic() - started, 2)
    say(f"node {status.node_name} Ready after {report.seconds_to_ready}s")

    core = k8s.CoreV1Api(stack.api_client)
    pod = _demo_pod(claim.metadata.name)
    await asyncio.to_thread(core.create_namespaced_pod, "default", pod)
    bound = await _until(
        lambda: asyncio.to_thread(core.read_namespaced_pod, "demo-workload", "default"),
        lambda p: _runs_on(p, claim.metadata.name),
        timeout_s=60,
    )
    if bound is None:
        report.problems.append("the demo pod was never bound to the new node")
    else:
        report.pods_bound = 1
        say(f"pod demo-workload Running on {claim.metadata.name}")
    await asyncio.to_thread(core.delete_namespaced_pod, "demo-workload", "default")
    say("pod deleted: the node is empty, its TTL runs")

    try:
        final: NodeClaimStatus = await asyncio.wait_for(handle.result(), timeout=120)
    except (TimeoutError, WorkflowFailureError) as err:
        report.problems.append(f"claim did not finish cleanly: {err}")
        final = await handle.query(NodeClaimWorkflow.status)
    if final.phase == NodeClaimPhase.DELETED:
        report.claims_deleted = 1
        report.seconds_to_deleted = round(time.monotonic() - started, 2)
        say(f"claim Deleted ({final.deletion_reason}) after {report.seconds_to_deleted}s")
    else:
        report.problems.append(f"claim ended in phase {final.phase}")

    history = await handle.fetch_history()
    report.history_events = len(history.events)
    say(f"the claim's whole life took {report.history_events} history events")
    report.vms_created, report.vms_leaked = _vm_counts(stack, provider, claim.metadata.name)
    if report.vms_created != 1:
        report.problems.append(f"expected exactly one VM, the cloud made {report.vms_created}")
    if report.vms_leaked:
        report.problems.append(f"{report.vms_leaked} VM(s) left behind")
    report.ok = not report.problems
    return report


def _vm_counts(stack: EmbeddedStack, provider: str, claim: str) -> tuple[int, int]:
    """(VMs the cloud ever made for the claim, VMs of it still there), read from the cloud."""
    if provider == "fake":
        stats = stack.cluster.cloud.stats()
        leaked = sum(
            1
            for instance in stack.cluster.cloud.list_instances()
            if instance["labels"].get(labels.NODECLAIM) == claim
        )
        return int(stats["created_by_name"].get(claim, 0)), leaked
    cloud = stack.cluster.standins[provider].cloud
    created = sum(
        int(n) for name, n in cloud.stats()["created_by_name"].items() if claim in str(name)
    )
    leaked = 0
    for native in cloud.instance_states():
        vm = cloud.peek(native) or {}
        if (
            claim in str(vm.get("name") or "")
            or (vm.get("labels") or {}).get(labels.NODECLAIM) == claim
        ):
            leaked += 1
    return created, leaked


def _runs_on(pod: k8s.V1Pod, node: str) -> bool:
    return bool(
        pod.spec and pod.spec.node_name == node and pod.status and pod.status.phase == "Running"
    )


def _demo_pod(node_name: str) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="demo-workload", namespace="default"),
        spec=k8s.V1PodSpec(
            node_selector={labels.NODECLAIM: node_name},
            containers=[
                k8s.V1Container(
                    name="app",
                    image="busybox:1.36",
                    resources=k8s.V1ResourceRequirements(
                        requests={"cpu": "250m", "memory": "128Mi"}
                    ),
                )
            ],
        ),
    )


async def _until(
    fetch: Callable[[], Awaitable[T]], done: Callable[[T], bool], timeout_s: float
) -> T | None:
    deadline = time.monotonic() + timeout_s
    value: T | None = None
    while time.monotonic() < deadline:
        value = await fetch()
        if done(value):
            return value
        await asyncio.sleep(0.25)
    return None


@dataclass
class BurstReport:
    ok: bool = False
    pods: int = 0
    pods_bound: int = 0
    pods_pending: int = 0
    nodes_peak: int = 0
    cost_eur_per_hour_peak: float = 0.0
    # From a pod's creation (an upper bound of "became Unschedulable") to the create call
    # of the VM it was planned onto.
    decision_p50_s: float | None = None
    decision_p99_s: float | None = None
    seconds_to_create_pods: float | None = None
    seconds_to_all_bound: float | None = None
    seconds_to_all_gone: float | None = None
    vms_created: int = 0
    vms_leaked: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# (cpu, memory) of the mixed workload, cycled through.
BURST_SHAPES = [("250m", "256Mi"), ("500m", "1Gi"), ("1", "2Gi"), ("1500m", "2Gi"), ("2", "4Gi")]


async def run_burst(
    say: Say,
    pods: int,
    *,
    boot_delay_s: float = 0.5,
    timeout_s: float = 300,
    control_plane: ControlPlane = "kubernetes",
) -> BurstReport:
    with tempfile.TemporaryDirectory(prefix="cloudburst-burst-") as tmp:
        options = StackOptions(
            state_dir=Path(tmp),
            temporal_port=free_port(),
            ui_port=None,
            persistent=False,
            boot_delay_s=boot_delay_s,
            ready_delay_s=boot_delay_s,
            empty_ttl_s=3,
            cluster_id="cloudburst-burst",
            control_plane=control_plane,
        )
        say("starting the embedded stack")
        async with embedded_stack(options) as stack:
            return await burst(stack, say, pods, timeout_s=timeout_s)


async def burst(stack: EmbeddedStack, say: Say, count: int, *, timeout_s: float) -> BurstReport:
    """N pending pods of mixed sizes → all bound → deleted → every burst node gone."""
    report = BurstReport(pods=count)
    core = k8s.CoreV1Api(stack.api_client)
    cloud = stack.cluster.cloud
    created_at: dict[str, float] = {}
    # The sample pool is capped for trying things out; a burst of N pods needs at most N nodes.
    await asyncio.to_thread(
        k8s.CustomObjectsApi(stack.api_client).patch_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodepools",
        SAMPLE_POOL,
        {"spec": {"limits": {"maxNodes": max(count, 10)}}},
    )
    started = time.monotonic()

    def create(index: int) -> None:
        cpu, memory = BURST_SHAPES[index % len(BURST_SHAPES)]
        name = f"burst-{index:05d}"
        created_at[name] = time.time()  # before the call: latencies err on the long side
        core.create_namespaced_pod("default", _burst_pod(name, cpu, memory))

    # A few at a time, like a ReplicaSet scaling up (it creates pods in parallel batches).
    with ThreadPoolExecutor(max_workers=8) as creators:
        await asyncio.gather(
            *(
                asyncio.get_running_loop().run_in_executor(creators, create, index)
                for index in range(count)
            )
        )
    report.seconds_to_create_pods = round(time.monotonic() - started, 2)
    say(f"created {count} pods of mixed sizes in {report.seconds_to_create_pods}s; waiting")

    async def snapshot() -> list[k8s.V1Pod]:
        listing = await asyncio.to_thread(
            core.list_namespaced_pod, "default", label_selector="app=burst"
        )
        pods: list[k8s.V1Pod] = listing.items
        return pods

    deadline = time.monotonic() + timeout_s
    pods = await snapshot()
    while time.monotonic() < deadline:
        pods = await snapshot()
        live = [vm for vm in cloud.list_instances() if vm["state"] != "stopping"]
        report.nodes_peak = max(report.nodes_peak, len(live))
        report.cost_eur_per_hour_peak = max(
            report.cost_eur_per_hour_peak, _hourly_cost(cloud, live)
        )
        running = [p for p in pods if p.status and p.status.phase == "Running"]
        if len(running) == count:
            break
        await asyncio.sleep(0.5)
    report.pods_bound = sum(1 for p in pods if p.spec and p.spec.node_name)
    report.pods_pending = count - report.pods_bound
    if report.pods_pending:
        report.problems.append(f"{report.pods_pending} pods never bound")
    else:
        report.seconds_to_all_bound = round(time.monotonic() - started, 2)
        say(
            f"all {count} pods bound on {report.nodes_peak} nodes after {report.seconds_to_all_bound}s"
        )
    latencies = _decision_latencies(pods, created_at, cloud.create_times())
    if latencies:
        report.decision_p50_s = round(_percentile(latencies, 50), 3)
        report.decision_p99_s = round(_percentile(latencies, 99), 3)

    await asyncio.to_thread(
        core.delete_collection_namespaced_pod, "default", label_selector="app=burst"
    )
    say("pods deleted; waiting for every burst node to go")
    while time.monotonic() < deadline:
        if not cloud.list_instances(label_selector={labels.CLUSTER: stack.settings.cluster_id}):
            break
        await asyncio.sleep(0.5)
    report.vms_created = int(cloud.stats()["instances_created"])
    report.vms_leaked = len(cloud.list_instances())
    if report.vms_leaked:
        report.problems.append(f"{report.vms_leaked} VMs still running after the pods left")
    else:
        report.seconds_to_all_gone = round(time.monotonic() - started, 2)
    report.ok = not report.problems
    return report


def _burst_pod(name: str, cpu: str, memory: str) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, namespace="default", labels={"app": "burst"}),
        spec=k8s.V1PodSpec(
            node_selector={"burst": "true"},
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


def _hourly_cost(cloud: Any, live: list[dict[str, Any]]) -> float:
    prices = {t["name"]: float(t["price_eur_per_hour"]) for t in cloud.instance_types()}
    return round(sum(prices.get(vm["instance_type"], 0.0) for vm in live), 4)


def _decision_latencies(
    pods: list[k8s.V1Pod], created_at: dict[str, float], vm_created: dict[str, Any]
) -> list[float]:
    latencies = []
    for pod in pods:
        node = pod.spec.node_name if pod.spec else None
        name = pod.metadata.name if pod.metadata else None
        if node in vm_created and name in created_at:
            latencies.append(vm_created[node].timestamp() - created_at[name])
    return latencies


def _percentile(values: list[float], percent: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(percent / 100 * len(ordered)) - 1))
    return ordered[index]
