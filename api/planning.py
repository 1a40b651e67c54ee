"""Capacity planning payloads: pending demand in, node shapes with ranked offerings out.

Pure models (they cross Temporal as the `plan_capacity` activity's input and output).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from api.nodeclaim import Offering
from api.nodeclass import NodeClassSpec
from api.nodepool import NodePoolSpec


class Resources(BaseModel):
    """Requests or capacity in the units the scheduler adds up."""

    cpu_m: int = 0
    memory_bytes: int = 0
    pods: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            cpu_m=self.cpu_m + other.cpu_m,
            memory_bytes=self.memory_bytes + other.memory_bytes,
            pods=self.pods + other.pods,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            cpu_m=self.cpu_m - other.cpu_m,
            memory_bytes=self.memory_bytes - other.memory_bytes,
            pods=self.pods - other.pods,
        )

    def fits_in(self, capacity: Resources) -> bool:
        return (
            self.cpu_m <= capacity.cpu_m
            and self.memory_bytes <= capacity.memory_bytes
            and self.pods <= capacity.pods
        )


class NodeSelectorRequirement(BaseModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = []


class NodeSelectorTerm(BaseModel):
    """All expressions must hold (AND); a pod's terms are alternatives (OR)."""

    match_expressions: list[NodeSelectorRequirement] = []


class Toleration(BaseModel):
    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: str | None = None  # None tolerates every effect


# The uid of the demand a pool plans a drifted node's replacement with: what the node's pods
# use, not a pod of the cluster's (`replacement_uid`).
REPLACEMENT_FOR = "replacement-for/"


def replacement_uid(claim_name: str) -> str:
    """The uid of the demand planning `claim_name`'s replacement."""
    return f"{REPLACEMENT_FOR}{claim_name}"


class PodDemand(BaseModel):
    """What one pending pod needs from a node."""

    uid: str
    namespace: str
    name: str
    requests: Resources
    node_selector: dict[str, str] = {}
    required_affinity: list[NodeSelectorTerm] = []
    tolerations: list[Toleration] = []


class InFlightNode(BaseModel):
    """A claim of the pool that is Ready or on its way: capacity the plan fills first."""

    claim_name: str
    offering: Offering
    # What pods may use on it (capacity minus DaemonSet overhead and kube-reserved).
    allocatable: Resources
    used: Resources = Resources()


class PlanRequest(BaseModel):
    pool_name: str
    pool: NodePoolSpec
    # Providers the pool's NodeClass has a block for: others can't be launched.
    class_providers: list[str]
    # The class itself: some offerings come from the provider named there (the fake cloud).
    node_class: NodeClassSpec | None = None
    pods: list[PodDemand]
    in_flight: list[InFlightNode] = []
    # Offering keys ("provider/region/type") that failed recently (capacity, quota, outage).
    failed_offerings: list[str] = []
    # What the pool's limits still allow; None = unlimited.
    max_new_nodes: int | None = None
    remaining_cpu_m: int | None = None
    remaining_memory_bytes: int | None = None
    # How many offerings each planned node carries for failover.
    offerings_per_node: int = 3
    # The pool's namespace: where the NodeClass's credential Secrets are read from.
    namespace: str = "default"
    # Empty nodes to add on top of the pods' (the pool's minNodes floor), cheapest offering.
    min_new_nodes: int = 0


class PlannedNode(BaseModel):
    offerings: list[Offering]  # ranked: the claim launches the first, fails over in order
    pod_uids: list[str]
    requests: Resources
    # What pods may use on the first offering (after DaemonSet overhead and kube-reserved):
    # the pool fills the rest with later pods while the node is on its way.
    allocatable: Resources = Resources()


class Plan(BaseModel):
    # pod uid -> claim name of the in-flight node it will land on
    assignments: dict[str, str] = {}
    new_nodes: list[PlannedNode] = []
    # pod uid -> why no offering of this pool can host it: none ever can, or every one that
    # could has no machine left (its `available` count used up); planned again next round
    unschedulable: dict[str, str] = {}
    # pods that fit an offering but a pool limit (maxNodes, cpu, memory) holds back
    limited: list[str] = []
    cost_eur_per_hour: float = 0.0
    # One line per provider whose prices for the new nodes are older than the configured
    # age (the pool's PricesStale condition says them).
    stale_prices: list[str] = []
    # pod uid -> why the cluster has it not pending for this pool (bound, deleted, never
    # there, a namespace the pool does not serve): not planned, and forgotten by the pool.
    not_pending: dict[str, str] = {}
