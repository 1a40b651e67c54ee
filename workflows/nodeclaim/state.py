"""What a claim knows: one object every phase reads and writes, so each phase is a function
of it. Nothing here calls an activity; setting a phase or an event also updates what the
Web UI shows (`workflow.set_current_details`, the `CloudburstPhase` search attribute)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from temporalio import workflow

from api import search_attributes as sa
from api.messages import (
    BootstrapRefs,
    FailureReason,
    InstanceRef,
    NodeClaimInput,
    NodeObservation,
    NodeRef,
    ScaleDownRequest,
)
from api.nodeclaim import NodeClaim, NodeClaimPhase, NodeClaimSpec, NodeClaimStatus, Offering
from api.nodepool.messages import DisruptionPermit
from cluster.node_identity import is_claims_node, is_claims_node_by_last_segment
from workflows.alarms import Alarms

# The alarm of `ClaimState.next_poll_at`: the look at the node that registration and liveness
# each arm while they wait (one at a time: liveness begins when registration is done).
POLL = "poll the node"


class ClaimFailed(Exception):
    """The claim cannot go on: it fails visibly, then cleans up (`termination.fail`)."""

    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class ClaimState:
    input: NodeClaimInput
    status: NodeClaimStatus
    # The Node named like the claim as last observed (the watcher's signal or the claim's
    # poll), whoever's it is; `node` is what the claim may act on.
    observed: NodeObservation | None = None
    instance_id: str | None = None  # the VM this claim created, once it has
    bootstrap: BootstrapRefs | None = None  # the join token's and script's Secrets
    launched_on: list[Offering] = field(default_factory=list)  # offerings a create was called for
    scale_down: ScaleDownRequest | None = None
    permit: DisruptionPermit | None = None
    asked: str | None = None  # the reason a permit was asked for
    blocked_by: str | None = None  # the do-not-disrupt pods last said to hold it
    drifted: bool = False
    instance_gone: bool = False
    cordoned: bool = False  # cordoned to check it is still empty
    # Set by every signal and alarm; cleared at the top of each round, before the round looks
    # at the state, so news that comes while the round awaits is never missed.
    dirty: bool = True
    observations: int = 0  # observe_node signals so far (a poll yields to a newer one)
    last_signal_at: datetime | None = None  # the watcher's clock in its latest signal
    next_poll_at: datetime | None = None
    # The providerID of the stranger a Warning was written for ("" for none set).
    stranger_told: str | None = None
    resource_uid: str | None = None  # the NodeClaim resource's, as the mirror last wrote it
    last_event: str = "started"
    # Node identity compares the whole providerID (`cluster/node_identity.py`); False only for
    # a run recorded before that (its history replays with the last-segment comparison).
    whole_identity: bool = True
    alarms: Alarms = field(init=False)  # deadlines, each reached when its timer fires

    def __post_init__(self) -> None:
        self.alarms = Alarms(on_ring=self.wake)

    @classmethod
    def of(cls, input: NodeClaimInput) -> ClaimState:
        """A new claim's state, or a resumed one's (continue-as-new carries it in `input`)."""
        return cls(
            input=input,
            status=input.resume or NodeClaimStatus(),
            observed=input.resume_node,
            instance_id=input.resume_instance_id,
        )

    @property
    def claim(self) -> NodeClaim:
        return self.input.claim

    @property
    def spec(self) -> NodeClaimSpec:
        return self.input.claim.spec

    @property
    def name(self) -> str:
        """The claim's name, which is its node's name too."""
        return self.input.claim.metadata.name

    @property
    def namespace(self) -> str:
        return self.input.claim.metadata.namespace

    @property
    def node(self) -> NodeObservation | None:
        """The claim's node as last observed: a Node of its name that is not its VM (no VM
        yet, or a providerID naming another machine, or none) is no node of its own."""
        seen = self.observed
        if seen is None or not seen.exists or self.stranger is None:
            return seen
        return NodeObservation(node_name=seen.node_name, exists=False, observed_at=seen.observed_at)

    @property
    def stranger(self) -> str | None:
        """The providerID ("" for none) of the Node of the claim's name when it is not the
        claim's VM; None when there is no such Node, or it is the claim's."""
        seen = self.observed
        if seen is None or not seen.exists or self.is_its_vm(seen.provider_id):
            return None
        return seen.provider_id or ""

    def is_its_vm(self, provider_id: str | None) -> bool:
        """Whether a Node with `provider_id` is this claim's VM."""
        judge = is_claims_node if self.whole_identity else is_claims_node_by_last_segment
        return judge(provider_id, self.instance_id)

    def identity_judged(self, whole: bool) -> None:
        """How this run judges node identity (the patch `node-identity-whole-provider-id`,
        asked once as the run starts)."""
        self.whole_identity = whole

    @property
    def budgeted(self) -> bool:
        """A pool budgets this claim's voluntary disruptions (a claim made by hand: none)."""
        return self.input.pool_workflow_id is not None

    def node_ref(self) -> NodeRef:
        """The claim's node: named like it, and its VM's (`cluster/node_identity.py`)."""
        return NodeRef(node_name=self.name, instance_id=self.instance_id)

    # --- the state's own transitions: each field written by more than one phase is written
    # only here (docs/architecture.md, "Who writes the state").

    def wake(self) -> None:
        """News (a signal, an alarm): the waiting loop looks again."""
        self.dirty = True

    def begin_round(self) -> None:
        """A loop's round starts: news from here on wakes the next one."""
        self.dirty = False

    def poll_due_at(self, interval_s: float) -> datetime:
        """When the next look at the node (`POLL`) is due: `interval_s` from now unless one is
        armed already. Registration's loop and liveness's each arm it while they wait (one at a
        time: liveness begins when registration is done)."""
        if self.next_poll_at is None:
            self.next_poll_at = workflow.now() + timedelta(seconds=interval_s)
        return self.next_poll_at

    def poll_taken(self) -> None:
        """The look is being taken (or no longer wanted): the next round arms the next."""
        self.next_poll_at = None

    def permitted(self, permit: DisruptionPermit) -> None:
        """A permit to disrupt for `permit.reason`: the pool's signal, or the claim's own when
        no pool is left to budget it."""
        self.permit = permit

    def permit_dropped(self) -> None:
        """The disruption is off (blocked, or the node was busy after all): a new one needs a
        new permit."""
        self.permit = None

    def bootstrap_stored(self, refs: BootstrapRefs) -> None:
        """The join token's and first-boot script's Secrets exist."""
        self.bootstrap = refs

    def bootstrap_deleted(self) -> None:
        """The join token has done its job (or the claim ends): its Secrets are gone."""
        self.bootstrap = None

    def capacity_seen(self, capacity: dict[str, str]) -> None:
        """The node's capacity as the claim shows it: the offering's until the kubelet's is
        known (the watcher's word or a look at the Node)."""
        self.status.capacity = capacity

    def set_phase(self, phase: NodeClaimPhase, event: str) -> None:
        self.status.phase = phase
        workflow.upsert_search_attributes([sa.PHASE.value_set(phase.value)])
        self.event(event)

    def event(self, text: str) -> None:
        self.last_event = text
        self.update_details()

    def update_details(self) -> None:
        """Current details in the Web UI: what the claim is doing now. Never a secret."""
        status = self.status
        rows = [
            ("Phase", status.phase.value),
            ("Last step", self.last_event),
            ("Pool", self.spec.node_pool),
            ("Offering", _offering_text(status)),
            ("Instance", status.instance_id or "—"),
            ("Node", status.node_name or "—"),
        ]
        node = self.node
        if node and node.exists:
            state = "Ready" if node.ready else "NotReady"
            rows.append(("Node state", f"{state}, {node.pod_count} pods"))
            if node.empty_since:
                rows.append(("Empty since", node.empty_since.isoformat(timespec="seconds")))
        if status.failure_message:
            rows.append(("Failure", status.failure_message))
        table = "\n".join(f"| {key} | {value} |" for key, value in rows)
        workflow.set_current_details(
            f"**NodeClaim {self.namespace}/{self.name}**\n\n| | |\n|---|---|\n{table}"
        )


def _offering_text(status: NodeClaimStatus) -> str:
    if not status.provider:
        return "—"
    price = f" at €{status.price_eur_per_hour:.4f}/h" if status.price_eur_per_hour else ""
    return f"{status.provider}/{status.region}/{status.instance_type}{price}"


def instance_ref(state: ClaimState, provider: str, instance_id: str | None) -> InstanceRef:
    """The claim's VM as a VM call names it: liveness asks whether it is there, termination
    deletes it."""
    return InstanceRef(
        claim_name=state.name,
        instance_id=instance_id,
        provider=provider,
        reason=state.status.deletion_reason or state.status.failure_reason,
        cluster_id=state.input.cluster_id,
        namespace=state.namespace,
        node_class_name=state.input.node_class_name,
        node_class=state.input.node_class,
        claim_uid=state.input.claim.metadata.uid,
    )
