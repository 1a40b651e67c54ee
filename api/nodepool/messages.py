"""NodePoolWorkflow payloads: demand from the trigger, reports from claims, the pool's status
(its query, and the `sync_nodepool_status` activity's input)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel

from api._base import CamelModel
from api.messages import ClaimTimings, object_key_of, workflow_id_of
from api.nodeclaim import NodeClaimPhase, Offering
from api.nodeclass import NodeClassSpec
from api.nodepool import NodePoolSpec, NodePoolStatus
from api.planning import PlannedNode, PodDemand, Resources

# How long a pool holds back a planned node its pods fill only partly, for more of a burst
# (`CLOUDBURST_PARTIAL_NODE_HOLD_S`): the longest a pod waits for company.
PARTIAL_NODE_HOLD_S = 1.0


_POOL_KIND = "nodepool"


class PoolSignal(StrEnum):
    """The NodePoolWorkflow's signals, by name: its handlers are declared with these, and
    the trigger and the claims send them."""

    DEMAND = "demand"
    UPDATE_SPECS = "update_specs"
    NODE_USAGE = "node_usage"
    RETRY_NOW = "retry_now"
    CLAIM_REPORT = "claim_report"
    WORKLOAD_LEFT = "workload_left"
    REQUEST_DISRUPTION = "request_disruption"
    WITHDRAW_DISRUPTION = "withdraw_disruption"


class PoolQuery(StrEnum):
    """The NodePoolWorkflow's queries, by name: its handlers are declared with these, and a
    command asks them without importing the workflow's code (`cloudburst plan`, `explain`)."""

    STATUS = "status"
    POD = "pod"


def pool_workflow_id(namespace: str, name: str) -> str:
    """A NodePool's workflow: one per pool, named by its namespace and name."""
    return workflow_id_of(_POOL_KIND, namespace, name)


def pool_key_of(workflow_id: str) -> tuple[str, str] | None:
    """(namespace, name) of a pool's workflow id; None for any other id."""
    return object_key_of(_POOL_KIND, workflow_id)


class PoolSpecs(BaseModel):
    """The pool and the class its nodes are built from, as the trigger last saw them."""

    pool: NodePoolSpec
    node_class_name: str
    node_class: NodeClassSpec
    # metadata.generation of each, so an older update never overwrites a newer one.
    pool_generation: int = 0
    class_generation: int = 0
    # metadata.uid of each ("" from a trigger that did not send them): an object deleted and
    # created again under its name starts at generation 1 again, and is newer all the same.
    # The pool's uid also makes it the owner of its NodeClaims.
    pool_uid: str = ""
    class_uid: str = ""
    # When the trigger read them (its clock): where scheduled budgets start counting windows,
    # so the pool never reads its own clock to decide whether a budget is active.
    observed_at: datetime | None = None

    def supersedes(self, current: PoolSpecs) -> bool:
        """Whether these specs replace `current`: the same objects at the same or a later
        generation, or objects created since under their names."""
        return self.recreated_since(current) or self._generations() >= current._generations()

    def edited_since(self, current: PoolSpecs) -> bool:
        """A later generation of the same objects, or objects created since."""
        return self.recreated_since(current) or self._generations() > current._generations()

    def recreated_since(self, current: PoolSpecs) -> bool:
        """The pool or its class deleted and created again (another uid): generations of
        different objects say nothing about which is newer, so the latest told wins (a
        second trigger still telling the deleted object's is put right once it sees the
        new one, which it then tells)."""
        return _other_object(self.pool_uid, current.pool_uid) or _other_object(
            self.class_uid, current.class_uid
        )

    def _generations(self) -> tuple[int, int]:
        return self.pool_generation, self.class_generation


def _other_object(uid: str, current_uid: str) -> bool:
    return bool(uid and current_uid and uid != current_uid)


class DemandUpdate(BaseModel):
    """Pending pods the trigger matched to this pool, and pods that stopped pending.

    Keyed by pod UID: sending the same update twice (two triggers, a restart) changes nothing.
    """

    pods: list[PodDemand] = []
    resolved: list[str] = []  # UIDs no longer pending (bound, deleted, matched elsewhere)
    # When set, the full set of pending pods for this pool: anything else is resolved.
    full_resync: bool = False
    sent_at: datetime | None = None
    specs: PoolSpecs | None = None
    # The NodePool is gone (with `full_resync` and no pods: none is its any more).
    pool_deleted: bool = False


