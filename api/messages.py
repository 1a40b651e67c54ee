"""Workflow inputs, signal/update payloads and activity inputs/outputs.

Everything here goes into Temporal history, so nothing here may hold a secret: Secrets are
named, never carried.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from api.events import KubeEvent
from api.nodeclaim import NodeClaim, NodeClaimStatus, Offering
from api.nodeclass import NodeClassSpec
from api.nodepool import Taint

TASK_QUEUE = "cloudburst"
_CLAIMS_QUEUE_SUFFIX = "-claims"
_CLAIM_KIND = "nodeclaim"
# Between kind, namespace and name in a workflow id: neither a namespace (a DNS label) nor an
# object name (a DNS subdomain) may contain it, so no two objects share an id (`team/b-web`
# and `team-b/web` are `nodepool/team/b-web` and `nodepool/team-b/web`).
ID_SEPARATOR = "/"


def workflow_id_of(kind: str, namespace: str, name: str) -> str:
    """The workflow id of the object `namespace/name` of `kind` (nodeclaim, nodepool)."""
    return ID_SEPARATOR.join((kind, namespace, name))


def object_key_of(kind: str, workflow_id: str) -> tuple[str, str] | None:
    """(namespace, name) of a workflow id made by `workflow_id_of` for `kind`, else None."""
    parts = workflow_id.split(ID_SEPARATOR)
    if len(parts) != 3 or parts[0] != kind or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def claim_workflow_id(namespace: str, claim_name: str) -> str:
    """A claim's workflow: one per NodeClaim, named by its namespace and name."""
    return workflow_id_of(_CLAIM_KIND, namespace, claim_name)


class ClaimSignal(StrEnum):
    """The NodeClaimWorkflow's signals, by name: its handlers are declared with these, and
    the trigger, the pool and the CLI send them."""

    OBSERVE_NODE = "observe_node"
    SCALE_DOWN = "scale_down"
    DISRUPTION_PERMITTED = "disruption_permitted"
    MARK_DRIFTED = "mark_drifted"


def claim_task_queue(task_queue: str) -> str:
    """The claims' task queue beside `task_queue` (pools, garbage collection, prices).

    A worker polls both, each with its own workflow cache: a thousand claims waking at once
    then never push their pool out of memory, where its next task would replay thousands of
    events among theirs and could outlast its workflow task timeout.
    """
    return f"{task_queue}{_CLAIMS_QUEUE_SUFFIX}"


def claim_key_of(workflow_id: str) -> tuple[str, str] | None:
    """(namespace, name) of a claim's workflow id; None for any other id."""
    return object_key_of(_CLAIM_KIND, workflow_id)


class ClaimTimings(BaseModel):
    """Durations the lifecycle waits on; tests shorten them, production keeps the defaults."""

    registration_timeout_s: float = 900
    # Safety net beside the watcher's signals: how often the claim looks at its node itself.
    node_poll_interval_s: float = 60
    # Once Ready the watcher's signals drive the claim; the poll (node, then VM) is only a
    # backstop for a lost signal: every 4 h keeps an idle claim under 4 events an hour.
    ready_poll_interval_s: float = 4 * 3600
    instance_boot_poll_s: float = 5
    drain_poll_interval_s: float = 2
    eviction_retry_s: float = 5


class NodeObservation(BaseModel):
    """What the node watcher saw of a claim's node. Sent on every transition; idempotent."""

    node_name: str
    exists: bool
    ready: bool = False
    # When the node stopped being Ready (or was first seen not Ready).
    not_ready_since: datetime | None = None
    # No pods but DaemonSet, mirror or finished ones since this moment; None when busy.
    empty_since: datetime | None = None
    pod_count: int = 0
    # Pods ("namespace/name") annotated do-not-disrupt: they hold voluntary disruption back.
    do_not_disrupt: list[str] = []
    observed_at: datetime
    # The provider is reclaiming the VM (spot interruption notice): the node must go now.
    interruption: str | None = None
    # The kubelet's capacity (cpu, memory, pods …) as the node reports it.
    capacity: dict[str, str] = {}
    # The Node's spec.providerID: the claim trusts the node only when it names its VM.
    provider_id: str | None = None


