"""A pool's minNodes floor is not torn down by the empty TTL.

Floor nodes are empty by nature: each one's claim reaches its empty TTL and asks the pool
for an "Empty" disruption. Granting it deletes the node and the pool, now under its floor,
starts another, which goes the same way 30 s later: endless churn (found by bench/scale.py:
3 floor claims made 5 VMs in 45 s). The pool holds such a request while granting it would
take the pool under minNodes, and grants it once the floor is lowered.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy

with workflow.unsafe.imports_passed_through():
    from api.events import EventBatch
    from api.messages import NodeClaimInput
    from api.nodeclaim import NodeClaimPhase, Offering
    from api.nodeclass import FakeClass, JoinSettings, NodeClassSpec
    from api.nodepool import Budget, Disruption, Limits, NodePoolSpec
    from api.nodepool.messages import (
        ClaimReport,
        DemandUpdate,
        DisruptionPermit,
        DisruptionRequest,
        NodePoolInput,
        NodePoolStatusUpdate,
        PoolSpecs,
        PoolState,
        PoolStatus,
    )
    from api.planning import Plan, PlannedNode, PlanRequest, Resources
    from tests.workflows.pool_workers import end_claims, pool_workers
    from workflows.nodepool import NodePoolWorkflow


@workflow.defn(name="NodeClaimWorkflow")
class FloorClaim:
    """Starts and waits; takes the pool's permit if one comes."""

    def __init__(self) -> None:
        self.permit: DisruptionPermit | None = None

    @workflow.run
    async def run(self, input: NodeClaimInput) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal
    def disruption_permitted(self, permit: DisruptionPermit) -> None:
        self.permit = permit


@activity.defn(name="plan_capacity")
async def plan_capacity(request: PlanRequest) -> Plan:
    offering = Offering(
        provider="fake", region="sim-1", instance_type="fk-small", vcpu=2, memory_gib=4
    )
    return Plan(
        new_nodes=[
            PlannedNode(offerings=[offering], pod_uids=[], requests=Resources(cpu_m=0, pods=0))
            for _ in range(request.min_new_nodes)
        ]
    )


@activity.defn(name="record_events")
async def record_events(batch: EventBatch) -> None:
    pass


@activity.defn(name="sync_nodepool_status")
async def sync_nodepool_status(update: NodePoolStatusUpdate) -> None:
    pass


def specs(min_nodes: int) -> PoolSpecs:
    return PoolSpecs(
        pool=NodePoolSpec(
            limits=Limits(min_nodes=min_nodes, max_nodes=10),
            disruption=Disruption(budgets=[Budget(nodes="100%")]),
        ),
        node_class_name="sample",
        node_class=NodeClassSpec(
            fake=FakeClass(), join=JoinSettings(host_api_server="https://127.0.0.1:6443")
        ),
    )


async def until(handle: WorkflowHandle, check: object, what: str) -> PoolStatus:
    status: PoolStatus | None = None
    for _ in range(100):
        status = await handle.query(NodePoolWorkflow.status)
        if check(status):  # type: ignore[operator]
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: {status}")


async def start_floor_pool(client: Client, queue: str) -> WorkflowHandle:
    """A pool with a floor of two nodes, started the way the trigger starts it."""
    return await client.start_workflow(
        NodePoolWorkflow.run,
        NodePoolInput(namespace="default", name="floor", state=PoolState(specs=specs(2))),
        id=f"nodepool-floor-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        start_signal="demand",
        start_signal_args=[DemandUpdate(specs=specs(2))],
    )


async def test_an_empty_floor_node_is_kept_until_the_floor_is_lowered(
    temporal_client: Client,
) -> None:
    queue = f"floor-{uuid.uuid4()}"
    async with pool_workers(
        temporal_client,
        queue,
        [NodePoolWorkflow, FloorClaim],
        [plan_capacity, record_events, sync_nodepool_status],
    ):
        handle = await start_floor_pool(temporal_client, queue)
        status = await until(handle, lambda s: len(s.claims) == 2, "two floor claims")
        names = [claim.name for claim in status.claims]
        # Both floor nodes reach their empty TTL and ask to go.
        for name in names:
            await handle.signal(
                NodePoolWorkflow.request_disruption,
                DisruptionRequest(claim_name=name, reason="Empty"),
            )
        status = await until(handle, lambda s: len(s.disruption_queue) == 2, "both requests queued")
        await asyncio.sleep(1)
        status = await handle.query(NodePoolWorkflow.status)
        assert status.permits == {}, "a floor node was let go"
        assert len(status.claims) == 2

        # The floor goes to 1: one of them may go now, the other stays.
        await handle.signal(NodePoolWorkflow.update_specs, specs(1))
        status = await until(handle, lambda s: len(s.permits) == 1, "one permit")
        assert len(status.disruption_queue) == 1

        history = await handle.fetch_history()
        failed = [
            e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
        assert not failed
        await handle.terminate("test over")
        await end_claims(temporal_client, names)


async def test_floor_nodes_coming_up_with_nothing_pending_arm_no_alarm(
    temporal_client: Client,
) -> None:
    """A Ready node's room counts for new pods only while pods wait (the scheduler is filling
    it), and is watched by an alarm until the grace is over: a floor of idle claims must not
    pay a timer each (1,000 of them, in the scale bench, were 40 timers a minute)."""
    queue = f"floor-{uuid.uuid4()}"
    async with pool_workers(
        temporal_client,
        queue,
        [NodePoolWorkflow, FloorClaim],
        [plan_capacity, record_events, sync_nodepool_status],
    ):
        handle = await start_floor_pool(temporal_client, queue)
        status = await until(handle, lambda s: len(s.claims) == 2, "two floor claims")
        names = [claim.name for claim in status.claims]
        for name in names:
            await handle.signal(
                NodePoolWorkflow.claim_report,
                ClaimReport(claim_name=name, phase=NodeClaimPhase.READY),
            )
        status = await until(handle, lambda s: s.ready_nodes == 2, "both Ready")
        assert not any(claim.filling for claim in status.claims)
        assert status.alarms == ["periodic look"]
        await handle.terminate("test over")
        await end_claims(temporal_client, names)
