"""What `cloudburst explain` and `cloudburst plan` answer with (`-o json|yaml`), and what a
pool's `pod` query tells of one pending pod.

Every answer is built from what is already recorded: the cluster's objects and Events, and the
pools' queries. Nothing here is computed by the workflows for explaining alone, so an answer is
the same whichever trigger or worker wrote what it reads.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from api.nodeclaim import NodeClaimPhase, Offering
from api.planning import Resources


class PoolPodView(BaseModel):
    """A pool's answer about one pod (its `pod` query): whether the pool has it among the
    pods it plans for, the claim it is nominated to, or why it waits."""

    known: bool  # the trigger told the pool of the pod, and it still waits
    nominated_to: str | None = None
    claim_phase: NodeClaimPhase | None = None
    claim_started_at: datetime | None = None
    offering: Offering | None = None
    # Why it waits (`LimitReached: ...`, `pool ...: no offering ...`, a failing plan or
    # configuration); None: the pool is not holding it back.
    blocked: str | None = None
    # Held back with a node its pods fill only partly, for more of a burst, until then.
    held_until: datetime | None = None
    # The pool's limits and what its live claims hold of them, in words with numbers.
    limits: str = ""
    config_error: str = ""


class PoolVerdictView(BaseModel):
    """One NodePool, judged for a pod (cluster/matching.py)."""

    pool: str  # namespace/name
    serves_namespace: bool
    hosts: bool
    reason: str | None = None
    weight: int = 0
    chosen: bool = False


class EventView(BaseModel):
    type: str
    reason: str
    message: str
    count: int = 1
    last_seen: datetime | None = None
    source: str = ""


class ClaimView(BaseModel):
    """A claim as explained: its phase and age, the offering and where its price came from."""

    namespace: str
    name: str
    phase: str
    age_s: float | None = None
    offering: str | None = None
    price_eur_per_hour: float | None = None
    price_source: str | None = None
    price_as_of: str | None = None
    node: str | None = None


class PodExplanation(BaseModel):
    """`cloudburst explain pod`."""

    pod: str  # namespace/name
    phase: str
    node_name: str | None = None
    # One line: where the pod is, or what it waits for.
    summary: str
    pools: list[PoolVerdictView] = []
    chosen_pool: str | None = None
    # The pool's own view of the pod, when it answered.
    in_pool: PoolPodView | None = None
    pool_unanswered: str | None = None  # why the pool's view is missing
    claim: ClaimView | None = None
    events: list[EventView] = []


class Blocker(BaseModel):
    """One thing that keeps a node: what kind (for scripts), and the words."""

    kind: str  # EmptyTTL, DoNotDisrupt, Budget, WaitingForPermit, NotEmpty, Consolidation, ...
    message: str


class NodeExplanation(BaseModel):
    """`cloudburst explain node|claim`."""

    node: str
    claim: ClaimView | None = None
    pool: str | None = None  # namespace/name
    summary: str
    blockers: list[Blocker] = []
    workload_pods: list[str] = []  # namespace/name of the pods that count (DaemonSets aside)
    do_not_disrupt: list[str] = []
    empty_since: datetime | None = None
    empty_ttl_remaining_s: float | None = None
    expires_at: datetime | None = None
    drifted: bool = False
    consolidation: str = ""
    disruptions_allowed: dict[str, int] = {}
    permit: str | None = None
    queued_for: str | None = None
    pool_unanswered: str | None = None
    events: list[EventView] = []


class PlannedNodeView(BaseModel):
    offering: str
    capacity_type: str
    price_eur_per_hour: float
    price_source: str | None = None
    price_as_of: str | None = None
    pods: list[str]  # namespace/name
    requests: Resources
    allocatable: Resources
    fallbacks: list[str] = []


class SingleTypePlan(BaseModel):
    """The cheapest plan with one instance type (one offering) for every pod."""

    offering: str
    nodes: int
    cost_eur_per_hour: float


class PlanComparison(BaseModel):
    """`cloudburst plan`: what the pool would launch for the pods, and how it compares."""

    pool: str
    pods: int
    prices: str  # where the offerings' prices come from
    nodes: list[PlannedNodeView] = []
    cost_eur_per_hour: float = 0.0
    unschedulable: dict[str, str] = {}  # namespace/name -> why
    limited: list[str] = []  # namespace/name held back by the pool's limits
    limits: str = ""
    single_type: SingleTypePlan | None = None
    single_type_note: str = ""
    lower_bound_eur_per_hour: float | None = None
    lower_bound_kind: str = ""
    offerings_considered: int = 0
    notes: list[str] = []
