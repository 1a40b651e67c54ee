"""NodePool: which pods a pool serves, where its nodes may come from, and when they leave.

The package is the pool's one home in the API: this module holds the resource (its spec and
the status `kubectl get nodepools` shows); `api/nodepool/messages.py` what the
NodePoolWorkflow is sent and answers, and what it asks of its activities.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Final, Literal

from croniter import CroniterError, croniter
from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import JsonDict

from api._base import CamelModel, Condition, ObjectMeta
from api.limits import (
    BUDGET_NODES_PATTERN,
    CPU_BOUND_RULE,
    CRON_PATTERN,
    MAX_BUDGET_WINDOW_S,
    MAX_BUDGETS,
    MAX_CRON_LENGTH,
    MAX_DURATION_LENGTH,
    MAX_GRACE_S,
    MAX_LABELS,
    MAX_POOL_NAME_LENGTH,
    MAX_SHORT_LIST,
    MAX_TAINTS,
    MAX_TTL_S,
    MAX_WEIGHT,
    MEMORY_BOUND_RULE,
    MIN_BUDGET_WINDOW_S,
    MIN_EXPIRY_S,
    Count,
    Duration,
    LabelKey,
    LabelValue,
    ObjectName,
    Price,
    Quantity,
    Seconds,
    Text,
    cel,
    label_key,
    validations,
)
from api.quantity import cpu_within_bounds, memory_within_bounds
from api.restricted_keys import LABELS_RULE, TAINT_RULE, refuse_restricted_keys
from api.selectors import LabelSelector

API_VERSION = "cloudburst.io/v1alpha1"
PROVIDERS = (
    "aws",
    "gcp",
    "azure",
    "hetzner",
    "scaleway",
    "digitalocean",
    "ovh",
    "fake",
    "plugin",
    # On-premises: the operator's own machines (docs/providers.md).
    "proxmox",
    "redfish",
)
# Providers whose offerings and prices the provider itself gives, at each plan (its
# `instance_types()`: what it has now, with counts): no price list to fetch or ship for them.
LIVE_CATALOG_PROVIDERS: frozenset[str] = frozenset({"fake", "plugin", "proxmox", "redfish"})
# The public clouds with published prices: the shipped catalog and the price refresh.
PRICED_PROVIDERS = tuple(p for p in PROVIDERS if p not in LIVE_CATALOG_PROVIDERS)
ARCHITECTURES = ("x86_64", "amd64", "arm64", "aarch64")
# Karpenter's `karpenter.sh/capacity-type` values: spot VMs are cheaper and may be reclaimed
# by the provider at short notice (AWS interruption, GCP preemption, Azure eviction).
CapacityType = Literal["spot", "on-demand"]
SPOT: Final = "spot"
ON_DEMAND: Final = "on-demand"
CAPACITY_TYPES: tuple[CapacityType, ...] = (SPOT, ON_DEMAND)


def _items_enum(values: tuple[str, ...]) -> JsonDict:
    # The model keeps its friendlier error ("unknown provider ['ibm']"); the CRD gets the enum.
    return {"items": {"type": "string", "enum": list(values)}}


class Taint(CamelModel):
    # Any domain: Cloudburst's own taints are Taints too (the startup and tenant taints); a
    # pool's template may not use restricted ones (NodePool, api/restricted_keys.py).
    key: LabelKey
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    @field_validator("key")
    @classmethod
    def _key_prefix(cls, value: str) -> str:
        return label_key(value)


class Requirements(CamelModel):
    # "ANY", "EU", or explicit region slugs such as ["fsn1", "fr-par"].
    region_constraint: Text | Annotated[list[Text], Field(max_length=MAX_SHORT_LIST)] = "ANY"
    arch: list[str] = Field(
        default=["x86_64"], max_length=MAX_SHORT_LIST, json_schema_extra=_items_enum(ARCHITECTURES)
    )
    max_price_eur_per_hour: Annotated[Price, Field(gt=0)] | None = None
    allowed_providers: list[str] = Field(
        default=[], max_length=MAX_SHORT_LIST, json_schema_extra=_items_enum(PROVIDERS)
    )
    # Which capacity the pool may launch; with both, the cheaper spot first, on-demand as the
    # fallback when spot capacity runs out.
    capacity_type: list[str] = Field(
        default=[ON_DEMAND],
        min_length=1,
        max_length=len(CAPACITY_TYPES),
        json_schema_extra=_items_enum(CAPACITY_TYPES),
    )

    @field_validator("arch")
    @classmethod
    def _known_arch(cls, value: list[str]) -> list[str]:
        return _only_known(value, ARCHITECTURES, "architecture", "one")

    @field_validator("allowed_providers")
    @classmethod
    def _known_providers(cls, value: list[str]) -> list[str]:
        return _only_known(value, PROVIDERS, "provider", "some")

    @field_validator("capacity_type")
    @classmethod
    def _known_capacity_types(cls, value: list[str]) -> list[str]:
        return _only_known(value, CAPACITY_TYPES, "capacity type", "some")


def _only_known(value: list[str], known: Sequence[str], what: str, how_many: str) -> list[str]:
    unknown = [item for item in value if item not in known]
    if unknown:
        raise ValueError(f"unknown {what} {unknown}; use {how_many} of {list(known)}")
    return value


class Limits(CamelModel):
    """How big the pool may grow. Quantities are Kubernetes' (`cpu: "64"`, `memory: 256Gi`)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.maxNodes) || !has(self.minNodes) || self.minNodes <= self.maxNodes",
                "minNodes must not exceed maxNodes",
                ".minNodes",
            ),
            CPU_BOUND_RULE,
            MEMORY_BOUND_RULE,
        )
    )

    max_nodes: Count | None = None
    min_nodes: Count = 0
    cpu: Quantity | None = None
    memory: Quantity | None = None

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, value: str | None) -> str | None:
        return cpu_within_bounds(value)

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str | None) -> str | None:
        return memory_within_bounds(value)

    @field_validator("min_nodes")
    @classmethod
    def _min_below_max(cls, value: int, info: ValidationInfo) -> int:
        # A field validator (maxNodes is declared first), so the error names minNodes.
        max_nodes = info.data.get("max_nodes")
        if max_nodes is not None and value > max_nodes:
            raise ValueError(f"minNodes ({value}) exceeds maxNodes ({max_nodes})")
        return value


