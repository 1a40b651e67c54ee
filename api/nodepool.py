"""NodePool: which pods a pool serves, where its nodes may come from, and when they leave."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from api._base import CamelModel, ObjectMeta
from api.quantity import parse_quantity

API_VERSION = "cloudburst.io/v1alpha1"
PROVIDERS = ("aws", "gcp", "azure", "hetzner", "scaleway", "digitalocean", "ovh", "fake")
ARCHITECTURES = ("x86_64", "amd64", "arm64", "aarch64")


class Taint(CamelModel):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Requirements(CamelModel):
    # "ANY", "EU", or explicit region slugs such as ["fsn1", "fr-par"].
    region_constraint: str | list[str] = "ANY"
    arch: list[str] = ["x86_64"]
    max_price_eur_per_hour: float | None = Field(default=None, gt=0)
    allowed_providers: list[str] = []

    @field_validator("arch")
    @classmethod
    def _known_arch(cls, value: list[str]) -> list[str]:
        unknown = [a for a in value if a not in ARCHITECTURES]
        if unknown:
            raise ValueError(f"unknown architecture {unknown}; use one of {list(ARCHITECTURES)}")
        return value

    @field_validator("allowed_providers")
    @classmethod
    def _known_providers(cls, value: list[str]) -> list[str]:
        unknown = [p for p in value if p not in PROVIDERS]
        if unknown:
            raise ValueError(f"unknown provider {unknown}; use some of {list(PROVIDERS)}")
        return value


class Limits(CamelModel):
    max_nodes: int | None = Field(default=None, ge=0)
    min_nodes: int = Field(default=0, ge=0)
    cpu: str | None = None
    memory: str | None = None

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, value: str | None) -> str | None:
        if value is not None:
            parse_quantity(value)
        return value

    @model_validator(mode="after")
    def _min_below_max(self) -> Limits:
        if self.max_nodes is not None and self.min_nodes > self.max_nodes:
            raise ValueError(f"minNodes ({self.min_nodes}) exceeds maxNodes ({self.max_nodes})")
        return self


class NodeTemplate(CamelModel):
    labels: dict[str, str] = {}
    taints: list[Taint] = []


class Disruption(CamelModel):
    ttl_seconds_after_empty: int | None = Field(default=30, ge=0)
    ttl_seconds_until_expired: int | None = Field(default=None, ge=0)
    # How long a drain waits on PDBs before pods are deleted anyway (Karpenter's name).
    termination_grace_period_seconds: int = Field(default=300, ge=0)


class NodePoolSpec(CamelModel):
    requirements: Requirements = Requirements()
    limits: Limits = Limits()
    template: NodeTemplate = NodeTemplate()
    disruption: Disruption = Disruption()
    weight: int = Field(default=0, ge=0, le=100)
    # The NodeClass this pool's nodes are built from; defaults to the only one in the namespace.
    node_class_ref: str | None = None


class NodePool(CamelModel):
    api_version: Literal["cloudburst.io/v1alpha1"] = "cloudburst.io/v1alpha1"
    kind: Literal["NodePool"] = "NodePool"
    metadata: ObjectMeta
    spec: NodePoolSpec = NodePoolSpec()
    status: dict[str, object] | None = None