class NodeClaimInput(BaseModel):
    claim: NodeClaim
    node_class_name: str
    node_class: NodeClassSpec
    cluster_id: str = "cloudburst"
    timings: ClaimTimings = ClaimTimings()
    # Set when the workflow continues as new: where the previous run left off.
    resume: NodeClaimStatus | None = None
    resume_node: NodeObservation | None = None
    # The NodePoolWorkflow that started this claim, told of every phase change; None for
    # claims made by hand.
    pool_workflow_id: str | None = None
    resume_instance_id: str | None = None


class ClaimStart(BaseModel):
    """One claim's workflow, as its pool starts it (`start_claim_workflows`)."""

    input: NodeClaimInput
    task_queue: str
    task_timeout_s: float | None = None  # None: Temporal's default
    pool_name: str  # its `NodePool` search attribute


class ClaimStarts(BaseModel):
    starts: list[ClaimStart]


class ClaimStartsResult(BaseModel):
    # claim name -> why Temporal refused its start for good (it never runs); every other
    # claim of the batch runs, started by this call or by an earlier attempt.
    refused: dict[str, str] = Field(default_factory=dict)
    # The batch's NodePool is gone from the cluster (deleted, or another of its name): nothing
    # was started, and the pool is to plan nothing more until its specs say it is back.
    pool_gone: bool = False


class ScaleDownRequest(BaseModel):
    reason: str = Field(default="Manual", min_length=1)
    requested_by: str = "cli"
    # Skip the pool's disruption budgets (and do-not-disrupt pods): the operator knows.
    force: bool = False
    # The NodeClaim resource whose deletion asks it (`kubectl delete nodeclaim`): the claim
    # goes only if that is its own resource, not an older or newer one of the same name.
    resource_uid: str | None = None


class ScaleDownResult(BaseModel):
    accepted: bool
    reason: str


# --- activity inputs and outputs ---------------------------------------------------------


class BootstrapInput(BaseModel):
    """What a claim asks its first-boot script to be. The activity renders what the cluster
    authorises (`activities/claim_authority.py`): the NodeClass read from the cluster, not
    `node_class`; `labels` and `taints` only as far as they are its NodeClaim's."""

    claim_name: str
    namespace: str
    node_pool: str
    node_class_name: str
    node_class: NodeClassSpec
    labels: dict[str, str] = {}
    taints: list[Taint] = []
    offering: Offering | None = None
    claim_uid: str | None = None  # the NodeClaim object's, from the claim's start


class BootstrapRefs(BaseModel):
    """Names of the Secrets holding the join token and the first-boot script.

    `namespace` is the script Secret's: the worker's own namespace (`cloudburst-system`);
    histories recorded before it moved there name the pool's namespace, and are still read
    and cleaned up from there.
    """

    namespace: str
    token_secret: str
    token_secret_namespace: str = "kube-system"
    script_secret: str
    token_expires_at: datetime
    # The script Secret's resourceVersion as the bootstrap wrote it (None in histories from
    # before): the create call on the same worker uses the script it just rendered.
    script_version: str | None = None


class CreateInstanceInput(BaseModel):
    """What a claim asks to launch. The activity launches only what the cluster authorises
    (`activities/claim_authority.py`): the NodeClaim `namespace/claim_name` (of `claim_uid`
    when given), its pool, and the NodeClass read from the cluster, not `node_class`."""

    claim_name: str
    namespace: str
    node_pool: str
    node_class_name: str
    node_class: NodeClassSpec
    offering: Offering
    cluster_id: str
    bootstrap: BootstrapRefs
    claim_uid: str | None = None  # the NodeClaim object's, from the claim's start


class InstanceInfo(BaseModel):
    instance_id: str
    name: str
    provider: str
    region: str
    instance_type: str
    state: str
    created_at: datetime | None = None
    capacity_type: str = "on-demand"


class InstanceRef(BaseModel):
    """A VM to act on; without an id it is looked up by the claim's label on the provider."""

    claim_name: str
    instance_id: str | None = None
    provider: str
    cluster_id: str
    # Why the VM goes (Empty, Expired, NodeLost, ...): the terminated metric's label.
    reason: str | None = None
    namespace: str
    node_class_name: str
    node_class: NodeClassSpec
    # The NodeClaim's uid: without an id, a VM recording a uid is the claim's only with this
    # one (a same-named claim before or after it, in any namespace, holds another).
    claim_uid: str | None = None