def _valid_labels(labels: dict[str, str]) -> dict[str, str]:
    for key in labels:
        label_key(key)
    return labels


def _each_taint_restricted(schema: JsonDict) -> None:
    """The template's taints' items schema: a Taint's, with the rule on each one."""
    items = schema["items"]
    assert isinstance(items, dict)
    items.update(validations(TAINT_RULE))


class NodeTemplate(CamelModel):
    # The grammar of label keys is checked by the model only: a structural CRD schema cannot
    # constrain the keys of a map (no patternProperties). Keys in restricted domains are
    # refused by the NodePool model and by these CEL rules, not by NodeTemplate itself: the
    # template a pool's workflow is sent also carries Cloudburst's tenant label and taint.
    labels: dict[str, LabelValue] = Field(
        default={}, max_length=MAX_LABELS, json_schema_extra=validations(LABELS_RULE)
    )
    taints: list[Taint] = Field(
        default=[],
        max_length=MAX_TAINTS,
        # Each taint judged on its own (the list's items schema is the Taint's, plus the rule).
        json_schema_extra=_each_taint_restricted,
    )

    _labels = field_validator("labels")(_valid_labels)


# The voluntary reasons a budget may limit (`DisruptionReason`'s, spelled for the CRD enum).
BudgetReason = Literal["Empty", "Drifted", "Underutilized"]
_DURATION = re.compile(r"^(?:([0-9]{1,9})h)?(?:([0-9]{1,9})m)?(?:([0-9]{1,9})s)?$")


