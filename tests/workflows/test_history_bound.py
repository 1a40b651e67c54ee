"""A pool continues as new at our own history bound, well before Temporal suggests it: every
replay of the pool (a worker taking it over, a task that failed) costs its whole history
(workflows/history.py).

The planner is a stand-in registered under the real name that finds room for nothing, so
every pod stays pending and each round's plan request carries all of them: the history
grows by megabytes in a few dozen demand signals, as in a large burst.
"""

from __future__ import annotations

import asyncio
import operator
import secrets
import uuid
from datetime import timedelta
from functools import partial

import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType, WorkflowExecutionStatus, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy

with workflow.unsafe.imports_passed_through():
    from api.nodepool.messages import DemandUpdate, NodePoolInput, NodePoolStatusUpdate, PoolState
    from api.planning import Plan, PlanRequest, PodDemand, Resources, Toleration
    from tests.e2e.harness import eventually
    from tests.payload_keys import KEYRING
    from tests.workflows.pool_workers import pool_workers
    from tests.workflows.test_nodepool_bursts import StandInClaim
    from tests.workflows.test_nodepool_races import record_events, specs, sync_nodepool_status
    from worker.payload_codec import ENCODING, opened
    from workflows.history import HARD_HISTORY_EVENTS, HISTORY_BYTES
    from workflows.nodepool import NodePoolWorkflow


UNHANDLED_COMMAND = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND


@activity.defn(name="plan_capacity")
async def plan_nothing(request: PlanRequest) -> Plan:
    return Plan()


def pods(batch: int, count: int) -> list[PodDemand]:
    return [
        PodDemand(
            uid=f"{batch:03d}-{i:03d}-{uuid.uuid4()}",
            namespace="default",
            name=f"web-{batch:03d}-{i:03d}-{'x' * 40}",
            requests=Resources(cpu_m=100, memory_bytes=2**27, pods=1),
        )
        for i in range(count)
    ]


async def _runs(client: Client, workflow_id: str) -> list[WorkflowHandle]:
    return [
        client.get_workflow_handle(workflow_id, run_id=e.run_id)
        async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")
    ]


async def _pending(pool: WorkflowHandle) -> int:
    return (await pool.query(NodePoolWorkflow.status)).pending_pods


async def _history_length(handle: WorkflowHandle) -> int:
    described = await handle.describe()
    return described.raw_description.workflow_execution_info.history_length


async def _start_pool(
    client: Client,
    queue: str,
    pool_id: str,
    state: PoolState,
    first: list[PodDemand],
    task_timeout: timedelta | None = None,
) -> WorkflowHandle:
    """The pool as the trigger starts it: with its first demand."""
    return await client.start_workflow(
        NodePoolWorkflow.run,
        NodePoolInput(namespace="default", name=pool_id, state=state),
        id=pool_id,
        task_queue=queue,
        task_timeout=task_timeout,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        start_signal="demand",
        start_signal_args=[DemandUpdate(pods=first)],
    )


async def test_a_pool_continues_as_new_at_its_own_bound(
    temporal_client: Client,
) -> None:
    client = temporal_client
    queue = f"bound-{uuid.uuid4()}"
    pool_id = f"nodepool-bound-{uuid.uuid4().hex[:8]}"
    async with pool_workers(
        client,
        queue,
        [NodePoolWorkflow, StandInClaim],
        [plan_nothing, record_events, sync_nodepool_status],
    ):
        first = await _start_pool(
            client, queue, pool_id, PoolState(specs=specs()), pods(0, 40), timedelta(seconds=4)
        )
        sent = 40
        for batch in range(1, 60):
            if len(await _runs(client, pool_id)) > 1:
                break
            await first.signal(NodePoolWorkflow.demand, DemandUpdate(pods=pods(batch, 40)))
            sent += 40
            # Each signal its own round, as the trigger's batches are: rounds make history.
            await eventually(lambda: _pending(first), partial(operator.eq, sent), timeout_s=30)
        await eventually(lambda: _runs(client, pool_id), lambda runs: len(runs) > 1, timeout_s=30)

        described = await client.get_workflow_handle(pool_id, run_id=first.result_run_id).describe()
        assert (
            described.status == WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW
        )
        # Our bound, not Temporal's suggestion: no task of the first run was told to.
        history = await client.get_workflow_handle(
            pool_id, run_id=first.result_run_id
        ).fetch_history()
        started = [
            e.workflow_task_started_event_attributes
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
        ]
        assert not any(s.suggest_continue_as_new for s in started)
        assert max(s.history_size_bytes for s in started) >= HISTORY_BYTES

        latest = client.get_workflow_handle(pool_id)
        # The operator's task timeout (the trigger's CLOUDBURST_POOL_TASK_TIMEOUT_S) holds
        # in the new run too: what a crash of the pool's worker costs does not drift back.
        config = (await latest.describe()).raw_description.execution_config
        assert config.default_workflow_task_timeout.ToTimedelta() == timedelta(seconds=4)
        # Nothing was lost crossing over: every pod sent is still pending in the new run.
        status = await latest.query(NodePoolWorkflow.status)
        assert status.pending_pods == sent
        await latest.terminate("test over")


