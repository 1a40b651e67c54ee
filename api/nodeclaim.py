"""NodeClaim: one burst node from creation to deletion. Its workflow is the source of truth."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from api._base import CamelModel, ObjectMeta
from api.nodepool import Taint


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


class Offering(CamelModel):
    """One way to make the node: an instance type in a region of a provider, at a price."""

    provider: str
    region: str
    instance_type: str
    zone: str | None = None
    vcpu: float | None = None
    memory_gib: float | None = None
    arch: str = "x86_64"
    price_eur_per_hour: float | None = None

    @property
    def key(self) -> str:
        return f"{self.provider}/{self.region}/{self.instance_type}"


class ResourceRequests(CamelModel):
    cpu: str | None = None
    memory: str | None = None
    pods: int | None = None


class ClaimResources(CamelModel):
    requests: ResourceRequests = ResourceRequests()


class ClaimDisruption(CamelModel):
    ttl_seconds_after_empty: int | None = 30
    ttl_seconds_until_expired: int | None = None
    termination_grace_period_seconds: int = 300
    node_unreachable_grace_period_seconds: int = 120


class NodeClaimSpec(CamelModel):
    node_pool: str
    node_class: str
    resources: ClaimResources = ClaimResources()
    # Ranked: the claim tries them in order when creation fails for capacity or outage.
    offerings: list[Offering] = Field(min_length=1)
    labels: dict[str, str] = {}
    taints: list[Taint] = []
    disruption: ClaimDisruption = ClaimDisruption()


class Condition(CamelModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: datetime


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
    api_version: Literal["cloudburst.io/v1alpha1"] = "cloudburst.io/v1alpha1"
    kind: Literal["NodeClaim"] = "NodeClaim"
    metadata: ObjectMeta
    spec: NodeClaimSpec
    status: NodeClaimStatus = NodeClaimStatus()
