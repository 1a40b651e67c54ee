"""Each phase of a NodeClaimWorkflow in the fast lane: the real workflow, its activities
stand-ins that record every call (tests/workflows/claim_world.py), the test deciding what
the cloud and the cluster answer. Launch failover, registration, liveness and termination,
with no cluster and no cloud: what needs processes stays in tests/e2e."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.heartbeat import HeartbeatInterceptor
from api import NodeClaimPhase, Offering, errors
from api.messages import (
    ClaimSignal,
    ClaimTimings,
    CreateInstanceInput,
    DrainInput,
    InstanceRef,
    LabelNodeInput,
    NodeState,
    ScaleDownRequest,
)
from api.nodeclaim import NodeClaimStatus
from tests.workflows.claim_world import ClaimWorld, observation, start_claim
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.retries import VM_CREATE

CHEAP = Offering(provider="fake", region="sim-1", instance_type="fk-small", vcpu=2)
NEXT = Offering(provider="fake", region="sim-2", instance_type="fk-small", vcpu=2)
LAST = Offering(provider="fake", region="sim-3", instance_type="fk-small", vcpu=2)


@asynccontextmanager
async def worker(client: Client, queue: str, world: ClaimWorld) -> AsyncIterator[None]:
    async with Worker(
        client,
        task_queue=queue,
        workflows=[NodeClaimWorkflow],
        activities=world.activities(),
        interceptors=[HeartbeatInterceptor()],
    ):
        yield


def queue() -> str:
    return f"phases-{uuid.uuid4()}"


async def until_phase(
    handle: WorkflowHandle[NodeClaimWorkflow, object], phase: NodeClaimPhase
) -> NodeClaimStatus:
    for _ in range(300):
        status = await handle.query(NodeClaimWorkflow.status)
        if status.phase == phase:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {phase}; last {status.phase}")


async def failure_of(handle: WorkflowHandle[NodeClaimWorkflow, object]) -> str:
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), timeout=30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    return str(cause.type)


def capacity(message: str) -> ApplicationError:
    return ApplicationError(message, type=errors.CAPACITY_ERROR, non_retryable=True)


async def ready(
    client: Client, name: str, handle: WorkflowHandle[NodeClaimWorkflow, object]
) -> None:
    await handle.signal(ClaimSignal.OBSERVE_NODE, observation(name))
    await until_phase(handle, NodeClaimPhase.READY)


def name_of(handle: WorkflowHandle[NodeClaimWorkflow, object]) -> str:
    return handle.id.rsplit("/", 1)[-1]


# --- launch ---------------------------------------------------------------------------------


async def test_a_capacity_error_moves_the_launch_to_the_next_offering(
    temporal_client: Client,
) -> None:
    world, q = ClaimWorld(), queue()
    world.create_errors[CHEAP.key] = capacity("no fk-small left in sim-1")
    async with worker(temporal_client, q, world):
        handle = await start_claim(temporal_client, q, offerings=[CHEAP, NEXT])
        status = await until_phase(handle, NodeClaimPhase.JOINING)
    tried = [c.offering.key for c in world.called("create_instance")]  # type: ignore[attr-defined]
    assert tried == [CHEAP.key, NEXT.key]
    assert status.region == "sim-2" and status.instance_id == f"fake/sim-2/{name_of(handle)}"
    # The script was rendered again for the offering it launched on (its node's labels).
    rendered = [b.offering.key for b in world.called("prepare_bootstrap")]  # type: ignore[attr-defined]
    assert rendered == [CHEAP.key, NEXT.key]


async def test_a_fatal_provider_error_moves_on_and_none_left_fails_the_claim(
    temporal_client: Client,
) -> None:
    world, q = ClaimWorld(), queue()
    world.create_errors[CHEAP.key] = ApplicationError(
        "quota exceeded", type=errors.PROVIDER_FATAL, non_retryable=True
    )
    world.create_errors[NEXT.key] = capacity("sold out")
    async with worker(temporal_client, q, world):
        handle = await start_claim(temporal_client, q, offerings=[CHEAP, NEXT])
        assert await failure_of(handle) == "InsufficientCapacity"
        status = await handle.query(NodeClaimWorkflow.status)
    assert status.phase == NodeClaimPhase.FAILED
    assert "quota exceeded" in str(status.failure_message) and "sold out" in str(
        status.failure_message
    )
    # Nothing it may have started outlives it: a delete by label on the provider it called.
    [deleted] = world.called("delete_instance")
    assert isinstance(deleted, InstanceRef) and deleted.provider == "fake"


async def test_an_invalid_configuration_fails_at_once_without_trying_further_offerings(
    temporal_client: Client,
) -> None:
    world, q = ClaimWorld(), queue()
    world.create_errors[CHEAP.key] = ApplicationError(
        "image not found", type=errors.INVALID_CONFIGURATION, non_retryable=True
    )
    async with worker(temporal_client, q, world):
        handle = await start_claim(temporal_client, q, offerings=[CHEAP, NEXT, LAST])
        assert await failure_of(handle) == "InvalidConfiguration"
    creates = world.called("create_instance")
    assert [c.offering.key for c in creates if isinstance(c, CreateInstanceInput)] == [CHEAP.key]


async def test_a_create_that_timed_out_is_tried_again_and_finds_its_vm_not_a_second(
    temporal_client: Client,
) -> None:
    """The first create makes its VM and never answers (its worker hung): the attempt times
    out, and the claim tries the same offering again, where the create finds the VM of the
    claim's name: one VM, the claim Joining on it. Fails without the retry of a timed-out
    create (VM_CREATE with one attempt): the claim moves on and a second VM runs in sim-2
    beside the first, which nothing deletes.

    The timeout that fires is the heartbeat's (5 s, `workflows/timeouts.py`), not the
    create's 10-minute start-to-close: the time-skipping server skips no time while an
    activity is in flight, and either timeout reaches the claim as the same retryable
    timeout of the attempt."""
    world, q = ClaimWorld(), queue()
    world.creates_that_hang = 1
    async with worker(temporal_client, q, world):
        handle = await start_claim(temporal_client, q, offerings=[CHEAP, NEXT])
        status = await until_phase(handle, NodeClaimPhase.JOINING)
        history = await handle.fetch_history()
    tried = [c.offering.key for c in world.called("create_instance")]  # type: ignore[attr-defined]
    assert tried == [CHEAP.key, CHEAP.key]
    vm = f"fake/sim-1/{name_of(handle)}"
    assert list(world.vms) == [vm] and status.instance_id == vm
    # The create that answered was the second attempt, after the first timed out.
    [launched] = [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
        and e.activity_task_started_event_attributes.attempt > 1
    ]
    assert launched.attempt == 2
    timeout = launched.last_failure.timeout_failure_info.timeout_type
    assert timeout == TimeoutType.TIMEOUT_TYPE_HEARTBEAT


async def test_an_outage_that_outlasts_the_retries_fails_the_claim_and_leaks_no_vm(
    skipping_env: WorkflowEnvironment,
) -> None:
    """Every offering's cloud answers 503 to every create, some having made the VM anyway:
    each offering is tried as often as VM_CREATE allows (its backoffs skipped), then the
    claim fails InsufficientCapacity, says so in its Ready condition with every offering's
    error, and deletes by the claim's label what the failed creates made. Fails without the
    failed claim's VM cleanup (`termination.fail`): the VMs the creates made are left
    running."""
    client = skipping_env.client
    world, q = ClaimWorld(), queue()
    for offering in (CHEAP, NEXT):
        world.create_errors[offering.key] = ApplicationError(
            "503 Service Unavailable", type=errors.PROVIDER_RETRYABLE
        )
    world.errors_after_making = True
    async with worker(client, q, world):
        handle = await start_claim(client, q, offerings=[CHEAP, NEXT])
        await skipping_env.fast_forward(handle)  # to its end: every backoff skipped
        assert await failure_of(handle) == "InsufficientCapacity"
        status = await handle.query(NodeClaimWorkflow.status)
    tried = [c.offering.key for c in world.called("create_instance")]  # type: ignore[attr-defined]
    attempts = VM_CREATE.maximum_attempts
    assert tried == [CHEAP.key] * attempts + [NEXT.key] * attempts
    assert status.phase == NodeClaimPhase.FAILED
    condition = status.condition("Ready")
    assert condition is not None and condition.status == "False"
    assert condition.reason == "InsufficientCapacity"
    assert CHEAP.key in condition.message and NEXT.key in condition.message
    # The claim never learnt an id: the delete finds its VMs by their label, and none is left.
    assert [(d.provider, d.instance_id) for d in world.called("delete_instance")] == [  # type: ignore[attr-defined]
        ("fake", None)
    ]
    assert world.vms == {}


# --- registration ---------------------------------------------------------------------------


async def test_a_node_that_registers_ready_is_labelled_and_the_token_goes(
    temporal_client: Client,
) -> None:
    world, q = ClaimWorld(), queue()
    async with worker(temporal_client, q, world):
        handle = await start_claim(temporal_client, q)
        await until_phase(handle, NodeClaimPhase.JOINING)
        await ready(temporal_client, name_of(handle), handle)
        status = await handle.query(NodeClaimWorkflow.status)
    [labelled] = world.called("label_node")
    assert isinstance(labelled, LabelNodeInput) and labelled.node_name == name_of(handle)
    assert labelled.labels["cloudburst.io/nodeclaim"] == name_of(handle)
    assert len(world.called("delete_bootstrap_secrets")) == 1
    assert status.capacity == {"cpu": "2", "memory": "4Gi"}  # the kubelet's, as observed
    assert status.condition("Ready") is not None


async def test_a_node_that_never_registers_fails_the_claim_and_its_vm_goes(
    temporal_client: Client,
) -> None:
    world, q = ClaimWorld(), queue()
    timings_update = {"registration_timeout_s": 1.0, "node_poll_interval_s": 0.3}
    async with worker(temporal_client, q, world):
        handle = await start_claim(temporal_client, q, timings=ClaimTimings(**timings_update))
        assert await failure_of(handle) == "RegistrationTimeout"
    [deleted] = world.called("delete_instance")
    assert isinstance(deleted, InstanceRef)
    assert deleted.instance_id == f"fake/sim-1/{name_of(handle)}"
    assert world.called("label_node") == []
    assert len(world.called("delete_bootstrap_secrets")) == 1


async def test_a_stranger_of_the_claims_name_is_never_its_ready_node(
    temporal_client: Client,
) -> None:
    """A Node of the claim's name whose providerID names another region's VM of the same id
    (node identity compares it whole): no label, no Ready, the claim times out."""
    world, q = ClaimWorld(), queue()
    async with worker(temporal_client, q, world):
        handle = await start_claim(
            temporal_client, q, timings=ClaimTimings(registration_timeout_s=2.0)
        )
        await until_phase(handle, NodeClaimPhase.JOINING)
        await handle.signal(ClaimSignal.OBSERVE_NODE, observation(name_of(handle), region="sim-9"))
        assert await failure_of(handle) == "RegistrationTimeout"
        status = await handle.query(NodeClaimWorkflow.status)
    assert world.called("label_node") == [] and status.ready_at is None
    # The cleanup's Node delete names the claim's own VM: the activity deletes only the Node
    # whose providerID is that VM's (tests/activities/test_kube_activities.py), not this one.
    assert world.called("cordon_node") == []
    for deleted in world.called("delete_node"):
        assert deleted.instance_id == f"fake/sim-1/{name_of(handle)}"  # type: ignore[attr-defined]


# --- liveness -------------------------------------------------------------------------------


async def test_a_node_that_is_gone_is_lost_and_its_vm_deleted_without_a_drain(
    temporal_client: Client,
) -> None:
    world, q = ClaimWorld(), queue()
    async with worker(temporal_client, q, world):
        handle = await start_claim(temporal_client, q)
        await until_phase(handle, NodeClaimPhase.JOINING)
        await ready(temporal_client, name_of(handle), handle)
        await handle.signal(
            ClaimSignal.OBSERVE_NODE, observation(name_of(handle), exists=False, ready=False)
        )
        status = await asyncio.wait_for(handle.result(), timeout=30)
    assert isinstance(status, NodeClaimStatus)
    assert status.phase == NodeClaimPhase.DELETED and status.deletion_reason == "NodeLost"
    assert world.called("drain_node") == []  # no node of its own to drain
    assert len(world.called("delete_instance")) == 1


async def test_a_vm_deleted_behind_the_claims_back_is_found_by_the_safety_net_poll(
    temporal_client: Client,
) -> None:
    world, q = ClaimWorld(), queue()
    world.node_state = lambda name: NodeState(exists=True, ready=True, pod_count=1)
    async with worker(temporal_client, q, world):
        handle = await start_claim(
            temporal_client, q, timings=ClaimTimings(ready_poll_interval_s=0.5)
        )
        await until_phase(handle, NodeClaimPhase.JOINING)
        await ready(temporal_client, name_of(handle), handle)
        world.vm_exists = False
        status = await asyncio.wait_for(handle.result(), timeout=30)
    assert isinstance(status, NodeClaimStatus)
    assert status.deletion_reason == "NodeLost"
    assert world.called("get_instance"), "the safety net looked at the VM"


# --- termination ----------------------------------------------------------------------------


async def test_a_do_not_disrupt_pod_holds_an_empty_scale_down_until_it_leaves(
    temporal_client: Client,
) -> None:
    world, q = ClaimWorld(), queue()
    async with worker(temporal_client, q, world):
        handle = await start_claim(temporal_client, q, disruption={"ttlSecondsAfterEmpty": 0})
        await until_phase(handle, NodeClaimPhase.JOINING)
        name = name_of(handle)
        await ready(temporal_client, name, handle)
        await handle.signal(
            ClaimSignal.OBSERVE_NODE,
            observation(name, empty_for_s=60, do_not_disrupt=["default/batch-1"]),
        )
        for _ in range(40):
            if any("do-not-disrupt" in str(b) for b in world.called("record_events")):
                break
            await asyncio.sleep(0.05)
        assert (await handle.query(NodeClaimWorkflow.status)).phase == NodeClaimPhase.READY
        assert world.called("drain_node") == []
        world.node_state = lambda n: NodeState(exists=True, ready=True, empty=True)
        await handle.signal(ClaimSignal.OBSERVE_NODE, observation(name, empty_for_s=60))
        status = await asyncio.wait_for(handle.result(), timeout=30)
    assert isinstance(status, NodeClaimStatus) and status.deletion_reason == "Empty"
    [drained] = world.called("drain_node")
    assert isinstance(drained, DrainInput) and drained.hold_do_not_disrupt


async def test_a_forced_scale_down_drains_past_do_not_disrupt(temporal_client: Client) -> None:
    world, q = ClaimWorld(), queue()
    async with worker(temporal_client, q, world):
        handle = await start_claim(temporal_client, q)
        await until_phase(handle, NodeClaimPhase.JOINING)
        name = name_of(handle)
        await ready(temporal_client, name, handle)
        await handle.signal(
            ClaimSignal.OBSERVE_NODE, observation(name, do_not_disrupt=["default/batch-1"])
        )
        await handle.signal(
            ClaimSignal.SCALE_DOWN, ScaleDownRequest(reason="maintenance", force=True)
        )
        status = await asyncio.wait_for(handle.result(), timeout=30)
    assert isinstance(status, NodeClaimStatus) and status.deletion_reason == "maintenance"
    [drained] = world.called("drain_node")
    assert isinstance(drained, DrainInput) and not drained.hold_do_not_disrupt
    # The Node and the VM go together, once drained.
    assert {c for c, _ in world.calls if c in ("delete_node", "delete_instance")} == {
        "delete_node",
        "delete_instance",
    }


async def test_a_vm_delete_that_outlasts_its_worker_is_finished_by_the_next(
    temporal_client: Client,
) -> None:
    """The worker stops while the VM's delete is under way; another worker takes the claim
    up and the delete runs again to its end: the claim ends Deleted, the VM gone."""
    world, q = ClaimWorld(), queue()
    world.delete_blocks.clear()
    async with worker(temporal_client, q, world):
        handle = await start_claim(temporal_client, q)
        await until_phase(handle, NodeClaimPhase.JOINING)
        name = name_of(handle)
        await ready(temporal_client, name, handle)
        await handle.signal(ClaimSignal.SCALE_DOWN, ScaleDownRequest(reason="gone", force=True))
        await asyncio.wait_for(world.deletes_started.wait(), timeout=30)
    # The first worker is gone, its delete cancelled half way; the next one finishes it.
    world.delete_blocks.set()
    async with worker(temporal_client, q, world):
        status = await asyncio.wait_for(handle.result(), timeout=60)
    assert isinstance(status, NodeClaimStatus) and status.phase == NodeClaimPhase.DELETED
    assert len(world.called("delete_instance")) >= 2 and not world.vm_exists