async def test_a_pool_that_carries_a_large_state_does_not_continue_as_new_every_round(
    temporal_client: Client,
) -> None:
    """The bound counts what a run wrote, not what it was handed: a pool whose carried state
    alone is near the bound (thousands of claims) must not continue as new on every round."""
    client = temporal_client
    queue = f"bound-{uuid.uuid4()}"
    pool_id = f"nodepool-heavy-{uuid.uuid4().hex[:8]}"
    # Pods that waited on limits before the last run ended: carried over, ~2.1 MB, and ~1.6
    # MB in history even compressed (worker/payload_codec.py): reasons that do not repeat.
    waited = {
        f"{uuid.uuid4()}-{i:05d}": f"LimitReached: {secrets.token_urlsafe(96)}"
        for i in range(12_000)
    }
    async with pool_workers(
        client,
        queue,
        [NodePoolWorkflow, StandInClaim],
        [plan_nothing, record_events, sync_nodepool_status],
    ):
        pool = await _start_pool(
            client, queue, pool_id, PoolState(specs=specs(), blocked=waited), pods(0, 5)
        )
        history = await pool.fetch_history()
        assert history.events[0].ByteSize() >= HISTORY_BYTES
        for batch in range(1, 4):
            await pool.signal(NodePoolWorkflow.demand, DemandUpdate(pods=pods(batch, 5)))
            await eventually(
                lambda: _pending(pool), partial(operator.eq, 5 * (batch + 1)), timeout_s=30
            )
        assert len(await _runs(client, pool_id)) == 1
        await pool.terminate("test over")


def waiting_pods(count: int) -> dict[str, PodDemand]:
    """Pods as a real cluster's look to the pool (~460 bytes each as JSON: every pod carries
    the two 300 s tolerations of the DefaultTolerationSeconds admission plugin)."""
    tolerations = [
        Toleration(key=f"node.kubernetes.io/{taint}", operator="Exists", effect="NoExecute")
        for taint in ("not-ready", "unreachable")
    ]
    demands = [
        PodDemand(
            uid=str(uuid.uuid4()),
            namespace="default",
            name=f"batch-{i:05d}-{uuid.uuid4().hex[:10]}",
            requests=Resources(cpu_m=100, memory_bytes=2**27, pods=1),
            tolerations=tolerations,
        )
        for i in range(count)
    ]
    return {pod.uid: pod for pod in demands}


async def test_a_pool_past_temporals_blob_limit_runs_and_continues_as_new(
    temporal_client: Client,
) -> None:
    """6,000 pending pods: the pool's state, its plan requests and its continue-as-new are
    each ~2.8 MB of JSON, past Temporal's 2 MB payload limit, where the SDK fails the task
    on every retry. The processes' codec compresses payloads that large
    (worker/payload_codec.py); smaller ones stay plain JSON for the Web UI."""
    client = temporal_client
    queue = f"bound-{uuid.uuid4()}"
    pool_id = f"nodepool-large-{uuid.uuid4().hex[:8]}"
    waiting = waiting_pods(6_000)
    assert len(PoolState(specs=specs(), pending=waiting).model_dump_json()) > 2 * 2**20
    async with pool_workers(
        client,
        queue,
        [NodePoolWorkflow, StandInClaim],
        [plan_nothing, record_events, sync_nodepool_status],
    ):
        first = await _start_pool(
            client, queue, pool_id, PoolState(specs=specs(), pending=waiting), pods(0, 5)
        )
        sent = len(waiting) + 5
        # Each round plans every waiting pod (a ~2.8 MB plan request): a few make the run's
        # history reach the pool's bound, and it continues as new with all of them.
        for batch in range(1, 20):
            if len(await _runs(client, pool_id)) > 1:
                break
            await first.signal(NodePoolWorkflow.demand, DemandUpdate(pods=pods(batch, 5)))
            sent += 5
            # Deadlines, not measures: each round moves megabytes through the codec, and a
            # machine busy with other tests takes minutes where an idle one takes seconds.
            await eventually(lambda: _pending(first), partial(operator.eq, sent), timeout_s=300)
        await eventually(lambda: _runs(client, pool_id), lambda runs: len(runs) > 1, timeout_s=300)
        latest = client.get_workflow_handle(pool_id)
        assert (await latest.query(NodePoolWorkflow.status)).pending_pods == sent

        history = await client.get_workflow_handle(
            pool_id, run_id=first.result_run_id
        ).fetch_history()
        # No task failed but on the race of a signal with the run's close (Temporal refuses
        # the close and the pool tries again), and none timed out.
        failures = [
            e.workflow_task_failed_event_attributes
            for e in history.events
            if e.HasField("workflow_task_failed_event_attributes")
        ]
        assert all(f.cause == UNHANDLED_COMMAND for f in failures), failures
        assert not any(
            e.HasField("workflow_task_timed_out_event_attributes") for e in history.events
        )
        started = history.events[0].workflow_execution_started_event_attributes
        # Compressed, then sealed with the suite's key (tests/payload_keys.py).
        assert opened(started.input.payloads[0], KEYRING, False).metadata["encoding"] == ENCODING
        assert started.input.payloads[0].ByteSize() < 2**20
        signals = [
            e.workflow_execution_signaled_event_attributes
            for e in history.events
            if e.HasField("workflow_execution_signaled_event_attributes")
        ]
        assert opened(signals[0].input.payloads[0], KEYRING, False).metadata["encoding"] == (
            b"json/plain"
        )
        await latest.terminate("test over")