def parse_duration(text: str) -> int:
    """Karpenter-style durations ("10m", "1h30m", "45s") in seconds, at most MAX_TTL_S.

    Refuses absurd values (9 digits a unit at most, 10 years in all) before anyone adds
    them to a datetime.
    """
    stripped = text.strip() if isinstance(text, str) else ""
    match = _DURATION.match(stripped) if len(stripped) <= MAX_DURATION_LENGTH else None
    if not stripped or not match or not any(match.groups()):
        raise ValueError(f"{str(text)[:40]!r} is not a duration like '30s', '10m' or '1h30m'")
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total > MAX_TTL_S:
        raise ValueError(f"{text!r} is longer than {MAX_TTL_S // 3600}h (10 years)")
    return total


def _cron_has_hits(schedule: str) -> str:
    """A cron expression croniter reads and that fires at all (not "0 0 31 2 *")."""
    if not re.fullmatch(CRON_PATTERN, schedule) or not croniter.is_valid(schedule):
        raise ValueError(f"{schedule!r} is not a cron schedule (5 fields, or @daily ...)")
    reference = datetime(2025, 1, 1, tzinfo=UTC)
    try:
        croniter(schedule, reference).get_next(datetime)
        croniter(schedule, reference).get_prev(datetime)
    except (CroniterError, ValueError, OverflowError) as err:
        raise ValueError(f"{schedule!r} never fires: {err}") from None
    return schedule


class Budget(CamelModel):
    """At most `nodes` of the pool's nodes disrupted at once (Karpenter's budgets)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.schedule) == has(self.duration)",
                "schedule and duration go together: set both or neither",
            ),
            cel(
                "!has(self.duration) || (duration(self.duration) >= "
                f"duration('{MIN_BUDGET_WINDOW_S}s') && duration(self.duration) <= "
                f"duration('{MAX_BUDGET_WINDOW_S // 3600}h'))",
                "duration must be between 1m and 8760h (a year)",
                ".duration",
            ),
        )
    )

    # A count ("1", at most MAX_NODES) or a percentage of the pool's nodes ("10%").
    nodes: str = Field(default="10%", max_length=6, pattern=BUDGET_NODES_PATTERN)
    # Cron (UTC) when the budget starts being active, and for how long; both or neither.
    schedule: str | None = Field(default=None, max_length=MAX_CRON_LENGTH, pattern=CRON_PATTERN)
    duration: Duration | None = None
    # Only these voluntary reasons are limited by this budget; None = all of them.
    reasons: list[BudgetReason] | None = Field(default=None, max_length=3)

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        return None if value is None else _cron_has_hits(value)

    @field_validator("duration")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            seconds = parse_duration(value)
            if not MIN_BUDGET_WINDOW_S <= seconds <= MAX_BUDGET_WINDOW_S:
                raise ValueError(f"{value!r} is not between 1m and 8760h (a year)")
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
    """When a pool's nodes leave. Bounds: api/limits.py and docs/resources.md."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.consolidateAfter) || duration(self.consolidateAfter) <= "
                f"duration('{MAX_TTL_S // 3600}h')",
                "consolidateAfter must be at most 87600h (10 years)",
                ".consolidateAfter",
            ),
        )
    )

    ttl_seconds_after_empty: Annotated[Seconds, Field(le=MAX_TTL_S)] | None = 30
    # At least MIN_EXPIRY_S: a node that expires before it could be used is replaced forever.
    ttl_seconds_until_expired: Annotated[Seconds, Field(ge=MIN_EXPIRY_S, le=MAX_TTL_S)] | None = (
        None
    )
    # How long a drain waits on PDBs and do-not-disrupt pods before deleting them anyway.
    termination_grace_period_seconds: Annotated[Seconds, Field(le=MAX_GRACE_S)] = 300
    # A node NotReady/Unknown this long is lost: deleted without a drain, its pods re-planned.
    node_unreachable_grace_period_seconds: Annotated[Seconds, Field(le=MAX_GRACE_S)] = 120
    budgets: list[Budget] = Field(default=[Budget()], max_length=MAX_BUDGETS)
    consolidation_policy: Literal["WhenEmpty", "WhenEmptyOrUnderutilized"] = "WhenEmpty"
    consolidate_after: Duration = "30s"
    # Consolidation moves only when it saves at least this much per hour.
    consolidation_min_savings_eur_per_hour: Annotated[Price, Field(ge=0)] = 0.005

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
    # Karpenter's range; 0 (unset) is the lowest.
    weight: int = Field(default=0, strict=True, ge=0, le=MAX_WEIGHT)
    # The NodeClass this pool's nodes are built from; defaults to the only one in the namespace.
    node_class_ref: ObjectName | None = None
    # Which namespaces' pods the pool serves besides its own: only for a pool in the operator's
    # namespace (a shared pool; `cluster/tenancy.py`). Matched against Namespace labels;
    # `{}` selects every namespace. A pool anywhere else serves its own namespace only.
    namespace_selector: LabelSelector | None = None


