"""A claim's phase timeline, read from its workflow history (no workflow change needed).

The workflow upserts the `CloudburstPhase` search attribute at every phase change; each
upsert is an event with its own time, so the history is the timeline. A claim that continued
as new has its earlier phases in earlier runs: they are followed back to the first one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.api.common.v1 import SearchAttributes
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import PayloadConverter

from api import search_attributes

MAX_RUNS = 50  # a claim continues as new every few thousand events: this is months of life


@dataclass(frozen=True)
class PhaseSpan:
    phase: str
    since: datetime
    until: datetime | None  # None: the phase it is in now

    def duration(self, now: datetime | None = None) -> timedelta:
        return (self.until or now or datetime.now(UTC)) - self.since


async def phase_timeline(client: Client, workflow_id: str) -> list[PhaseSpan]:
    """Phases in order with their start and end; the last one ends when the workflow closed."""
    histories: list[WorkflowHistory] = []
    run_id: str | None = None
    for _ in range(MAX_RUNS):
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.insert(0, history)
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id or None
        if run_id is None:
            break
    changes: list[tuple[str, datetime]] = []
    closed: datetime | None = None
    for history in histories:
        for phase, at in phase_changes(history.events):
            if not changes or changes[-1][0] != phase:
                changes.append((phase, at))
        closed = _close_time(history.events)
    return spans(changes, closed)


def phase_changes(events: Sequence[HistoryEvent]) -> list[tuple[str, datetime]]:
    """(phase, event time) for each event that sets `CloudburstPhase`."""
    found = []
    for event in events:
        attrs: SearchAttributes | None = None
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            attrs = event.workflow_execution_started_event_attributes.search_attributes
        elif event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            attrs = event.upsert_workflow_search_attributes_event_attributes.search_attributes
        if attrs is None:
            continue
        payload = attrs.indexed_fields.get(search_attributes.PHASE.name)
        if payload is None:
            continue
        value = PayloadConverter.default.from_payload(payload)
        if isinstance(value, list):  # keyword attributes may arrive as a one-element list
            value = value[0] if value else None
        if value:
            found.append((str(value), event.event_time.ToDatetime(tzinfo=UTC)))
    return found


def spans(changes: list[tuple[str, datetime]], closed: datetime | None) -> list[PhaseSpan]:
    result = []
    for index, (phase, since) in enumerate(changes):
        until = changes[index + 1][1] if index + 1 < len(changes) else closed
        result.append(PhaseSpan(phase, since, until))
    return result


def format_duration(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


_CLOSING = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
}


def _close_time(events: Sequence[HistoryEvent]) -> datetime | None:
    last = events[-1] if events else None
    if last is not None and last.event_type in _CLOSING:
        return last.event_time.ToDatetime(tzinfo=UTC)
    return None
