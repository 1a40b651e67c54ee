"""Heartbeats for sync activities that block.

A sync activity runs in the worker's thread pool. While it sits in a blocking call (an HTTP
request, a sleep) nobody heartbeats, so a worker that died would only be noticed at the
start-to-close timeout, and a cancellation would never reach it (cancellation is delivered in
the reply to a heartbeat). `heartbeating()` heartbeats from a helper thread for the duration of
a block; `sleep_heartbeating()` waits in small steps and stops early when cancelled.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import CancelledError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

log = logging.getLogger(__name__)

DetailsFn = Callable[[], object]


def _beat(details: DetailsFn | None) -> None:
    if details is None:
        activity.heartbeat()
        return
    value = details()
    if value is None:
        activity.heartbeat()
    else:
        activity.heartbeat(value)


@contextmanager
def heartbeating(interval_s: float = 2.0, details: DetailsFn | None = None) -> Iterator[None]:
    """Heartbeat every `interval_s` from a background thread while the block runs.

    `details()` is called on each beat; its value (if not None) is the heartbeat detail, so a
    retried attempt can read where the previous one got to. It must be cheap and thread-safe.
    """
    if interval_s <= 0:
        raise ValueError("interval_s must be positive")
    stop = threading.Event()
    # The activity context lives in a contextvar: the helper thread needs a copy of it.
    ctx = contextvars.copy_context()

    def loop() -> None:
        while not stop.wait(interval_s):
            try:
                _beat(details)
            except Exception:  # a failing beat must not kill the activity; the next one may work
                log.debug("heartbeat failed", exc_info=True)

    _beat(details)
    thread = threading.Thread(target=ctx.run, args=(loop,), name="activity-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=max(1.0, interval_s))


def raise_if_cancelled() -> None:
    """Raise Temporal's CancelledError if a cancellation was requested for this activity."""
    if activity.is_cancelled():
        raise CancelledError("activity cancelled")


def sleep_heartbeating(
    seconds: float, details: DetailsFn | None = None, step_s: float = 1.0
) -> None:
    """Sleep `seconds`, heartbeating every `step_s`; raise CancelledError when cancelled."""
    deadline = time.monotonic() + max(0.0, seconds)
    while True:
        raise_if_cancelled()
        _beat(details)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        # Wakes up at once on cancellation instead of finishing the step.
        activity.wait_for_cancelled_sync(min(step_s, remaining))


# --- heartbeats for every activity ------------------------------------------------------------

_HEARTBEATS_ITSELF = "__cloudburst_heartbeats_itself__"
F = TypeVar("F", bound=Callable[..., Any])


def heartbeats_itself(fn: F) -> F:
    """Marks an activity that heartbeats on its own, with details a retry reads (drain
    progress): the worker's automatic heartbeat must not overwrite them with nothing."""
    setattr(fn, _HEARTBEATS_ITSELF, True)
    return fn


class HeartbeatInterceptor(Interceptor):
    """Heartbeats every activity that has a heartbeat timeout, while it runs.

    Why: with a heartbeat timeout of a few seconds on every activity, the attempt of a worker
    that died (SIGKILL, OOM, a node gone) is retried elsewhere within seconds, instead of at
    its start-to-close timeout; and a cancellation reaches the activity. The beats come from
    the worker's event loop, beside the activity's thread, so a call that blocks still counts
    as alive as long as the process is — the start-to-close timeout bounds a call that hangs.
    """

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _HeartbeatingInbound(next)


class _HeartbeatingInbound(ActivityInboundInterceptor):
    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        # The worker's own heartbeat call, safe on the event loop (`activity.heartbeat()`
        # of a threaded activity is meant for its thread and would block the loop).
        self._outbound = outbound
        super().init(outbound)

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        timeout = activity.info().heartbeat_timeout
        if not timeout or getattr(input.fn, _HEARTBEATS_ITSELF, False):
            return await self.next.execute_activity(input)
        beats = asyncio.create_task(self._beat_every(min(1.0, timeout.total_seconds() / 4)))
        try:
            return await self.next.execute_activity(input)
        finally:
            beats.cancel()

    async def _beat_every(self, interval_s: float) -> None:
        while True:
            self._outbound.heartbeat()
            await asyncio.sleep(interval_s)
