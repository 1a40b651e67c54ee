"""Deadlines a workflow decides on by durable timers, never by reading the clock.

Why: `workflow.now()` is the time of the current workflow task, and it was not the same on
first execution and on replay. When a worker died and a query (`pools describe`, the Web UI)
reached the new worker with a history ending in signals no task had taken, the Temporal
Python SDK (temporalio 1.35) ran the workflow on them with the clock of the *previous* task,
while a replay sees the true one. A decision of the form "is `now` past this deadline?" could
then go one way live and the other way on replay: a nondeterminism error, and the workflow
looped on failed workflow tasks for good (docs/repro/README.md,
`tests/workflows/test_stale_clock.py`). The worker now refuses such activations
(`worker/untaken_events.py`); deciding by alarms keeps decisions free of the clock anyway.

So a deadline is reached only when a timer armed for it fires. The clock only sets how long
the timer sleeps (a duration is not part of what replay compares); what the timer *means*
is fixed when it is armed: the key and the moment it waits for. Rules for callers:

- ask `reached(key, at)` every round for every deadline still wanted, then `settle()`, which
  cancels the alarms nobody asked for (a node busy again, a nomination resolved);
- `at` is a stored value — from history (a signal's or an activity's timestamp) or written
  once into state — so that asking again does not re-arm the alarm;
- never compare `workflow.now()` with a deadline in a decision; read it only for durations,
  for values shown to people (conditions, details), and for moments stored once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from temporalio import workflow

# Temporal refuses a zero timer; a deadline already past still gets a real one, so that what
# happens next is decided by the timer's firing, in history, and not by a comparison.
_MIN_SLEEP_S = 0.001


class Alarms:
    def __init__(self, on_ring: Callable[[], None]) -> None:
        self._on_ring = on_ring
        self._armed: dict[str, tuple[datetime, asyncio.Task[None]]] = {}
        self._rung: dict[str, datetime] = {}
        self._asked: set[str] = set()

    def reached(self, key: str, at: datetime) -> bool:
        """True once the alarm armed for (`key`, `at`) has fired; arms it otherwise."""
        self._asked.add(key)
        if self._rung.get(key) == at:
            return True
        armed = self._armed.get(key)
        if armed is not None:
            if armed[0] == at:
                return False
            armed[1].cancel()
        self._rung.pop(key, None)
        self._armed[key] = (at, asyncio.create_task(self._ring(key, at)))
        return False

    def settle(self) -> None:
        """Cancel the alarms not asked about since the last settle; forget their rings."""
        for key in [k for k in self._armed if k not in self._asked]:
            self._armed.pop(key)[1].cancel()
        for key in [k for k in self._rung if k not in self._asked]:
            del self._rung[key]
        self._asked.clear()

    def cancel(self, key: str) -> None:
        """No longer wanted, decided mid-round (after `settle`): cancel it now."""
        armed = self._armed.pop(key, None)
        if armed is not None:
            armed[1].cancel()
        self._rung.pop(key, None)
        self._asked.discard(key)

    def clear(self) -> None:
        """Cancel every alarm (a phase of the lifecycle is over)."""
        self._asked.clear()
        self.settle()

    @property
    def armed(self) -> list[str]:
        return sorted(self._armed)

    async def _ring(self, key: str, at: datetime) -> None:
        delay = max((at - workflow.now()).total_seconds(), _MIN_SLEEP_S)
        await workflow.sleep(delay, summary=key)
        self._armed.pop(key, None)
        self._rung[key] = at
        self._on_ring()
