"""Schedules the worker owns: created at start, or brought up to date with its settings.

`ensure_schedule` is idempotent: the first worker creates the schedule; later ones (every
replica, every restart) find it and update its spec and action to their settings, keeping
whatever an operator did to its state (paused, notes). So changing an interval is a worker
restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError

log = logging.getLogger(__name__)


def every(interval: timedelta, action: ScheduleActionStartWorkflow, note: str) -> Schedule:
    """`action` every `interval`; a run still busy makes the next tick a no-op (SKIP), so a
    slow run never has a second one beside it."""
    return Schedule(
        action=action,
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=interval)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        state=ScheduleState(note=note),
    )


async def ensure_schedule(
    client: Client,
    schedule_id: str,
    build: Callable[[], Schedule],
    consequence: str,
    *,
    trigger_when_created: bool = False,
) -> None:
    """Create `schedule_id` from `build()`, or update it to that (idempotent). A refusal
    (e.g. an API key without the right to manage schedules) is logged loudly, saying
    `consequence`, and the worker still starts: its real job does not depend on it.
    `trigger_when_created`: the first action runs at once, not one interval later."""

    def update(current: ScheduleUpdateInput) -> ScheduleUpdate:
        wanted = build()
        wanted.state = current.description.schedule.state
        return ScheduleUpdate(schedule=wanted)

    try:
        try:
            await client.create_schedule(
                schedule_id, build(), trigger_immediately=trigger_when_created
            )
            log.info("created schedule %s", schedule_id)
            return
        except ScheduleAlreadyRunningError:
            pass
        await client.get_schedule_handle(schedule_id).update(update)
        log.info("updated schedule %s", schedule_id)
    except RPCError as err:
        log.error(
            "could not create or update schedule %s (%s: %s): %s",
            schedule_id,
            err.status.name,
            err.message,
            consequence,
        )
