"""A claim acts on news as soon as it has it: no wake-up is lost, no newer word overwritten.

Two ways a claim used to sleep through what it was told (a lost wake-up):
- the pool's permit arrived in the same workflow task as the end of the claim's own request
  for it; the claim then waited for "a signal since now" and slept until its next poll;
- the node watcher said "empty" while the claim's own poll of the node was on its way; the
  poll's older answer ("busy") overwrote it, and the node stayed empty past its TTL.

The cluster and the cloud are stand-in activities under the real names (how Temporal
unit-tests a workflow), so the test controls when each answer comes; the claim is the real
NodeClaimWorkflow. Its poll interval is ten minutes: only news can move it in these tests.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from activities.heartbeat import HeartbeatInterceptor
    from api import NodeClaimPhase, Offering
    from api import search_attributes as sa
    from api.claims import new_claim
    from api.events import EventBatch
    from api.messages import (
        BootstrapInput,
        BootstrapRefs,
        ClaimTimings,
        CreateInstanceInput,
        DrainInput,
        DrainResult,
        InstanceInfo,
        InstanceRef,
        LabelNodeInput,
        MirrorInput,
        MirrorResult,
        NodeClaimInput,
        NodeObservation,
        NodeRef,
        NodeState,
        claim_key_of,
        claim_workflow_id,
    )
    from api.nodeclass import FakeClass, JoinSettings, NodeClassSpec
    from api.nodepool import NodePoolSpec
    from api.nodepool.messages import DisruptionPermit, DisruptionRequest
    from workflows.nodeclaim import NodeClaimWorkflow


def EMPTY() -> NodeState:
    return NodeState(exists=True, ready=True, empty=True, pod_count=0)


SLOW_POLL = ClaimTimings(node_poll_interval_s=600, ready_poll_interval_s=600)
OFFERING = Offering(provider="fake", region="sim-1", instance_type="fk-small", vcpu=2)


class Cluster:
    """Stand-in activities; `node_state` decides what a poll of the node answers."""

    def __init__(self) -> None:
        self.node_state: Callable[[], NodeState] = lambda: NodeState(
            exists=True, ready=True, empty=False, pod_count=1
        )
        self.poll_started = asyncio.Event()
        self.release_poll = asyncio.Event()
        self.release_poll.set()

    def activities(self) -> list[Callable[..., object]]:
        return [
            self.prepare_bootstrap,
            self.create_instance,
            self.get_node_state,
            self.get_instance,
            self.cordon_node,
            self.cordon_and_look,
            self.uncordon_node,
            self.delete_node,
            self.label_node,
            self.drain_node,
            self.delete_instance,
            self.delete_bootstrap_secrets,
            self.sync_nodeclaim,
            self.record_events,
        ]

    @activity.defn(name="prepare_bootstrap")
    async def prepare_bootstrap(self, input: BootstrapInput) -> BootstrapRefs:
        return BootstrapRefs(
            namespace=input.namespace,
            token_secret="bootstrap-token-abcdef",
            script_secret=f"{input.claim_name}-bootstrap",
            token_expires_at=datetime.now(UTC) + timedelta(hours=1),
        )

    @activity.defn(name="create_instance")
    async def create_instance(self, input: CreateInstanceInput) -> InstanceInfo:
        return InstanceInfo(
            instance_id=f"fake/sim-1/{input.claim_name}",
            name=input.claim_name,
            provider="fake",
            region="sim-1",
            instance_type="fk-small",
            state="running",
        )

    @activity.defn(name="get_node_state")
    async def get_node_state(self, input: NodeRef) -> NodeState:
        # What the node looked like when the poll read it: the claim's VM's node.
        state = self.node_state().model_copy(update={"provider_id": provider_id(input.node_name)})
        self.poll_started.set()
        await self.release_poll.wait()
        return state

    @activity.defn(name="get_instance")
    async def get_instance(self, ref: InstanceRef) -> InstanceInfo | None:
        return InstanceInfo(
            instance_id=ref.instance_id or "",
            name=ref.claim_name,
            provider="fake",
            region="sim-1",
            instance_type="fk-small",
            state="running",
        )

    @activity.defn(name="cordon_node")
    async def cordon_node(self, input: NodeRef) -> None:
        pass

    @activity.defn(name="cordon_and_look")
    async def cordon_and_look(self, input: NodeRef) -> NodeState:
        return await self.get_node_state(input)

    @activity.defn(name="uncordon_node")
    async def uncordon_node(self, input: NodeRef) -> None:
        pass

    @activity.defn(name="delete_node")
    async def delete_node(self, input: NodeRef) -> None:
        pass

    @activity.defn(name="label_node")
    async def label_node(self, input: LabelNodeInput) -> None:
        pass

    @activity.defn(name="drain_node")
    async def drain_node(self, input: DrainInput) -> DrainResult:
        return DrainResult(evicted=0, forced=0, left_alone=0)

    @activity.defn(name="delete_instance")
    async def delete_instance(self, ref: InstanceRef) -> None:
        pass

    @activity.defn(name="delete_bootstrap_secrets")
    async def delete_bootstrap_secrets(self, refs: BootstrapRefs) -> None:
        pass

    @activity.defn(name="sync_nodeclaim")
    async def sync_nodeclaim(self, input: MirrorInput) -> MirrorResult:
        return MirrorResult()

    @activity.defn(name="record_events")
    async def record_events(self, batch: EventBatch) -> None:
        pass


# Not named NodePoolWorkflow: claims reach their pool by workflow id, and the replay test
# replays every NodePoolWorkflow of the session with the real class.
@workflow.defn(name="InstantPoolWorkflow")
class InstantPool:
    """A pool that permits every disruption at once (once the test says `permit_now`)."""

    def __init__(self) -> None:
        self.requests: list[DisruptionRequest] = []
        self.go = False

    @workflow.run
    async def run(self) -> None:
        while True:
            await workflow.wait_condition(lambda: bool(self.requests) and self.go)
            request = self.requests.pop(0)
            handle = workflow.get_external_workflow_handle(
                claim_workflow_id("default", request.claim_name)
            )
            await handle.signal("disruption_permitted", DisruptionPermit(reason=request.reason))

    @workflow.signal
    def request_disruption(self, request: DisruptionRequest) -> None:
        self.requests.append(request)

    @workflow.signal
    def withdraw_disruption(self, request: DisruptionRequest) -> None:
        pass

    @workflow.signal
    def claim_report(self, report: object) -> None:
        pass

    @workflow.signal
    def permit_now(self) -> None:
        self.go = True


def provider_id(node_name: str) -> str:
    """The providerID of the node of `create_instance`'s VM for the claim `node_name`."""
    return f"fake:///sim-1/{node_name}"


