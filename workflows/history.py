"""How long a pool's history may grow before it continues as new.

Temporal suggests continuing as new only at thousands of events or megabytes (its dynamic
config's defaults). A pool stops sooner, because every replay of it costs its whole history:
a worker that takes it over, and any task of it that fails. One that fails often is a pool
continuing as new while claims signal it (Temporal refuses to close a run that has news it
has not seen: `UnhandledCommand`), and the worker evicts and replays the pool each time. In
a 300-claim teardown the pool's history had reached Temporal's suggestion (4,096 events,
2 MB): each replay took 10-13 s on the busy worker and timed out, while the claims' reports
kept coming (docs/benchmarks-history.md, "Tried and not adopted").

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
# Past this many events a pool stops taking news until what it has in flight is done, and
# continues as new: a stream of news keeps something in flight all the time (3,000 claims
# reporting Ready one after another: the pool's status write, its Events), and a run grew to
# 3,449 events, whose replay (~1 ms an event on this machine when quiet, three times that on
# the busy worker) outlasted the 10 s workflow task timeout on every retry. Events, not
# bytes: a replay's cost is its events (a 1,000-pod burst's 2.4 MB in 289 events replays in
# 0.16 s), and a burst keeps its news flowing.
HARD_HISTORY_EVENTS = 1_500


@dataclass(frozen=True)
class HistoryBound:
    start_bytes: int  # the history at the run's first task: its input, carried over

    @classmethod
    def of_this_run(cls) -> HistoryBound:
        """Made when the run's state is, in its first task: the same in every replay."""
        return cls(workflow.info().get_current_history_size())

    def overdue(self) -> bool:
        """Past the hard bound: news waits until the run can continue as new."""
        return workflow.info().get_current_history_length() >= HARD_HISTORY_EVENTS

    def reached(self) -> bool:
        info = workflow.info()
        return (
            info.get_current_history_length() >= HISTORY_EVENTS
            or info.get_current_history_size() - self.start_bytes >= HISTORY_BYTES
        )
