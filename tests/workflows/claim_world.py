"""Stand-ins for everything a NodeClaimWorkflow calls, under the real activity names (how
Temporal unit-tests a workflow): each call is recorded, and a test decides what each answers
(a capacity error on one offering, a VM that is gone, a delete that blocks)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.heartbeat import heartbeats_itself
    from api import Offering
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
        claim_workflow_id,
    )
    from api.nodeclass import FakeClass, JoinSettings, NodeClassSpec
    from api.nodepool import NodePoolSpec
    from workflows.nodeclaim import NodeClaimWorkflow

OFFERING = Offering(provider="fake", region="sim-1", instance_type="fk-small", vcpu=2)


def provider_id(node_name: str, region: str = "sim-1") -> str:
    """The providerID of the node of `create_instance`'s VM for the claim `node_name`."""
    return f"fake:///{region}/{node_name}"


class ClaimWorld:
    """The cloud and the cluster a claim sees. `create_errors[offering key]` is raised by a
    create on that offering; `vms` are the VMs the creates made, by id (a create of a name
    that has a VM in that region finds it, as a cloud's idempotency by name does), a delete
    removes them; `creates_that_hang` is how many creates, having made their VM, never
    answer nor heartbeat; with `errors_after_making`, a create that raises has made its VM; `vm_exists` is what a look at the VM finds; `node_state` what a poll of the node
    answers; `delete_blocks` holds every VM delete until it is cleared."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.create_errors: dict[str, ApplicationError] = {}
        self.vms: dict[str, InstanceInfo] = {}
        self.creates_that_hang = 0
        self.errors_after_making = False
        self.vm_exists = True
        self.node_state: Callable[[str], NodeState] = lambda name: NodeState(
            exists=False, ready=False
        )
        self.delete_blocks = asyncio.Event()
        self.delete_blocks.set()
        self.deletes_started = asyncio.Event()

    def called(self, name: str) -> list[object]:
        return [arg for called, arg in self.calls if called == name]

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
        self.calls.append(("prepare_bootstrap", input))
        return BootstrapRefs(
            namespace=input.namespace,
            token_secret="bootstrap-token-abcdef",
            script_secret=f"{input.claim_name}-bootstrap",
            token_expires_at=datetime.now(UTC) + timedelta(hours=1),
        )

    @activity.defn(name="create_instance")
    @heartbeats_itself  # as the real one: a create that hangs is not kept alive by the worker
    async def create_instance(self, input: CreateInstanceInput) -> InstanceInfo:
        self.calls.append(("create_instance", input))
        error = self.create_errors.get(input.offering.key)
        if error is not None and not self.errors_after_making:
            raise error
        offering = input.offering
        instance_id = f"{offering.provider}/{offering.region}/{input.claim_name}"
        vm = self.vms.setdefault(
            instance_id,
            InstanceInfo(
                instance_id=instance_id,
                name=input.claim_name,
                provider=offering.provider,
                region=offering.region,
                instance_type=offering.instance_type,
                state="running",
            ),
        )
        if error is not None:
            raise error
        if self.creates_that_hang > 0:
            self.creates_that_hang -= 1
            await asyncio.Event().wait()  # made, never answered: until the timeout cancels it
        return vm

    @activity.defn(name="get_node_state")
    async def get_node_state(self, input: NodeRef) -> NodeState:
        self.calls.append(("get_node_state", input))
        return self.node_state(input.node_name)

    @activity.defn(name="get_instance")
    async def get_instance(self, ref: InstanceRef) -> InstanceInfo | None:
        self.calls.append(("get_instance", ref))
        if not self.vm_exists:
            return None
        return InstanceInfo(
            instance_id=ref.instance_id or "",
            name=ref.claim_name,
            provider=ref.provider,
            region="sim-1",
            instance_type="fk-small",
            state="running",
        )

    @activity.defn(name="cordon_node")
    async def cordon_node(self, input: NodeRef) -> None:
        self.calls.append(("cordon_node", input))

    @activity.defn(name="cordon_and_look")
    async def cordon_and_look(self, input: NodeRef) -> NodeState:
        self.calls.append(("cordon_and_look", input))
        return self.node_state(input.node_name)

    @activity.defn(name="uncordon_node")
    async def uncordon_node(self, input: NodeRef) -> None:
        self.calls.append(("uncordon_node", input))

    @activity.defn(name="delete_node")
    async def delete_node(self, input: NodeRef) -> None:
        self.calls.append(("delete_node", input))

    @activity.defn(name="label_node")
    async def label_node(self, input: LabelNodeInput) -> None:
        self.calls.append(("label_node", input))

    @activity.defn(name="drain_node")
    async def drain_node(self, input: DrainInput) -> DrainResult:
        self.calls.append(("drain_node", input))
        return DrainResult(evicted=1, forced=0, left_alone=0)

    @activity.defn(name="delete_instance")
    async def delete_instance(self, ref: InstanceRef) -> None:
        self.calls.append(("delete_instance", ref))
        self.deletes_started.set()
        while not self.delete_blocks.is_set():
            activity.heartbeat()
            await asyncio.sleep(0.1)
        self.vm_exists = False
        for instance_id, vm in list(self.vms.items()):
            # By id, or else by the claim's name on the provider (its label).
            if instance_id == ref.instance_id or (
                ref.instance_id is None
                and vm.name == ref.claim_name
                and vm.provider == ref.provider
            ):
                del self.vms[instance_id]

    @activity.defn(name="delete_bootstrap_secrets")
    async def delete_bootstrap_secrets(self, refs: BootstrapRefs) -> None:
        self.calls.append(("delete_bootstrap_secrets", refs))

    @activity.defn(name="sync_nodeclaim")
    async def sync_nodeclaim(self, input: MirrorInput) -> MirrorResult:
        return MirrorResult()

    @activity.defn(name="record_events")
    async def record_events(self, batch: EventBatch) -> None:
        self.calls.append(("record_events", batch))


def observation(
    name: str,
    *,
    ready: bool = True,
    exists: bool = True,
    empty_for_s: float | None = None,
    do_not_disrupt: list[str] | None = None,
    region: str = "sim-1",
    not_ready_for_s: float | None = None,
) -> NodeObservation:
    now = datetime.now(UTC)
    return NodeObservation(
        node_name=name,
        exists=exists,
        ready=ready,
        provider_id=provider_id(name, region) if exists else None,
        empty_since=now - timedelta(seconds=empty_for_s) if empty_for_s is not None else None,
        not_ready_since=(
            now - timedelta(seconds=not_ready_for_s) if not_ready_for_s is not None else None
        ),
        pod_count=0 if empty_for_s is not None else 1,
        do_not_disrupt=do_not_disrupt or [],
        capacity={"cpu": "2", "memory": "4Gi"} if exists else {},
        observed_at=now,
    )


async def start_claim(
    client: Client,
    queue: str,
    *,
    offerings: list[Offering] | None = None,
    timings: ClaimTimings | None = None,
    disruption: dict[str, object] | None = None,
) -> WorkflowHandle[NodeClaimWorkflow, object]:
    """A claim of no pool (nobody budgets it), its VM on the first offering that works."""
    name = f"phase-{uuid.uuid4().hex[:6]}"
    pool = NodePoolSpec.model_validate({"disruption": disruption or {}})
    claim = new_claim(
        name=name,
        namespace="default",
        pool_name="phases",
        pool=pool,
        node_class_name="sample",
        offerings=offerings or [OFFERING],
    )
    return await client.start_workflow(
        NodeClaimWorkflow.run,
        NodeClaimInput(
            claim=claim,
            node_class_name="sample",
            node_class=NodeClassSpec(
                fake=FakeClass(), join=JoinSettings(host_api_server="https://127.0.0.1:6443")
            ),
            timings=timings or ClaimTimings(node_poll_interval_s=600, ready_poll_interval_s=600),
        ),
        id=claim_workflow_id("default", name),
        task_queue=queue,
    )