def observation(name: str, *, empty_for_s: float | None) -> NodeObservation:
    now = datetime.now(UTC)
    return NodeObservation(
        node_name=name,
        exists=True,
        ready=True,
        provider_id=provider_id(name),
        empty_since=now - timedelta(seconds=empty_for_s) if empty_for_s is not None else None,
        pod_count=0 if empty_for_s is not None else 1,
        observed_at=now,
    )


async def start_claim(
    client: Client, queue: str, pool_id: str | None
) -> WorkflowHandle[NodeClaimWorkflow, object]:
    name = f"wake-{uuid.uuid4().hex[:5]}"
    pool = NodePoolSpec.model_validate({"disruption": {"ttlSecondsAfterEmpty": 1}})
    claim = new_claim(
        name=name,
        namespace="default",
        pool_name="wake",
        pool=pool,
        node_class_name="sample",
        offerings=[OFFERING],
    )
    return await client.start_workflow(
        NodeClaimWorkflow.run,
        NodeClaimInput(
            claim=claim,
            node_class_name="sample",
            node_class=NodeClassSpec(
                fake=FakeClass(), join=JoinSettings(host_api_server="https://127.0.0.1:6443")
            ),
            timings=SLOW_POLL,
            pool_workflow_id=pool_id,
        ),
        id=claim_workflow_id("default", name),
        task_queue=queue,
    )


@workflow.defn
class Busy:
    """Keeps a worker's only workflow-task slot busy most of the time (CPU, then a no-op)."""

    @workflow.run
    async def run(self) -> None:
        while True:
            if not workflow.unsafe.is_replaying():  # the worker keeps no cache: it replays
                total = 0
                for number in range(8_000_000):
                    total += number
            # An activity comes back within milliseconds (a short timer takes about a second).
            await workflow.execute_activity(
                "record_events", EventBatch(events=[]), start_to_close_timeout=timedelta(seconds=10)
            )


@asynccontextmanager
async def worker(
    client: Client, queue: str, cluster: Cluster, *, one_task_at_a_time: bool = False
) -> AsyncIterator[None]:
    # One workflow task at a time, from one poller, with no sticky queue (which would need a
    # poller of its own): a task waits while the worker is busy.
    async with Worker(
        client,
        task_queue=queue,
        workflows=[NodeClaimWorkflow, Busy],
        activities=cluster.activities(),
        max_concurrent_workflow_tasks=1 if one_task_at_a_time else None,
        max_concurrent_workflow_task_polls=1 if one_task_at_a_time else None,
        max_cached_workflows=0 if one_task_at_a_time else 1000,
        # As deployed: a poll held up past its heartbeat timeout is alive, not retried.
        interceptors=[HeartbeatInterceptor()],
    ):
        yield