class NodePool(CamelModel):
    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                f"!has(self.metadata.name) || size(self.metadata.name) <= {MAX_POOL_NAME_LENGTH}",
                f"a NodePool's name is at most {MAX_POOL_NAME_LENGTH} characters (its claims "
                "are named <pool>-<5 characters>, a label value of at most 63)",
            ),
        )
    )

    api_version: Literal["cloudburst.io/v1alpha1"] = "cloudburst.io/v1alpha1"
    kind: Literal["NodePool"] = "NodePool"
    metadata: ObjectMeta
    spec: NodePoolSpec = NodePoolSpec()
    status: dict[str, object] | None = None

    @field_validator("metadata")
    @classmethod
    def _short_name(cls, value: ObjectMeta) -> ObjectMeta:
        if len(value.name) > MAX_POOL_NAME_LENGTH:
            raise ValueError(
                f"name: a NodePool's name is at most {MAX_POOL_NAME_LENGTH} characters (its "
                "claims are named <pool>-<5 characters>, a label value of at most 63)"
            )
        return value

    @field_validator("spec")
    @classmethod
    def _no_restricted_keys(cls, value: NodePoolSpec, info: ValidationInfo) -> NodePoolSpec:
        # Judged on the resource a user writes, not on NodePoolSpec: that also carries
        # Cloudburst's own keys to the pool's workflow, and is read back from its history.
        metadata = info.data.get("metadata")
        name = metadata.name if isinstance(metadata, ObjectMeta) else None
        template = value.template
        taint_keys = [taint.key for taint in template.taints]
        refuse_restricted_keys("NodePoolSpec", name, template.labels, taint_keys)
        return value


# --- status: what `kubectl get nodepools` shows (NODES READY CPU MEMORY LIMIT) ----------------
# Written by the pool's workflow through an activity (`nodepools/status` patch); read by the
# CRD's printer columns. Quantities are Kubernetes quantity strings ("4", "8Gi").

# Condition types a pool reports (Karpenter's NodePool has Ready and ValidationSucceeded).
LIMIT_REACHED = "LimitReached"
# True (a warning) while the pool's latest new nodes were chosen by prices older than
# CLOUDBURST_PRICES_MAX_AGE_HOURS; present once that has happened.
PRICES_STALE = "PricesStale"
READY = "Ready"
# Written by the trigger, which validates the spec (trigger/verdicts.py); the pool's workflow
# keeps it, and keeps Ready=False while it is False.
VALIDATION_SUCCEEDED = "ValidationSucceeded"


class NodePoolResources(CamelModel):
    """Resources of the pool's claims that are not Deleted or Failed."""

    cpu: str | None = None
    memory: str | None = None


class NodePoolStatus(CamelModel):
    nodes: int = 0
    ready_nodes: int = 0
    resources: NodePoolResources = NodePoolResources()
    conditions: list[Condition] = []
