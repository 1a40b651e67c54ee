"""How long a pool's or a claim's history may grow before it continues as new.

Temporal suggests continuing as new only at thousands of events or megabytes (its dynamic
config's defaults); ours stop sooner, so that a worker taking a workflow over from one that
died replays its whole history well within `timeouts.WORKFLOW_TASK` (a task that always
timed out would hang the workflow). Replaying 1 MB of a pool's burst took 0.1 to 0.3 s on this
2-core VM; the longest pool tasks in the chaos soaks' histories were such replays on a new
worker, about 1.2 ms per event under the soak's load (docs/design-notes.md).

The bytes count from the run's first task: a run begins with what the last one carried over
(a pool's state: ~700 bytes a claim, ~460 a pending pod, docs/capacity.md), and a bound on
the whole history would make a pool whose state alone is near it continue as new on every
round.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

HISTORY_EVENTS = 1_000
HISTORY_BYTES = 1_000_000


@dataclass(frozen=True)
class HistoryBound:
    bounded: bool  # runs recorded before the bound know only Temporal's suggestion
    start_bytes: int  # the history at the run's first task: its input, carried over

    @classmethod
    def of_this_run(cls, bounded: bool) -> HistoryBound:
        """Made in the workflow's `__init__`: its first task, the same in every replay."""
        return cls(bounded, workflow.info().get_current_history_size() if bounded else 0)

    def reached(self) -> bool:
        info = workflow.info()
        if info.is_continue_as_new_suggested():
            return True
        return self.bounded and (
            info.get_current_history_length() >= HISTORY_EVENTS
            or info.get_current_history_size() - self.start_bytes >= HISTORY_BYTES
        )
