"""`cloudburst demo --scenario hybrid`: a burst fills the machines on premises first, the rest
goes to a cloud in the same plan, and when it ends every machine is off and free again.

The embedded stack runs the Redfish stand-in (sushy-tools' own emulator, six machines of the
operator's, price 0) and the Hetzner stand-in. A burst of pods, more than the machines hold,
waits for a NodePool allowing both; once the pool exists its first plan puts as many pods as
the machines hold on them (each machine once: the planner counts each offering's `available`)
and the rest on Hetzner VMs. The pods bind; the burst is deleted; each node's empty-TTL runs
out: a machine is powered off and its seed removed (back in the inventory), a VM deleted.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s

from api import labels
from api.nodepool.messages import PoolStatus, pool_workflow_id
from sim.cluster import ControlPlane
from sim.dev.dr import DrillReport, apply_drill_pool, drill_stack
from sim.dev.stack import EmbeddedStack
from workflows.nodepool import NodePoolWorkflow

POOL, APP = "hybrid", "hybrid-burst"
ON_PREM, CLOUD = "redfish", "hetzner"
# Seven cores a pod: two fill a 16-core machine, four a 32-core one (with kube-reserved).
POD_CPU, POD_MEMORY = "7", "8Gi"
EMPTY_TTL_S = 5


@dataclass
class HybridReport(DrillReport):
    pods: int = 0
    pods_bound: int = 0
    machines: int = 0  # the on-premises inventory
    # Nodes the pool made, by provider, and the providers of its first plan's nodes.
    nodes_by_provider: dict[str, int] = field(default_factory=dict)
    first_plan_providers: list[str] = field(default_factory=list)
    pods_on_premises: int = 0
    pods_in_cloud: int = 0
    seconds_to_all_bound: float | None = None
    seconds_to_all_gone: float | None = None
    machines_powered_on_at_end: int = 0
    machines_held_at_end: int = 0
    cloud_vms_created: int = 0


async def run_hybrid(
    say: Any, pods: int = 20, timeout_s: float = 240, control_plane: ControlPlane = "kubernetes"
) -> HybridReport:
    say(f"starting the embedded stack with the {ON_PREM} (sushy-tools) and {CLOUD} stand-ins")
    async with drill_stack("hybrid", [ON_PREM, CLOUD], control_plane) as stack:
        return await hybrid(stack, say, pods, timeout_s)


async def hybrid(stack: EmbeddedStack, say: Any, count: int, timeout_s: float) -> HybridReport:
    report = HybridReport(pods=count)
    machines = stack.cluster.standins[ON_PREM].cloud
    cloud = stack.cluster.standins[CLOUD].cloud
    report.machines = len(machines.machines)
    core = k8s.CoreV1Api(stack.api_client)
    started = time.monotonic()
    await asyncio.to_thread(_create_burst, core, count)
    say(
        f"{count} pods of {POD_CPU} cpu / {POD_MEMORY} wait; {report.machines} machines on premises"
    )
    await asyncio.to_thread(_apply_pool, stack.api_client)
    say(f"NodePool {POOL} applied: {ON_PREM} (price 0) first, {CLOUD} for the rest")

    deadline = started + timeout_s
    pods: list[Any] = []
    while time.monotonic() < deadline:
        pods = await asyncio.to_thread(_burst_pods, core)
        if sum(1 for p in pods if p.status and p.status.phase == "Running") == count:
            report.seconds_to_all_bound = round(time.monotonic() - started, 2)
            break
        await asyncio.sleep(0.5)
    report.pods_bound = sum(1 for p in pods if p.spec and p.spec.node_name)
    provider_of = {
        meta.name: (meta.labels or {}).get(labels.PROVIDER, "")
        for node in (await asyncio.to_thread(core.list_node)).items
        if (meta := node.metadata) is not None
    }
    placed = Counter(provider_of.get(p.spec.node_name, "") for p in pods if p.spec.node_name)
    report.pods_on_premises, report.pods_in_cloud = placed[ON_PREM], placed[CLOUD]
    status = await _pool_status(stack)
    report.nodes_by_provider = dict(Counter(c.offering.provider for c in status.claims))
    first = min((c.started_at for c in status.claims), default=None)
    report.first_plan_providers = sorted(
        {c.offering.provider for c in status.claims if c.started_at == first}
    )
    if report.seconds_to_all_bound is None:
        report.problems.append(f"{count - report.pods_bound} pods never bound")
    say(
        f"{report.pods_bound} pods bound in {report.seconds_to_all_bound}s: "
        f"{report.pods_on_premises} on premises, {report.pods_in_cloud} in the cloud; nodes "
        f"{report.nodes_by_provider}, first plan {report.first_plan_providers}"
    )
    if report.nodes_by_provider.get(ON_PREM, 0) != report.machines:
        report.problems.append(
            f"{report.nodes_by_provider.get(ON_PREM, 0)} of {report.machines} machines used: "
            "the burst should fill them before the cloud"
        )
    if not report.nodes_by_provider.get(CLOUD):
        report.problems.append("nothing burst to the cloud")
    if report.first_plan_providers != sorted([ON_PREM, CLOUD]):
        report.problems.append("the machines and the cloud were not in the same first plan")

    await asyncio.to_thread(
        core.delete_collection_namespaced_pod, "default", label_selector=f"app={APP}"
    )
    say(f"the burst is over: pods deleted; each node goes after its {EMPTY_TTL_S}s empty-TTL")
    powered_on: list[str] = []
    while time.monotonic() < deadline:
        held = machines.stats()["live_instances"]
        vms = [s for s in cloud.instance_states().values() if s != "terminated"]
        if not held and not vms:
            # A BMC lands a power-off seconds after it was asked for: read each machine now.
            powered_on = await asyncio.to_thread(_powered_on, machines)
            if not powered_on:
                report.seconds_to_all_gone = round(time.monotonic() - started, 2)
                break
        await asyncio.sleep(1)
    else:
        powered_on = await asyncio.to_thread(_powered_on, machines)
    report.machines_powered_on_at_end = len(powered_on)
    report.machines_held_at_end = int(machines.stats()["live_instances"])
    report.vms_leaked = sum(1 for s in cloud.instance_states().values() if s != "terminated")
    report.cloud_vms_created = int(cloud.stats().get("instances_created", 0))
    if report.machines_powered_on_at_end or report.machines_held_at_end:
        report.problems.append(
            f"{report.machines_powered_on_at_end} machines still on, "
            f"{report.machines_held_at_end} not back in the inventory"
        )
    if report.vms_leaked:
        report.problems.append(f"{report.vms_leaked} cloud VMs left")
    say(
        f"all gone after {report.seconds_to_all_gone}s: machines on {report.machines_powered_on_at_end}, "
        f"held {report.machines_held_at_end}; cloud VMs left {report.vms_leaked}"
    )
    report.ok = not report.problems
    return report


def _powered_on(machines: Any) -> list[str]:
    """The machines whose BMC says On, read from the emulator now (not the kubelets' view)."""
    return [m.name for m in machines.machines if machines.power_state(m.name) == "On"]


async def _pool_status(stack: EmbeddedStack) -> PoolStatus:
    handle = stack.temporal.get_workflow_handle_for(
        NodePoolWorkflow.run, pool_workflow_id("default", POOL)
    )
    return await handle.query(NodePoolWorkflow.status)


def _create_burst(core: k8s.CoreV1Api, count: int) -> None:
    for index in range(count):
        core.create_namespaced_pod(
            "default",
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(
                    name=f"{APP}-{index:03d}", namespace="default", labels={"app": APP}
                ),
                spec=k8s.V1PodSpec(
                    node_selector={labels.NODEPOOL: POOL},
                    termination_grace_period_seconds=0,
                    containers=[
                        k8s.V1Container(
                            name="app",
                            image="busybox:1.36",
                            resources=k8s.V1ResourceRequirements(
                                requests={"cpu": POD_CPU, "memory": POD_MEMORY}
                            ),
                        )
                    ],
                ),
            ),
        )


def _burst_pods(core: k8s.CoreV1Api) -> list[Any]:
    listing = core.list_namespaced_pod("default", label_selector=f"app={APP}")
    return list(listing.items)


def _apply_pool(api_client: k8s.ApiClient) -> None:
    """A NodeClass with the sample's Redfish and Hetzner blocks, a pool allowing both."""
    apply_drill_pool(
        api_client,
        POOL,
        [ON_PREM, CLOUD],
        {
            "requirements": {"arch": ["x86_64"], "allowedProviders": [ON_PREM, CLOUD]},
            "limits": {"maxNodes": 30},
            "disruption": {"ttlSecondsAfterEmpty": EMPTY_TTL_S},
        },
    )
