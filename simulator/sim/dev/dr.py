"""`cloudburst demo --scenario dr`: the seed's disaster-recovery drill on the embedded stack.

A one-replica Deployment lands on a Hetzner node (Hetzner is cheapest); Hetzner's create API
starts answering 503; the Hetzner VM is deleted behind our back; the claim sees its node lost
after the pool's unreachable grace period, deletes what is left, and the pod's replacement
lands on a Scaleway node — with nobody changing anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client as k8s

from api import labels
from api.messages import ClaimSignal, ScaleDownRequest, claim_workflow_id
from api.nodepool import API_VERSION
from sim.cluster import ControlPlane
from sim.dev.stack import SAMPLE_CLASS, EmbeddedStack, StackOptions, embedded_stack, free_port
from workflows.nodeclaim import NodeClaimWorkflow

POOL, CLASS, APP = "dr-nodepool", "dr-nodeclass", "dr-workload"
UNREACHABLE_GRACE_S = 10


@dataclass
class DrillReport:
    """What every drill reports (its own figures come in a subclass)."""

    ok: bool = False
    vms_leaked: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_Report = TypeVar("_Report", bound=DrillReport)


@dataclass
class DrReport(DrillReport):
    first_provider: str | None = None
    failover_provider: str | None = None
    node_lost_detected_s: float | None = None
    pod_rescheduled_s: float | None = None


async def run_dr(say: Any, control_plane: ControlPlane = "kubernetes") -> DrReport:
    say("starting the embedded stack with Hetzner and Scaleway stand-ins")
    async with drill_stack("dr", ["hetzner", "scaleway"], control_plane) as stack:
        return await drill(stack, say)


@contextlib.asynccontextmanager
async def drill_stack(
    name: str, clouds: list[str], control_plane: ControlPlane = "kubernetes"
) -> AsyncIterator[EmbeddedStack]:
    """A throw-away embedded stack with these clouds' stand-ins, fast boots, for a drill."""
    with tempfile.TemporaryDirectory(prefix=f"cloudburst-{name}-") as tmp:
        options = StackOptions(
            state_dir=Path(tmp),
            temporal_port=free_port(),
            ui_port=None,
            persistent=False,
            boot_delay_s=0.5,
            ready_delay_s=0.5,
            empty_ttl_s=60,
            cluster_id=f"cloudburst-{name}",
            clouds=clouds,
            control_plane=control_plane,
        )
        async with embedded_stack(options) as stack:
            yield stack


async def drill(stack: EmbeddedStack, say: Any) -> DrReport:
    report = DrReport()
    core = k8s.CoreV1Api(stack.api_client)
    await asyncio.to_thread(_apply_seed_manifests, stack.api_client)
    say(f"NodePool {POOL} (hetzner, scaleway) and Deployment {APP} (1 replica) applied")

    node = await workload_node(core, APP, timeout_s=120)
    if node is None:
        report.problems.append("the workload never ran")
        return report
    first_node = node.metadata.name
    report.first_provider = node.metadata.labels.get(labels.PROVIDER)
    say(f"phase 1: {APP} runs on {first_node} ({report.first_provider})")
    if report.first_provider != "hetzner":
        report.problems.append(f"expected Hetzner first (cheapest), got {report.first_provider}")

    hetzner = stack.cluster.standins["hetzner"].cloud
    hetzner.inject_failure("create", "unavailable", times=None)
    say("phase 2: Hetzner's create API now answers 503")

    native_id = node.spec.provider_id.rsplit("/", 1)[-1]
    lost_at = time.monotonic()
    hetzner.delete_behind_our_back(native_id)
    say(f"phase 3: the Hetzner VM {native_id} was deleted behind our back")

    claim = stack.temporal.get_workflow_handle_for(
        NodeClaimWorkflow.run,
        claim_workflow_id(node.metadata.labels[labels.NODEPOOL_NAMESPACE], first_node),
    )
    try:
        final = await asyncio.wait_for(claim.result(), timeout=UNREACHABLE_GRACE_S + 90)
    except Exception as err:
        report.problems.append(f"the lost claim did not finish: {err}")
        return report
    report.node_lost_detected_s = round(time.monotonic() - lost_at, 2)
    if final.deletion_reason != "NodeLost":
        report.problems.append(f"the claim ended with {final.deletion_reason}, not NodeLost")
    say(f"node loss handled after {report.node_lost_detected_s}s ({final.deletion_reason})")

    node = await workload_node(core, APP, timeout_s=180, not_on=first_node)
    if node is None:
        report.problems.append("the workload did not come back")
        return report
    report.pod_rescheduled_s = round(time.monotonic() - lost_at, 2)
    report.failover_provider = node.metadata.labels.get(labels.PROVIDER)
    say(
        f"phase 4: {APP} runs again on {node.metadata.name} ({report.failover_provider}) "
        f"{report.pod_rescheduled_s}s after the loss"
    )
    if report.failover_provider != "scaleway":
        report.problems.append(f"expected failover to Scaleway, got {report.failover_provider}")

    hetzner.clear_failures()
    return await finish_drill(stack, report, APP, POOL, ["hetzner", "scaleway"])


async def finish_drill(
    stack: EmbeddedStack, report: _Report, app: str, pool: str, clouds: list[str]
) -> _Report:
    """The workload deleted, the pool's claims scaled down: any VM left is a leak."""
    await asyncio.to_thread(
        k8s.AppsV1Api(stack.api_client).delete_namespaced_deployment, app, "default"
    )
    report.vms_leaked = await scale_down_and_count_vms(stack, pool, clouds)
    if report.vms_leaked:
        report.problems.append(f"{report.vms_leaked} VMs left after the drill")
    report.ok = not report.problems
    return report