class ClaimReport(BaseModel):
    """A child claim telling its pool what happened."""

    claim_name: str
    phase: NodeClaimPhase
    offering: Offering | None = None
    # An offering that failed to launch (capacity, quota, outage): skip it for a while.
    failed_offering: str | None = None
    reason: str = ""
    # The claim's clock when it reported. The pool times nominations and its failed-offering
    # cache from here: a value carried in history, never the pool's own reading of the clock.
    at: datetime | None = None
    # Set with phase Failed: why (FailureReason), so the pool can back off a bad configuration.
    failure_reason: str | None = None


class DisruptionRequest(BaseModel):
    """A claim asking its pool for a disruption permit (or withdrawing the ask)."""

    claim_name: str
    # Empty, Drifted, Underutilized, or an operator's reason (counted by reason-less budgets).
    reason: str


class DisruptionPermit(BaseModel):
    """The pool's answer: go ahead. Also sent unasked when the pool chooses a claim
    (drift replacement, consolidation) within its budgets."""

    reason: str


class NodeUsage(BaseModel):
    """What the watcher sees on a pool's new nodes (on their way, or Ready for less than
    the trigger's `USAGE_WINDOW_S`), which the scheduler is filling with whatever pods are
    pending, not only those the pool nominated there. Told at most a few times a second, and
    only while such nodes change: what the pool plans into a node's room is right only if
    it knows what already took it."""

    # Node (= claim) name -> what the workload pods bound there request, all of them.
    requested: dict[str, Resources] = {}
    # Pods bound to those nodes since the last report: no longer pending, told here in the
    # same message as the room they took (the pending-pod watch may say so a moment later).
    bound: list[str] = []
    observed_at: datetime | None = None


class PoolClaim(BaseModel):
    name: str
    phase: NodeClaimPhase
    offering: Offering
    allocatable: Resources
    nominated: list[str] = []  # pod UIDs expected to land on it
    # What the pods the scheduler bound to its node request, as the watcher last told
    # (`NodeUsage`, while the node is new): nominated pods that no longer fit beside them
    # are planned again at once instead of after the grace, and the room left is what new
    # pods are planned into.
    bound: Resources = Resources()
    # Ready, and the scheduler still filling it (until its nominations' grace is over): its
    # room beside `bound` and what is nominated counts for new pods, as a node's on its way.
    filling: bool = False
    started_at: datetime
    ready_at: datetime | None = None
    # Started to hold the pool at minNodes, not for pods.
    for_min_nodes: bool = False
    # What it was planned for; a drift replacement is planned for the same.
    requests: Resources = Resources()
    # Hash of the pool template and NodeClass it was built from; "" when unknown.
    drift_hash: str = ""
    drifted: bool = False
    # Replacement (drift, consolidation): the claim this one replaces / the one replacing it,
    # and the disruption reason the replaced claim gets once this one is Ready.
    replaces: str | None = None
    replaced_by: str | None = None
    replace_reason: str = "Drifted"


class PoolState(BaseModel):
    """Everything the pool workflow carries across continue-as-new."""

    specs: PoolSpecs
    pending: dict[str, PodDemand] = {}
    claims: dict[str, PoolClaim] = {}
    # offering key -> until when it is skipped
    failed_offerings: dict[str, datetime] = {}
    # pod UID -> why it waits (LimitReached, Unschedulable: ...)
    blocked: dict[str, str] = {}
    # claim -> reason, in the order asked: waiting for a disruption budget
    disruption_queue: dict[str, str] = {}
    # claims allowed to disrupt that have not reported Deleting yet
    permits: dict[str, str] = {}
    # claim -> why it is not being disrupted (do-not-disrupt pods), as the claim reported
    disruption_blocked: dict[str, str] = {}
    claims_started: int = 0
    last_consolidation: datetime | None = None
    consolidation_note: str = ""
    # claim -> what the latest consolidation found for it (see ConsolidationDecision).
    consolidation_verdicts: dict[str, str] = {}
    # The NodePool status last written, so that only changes are written.
    published_status: NodePoolStatus | None = None
    # Moments the pool waits for (see workflows/alarms.py): each stored once, so that the
    # timer armed for it keeps its meaning whatever the clock says when it fires.
    plan_retry_at: datetime | None = None
    consolidate_at: datetime | None = None
    safety_net_at: datetime | None = None
    # Claims of this pool fail on their configuration (a Secret missing, a bad NodeClass):
    # no new claim until the specs change or `config_retry_at` comes (backing off).
    config_error: str = ""
    config_retry_at: datetime | None = None
    config_failures: int = 0
    # Scheduled budgets: the latest window start reached so far, by budget identity.
    budget_window_starts: dict[str, datetime] = {}
    # Why the prices of the pool's latest new nodes may be out of date (one line per
    # provider; empty: current), for the PricesStale condition.
    stale_prices: list[str] = []
    # Planned nodes that pods fill only partly wait for more pods until then (set when the
    # first is held back; None: nothing is held).
    hold_until: datetime | None = None
    # The NodePool was deleted (the trigger said so): its claims go (the garbage collector
    # deletes their NodeClaims) and nothing new is planned, a floor or a replacement
    # neither, until a NodePool is created again under its name (specs of another uid).
    deleted: bool = False


