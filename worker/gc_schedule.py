"""The orphan-GC Schedule, created (or brought up to date) by the worker at start.

`ensure_gc_schedule` is idempotent (worker/schedules.py): changing the interval or grace
period is a worker restart. Overlap is SKIP: a run still busy deleting makes the next tick
a no-op rather than a second collector.

Settings (environment, beside the worker's `CLOUDBURST_*`):
`CLOUDBURST_GC_ENABLED` (default true), `CLOUDBURST_GC_INTERVAL_SECONDS` (300),
`CLOUDBURST_GC_GRACE_PERIOD_SECONDS` (600), `CLOUDBURST_GC_DRY_RUN` (false).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
)

from api.gc import (
    DEFAULT_GC_INTERVAL_S,
    DEFAULT_GRACE_PERIOD_S,
    GC_SCHEDULE_ID,
    GC_WORKFLOW_ID,
    OrphanGcInput,
)
from worker.schedules import ensure_schedule, every
from worker.settings import Settings
from workflows.gc import OrphanGcWorkflow

log = logging.getLogger(__name__)


class GcSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CLOUDBURST_GC_", extra="ignore")

    enabled: bool = Field(
        default=True,
        description="The worker keeps the orphan-GC Schedule (creates it, or brings it up to "
        "these settings, at start); false leaves the Schedule as it is.",
    )
    interval_seconds: float = Field(
        default=DEFAULT_GC_INTERVAL_S,
        ge=10,
        description="How often the orphan GC runs: it removes VMs labelled for this "
        "cluster and bootstrap Secrets that no live claim owns. A run still busy makes the "
        "next tick a no-op.",
    )
    grace_period_seconds: float = Field(
        default=DEFAULT_GRACE_PERIOD_S,
        ge=0,
        description="VMs (and Secrets of unknown claims) younger than this are left alone: "
        "a claim's create may still be on its way to recording the VM.",
    )
    dry_run: bool = Field(
        default=False, description="Report what the GC would remove, and remove nothing."
    )


def gc_schedule(settings: Settings, gc: GcSettings) -> Schedule:
    interval = timedelta(seconds=gc.interval_seconds)
    return every(
        interval,
        ScheduleActionStartWorkflow(
            OrphanGcWorkflow.run,
            OrphanGcInput(
                cluster_id=settings.cluster_id,
                grace_period_s=gc.grace_period_seconds,
                dry_run=gc.dry_run,
            ),
            id=GC_WORKFLOW_ID,
            task_queue=settings.task_queue,
            # A run that cannot finish (a provider hanging) must not block the schedule.
            execution_timeout=max(timedelta(minutes=30), interval * 3),
        ),
        f"orphan VM and bootstrap Secret GC of {settings.cluster_id}",
    )


async def ensure_gc_schedule(
    client: Client, settings: Settings, gc: GcSettings | None = None
) -> None:
    """Create the orphan-GC Schedule, or update it to these settings (idempotent)."""
    gc = gc or GcSettings()
    if not gc.enabled:
        log.info("orphan GC schedule not managed (CLOUDBURST_GC_ENABLED=false)")
        return
    await ensure_schedule(
        client, GC_SCHEDULE_ID, lambda: gc_schedule(settings, gc), "orphan GC will not run"
    )
