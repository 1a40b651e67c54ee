"""The pool workflow stays healthy when news arrives while it is in the middle of a step.

Signals are handled whenever the workflow awaits (an activity, a child start): a pod resolved
while its plan is being made must not break the step that uses the plan. The activities here
are stand-ins registered under the real names (the Temporal way to unit-test a workflow), and
the claims are a stand-in workflow of the same type, so that the test controls the timing.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

# The stand-in claim below is a workflow: the sandbox re-imports this module.

with workflow.unsafe.imports_passed_through():
    from api.events import EventBatch
    from api.messages import NodeClaimInput
    from api.nodeclaim import Offering
    from api.nodeclass import FakeClass, JoinSettings, NodeClassSpec
    from api.nodepool import NodePoolSpec
    from api.nodepool.messages import (
        DemandUpdate,
        NodePoolInput,
        NodePoolStatusUpdate,
        PoolSpecs,
        PoolState,
        PoolStatus,
    )
    from api.planning import Plan, PlannedNode, PlanRequest, PodDemand, Resources
    from tests.workflows.pool_workers import end_claims, pool_workers
    from workflows.nodepool import NodePoolWorkflow


@workflow.defn(name="NodeClaimWorkflow")
class StandInClaim:
    """Starts and waits: what the pool does with a claim's reports is not under test here."""

    @workflow.run
    async def run(self, input: NodeClaimInput) -> None:
        await workflow.wait_condition(lambda: False)


class PlanningGate:
    """`plan_capacity` that waits for the test, then plans one node for every pod asked."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.release = asyncio.Event()

    @activity.defn(name="plan_capacity")
    async def plan_capacity(self, request: PlanRequest) -> Plan:
        self.called.set()
        await self.release.wait()
        offering = Offering(
            provider="fake", region="sim-1", instance_type="fk-small", vcpu=2, memory_gib=4
        )
        return Plan(
            new_nodes=[
                PlannedNode(
                    offerings=[offering],
                    pod_uids=[pod.uid for pod in request.pods],
                    requests=Resources(cpu_m=500, memory_bytes=2**28, pods=len(request.pods)),
                )
            ]
        )


@activity.defn(name="record_events")
async def record_events(batch: EventBatch) -> None:
    pass


@activity.defn(name="sync_nodepool_status")
async def sync_nodepool_status(update: NodePoolStatusUpdate) -> None:
    pass


def specs() -> PoolSpecs:
    return PoolSpecs(
        pool=NodePoolSpec(),
        node_class_name="sample",
        node_class=NodeClassSpec(
            fake=FakeClass(), join=JoinSettings(host_api_server="https://127.0.0.1:6443")
        ),
    )


def pod(uid: str) -> PodDemand:
    return PodDemand(uid=uid, namespace="default", name=uid, requests=Resources(cpu_m=500, pods=1))


async def test_a_pod_resolved_while_its_plan_is_made_breaks_nothing(
    temporal_client: Client,
) -> None:
    queue = f"races-{uuid.uuid4()}"
    gate = PlanningGate()
    pool_id = f"nodepool-races-{uuid.uuid4().hex[:8]}"
    async with pool_workers(
        temporal_client,
        queue,
        [NodePoolWorkflow, StandInClaim],
        [gate.plan_capacity, record_events, sync_nodepool_status],
    ):
        handle = await temporal_client.start_workflow(
            NodePoolWorkflow.run,
            NodePoolInput(namespace="default", name="races", state=PoolState(specs=specs())),
            id=pool_id,
            task_queue=queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal="demand",
            start_signal_args=[DemandUpdate(pods=[pod("a"), pod("b")])],
        )
        await asyncio.wait_for(gate.called.wait(), timeout=30)
        # While the plan is being made, pod "a" is bound elsewhere.
        await handle.signal(NodePoolWorkflow.demand, DemandUpdate(resolved=["a"]))
        # The signal is in history before the plan's result: the workflow handles it first
        # (in an earlier task, or earlier in the same one: signals come before results).
        gate.release.set()

        status: PoolStatus | None = None
        for _ in range(100):
            status = await handle.query(NodePoolWorkflow.status)
            if status.claims:
                break
            await asyncio.sleep(0.1)
        assert status is not None and len(status.claims) == 1, status
        # Only the pod still pending waits for the new claim.
        assert status.claims[0].nominated == ["b"]
        assert status.pending_pods == 1

        history = await handle.fetch_history()
        failed = [
            e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
        assert not failed, failed[0].workflow_task_failed_event_attributes.failure.message
        await handle.terminate("test over")
        await end_claims(temporal_client, (claim.name for claim in status.claims))


class NotPendingInTheCluster:
    """`plan_capacity` as the worker's, for a demand naming one pod the cluster has pending
    and one it has not: that one is not planned, and said not pending."""

    @activity.defn(name="plan_capacity")
    async def plan_capacity(self, request: PlanRequest) -> Plan:
        real = [p for p in request.pods if p.uid != "forged"]
        offering = Offering(
            provider="fake", region="sim-1", instance_type="fk-small", vcpu=2, memory_gib=4
        )
        return Plan(
            new_nodes=[
                PlannedNode(
                    offerings=[offering],
                    pod_uids=[p.uid for p in real],
                    requests=Resources(cpu_m=500, memory_bytes=2**28, pods=len(real)),
                )
            ],
            not_pending={"forged": "pod default/forged is not pending in the cluster"},
        )


async def test_a_pod_the_cluster_has_not_pending_is_forgotten_not_planned_again(
    temporal_client: Client,
) -> None:
    """The pool acts on the pods the cluster has pending: one its plan says is not (never
    there, bound, another namespace's) leaves the pool's pending pods, so no later round plans
    it. (Fails on the pool that kept every pod a signal named.)"""
    queue = f"races-{uuid.uuid4()}"
    pool_id = f"nodepool-notpending-{uuid.uuid4().hex[:8]}"
    async with pool_workers(
        temporal_client,
        queue,
        [NodePoolWorkflow, StandInClaim],
        [NotPendingInTheCluster().plan_capacity, record_events, sync_nodepool_status],
    ):
        handle = await temporal_client.start_workflow(
            NodePoolWorkflow.run,
            NodePoolInput(namespace="default", name="notpending", state=PoolState(specs=specs())),
            id=pool_id,
            task_queue=queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal="demand",
            start_signal_args=[DemandUpdate(pods=[pod("real"), pod("forged")])],
        )
        status: PoolStatus | None = None
        for _ in range(100):
            status = await handle.query(NodePoolWorkflow.status)
            if status.claims:
                break
            await asyncio.sleep(0.1)
        assert status is not None and len(status.claims) == 1, status
        assert status.claims[0].nominated == ["real"]
        assert status.pending_pods == 1  # "forged" is not the pool's to wait for
        await handle.terminate("test over")
        await end_claims(temporal_client, [c.name for c in status.claims])