@pytest.mark.slow
async def test_news_that_never_stops_cannot_hold_a_pool_past_its_hard_bound(
    temporal_client: Client,
) -> None:
    """A stream of news with something always in flight (here the pool's status write, held)
    kept a pool from continuing as new: at 3,000 claims reporting Ready a run grew to 3,449
    events (1.4 MB, short of Temporal's suggestion), whose replay outlasted the workflow task
    timeout on every retry. Past `HARD_HISTORY_EVENTS` the pool takes no more rounds until
    what is in flight is done, then continues as new with what it was told. Each signal here
    swaps the one pending pod for a new one: a round each, and the history stays small in
    bytes, as the claims' reports are."""
    client = temporal_client
    queue = f"bound-{uuid.uuid4()}"
    pool_id = f"nodepool-hard-{uuid.uuid4().hex[:8]}"
    released = asyncio.Event()
    plans = 0

    @activity.defn(name="plan_capacity")
    async def counted_plan(request: PlanRequest) -> Plan:
        nonlocal plans
        plans += 1
        return Plan()

    @activity.defn(name="sync_nodepool_status")
    async def held_status_write(update: NodePoolStatusUpdate) -> None:
        while not released.is_set():
            activity.heartbeat()
            await asyncio.sleep(0.2)

    async def plans_made() -> int:
        return plans

    async with pool_workers(
        client,
        queue,
        [NodePoolWorkflow, StandInClaim],
        [counted_plan, record_events, held_status_write],
    ):
        previous = pods(0, 1)[0]
        first = await _start_pool(client, queue, pool_id, PoolState(specs=specs()), [previous])

        async def swap(batch: int) -> None:
            nonlocal previous
            pod = pods(batch, 1)[0]
            await first.signal(
                NodePoolWorkflow.demand, DemandUpdate(pods=[pod], resolved=[previous.uid])
            )
            previous = pod

        try:
            batch = 1
            while await _history_length(first) < HARD_HISTORY_EVENTS:
                planned = plans
                await swap(batch)
                batch += 1
                async with asyncio.timeout(30):  # a round each, or the bound reached
                    while plans == planned and await _history_length(first) < HARD_HISTORY_EVENTS:
                        await asyncio.sleep(0.01)
            described = await first.describe()
            assert described.status == WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING
            # Past the hard bound: the news is taken in, but starts no round.
            plans_at_bound = plans
            for extra in range(5):
                await swap(batch + extra)
            await asyncio.sleep(2)
            assert plans == plans_at_bound
        finally:
            released.set()
        # The write done, the run continues as new with the latest pod, and plans it.
        await eventually(lambda: _runs(client, pool_id), lambda runs: len(runs) > 1)
        assert await _history_length(first) < HARD_HISTORY_EVENTS + 60
        latest = client.get_workflow_handle(pool_id)
        assert (await latest.query(NodePoolWorkflow.status)).pending_pods == 1
        await eventually(plans_made, lambda n: n > plans_at_bound)
        history = await first.fetch_history()
        started = [
            e.workflow_task_started_event_attributes
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
        ]
        assert not any(s.suggest_continue_as_new for s in started)  # our bound, not Temporal's
        await latest.terminate("test over")
