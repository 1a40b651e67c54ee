"""`cloudburst demo --scenario lifecycle`: one claim's whole life on the embedded stack, checked."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client as k8s
from temporalio.client import WorkflowFailureError

from api import NodeClaimPhase, NodeClaimStatus, labels
from cli.claims import build_claim, load_pool, start_claim
from cli.devstack import (
    SAMPLE_POOL,
    EmbeddedStack,
    StackOptions,
    cheapest_offering,
    embedded_stack,
    free_port,
)
from workflows.nodeclaim import NodeClaimWorkflow

Say = Callable[[str], None]
T = TypeVar("T")


@dataclass
class LifecycleReport:
    ok: bool = False
    claim: str = ""
    claims_ready: int = 0
    claims_deleted: int = 0
    vms_created: int = 0
    vms_leaked: int = 0
    pods_bound: int = 0
    seconds_to_ready: float | None = None
    seconds_to_deleted: float | None = None
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def run_lifecycle(say: Say, state_dir: Path | None = None) -> LifecycleReport:
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
        )
        say("starting the embedded stack (Temporal dev server, simulated cluster, worker, watcher)")
        async with embedded_stack(options) as stack:
            return await _lifecycle(stack, say)


async def _lifecycle(stack: EmbeddedStack, say: Say) -> LifecycleReport:
    report = LifecycleReport()
    started = time.monotonic()
    context = load_pool(stack.api_client, "default", SAMPLE_POOL)
    offering = cheapest_offering(stack.cluster)
    claim = build_claim(context, [offering], f"{SAMPLE_POOL}-demo1")
    report.claim = claim.metadata.name
    handle = await start_claim(
        stack.temporal,
        context,
        claim,
        task_queue=stack.settings.task_queue,
        cluster_id=stack.settings.cluster_id,
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

    stats = stack.cluster.cloud.stats()
    report.vms_created = int(stats["created_by_name"].get(claim.metadata.name, 0))
    report.vms_leaked = sum(
        1
        for instance in stack.cluster.cloud.list_instances()
        if instance["labels"].get(labels.NODECLAIM) == claim.metadata.name
    )
    if report.vms_created != 1:
        report.problems.append(f"expected exactly one VM, the cloud made {report.vms_created}")
    if report.vms_leaked:
        report.problems.append(f"{report.vms_leaked} VM(s) left behind")
    report.ok = not report.problems
    return report


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