async def workload_node(
    core: k8s.CoreV1Api, app: str, timeout_s: float, not_on: str | None = None
) -> Any | None:
    """The Node the Running pod of `app` is on (not `not_on`), or None after `timeout_s`."""
    pod = await running_pod(core, app, timeout_s, not_on)
    return None if pod is None else await asyncio.to_thread(core.read_node, pod.spec.node_name)


def _apply_seed_manifests(api_client: k8s.ApiClient) -> None:
    """The seed's NodePool/NodeClass/Deployment, pointed at the stand-ins."""
    apply_drill_pool(
        api_client,
        POOL,
        ["hetzner", "scaleway"],
        {
            "requirements": {
                "regionConstraint": "ANY",
                "arch": ["x86_64"],
                "maxPriceEurPerHour": 0.5,
                "allowedProviders": ["hetzner", "scaleway"],
            },
            "limits": {"maxNodes": 2, "minNodes": 0},
            "template": {"labels": {"cloudburst.io/nodepool": POOL}},
            "disruption": {
                "ttlSecondsAfterEmpty": 60,
                "ttlSecondsUntilExpired": 3600,
                "nodeUnreachableGracePeriodSeconds": UNREACHABLE_GRACE_S,
            },
            "weight": 1,
        },
        class_name=CLASS,
    )
    k8s.AppsV1Api(api_client).create_namespaced_deployment(
        "default", one_replica_deployment(APP, POOL, cpu="1500m", memory="2Gi")
    )


def apply_drill_pool(
    api_client: k8s.ApiClient,
    name: str,
    providers: list[str],
    pool_spec: dict[str, Any],
    class_name: str | None = None,
) -> None:
    """A NodeClass (`class_name`, else `name`) with the sample NodeClass's blocks of these
    providers (the stack's stand-ins) and its join settings, and a NodePool `name` of it with
    `pool_spec`."""
    class_name = class_name or name
    custom = k8s.CustomObjectsApi(api_client)
    sample: Any = custom.get_namespaced_custom_object(
        "cloudburst.io", "v1alpha1", "default", "nodeclasses", SAMPLE_CLASS
    )
    spec: dict[str, Any] = sample["spec"]
    node_class = {
        "apiVersion": API_VERSION,
        "kind": "NodeClass",
        "metadata": {"name": class_name, "namespace": "default"},
        "spec": {**{p: spec[p] for p in providers}, "join": spec["join"]},
    }
    node_pool = {
        "apiVersion": API_VERSION,
        "kind": "NodePool",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeClassRef": class_name, **pool_spec},
    }
    for plural, body in (("nodeclasses", node_class), ("nodepools", node_pool)):
        custom.create_namespaced_custom_object("cloudburst.io", "v1alpha1", "default", plural, body)


def one_replica_deployment(app: str, pool: str, *, cpu: str, memory: str) -> k8s.V1Deployment:
    """A Deployment (so a drained pod comes back) of one pod that only `pool` can host."""
    return k8s.V1Deployment(
        metadata=k8s.V1ObjectMeta(name=app, namespace="default"),
        spec=k8s.V1DeploymentSpec(
            replicas=1,
            selector=k8s.V1LabelSelector(match_labels={"app": app}),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels={"app": app}),
                spec=k8s.V1PodSpec(
                    node_selector={labels.NODEPOOL: pool},
                    containers=[
                        k8s.V1Container(
                            name="workload",
                            image="busybox:1.36",
                            command=["sleep", "infinity"],
                            resources=k8s.V1ResourceRequirements(
                                requests={"cpu": cpu, "memory": memory}
                            ),
                        )
                    ],
                ),
            ),
        ),
    )


async def running_pod(
    core: k8s.CoreV1Api, app: str, timeout_s: float, not_on: str | None = None
) -> Any | None:
    """The Running pod of `app` (not on node `not_on`), or None after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pods: Any = await asyncio.to_thread(
            core.list_namespaced_pod, "default", label_selector=f"app={app}"
        )
        for pod in pods.items:
            if pod.status and pod.status.phase == "Running" and pod.spec.node_name != not_on:
                return pod
        await asyncio.sleep(0.5)
    return None


async def scale_down_and_count_vms(
    stack: EmbeddedStack, pool: str, clouds: list[str], timeout_s: float = 120
) -> int:
    """Scale the pool's claims down (as an operator would) and count the VMs left."""
    query = f"WorkflowType = 'NodeClaimWorkflow' AND CloudburstNodePool = '{pool}'"
    async for execution in stack.temporal.list_workflows(
        query + " AND ExecutionStatus = 'Running'"
    ):
        handle = stack.temporal.get_workflow_handle(execution.id)
        await handle.signal(
            ClaimSignal.SCALE_DOWN,
            ScaleDownRequest(reason="drill over", requested_by="demo", force=True),
        )
    deadline = time.monotonic() + timeout_s
    left = 0
    while time.monotonic() < deadline:
        left = 0
        for name in clouds:
            cloud = stack.cluster.standins[name].cloud
            left += sum(1 for state in cloud.instance_states().values() if state != "terminated")
        if left == 0:
            return 0
        await asyncio.sleep(1)
    return left
