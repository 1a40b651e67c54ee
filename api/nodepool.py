"""NodePool: which pods a pool serves, where its nodes may come from, and when they leave."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Literal

from croniter import croniter
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


DisruptionReason = Literal["Empty", "Drifted", "Underutilized"]
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> int:
    """Karpenter-style durations ("10m", "1h30m", "45s") in seconds."""
    match = _DURATION.match(text.strip())
    if not text.strip() or not match or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration like '30s', '10m' or '1h30m'")
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


class Budget(CamelModel):
    """At most `nodes` of the pool's nodes disrupted at once (Karpenter's budgets)."""

    nodes: str = "10%"  # a count ("1") or a percentage of the pool's nodes ("10%")
    # Cron (UTC) when the budget starts being active, and for how long; both or neither.
    schedule: str | None = None
    duration: str | None = None
    # Only these voluntary reasons are limited by this budget; None = all of them.
    reasons: list[DisruptionReason] | None = None

    @field_validator("nodes")
    @classmethod
    def _count_or_percent(cls, value: str) -> str:
        number = value[:-1] if value.endswith("%") else value
        if not number.isdigit() or (value.endswith("%") and int(number) > 100):
            raise ValueError(f"{value!r} must be a node count ('2') or a percentage ('20%')")
        return value

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None and not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a cron schedule")
        return value

    @field_validator("duration")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value

    @model_validator(mode="after")
    def _schedule_needs_duration(self) -> Budget:
        if (self.schedule is None) != (self.duration is None):
            raise ValueError("schedule and duration go together: set both or neither")
        return self

    def active(self, now: datetime) -> bool:
        """Always, or within `duration` after the latest `schedule` hit (UTC)."""
        if self.schedule is None or self.duration is None:
            return True
        last_hit: datetime = croniter(self.schedule, now).get_prev(datetime)
        return now < last_hit + timedelta(seconds=parse_duration(self.duration))

    def allowed(self, total_nodes: int) -> int:
        if self.nodes.endswith("%"):
            # Rounded up, as Karpenter does, so 10% of a small pool still allows one.
            return math.ceil(total_nodes * int(self.nodes[:-1]) / 100)
        return int(self.nodes)


class Disruption(CamelModel):
    ttl_seconds_after_empty: int | None = Field(default=30, ge=0)
    ttl_seconds_until_expired: int | None = Field(default=None, ge=0)
    # How long a drain waits on PDBs and do-not-disrupt pods before deleting them anyway.
    termination_grace_period_seconds: int = Field(default=300, ge=0)
    # A node NotReady/Unknown this long is lost: deleted without a drain, its pods re-planned.
    node_unreachable_grace_period_seconds: int = Field(default=120, ge=0)
    budgets: list[Budget] = [Budget()]
    consolidation_policy: Literal["WhenEmpty", "WhenEmptyOrUnderutilized"] = "WhenEmpty"
    consolidate_after: str = "30s"
    # Consolidation moves only when it saves at least this much per hour.
    consolidation_min_savings_eur_per_hour: float = Field(default=0.005, ge=0)

    @field_validator("consolidate_after")
    @classmethod
    def _after(cls, value: str) -> str:
        parse_duration(value)
        return value


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