class NodeRef(BaseModel):
    """The claim's node: the Node named `node_name` whose providerID names `instance_id`
    (`cluster/node_identity.py`); a Node of that name that is not that VM is not acted on."""

    node_name: str
    instance_id: str | None = None


class TailnetDeviceRef(BaseModel):
    """A claim's node on the tailnet, for `remove_tailnet_device`: its device is the one whose
    hostname is the node name and that carries the NodeClass's Tailscale tags. The OAuth
    client is read from the NodeClass's Secret inside the activity."""

    node_name: str
    namespace: str
    node_class_name: str
    node_class: NodeClassSpec


class TailnetDeviceRemoval(BaseModel):
    """What `remove_tailnet_device` did: the device ids it removed (none when already gone),
    or why it had nothing to do (no Tailscale, or the reusable-key mode without API access)."""

    removed: list[str] = []
    skipped: str | None = None


class LabelNodeInput(BaseModel):
    """What a claim asks its node to carry. The activity applies only what the cluster
    authorises: the labels and taints of the NodeClaim `namespace/node_name` (a tenant's
    marks those of its own namespace), the ownership labels, and labels of what the VM is
    that match one of its offerings; anything else asked is refused."""

    node_name: str
    instance_id: str | None = None  # as in NodeRef
    labels: dict[str, str]
    # The claim's taints: put back if the node registered without them.
    taints: list[Taint] = []
    # The claim's namespace and NodeClaim uid; a request without its namespace is refused.
    namespace: str | None = None
    claim_uid: str | None = None


class DrainInput(BaseModel):
    node_name: str
    instance_id: str | None = None  # as in NodeRef
    # When the drain stops waiting on PDBs and deletes the remaining pods.
    force_after: datetime
    # The same as a grace period counted by the drain itself from when it began (kept across
    # retries): no comparison of the workflow's clock with the worker's. Wins when set.
    grace_s: float | None = None
    poll_interval_s: float = 2
    eviction_retry_s: float = 5
    # do-not-disrupt pods stay until `force_after` (Karpenter's behaviour on expiry); an
    # operator's forced scale-down takes them at once.
    hold_do_not_disrupt: bool = True


class DrainResult(BaseModel):
    evicted: int
    forced: int
    left_alone: int


class NodeState(BaseModel):
    """A poll of the node, the claim's safety net beside the watcher's signals."""

    exists: bool
    ready: bool = False
    empty: bool = True
    pod_count: int = 0
    # Pods ("namespace/name") annotated do-not-disrupt.
    do_not_disrupt: list[str] = []
    # What the kubelet reports (cpu, memory, pods, ...): the claim's real capacity.
    capacity: dict[str, str] = {}
    allocatable: dict[str, str] = {}
    # The activity's clock when it looked: the claim dates "empty since" / "not Ready since"
    # from here, a value in history, rather than from its own clock.
    observed_at: datetime | None = None
    interruption: str | None = None  # a spot interruption notice on the node
    provider_id: str | None = None  # the Node's spec.providerID: whether it is the claim's VM


class FailureReason(StrEnum):
    NO_CAPACITY = "InsufficientCapacity"
    PROVIDER_ERROR = "ProviderError"
    REGISTRATION_TIMEOUT = "RegistrationTimeout"
    INVALID_CONFIG = "InvalidConfiguration"


class MirrorResult(BaseModel):
    """What the mirror wrote: the NodeClaim resource's uid (None when it wrote none)."""

    uid: str | None = None


class MirrorInput(BaseModel):
    """The claim as its NodeClaim custom resource should show it, plus Events to record."""

    claim: NodeClaim
    events: list[KubeEvent] = []
    # The claim's life is over: drop the finalizer so the resource goes away.
    remove: bool = False
    # With `remove`: drop the finalizer but leave the resource, Failed, for people to read;
    # it replaces the pool's previous failed one (and goes with its pool).
    keep: bool = False
    # The claim's first showing (histories record it; the resource is made before the claim
    # starts, so the mirror writes its status alike either way).
    new: bool = False