async def phase(handle: WorkflowHandle[NodeClaimWorkflow, object]) -> NodeClaimPhase:
    # From the search attribute, not a query: a busy worker answers queries late.
    described = await handle.describe()
    return NodeClaimPhase(described.typed_search_attributes.get(sa.PHASE) or "Pending")


async def until(check: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():  # type: ignore[misc]
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.2)


async def has_event(handle: WorkflowHandle, kind: EventType.ValueType, count: int = 1) -> bool:
    history = await handle.fetch_history()
    return sum(1 for e in history.events if e.event_type == kind) >= count


async def test_a_permit_that_comes_with_the_end_of_the_request_is_acted_on(
    temporal_client: Client,
) -> None:
    queue = f"wake-{uuid.uuid4()}"
    pool_queue = f"wake-pool-{uuid.uuid4()}"
    cluster = Cluster()
    pool_id = f"nodepool-wake-{uuid.uuid4().hex[:8]}"
    async with (
        worker(temporal_client, queue, cluster, one_task_at_a_time=True),
        Worker(temporal_client, task_queue=pool_queue, workflows=[InstantPool]),
    ):
        # By name: mypy 1.x mis-solves later `get_workflow_handle_for` calls in the program
        # once `start_workflow` met a no-argument workflow method here.
        pool = await temporal_client.start_workflow(
            "InstantPoolWorkflow", id=pool_id, task_queue=pool_queue
        )
        await pool.signal("permit_now")
        claim = await start_claim(temporal_client, queue, pool_id)
        name = claim_key_of(claim.id)[1]
        await claim.signal(NodeClaimWorkflow.observe_node, observation(name, empty_for_s=None))
        await until(lambda: _is(claim, NodeClaimPhase.READY), 30, "the claim never got Ready")
        # The claim's worker is busy with another workflow most of the time, so the end of
        # the claim's request and the pool's instant permit reach it in one workflow task.
        busy = await temporal_client.start_workflow(
            "Busy", id=f"busy-{uuid.uuid4()}", task_queue=queue
        )
        # Empty for longer than its TTL: the claim asks its pool for a permit.
        cluster.node_state = EMPTY
        await claim.signal(NodeClaimWorkflow.observe_node, observation(name, empty_for_s=60))
        # Its next poll is ten minutes away: only the permit can move it now.
        await until(
            lambda: _past(claim, NodeClaimPhase.READY), 30, "the claim slept through its permit"
        )
        await busy.terminate("test over")
        await asyncio.wait_for(claim.result(), timeout=30)
    await pool.terminate("test over")


async def test_the_watchers_word_during_a_poll_is_not_overwritten_by_the_poll(
    temporal_client: Client,
) -> None:
    queue = f"wake-{uuid.uuid4()}"
    cluster = Cluster()
    async with worker(temporal_client, queue, cluster):
        claim = await start_claim(temporal_client, queue, pool_id=None)
        name = claim_key_of(claim.id)[1]
        # The node turns Ready; on its way to Ready the claim polls the node once (for its
        # capacity). That poll reads the node busy, then takes its time to answer ...
        cluster.release_poll.clear()
        await claim.signal(NodeClaimWorkflow.observe_node, observation(name, empty_for_s=None))
        await asyncio.wait_for(cluster.poll_started.wait(), timeout=30)
        # ... while the pods leave and the watcher says so.
        cluster.node_state = EMPTY
        await claim.signal(NodeClaimWorkflow.observe_node, observation(name, empty_for_s=0))
        await until(
            lambda: has_event(claim, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, count=2),
            30,
            "the watcher's signal never arrived",
        )
        cluster.release_poll.set()
        # Empty TTL 1 s; the next poll is ten minutes away and the watcher has nothing new.
        await until(
            lambda: _past(claim, NodeClaimPhase.READY),
            30,
            "the empty node was never scaled down",
        )
        status = await asyncio.wait_for(claim.result(), timeout=30)
        assert status.deletion_reason == "Empty"  # type: ignore[attr-defined]


async def _is(handle: WorkflowHandle, wanted: NodeClaimPhase) -> bool:
    return await phase(handle) == wanted


async def _past(handle: WorkflowHandle, wanted: NodeClaimPhase) -> bool:
    order = list(NodeClaimPhase)
    return order.index(await phase(handle)) > order.index(wanted)
