"""Orphan garbage collection: the workflow's input, the activities' payloads and the report.

Everything here enters Temporal history: instance ids, claim and Secret names, never a
Secret's value (credentials are read inside the activities from the NodeClass references).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from api.nodeclass import NodeClassSpec

GC_SCHEDULE_ID = "cloudburst-orphan-gc"
# Runs started by the schedule get this id plus the schedule's timestamp suffix.
GC_WORKFLOW_ID = "cloudburst-orphan-gc"
DEFAULT_GC_INTERVAL_S = 300.0
DEFAULT_GRACE_PERIOD_S = 600.0


class OrphanGcInput(BaseModel):
    cluster_id: str = "cloudburst"
    # VMs (and Secrets of unknown claims) younger than this are left alone: a claim's create
    # may still be on its way to recording the VM.
    grace_period_s: float = Field(default=DEFAULT_GRACE_PERIOD_S, ge=0)
    # How long one run waits for each deleted VM to be gone before reporting it as pending.
    delete_timeout_s: float = Field(default=300.0, gt=0)
    # Report what would be removed, remove nothing.
    dry_run: bool = False


class ClaimState(StrEnum):
    RUNNING = "running"
    CLOSED = "closed"
    UNKNOWN = "unknown"  # no such claim workflow (never started, or past retention)


class GcScope(BaseModel):
    """One provider as one NodeClass configures it (endpoint, account, credential Secret)."""

    provider: str
    namespace: str
    node_class_name: str
    node_class: NodeClassSpec


class OwnedVm(BaseModel):
    scope: int  # index into GcInventory.scopes: the first that listed it
    # The namespaces of every scope (NodeClass) whose account lists it: its claim is one of
    # theirs (an account reached from several namespaces lists its VMs for each).
    namespaces: list[str] = []
    instance_id: str
    provider: str
    claim_name: str | None = None
    node_pool: str | None = None
    state: str
    created_at: datetime | None = None


class SecretPurpose(StrEnum):
    BOOTSTRAP_TOKEN = "bootstrap-token"
    BOOTSTRAP_SCRIPT = "bootstrap-script"


class LabelledSecret(BaseModel):
    namespace: str
    name: str
    purpose: SecretPurpose
    claim_name: str | None = None
    claim_namespace: str | None = None
    created_at: datetime | None = None
    expires_at: datetime | None = None  # bootstrap tokens only


class GcInventory(BaseModel):
    """What `collect_orphans` found: every owned VM on every configured provider, every
    bootstrap Secret, and what could not be listed."""

    scopes: list[GcScope] = []
    vms: list[OwnedVm] = []
    secrets: list[LabelledSecret] = []
    errors: list[str] = []
    listed_at: datetime


class ClaimStatesInput(BaseModel):
    workflow_ids: list[str]  # claims' (`claim_workflow_id`)


class ClaimStates(BaseModel):
    states: dict[str, ClaimState] = {}  # by workflow id


class OrphanVm(BaseModel):
    vm: OwnedVm
    reason: str


class StaleSecret(BaseModel):
    secret: LabelledSecret
    reason: str


class RemoveOrphansInput(BaseModel):
    scopes: list[GcScope]
    vms: list[OrphanVm] = []
    secrets: list[StaleSecret] = []
    delete_timeout_s: float = 300.0


class RemovedVm(BaseModel):
    instance_id: str
    provider: str
    claim_name: str | None = None
    reason: str


class RemovedSecret(BaseModel):
    namespace: str
    name: str
    purpose: SecretPurpose
    claim_name: str | None = None
    reason: str


class RemovalResult(BaseModel):
    vms_deleted: list[RemovedVm] = []
    secrets_deleted: list[RemovedSecret] = []
    # Asked for but not confirmed gone within the timeout: the next run tries again.
    vms_pending: list[str] = []
    errors: list[str] = []


class OrphanGcReport(BaseModel):
    cluster_id: str
    dry_run: bool = False
    providers: list[str] = []  # "provider (namespace/nodeclass)" scanned
    vms_seen: int = 0
    vms_kept_live: int = 0
    vms_kept_young: int = 0
    vms_deleted: list[RemovedVm] = []
    vms_pending: list[str] = []
    secrets_seen: int = 0
    secrets_deleted: list[RemovedSecret] = []
    # Planned removals (also filled in a dry run).
    orphan_vms: list[OrphanVm] = []
    stale_secrets: list[StaleSecret] = []
    errors: list[str] = []

    def summary(self) -> str:
        return (
            f"cluster {self.cluster_id}: {len(self.vms_deleted)} orphan VM(s) deleted "
            f"({len(self.vms_pending)} pending, {self.vms_kept_live} live, "
            f"{self.vms_kept_young} within grace, of {self.vms_seen}); "
            f"{len(self.secrets_deleted)} stale Secret(s) deleted of {self.secrets_seen}; "
            f"{len(self.errors)} error(s){' [dry run]' if self.dry_run else ''}"
        )
