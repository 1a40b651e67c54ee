"""`cloudburst demo --scenario spot`: a spot node is interrupted and its workload comes back.

A one-replica Deployment lands on a spot VM of the AWS stand-in (a pool allowing spot and
on-demand plans spot: it is cheaper). The stand-in then reclaims the VM as EC2 does: a
`spot/instance-action` notice first — which the simulated node's agent turns into the
`cloudburst.io/interruption` taint, as aws-node-termination-handler does — and the instance
terminated once the notice runs out. The claim cordons and drains at once and ends
`Interrupted`; the pod runs again on a replacement; nothing is left once the drill is over.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from api import labels
from api.messages import claim_workflow_id
from sim.cluster import ControlPlane
from sim.dev.dr import (
    DrillReport,
    apply_drill_pool,
    drill_stack,
    finish_drill,
    one_replica_deployment,
    workload_node,
)
from sim.dev.stack import EmbeddedStack
from workflows.decisions.claim_disruption import INTERRUPTED
from workflows.nodeclaim import NodeClaimWorkflow

POOL, CLASS, APP = "spot-nodepool", "spot-nodeclass", "spot-workload"
# EC2 gives two minutes; the drill's is shorter so that it ends within a minute.
NOTICE_S = 10.0


@dataclass
class SpotReport(DrillReport):
    interrupted_node: str | None = None
    interrupted_capacity_type: str | None = None
    replacement_node: str | None = None
    replacement_capacity_type: str | None = None
    claim_ended_s: float | None = None
    pod_rescheduled_s: float | None = None


async def run_spot(say: Any, control_plane: ControlPlane = "kubernetes") -> SpotReport:
    say("starting the embedded stack with the AWS stand-in")
    async with drill_stack("spot", ["aws"], control_plane) as stack:
        return await interruption_drill(stack, say)


async def interruption_drill(stack: EmbeddedStack, say: Any) -> SpotReport:
    report = SpotReport()
    core = k8s.CoreV1Api(stack.api_client)
    await asyncio.to_thread(_apply_manifests, stack.api_client)
    say(f"NodePool {POOL} (aws, capacityType spot + on-demand) and Deployment {APP} applied")

    node = await workload_node(core, APP, timeout_s=120)
    if node is None:
        report.problems.append("the workload never ran")
        return report
    first = report.interrupted_node = node.metadata.name
    report.interrupted_capacity_type = node.metadata.labels.get(labels.KARPENTER_CAPACITY_TYPE)
    say(f"{APP} runs on {first} ({report.interrupted_capacity_type})")
    if report.interrupted_capacity_type != "spot":
        report.problems.append(f"expected a spot node, got {report.interrupted_capacity_type}")
        return report

    aws = stack.cluster.standins["aws"].cloud
    native_id = node.spec.provider_id.rsplit("/", 1)[-1]
    interrupted_at = time.monotonic()
    aws.interrupt(native_id, notice_s=NOTICE_S)
    say(f"EC2 reclaims {native_id}: interruption notice, terminated in {NOTICE_S:g}s")

    claim = stack.temporal.get_workflow_handle_for(
        NodeClaimWorkflow.run,
        claim_workflow_id(node.metadata.labels[labels.NODEPOOL_NAMESPACE], first),
    )
    try:
        final = await asyncio.wait_for(claim.result(), timeout=120)
    except Exception as err:
        report.problems.append(f"the interrupted claim did not finish: {err}")
        return report
    report.claim_ended_s = round(time.monotonic() - interrupted_at, 2)
    if final.deletion_reason != INTERRUPTED:
        report.problems.append(f"the claim ended with {final.deletion_reason}, not {INTERRUPTED}")
    say(f"the claim drained and deleted its node {report.claim_ended_s}s after the notice")

    node = await workload_node(core, APP, timeout_s=120, not_on=first)
    if node is None:
        report.problems.append("the workload did not come back")
        return report
    report.pod_rescheduled_s = round(time.monotonic() - interrupted_at, 2)
    report.replacement_node = node.metadata.name
    report.replacement_capacity_type = node.metadata.labels.get(labels.KARPENTER_CAPACITY_TYPE)
    say(
        f"{APP} runs again on {report.replacement_node} ({report.replacement_capacity_type}) "
        f"{report.pod_rescheduled_s}s after the notice"
    )

    return await finish_drill(stack, report, APP, POOL, ["aws"])


def _apply_manifests(api_client: k8s.ApiClient) -> None:
    """A NodeClass reaching the AWS stand-in, a pool allowing spot, the Deployment."""
    apply_drill_pool(
        api_client,
        POOL,
        ["aws"],
        {
            "requirements": {
                "allowedProviders": ["aws"],
                "capacityType": ["spot", "on-demand"],
            },
            "template": {"labels": {labels.NODEPOOL: POOL}},
            "disruption": {"ttlSecondsAfterEmpty": 60, "terminationGracePeriodSeconds": 20},
        },
        class_name=CLASS,
    )
    k8s.AppsV1Api(api_client).create_namespaced_deployment(
        "default", one_replica_deployment(APP, POOL, cpu="500m", memory="512Mi")
    )
