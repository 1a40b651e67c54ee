"""A burst that arrives in parts: the pool starts the nodes its pods fill at once, holds back
the one they fill only partly for the rest of the burst, and plans again at once the pods
whose node the scheduler filled with others.

The planner is a stand-in registered under the real name (the Temporal way to unit-test a
workflow) that packs ten pods to a node, filling the room left on nodes on their way first;
the claims are a stand-in workflow of the same type that starts and waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from kubernetes import client as k8s

    from activities.claim_workflows import ClaimWorkflowActivities
    from activities.heartbeat import HeartbeatInterceptor
    from api.gc import ClaimStates, ClaimStatesInput
    from api.messages import ClaimStarts, FailureReason, NodeClaimInput, claim_task_queue
    from api.nodeclaim import NodeClaimPhase, Offering
    from api.nodepool.messages import (
        ClaimReport,
        DemandUpdate,
        NodePoolInput,
        NodePoolStatusUpdate,
        NodeUsage,
        PoolClaim,
        PoolState,
        PoolStatus,
    )
    from api.planning import Plan, PlannedNode, PlanRequest, PodDemand, Resources
    from cluster.tenancy import Tenancy
    from tests.e2e.harness import eventually
    from tests.workflows.pool_workers import (
        claim_starter_activities,
        end_claims,
        pool_workers,
        started_claim,
    )
    from tests.workflows.test_nodepool_races import record_events, specs, sync_nodepool_status
    from workflows.nodepool import NodePoolWorkflow

PODS_PER_NODE = 10
START_CLAIMS = "start_claim_workflows"
OFFERING = Offering(provider="fake", region="sim-1", instance_type="fk-ten", vcpu=8, memory_gib=8)
ROOM = Resources(cpu_m=7000, memory_bytes=6 * 2**30, pods=PODS_PER_NODE)


@workflow.defn(name="NodeClaimWorkflow")
class StandInClaim:
    @workflow.run
    async def run(self, input: NodeClaimInput) -> None:
        await workflow.wait_condition(lambda: False)


@activity.defn(name="plan_capacity")
async def plan_capacity(request: PlanRequest) -> Plan:
    """Ten pods to a node: room on nodes on their way first, then new nodes in order."""
    plan = Plan()
    waiting = list(request.pods)
    for node in request.in_flight:
        room = PODS_PER_NODE - node.used.pods
        for pod in waiting[:room]:
            plan.assignments[pod.uid] = node.claim_name
        waiting = waiting[max(room, 0) :]
    for start in range(0, len(waiting), PODS_PER_NODE):
        chunk = waiting[start : start + PODS_PER_NODE]
        plan.new_nodes.append(
            PlannedNode(
                offerings=[OFFERING],
                pod_uids=[pod.uid for pod in chunk],
                requests=Resources(cpu_m=100 * len(chunk), pods=len(chunk)),
                allocatable=ROOM,
            )
        )
    return plan


def pods(prefix: str, count: int) -> list[PodDemand]:
    return [
        PodDemand(
            uid=f"{prefix}{i}",
            namespace="default",
            name=f"{prefix}{i}",
            requests=Resources(cpu_m=100, pods=1),
        )
        for i in range(count)
    ]


async def start_bursts_pool(
    client: Client, queue: str, hold_s: float, first: list[PodDemand]
) -> WorkflowHandle:
    return await client.start_workflow(
        NodePoolWorkflow.run,
        NodePoolInput(
            namespace="default",
            name="bursts",
            partial_node_hold_s=hold_s,
            state=PoolState(specs=specs()),
        ),
        id=f"nodepool-bursts-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        start_signal="demand",
        start_signal_args=[DemandUpdate(pods=first)],
    )


@contextlib.asynccontextmanager
async def pool_with(
    client: Client, activities: list[Callable[..., Any]]
) -> AsyncIterator[WorkflowHandle]:
    """A pool of ten pods (a0 to a9, no hold) on a worker of its own with these activities;
    the pool and its claims are ended afterwards."""
    queue = f"bursts-{uuid.uuid4()}"
    async with pool_workers(
        client,
        queue,
        [NodePoolWorkflow, StandInClaim],
        activities,
    ):
        handle = await start_bursts_pool(client, queue, 0, pods("a", 10))
        try:
            yield handle
        finally:
            await handle.terminate("test over")
            await end_claims(
                client, (c.name for c in (await handle.query(NodePoolWorkflow.status)).claims)
            )


@pytest.fixture
async def start_pool(
    temporal_client: Client,
) -> AsyncIterator[Callable[[float, list[PodDemand]], asyncio.Future[WorkflowHandle]]]:
    queue = f"bursts-{uuid.uuid4()}"
    handles: list[WorkflowHandle] = []

    async def start(hold_s: float, first: list[PodDemand]) -> WorkflowHandle:
        handle = await start_bursts_pool(temporal_client, queue, hold_s, first)
        handles.append(handle)
        return handle

    async with pool_workers(
        temporal_client,
        queue,
        [NodePoolWorkflow, StandInClaim],
        [plan_capacity, record_events, sync_nodepool_status],
    ):
        yield start  # type: ignore[misc]
        for handle in handles:
            status = await handle.query(NodePoolWorkflow.status)
            history = await handle.fetch_history()
            failed = [
                e
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
            ]
            assert not failed, failed[0].workflow_task_failed_event_attributes.failure.message
            await handle.terminate("test over")
            await end_claims(temporal_client, (claim.name for claim in status.claims))


async def settled(
    handle: WorkflowHandle, done: Callable[[PoolStatus], bool], what: str
) -> PoolStatus:
    status: PoolStatus | None = None
    for _ in range(150):
        status = await handle.query(NodePoolWorkflow.status)
        if done(status):
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"never {what}: {status}")


def nominated(status: PoolStatus) -> dict[str, list[str]]:
    return {claim.name: sorted(claim.nominated) for claim in status.claims}


async def plans_made(handle: WorkflowHandle) -> int:
    history = await handle.fetch_history()
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "plan_capacity"
    )


async def test_the_rest_of_a_burst_fills_the_node_held_back_for_it(
    start_pool: Callable[[float, list[PodDemand]], asyncio.Future[WorkflowHandle]],
) -> None:
    # 14 pods: one node they fill goes at once; the one 4 pods would fill waits.
    handle = await start_pool(60, pods("a", 14))
    status = await settled(handle, lambda s: bool(s.claims), "started the full node")
    assert [len(c.nominated) for c in status.claims] == [10]
    assert "launch partly filled nodes" in status.alarms
    assert status.pending_pods == 14  # the 4 held back are still pending, not nominated
    # News that uncovers no pod (the claim launched) does not plan the held pods again.
    started = status.claims[0].name
    report = ClaimReport(claim_name=started, phase=NodeClaimPhase.PROVISIONING)
    await handle.signal(NodePoolWorkflow.claim_report, report)
    await settled(handle, lambda s: s.claims[0].phase == NodeClaimPhase.PROVISIONING, "heard")
    assert await plans_made(handle) == 1

    # The rest of the burst: the 4 and these 6 fill a node together.
    await handle.signal(NodePoolWorkflow.demand, DemandUpdate(pods=pods("b", 6)))
    status = await settled(handle, lambda s: len(s.claims) == 2, "started the second node")
    second = next(c for c in status.claims if len(c.nominated) == 10 and "b0" in c.nominated)
    assert sorted(second.nominated) == sorted(
        [f"a{i}" for i in range(10, 14)] + [f"b{i}" for i in range(6)]
    )
    assert "launch partly filled nodes" not in status.alarms


async def test_a_node_held_back_goes_when_the_hold_is_over(
    start_pool: Callable[[float, list[PodDemand]], asyncio.Future[WorkflowHandle]],
) -> None:
    handle = await start_pool(1.0, pods("a", 3))
    status = await settled(handle, lambda s: bool(s.claims), "started the held node")
    assert nominated(status) == {status.claims[0].name: ["a0", "a1", "a2"]}
    assert not status.alarms or "launch partly filled nodes" not in status.alarms


async def test_without_a_hold_every_planned_node_goes_at_once(
    start_pool: Callable[[float, list[PodDemand]], asyncio.Future[WorkflowHandle]],
) -> None:
    handle = await start_pool(0, pods("a", 3))
    status = await settled(handle, lambda s: bool(s.claims), "started the node")
    assert [len(c.nominated) for c in status.claims] == [3]
    assert await plans_made(handle) == 1


@pytest.mark.parametrize("up", [False, True], ids=["on-their-way", "ready"])
async def test_pods_whose_node_the_scheduler_filled_with_others_are_planned_again_at_once(
    start_pool: Callable[[float, list[PodDemand]], asyncio.Future[WorkflowHandle]], up: bool
) -> None:
    burst = pods("a", 20)
    handle = await start_pool(0, burst)
    status = await settled(handle, lambda s: len(s.claims) == 2, "started both nodes")
    first, second = sorted(status.claims, key=lambda c: "a0" not in c.nominated)
    assert first.nominated == [f"a{i}" for i in range(10)]
    if up:  # both nodes Ready: the scheduler is filling them, within the nominations' grace
        for claim in (first, second):
            report = ClaimReport(claim_name=claim.name, phase=NodeClaimPhase.READY)
            await handle.signal(NodePoolWorkflow.claim_report, report)

    # The first node comes up; the scheduler, which knows nothing of nominations, fills half
    # of it with five pods meant for the second.
    went_first = [f"a{i}" for i in range(10, 15)]
    five = Resources(cpu_m=500, pods=5)
    await handle.signal(
        NodePoolWorkflow.node_usage, NodeUsage(requested={first.name: five}, bound=went_first)
    )
    # Five of the first node's own pods no longer fit there: they take the room the second
    # node kept for the pods that went to the first, now, not after the nominations' grace.
    status = await settled(
        handle,
        lambda s: any(len(c.nominated) == 10 for c in s.claims if c.name == second.name),
        "planned the pods left out onto the second node",
    )
    assert nominated(status) == {
        first.name: [f"a{i}" for i in range(5)],
        second.name: sorted([f"a{i}" for i in range(5, 10)] + [f"a{i}" for i in range(15, 20)]),
    }
    assert len(status.claims) == 2  # no new node for them


class SlowStatusWrites:
    """`sync_nodepool_status` that holds each write until the test lets it through."""

    def __init__(self) -> None:
        self.written: list[NodePoolStatusUpdate] = []
        self.started = 0
        self.release = asyncio.Event()

    @activity.defn(name="sync_nodepool_status")
    async def sync_nodepool_status(self, update: NodePoolStatusUpdate) -> None:
        self.started += 1
        await self.release.wait()
        self.written.append(update)


async def test_a_slow_status_write_holds_no_plan_back_and_the_latest_status_is_written(
    temporal_client: Client,
) -> None:
    """During a burst the NodePool's status write took a third of every round: the next
    plan waited for it. It goes beside the rounds now, one at a time, the latest last."""
    writes = SlowStatusWrites()
    async with pool_with(
        temporal_client, [plan_capacity, record_events, writes.sync_nodepool_status]
    ) as handle:
        await settled(handle, lambda s: len(s.claims) == 1, "started the first node")
        for _ in range(100):  # the first status write is on its way, and stays there
            if writes.started:
                break
            await asyncio.sleep(0.05)
        assert writes.started == 1
        # More of the burst: planned and started while that write still hangs.
        await handle.signal(NodePoolWorkflow.demand, DemandUpdate(pods=pods("b", 10)))
        await settled(handle, lambda s: len(s.claims) == 2, "started the second node")
        assert writes.started == 1 and not writes.written  # one write at a time

        writes.release.set()
        for _ in range(100):
            if writes.written and writes.written[-1].status.nodes == 2:
                break
            await asyncio.sleep(0.05)
        assert [w.status.nodes for w in writes.written] == [1, 2]


class HeldPlan:
    """The stand-in planner, holding its `held`-th plan until the test lets it through."""

    def __init__(self, held: int) -> None:
        self.held = held
        self.started = 0
        self.release = asyncio.Event()

    @activity.defn(name="plan_capacity")
    async def plan_capacity(self, request: PlanRequest) -> Plan:
        self.started += 1
        if self.started == self.held:
            await self.release.wait()
        return await plan_capacity(request)


async def test_pods_that_arrive_while_claims_start_are_planned_without_waiting_for_the_starts(
    temporal_client: Client,
) -> None:
    """A round used to wait until Temporal confirmed each of its claims' starts (several
    workflow tasks under a burst) before the pods that arrived meanwhile could be planned.
    Now the workflow task that starts a round's claims also plans the next pods."""
    planner = HeldPlan(1)
    async with pool_with(
        temporal_client, [planner.plan_capacity, record_events, sync_nodepool_status]
    ) as handle:
        for _ in range(100):  # the first plan is on its way, and stays there
            if planner.started:
                break
            await asyncio.sleep(0.05)
        # More of the burst arrives while the first plan runs, and the pool has heard it.
        await handle.signal(NodePoolWorkflow.demand, DemandUpdate(pods=pods("b", 10)))
        for _ in range(100):
            events = (await handle.fetch_history()).events
            signals = [
                e.event_id
                for e in events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            ]
            heard = [
                e.event_id
                for e in events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
            ]
            if len(signals) == 2 and heard and heard[-1] > signals[-1]:
                break
            await asyncio.sleep(0.05)
        planner.release.set()
        await settled(handle, lambda s: len(s.claims) == 2, "started both nodes")

        scheduled = [
            e.activity_task_scheduled_event_attributes
            for e in (await handle.fetch_history()).events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
        first_start = next(a for a in scheduled if a.activity_type.name == START_CLAIMS)
        second_plan = [a for a in scheduled if a.activity_type.name == "plan_capacity"][1]
        assert (
            second_plan.workflow_task_completed_event_id
            == first_start.workflow_task_completed_event_id
        )


@pytest.mark.slow
async def test_a_burst_of_600_nodes_starts_its_claims_in_batches_and_runs(
    temporal_client: Client,
) -> None:
    """Each claim start costs the pool's workflow task ~1 ms of Python: 3,000 at once ran
    past the SDK's 2 s deadlock detector, which failed the task on every retry, and Temporal
    refused a run's 2,001st running child the same way (a pool of 3,000 floor nodes stood
    still). No run starts more than 500, no `start_claim_workflows` more than 100 (its input
    stays far below Temporal's payload limit); all 600 start, each once."""
    client = temporal_client
    queue = f"bursts-{uuid.uuid4()}"
    # The pool's queue only: Temporal starts a claim without a worker for it (its first task
    # waits), so 600 claims cost this test no workflow tasks.
    async with Worker(
        client,
        task_queue=queue,
        workflows=[NodePoolWorkflow],
        activities=[
            plan_capacity,
            record_events,
            sync_nodepool_status,
            *claim_starter_activities(),
        ],
        interceptors=[HeartbeatInterceptor()],  # as deployed
    ):
        first = await start_bursts_pool(client, queue, 0, pods("w", 600 * PODS_PER_NODE))
        latest = client.get_workflow_handle(first.id)
        try:
            await eventually(
                lambda: latest.query(NodePoolWorkflow.status),
                lambda s: len(s.claims) == 600,
                timeout_s=120,
            )
            # Every claim started, in two runs ...
            runs = await eventually(
                lambda: starts_by_run(client, first.id),
                lambda runs: sum(started for started, _ in runs) == 600,
                timeout_s=120,
            )
            assert [started for started, _ in runs] == [500, 100]
            # ... in batches of at most 100 ...
            assert max(max(batches) for _, batches in runs) <= 100, runs
            # ... each claim its own workflow, started once.
            query = (
                "WorkflowType = 'NodeClaimWorkflow' AND CloudburstNodePool = 'bursts' "
                f"AND TaskQueue = '{claim_task_queue(queue)}'"
            )

            async def claims() -> list[str]:
                return [execution.id async for execution in client.list_workflows(query)]

            listed = await eventually(claims, lambda ids: len(ids) >= 600, timeout_s=30)
            assert len(listed) == len(set(listed)) == 600
        finally:
            await latest.terminate("test over")
            await end_claims(
                client, (c.name for c in (await latest.query(NodePoolWorkflow.status)).claims)
            )


async def starts_by_run(client: Client, workflow_id: str) -> list[tuple[int, list[int]]]:
    """Per run of the pool (oldest first): the claims its `start_claim_workflows` activities
    started, and how many each was asked to start."""
    runs = [
        execution.run_id
        async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'")
    ]
    by_run: list[tuple[int, list[int]]] = []
    for run_id in reversed(runs):
        asked: dict[int, int] = {}
        started = 0
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attributes = event.activity_task_scheduled_event_attributes
                if attributes.activity_type.name == START_CLAIMS:
                    [batch] = await client.data_converter.decode(
                        attributes.input.payloads, [ClaimStarts]
                    )
                    asked[event.event_id] = len(batch.starts)
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attributes_done = event.activity_task_completed_event_attributes
                started += asked.get(attributes_done.scheduled_event_id, 0)
        by_run.append((started, list(asked.values()) or [0]))
    return by_run


@contextlib.asynccontextmanager
async def ten_pods_pool(
    client: Client, extra_activities: Sequence[Callable[..., Any]] = ()
) -> AsyncIterator[WorkflowHandle]:
    """A pool asked for ten pods (one claim's worth) that looks at its claims every second,
    with its workers; terminated, its claims too, at the end."""
    queue = f"bursts-{uuid.uuid4()}"
    async with pool_workers(
        client,
        queue,
        [NodePoolWorkflow, StandInClaim],
        [plan_capacity, record_events, sync_nodepool_status, *extra_activities],
    ):
        handle = await client.start_workflow(
            NodePoolWorkflow.run,
            NodePoolInput(
                namespace="default",
                name="bursts",
                state=PoolState(specs=specs()),
                reconcile_interval_s=1,  # a look every second
            ),
            id=f"nodepool-bursts-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            start_signal="demand",
            start_signal_args=[DemandUpdate(pods=pods("a", PODS_PER_NODE))],
        )
        try:
            yield handle
        finally:
            status = await handle.query(NodePoolWorkflow.status)
            await handle.terminate("test over")
            await end_claims(client, (claim.name for claim in status.claims))


def config_failure(claim: str, reason: str) -> ClaimReport:
    """A claim's final report: it failed on its configuration."""
    return ClaimReport(
        claim_name=claim,
        phase=NodeClaimPhase.FAILED,
        reason=reason,
        failure_reason=FailureReason.INVALID_CONFIG.value,
    )


async def fails_on_configuration(
    client: Client, handle: WorkflowHandle, claim: str, reason: str
) -> None:
    """A claim's last steps when it fails on its configuration: its report, then its end."""
    await handle.signal(NodePoolWorkflow.claim_report, config_failure(claim, reason))
    await (await started_claim(client, claim)).terminate("failed")


async def only_claim(handle: WorkflowHandle) -> PoolClaim:
    [claim] = (await settled(handle, lambda s: len(s.claims) == 1, "one claim")).claims
    return claim


async def test_a_claim_that_ends_without_a_word_is_forgotten_at_the_next_look(
    temporal_client: Client,
) -> None:
    """A claim reports its own end; one terminated by hand cannot. The pool's periodic look
    asks Temporal which of its claims still run, forgets the one that does not (it would
    hold its pods and count against the limits for good) and plans its pods again."""
    async with ten_pods_pool(temporal_client) as handle:
        first = await only_claim(handle)
        await (await started_claim(temporal_client, first.name)).terminate("gone without a word")
        status = await settled(
            handle,
            lambda s: len(s.claims) == 1 and s.claims[0].name != first.name,
            "forgot the ended claim and planned its pods again",
        )
        assert sorted(status.claims[0].nominated) == sorted(f"a{i}" for i in range(10))


async def test_a_configuration_failure_of_a_claim_made_before_the_fix_holds_nothing_back(
    temporal_client: Client,
) -> None:
    """The operator fixes the NodeClass while a claim made from the old one is failing on it.
    Its failure is about specs that are gone: the pool plans the pods again at once, on the
    fixed class, instead of holding every new claim back for the configuration error."""
    async with ten_pods_pool(temporal_client) as handle:
        first = await only_claim(handle)
        fixed = specs()
        fixed.node_class.join.host_api_server = "https://10.0.0.1:6443"  # the edit
        fixed.class_generation = 2
        await handle.signal(NodePoolWorkflow.update_specs, fixed)
        await fails_on_configuration(
            temporal_client, handle, first.name, "Secret default/tailscale-auth not found"
        )
        status = await settled(
            handle,
            lambda s: len(s.claims) == 1 and s.claims[0].name != first.name,
            "planned the pods again on the fixed class",
        )
        assert not status.config_error, status.config_error
        assert sorted(status.claims[0].nominated) == sorted(f"a{i}" for i in range(10))
        # The same failure of a claim made from the current specs still holds back.
        [second] = status.claims
        await fails_on_configuration(
            temporal_client, handle, second.name, "Secret default/hetzner-api-token not found"
        )
        status = await settled(
            handle,
            lambda s: "hetzner-api-token" in s.config_error,
            "held new claims back on the configuration error",
        )
        assert not status.claims, status.claims


async def test_an_operator_ends_the_configuration_back_off_at_once(
    temporal_client: Client,
) -> None:
    """A claim fails on a missing Secret; the operator creates it. No spec changed, so the
    pool would wait out its back-off (30 s, doubling to 10 min) before trying again;
    `cloudburst pools retry` (the `retry_now` signal) ends the wait at once."""
    async with ten_pods_pool(temporal_client) as handle:
        first = await only_claim(handle)
        await fails_on_configuration(
            temporal_client, handle, first.name, "Secret default/tailscale-auth not found"
        )
        held = await settled(
            handle,
            lambda s: "tailscale-auth" in s.config_error and not s.claims,
            "held new claims back on the configuration error",
        )
        assert held.config_retry_at is not None  # what `pools describe` shows

        await handle.signal(NodePoolWorkflow.retry_now)

        # Well within the back-off's first 30 s (`settled` gives up after 15).
        status = await settled(
            handle,
            lambda s: len(s.claims) == 1 and s.claims[0].name != first.name,
            "planned the pods again at the operator's word",
        )
        assert not status.config_error and status.config_retry_at is None
        assert "retry after config error" not in status.alarms
        assert sorted(status.claims[0].nominated) == sorted(f"a{i}" for i in range(10))


class GatedClaimStates:
    """The real `claim_workflow_states`, held at a gate the test opens: a look in flight."""

    def __init__(self) -> None:
        self.closed = False  # hold the next look's check at the gate
        self.at_gate = asyncio.Event()
        self.opened = asyncio.Event()

    @activity.defn(name="claim_workflow_states")
    async def claim_workflow_states(self, input: ClaimStatesInput) -> ClaimStates:
        if self.closed:
            self.at_gate.set()
            await self.opened.wait()
        return await ClaimWorkflowActivities(k8s.ApiClient(), Tenancy()).claim_workflow_states(
            input
        )


async def test_a_failure_reported_while_the_look_forgets_its_claim_still_counts(
    temporal_client: Client,
) -> None:
    """A claim that fails on its configuration reports so, then ends. If the pool's periodic
    look asks Temporal just then, it finds the claim ended and forgets it before the report
    lands: the report must still count (the error shown, the back-off armed), or the pool
    learns of the error only when its next claim fails the same way, and backs off a step
    short. The plan that look made for the claim's pods starts nothing: it would fail too."""
    gate = GatedClaimStates()
    async with ten_pods_pool(temporal_client, [gate.claim_workflow_states]) as handle:
        first = await only_claim(handle)
        claim = await started_claim(temporal_client, first.name)
        gate.closed = True
        await asyncio.wait_for(gate.at_gate.wait(), timeout=15)
        # The claim's last steps, as it takes them: the report, then its end.
        await handle.signal(
            NodePoolWorkflow.claim_report,
            config_failure(first.name, "Secret default/tailscale-auth not found"),
        )
        await claim.terminate("failed")
        gate.closed = False
        gate.opened.set()
        status = await settled(
            handle,
            lambda s: "tailscale-auth" in s.config_error and "retry after config error" in s.alarms,
            "took the report of the claim it had forgotten, and backed off",
        )
        assert not status.claims, status.claims  # nothing started on the failing config


async def test_a_configuration_failure_reported_while_a_plan_is_made_starts_none_of_it(
    temporal_client: Client,
) -> None:
    """More pods arrive; while the pool plans their node, its first claim fails on the
    configuration (a missing Secret). The planned node would fail the same way: it is not
    started, and the pods wait saying why, until the back-off's retry or a change of specs."""
    planner = HeldPlan(2)
    queue = f"bursts-{uuid.uuid4()}"
    async with pool_workers(
        temporal_client,
        queue,
        [NodePoolWorkflow, StandInClaim],
        [planner.plan_capacity, record_events, sync_nodepool_status],
    ):
        handle = await start_bursts_pool(temporal_client, queue, 0, pods("a", PODS_PER_NODE))
        try:
            first = await only_claim(handle)
            claim = await started_claim(temporal_client, first.name)
            await handle.signal(
                NodePoolWorkflow.demand, DemandUpdate(pods=pods("b", PODS_PER_NODE))
            )
            for _ in range(300):  # the second plan is on its way, and stays there
                if planner.started == 2:
                    break
                await asyncio.sleep(0.05)
            assert planner.started == 2
            await handle.signal(
                NodePoolWorkflow.claim_report,
                config_failure(first.name, "Secret default/tailscale-auth not found"),
            )
            await claim.terminate("failed")
            await settled(
                handle,
                lambda s: "tailscale-auth" in s.config_error and not s.claims,
                "took the failure",
            )
            planner.release.set()
            status = await settled(
                handle,
                lambda s: (
                    sum(1 for r in s.blocked.values() if "tailscale-auth" in r) == 2 * PODS_PER_NODE
                ),
                "every pod waiting on the configuration error",
            )
            assert not status.claims, status.claims
        finally:
            await handle.terminate("test over")
            await end_claims(
                temporal_client,
                (c.name for c in (await handle.query(NodePoolWorkflow.status)).claims),
            )
