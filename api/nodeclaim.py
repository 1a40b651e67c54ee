"""NodeClaim: one burst node from creation to deletion. Its workflow is the source of truth."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from api._base import CamelModel, Condition, ObjectMeta
from api.limits import (
    CPU_BOUND_RULE,
    DNS_SUBDOMAIN_PATTERN,
    MAX_CLAIM_NAME_LENGTH,
    MAX_GRACE_S,
    MAX_LABELS,
    MAX_MEMORY_GIB,
    MAX_NODES,
    MAX_OFFERINGS,
    MAX_PODS_PER_NODE,
    MAX_POOL_NAME_LENGTH,
    MAX_PRICE_EUR_PER_HOUR,
    MAX_TAINTS,
    MAX_TTL_S,
    MAX_VCPU,
    MEMORY_BOUND_RULE,
    MIN_EXPIRY_S,
    LabelValue,
    ObjectName,
    Quantity,
    Seconds,
    Text,
    cel,
    validations,
)
from api.nodepool import (
    ARCHITECTURES,
    ON_DEMAND,
    PROVIDERS,
    SPOT,
    CapacityType,
    Taint,
    _valid_labels,
)
from api.quantity import cpu_within_bounds, memory_within_bounds

# Catalog numbers arrive as ints or floats from many SDKs: lax, but finite and bounded.
_Amount = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class NodeClaimPhase(StrEnum):
    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    JOINING = "Joining"
    READY = "Ready"
    DELETING = "Deleting"
    DELETED = "Deleted"
    FAILED = "Failed"

    @property
    def is_final(self) -> bool:
        return self in (NodeClaimPhase.DELETED, NodeClaimPhase.FAILED)


class DisruptionReason(StrEnum):
    """Why a claim's node goes (an operator's scale-down carries its own words instead)."""

    EMPTY = "Empty"  # no workload pod past ttlSecondsAfterEmpty
    DRIFTED = "Drifted"  # built from an older pool template or class: replaced first
    UNDERUTILIZED = "Underutilized"  # consolidation found it a cheaper home
    EXPIRED = "Expired"  # past ttlSecondsUntilExpired
    NODE_LOST = "NodeLost"  # the Node or its VM gone, or NotReady past its grace
    INTERRUPTED = "Interrupted"  # the provider reclaims the (spot) VM


class ConditionType(StrEnum):
    """Karpenter-style conditions, kept beside the Cloudburst phases."""

    LAUNCHED = "Launched"
    REGISTERED = "Registered"
    INITIALIZED = "Initialized"
    READY = "Ready"
    EMPTY = "Empty"
    EXPIRED = "Expired"
    DRIFTED = "Drifted"
    DISRUPTING = "Disrupting"
    INTERRUPTED = "Interrupted"  # the provider reclaimed the (spot) VM


class Offering(CamelModel):
    """One way to make the node: an instance type in a region of a provider, at a price."""

    provider: str = Field(json_schema_extra={"enum": list(PROVIDERS)})
    region: Text
    instance_type: Text
    zone: Text | None = None
    vcpu: Annotated[_Amount, Field(le=MAX_VCPU)] | None = None
    memory_gib: Annotated[_Amount, Field(le=MAX_MEMORY_GIB)] | None = None
    arch: str = Field(default="x86_64", json_schema_extra={"enum": list(ARCHITECTURES)})
    price_eur_per_hour: Annotated[_Amount, Field(le=MAX_PRICE_EUR_PER_HOUR)] | None = None
    # Where the price comes from (the provider's price API, its pricing page, CloudBroker)
    # and when it was read (ISO-8601): what `catalog show` and a claim's details print.
    price_source: Text | None = None
    price_as_of: Text | None = None
    capacity_type: CapacityType = ON_DEMAND
    # How many nodes of this offering can still be made (an on-premises inventory: free
    # machines, room on the hosts), as the provider said when the plan was made; None:
    # unbounded (a public cloud). A plan never makes more.
    available: Annotated[int, Field(strict=True, ge=0, le=MAX_NODES)] | None = None

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, value: str) -> str:
        if value not in PROVIDERS:
            raise ValueError(f"unknown provider {value!r}; use one of {list(PROVIDERS)}")
        return value

    @field_validator("arch")
    @classmethod
    def _known_arch(cls, value: str) -> str:
        if value not in ARCHITECTURES:
            raise ValueError(f"unknown architecture {value!r}; use one of {list(ARCHITECTURES)}")
        return value

    @property
    def key(self) -> str:
        # On-demand keys are those recorded in running claims' histories: unchanged.
        base = f"{self.provider}/{self.region}/{self.instance_type}"
        return f"{base}/{SPOT}" if self.spot else base

    @property
    def spot(self) -> bool:
        return self.capacity_type == SPOT


class ResourceRequests(CamelModel):
    model_config = ConfigDict(
        json_schema_extra=validations(
            CPU_BOUND_RULE,
            MEMORY_BOUND_RULE,
        )
    )

    cpu: Quantity | None = None
    memory: Quantity | None = None
    pods: int | None = Field(default=None, strict=True, ge=0, le=MAX_PODS_PER_NODE)

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, value: str | None) -> str | None:
        return cpu_within_bounds(value)

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str | None) -> str | None:
        return memory_within_bounds(value)


class ClaimResources(CamelModel):
    requests: ResourceRequests = ResourceRequests()


class ClaimDisruption(CamelModel):
    """The pool's disruption settings a claim was made with: the pool's bounds (api/limits.py)."""

    ttl_seconds_after_empty: Annotated[Seconds, Field(le=MAX_TTL_S)] | None = 30
    ttl_seconds_until_expired: Annotated[Seconds, Field(ge=MIN_EXPIRY_S, le=MAX_TTL_S)] | None = (
        None
    )
    termination_grace_period_seconds: Annotated[Seconds, Field(le=MAX_GRACE_S)] = 300
    node_unreachable_grace_period_seconds: Annotated[Seconds, Field(le=MAX_GRACE_S)] = 120


class NodeClaimSpec(CamelModel):
    node_pool: str = Field(
        min_length=1, max_length=MAX_POOL_NAME_LENGTH, pattern=DNS_SUBDOMAIN_PATTERN
    )
    node_class: ObjectName
    resources: ClaimResources = ClaimResources()
    # Ranked: the claim tries them in order when creation fails for capacity or outage.
    offerings: list[Offering] = Field(min_length=1, max_length=MAX_OFFERINGS)
    labels: dict[str, LabelValue] = Field(default={}, max_length=MAX_LABELS)
    taints: list[Taint] = Field(default=[], max_length=MAX_TAINTS)
    disruption: ClaimDisruption = ClaimDisruption()

    _labels = field_validator("labels")(_valid_labels)


class NodeClaimStatus(CamelModel):
    phase: NodeClaimPhase = NodeClaimPhase.PENDING
    conditions: list[Condition] = []
    provider_id: str | None = Field(default=None, alias="providerID")
    instance_id: str | None = Field(default=None, alias="instanceID")
    node_name: str | None = None
    provider: str | None = None
    region: str | None = None
    instance_type: str | None = None
    price_eur_per_hour: float | None = None
    price_source: str | None = None  # where that price was read, and when (ISO-8601)
    price_as_of: str | None = None
    capacity_type: CapacityType | None = None
    capacity: dict[str, str] = {}
    failure_reason: str | None = None
    failure_message: str | None = None
    deletion_reason: str | None = None
    created_at: datetime | None = None
    ready_at: datetime | None = None
    deleted_at: datetime | None = None

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def set_condition(
        self, type_: str, status: bool, reason: str, message: str, now: datetime
    ) -> None:
        """Set a condition; its transition time moves only when its status changes."""
        value: Literal["True", "False"] = "True" if status else "False"
        existing = self.condition(type_)
        if existing is None:
            self.conditions.append(
                Condition(
                    type=type_,
                    status=value,
                    reason=reason,
                    message=message,
                    last_transition_time=now,
                )
            )
            return
        if existing.status != value:
            existing.last_transition_time = now
        existing.status = value
        existing.reason = reason
        existing.message = message


class NodeClaim(CamelModel):
    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                f"!has(self.metadata.name) || size(self.metadata.name) <= {MAX_CLAIM_NAME_LENGTH}",
                f"a NodeClaim's name is a node name and a label value: at most "
                f"{MAX_CLAIM_NAME_LENGTH} characters",
            ),
        )
    )

    api_version: Literal["cloudburst.io/v1alpha1"] = "cloudburst.io/v1alpha1"
    kind: Literal["NodeClaim"] = "NodeClaim"
    metadata: ObjectMeta
    spec: NodeClaimSpec
    status: NodeClaimStatus = NodeClaimStatus()

    @field_validator("metadata")
    @classmethod
    def _short_name(cls, value: ObjectMeta) -> ObjectMeta:
        if len(value.name) > MAX_CLAIM_NAME_LENGTH:
            raise ValueError(
                f"name: a NodeClaim's name is a node name and a label value: at most "
                f"{MAX_CLAIM_NAME_LENGTH} characters"
            )
        return value