class NodePoolInput(BaseModel):
    namespace: str
    name: str
    cluster_id: str = "cloudburst"
    claim_timings: ClaimTimings = ClaimTimings()
    failed_offering_ttl_s: float = 180
    # A look at least this often even without news. Every deadline has its own alarm (the
    # failure cache, nominations, consolidation, budgets): this is only a backstop, kept
    # rare so an idle pool writes little history.
    reconcile_interval_s: float = 1800
    # Once a node is Ready the scheduler decides; pods nominated to it that are still pending
    # this long after are planned again (the scheduler may have put others there instead).
    nomination_grace_after_ready_s: float = 15
    # How long a planned node that its pods fill only partly may wait for more of a burst
    # (workflows/decisions/pool.py `partly_filled`); 0: every planned node goes at once.
    partial_node_hold_s: float = PARTIAL_NODE_HOLD_S
    # The workflow task timeout of the claims it starts (the trigger's
    # CLOUDBURST_CLAIM_TASK_TIMEOUT_S); None: Temporal's default.
    claim_task_timeout_s: float | None = None
    state: PoolState


class BudgetStatus(BaseModel):
    nodes: str
    reasons: list[str] | None
    schedule: str | None
    duration: str | None
    active: bool


class PoolStatus(BaseModel):
    name: str
    namespace: str
    pending_pods: int
    blocked: dict[str, str]
    claims: list[PoolClaim]
    failed_offerings: dict[str, datetime]
    consolidation: str = ""
    consolidation_verdicts: dict[str, str] = {}
    disruption_queue: dict[str, str] = {}
    permits: dict[str, str] = {}
    disruption_blocked: dict[str, str] = {}
    # reason -> how many more nodes may be disrupted right now
    disruptions_allowed: dict[str, int] = {}
    budgets: list[BudgetStatus] = []
    nodes: int
    ready_nodes: int
    cpu_m: int
    memory_bytes: int
    # Why new claims are held back (claims failing on the configuration), if they are, and
    # until when (the back-off's next try; `cloudburst pools retry` ends it at once).
    config_error: str = ""
    config_retry_at: datetime | None = None
    # The deadlines the pool is waiting for (workflows/alarms.py), by name.
    alarms: list[str] = []


class ConsolidationInput(BaseModel):
    pool_name: str
    namespace: str
    pool: NodePoolSpec
    node_class: NodeClassSpec
    # Ready claims that have been stable for consolidateAfter: the candidates to remove.
    candidates: list[str]
    # Every Ready claim of the pool: where the candidates' pods could move.
    ready: dict[str, Offering]
    min_savings_eur_per_hour: float
    failed_offerings: list[str] = []
    # When given, only candidates Ready (stable) for `min_stable_s` by the activity's clock.
    stable_since: dict[str, datetime] = {}
    min_stable_s: float = 0


class ConsolidationDecision(BaseModel):
    action: Literal["none", "delete", "replace"] = "none"
    claim_name: str | None = None
    # For "replace": the cheaper node to start first.
    replacement: PlannedNode | None = None
    savings_eur_per_hour: float = 0.0
    explanation: str = ""
    # Every claim looked at -> what consolidation found for it (kept: why; the move: which).
    verdicts: dict[str, str] = {}


class NodePoolStatusUpdate(CamelModel):
    """What the pool workflow asks `sync_nodepool_status` to write (and to export as metrics)."""

    namespace: str
    name: str
    status: NodePoolStatus
    cpu_m: int = 0
    memory_bytes: int = 0
    # The pool's limits, for the usage-vs-limit gauges; None = unlimited.
    max_nodes: int | None = None
    limit_cpu_m: int | None = None
    limit_memory_bytes: int | None = None
