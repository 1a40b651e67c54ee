"""Disruption budgets: how many more nodes may go now, and when scheduled budgets are active.

The workflow never asks the clock whether a scheduled budget is active (see
workflows/alarms.py): it keeps the start of the latest window it has reached, asks these
functions for the next start and the end of that window, and arms alarms for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from croniter import croniter

from api.nodepool import Budget, parse_duration


def disruptions_allowed(
    active_budgets: Sequence[Budget], reason: str, total_nodes: int, disrupting: int
) -> int:
    """How many more nodes may be disrupted for `reason`: the strictest active budget that
    covers the reason, less those already disrupting; no budget at all allows every node."""
    limits = [
        budget.allowed(total_nodes)
        for budget in active_budgets
        if budget.reasons is None or reason in budget.reasons
    ]
    if not limits:
        return max(0, total_nodes - disrupting)
    return max(0, min(limits) - disrupting)


def budget_identity(index: int, budget: Budget) -> str:
    """Names a scheduled budget across spec updates: a new schedule starts a new identity."""
    return f"{index}|{budget.schedule}|{budget.duration}"


def latest_window_start(budget: Budget, moment: datetime) -> datetime:
    """The latest start of the budget's window at or before `moment` (cron, UTC)."""
    assert budget.schedule is not None
    start: datetime = croniter(budget.schedule, moment + timedelta(seconds=1)).get_prev(datetime)
    return start


def next_window_start(budget: Budget, start: datetime) -> datetime:
    """The start of the window after the one that started at `start`."""
    assert budget.schedule is not None
    following: datetime = croniter(budget.schedule, start).get_next(datetime)
    return following


def window_end(budget: Budget, start: datetime) -> datetime:
    assert budget.duration is not None
    return start + timedelta(seconds=parse_duration(budget.duration))
