"""A workflow runner that refuses to run workflow code on events no workflow task has taken.

Why: when a worker dies, a query sent while its workflow is quiet goes to the dead worker's
sticky queue and, after the sticky timeout, to the normal queue. The history a new worker gets
with that query ends with whatever arrived meanwhile — signals a workflow task is scheduled
for but has not started. The Temporal SDK (temporalio 1.35, its Rust core) rebuilds the
workflow from that history, runs the workflow's code on those signals with the clock of the
task before, answers the query, and keeps the result cached; the real task that follows
brings only the signals after them. Live, the workflow ran two rounds (the first on a stale
clock) where a replay of the same history runs one: the commands come in another order and
the workflow loops on nondeterminism errors for good (`docs/repro/`,
`tests/workflows/test_untaken_events.py`).

Such an activation is recognisable: it is not a replay, its history is longer than the last
activation's, yet its clock did not move — every workflow task starts with an event of its own
and a time of its own, so only events no task took grow the history on the old clock. The
runner fails that activation instead of running it: the query fails with a message saying
why (ask again), the worker evicts the half-built workflow, and the real task replays from
history as any cold worker would.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.converter import SerializationContext, StorageDriverStoreContext
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.workflow import Info

from api.errors import QUERY_REFUSED_DURING_TAKEOVER

if TYPE_CHECKING:  # the SDK's private names, in its runner's signatures only
    from temporalio.worker._command_aware_visitor import CommandInfo
    from temporalio.workflow import _Definition

log = logging.getLogger(__name__)


# Jobs that carry no history event: a query and the worker's own eviction.
_EVENTLESS_JOBS = frozenset({"query_workflow", "remove_from_cache"})


@dataclass(frozen=True)
class TaskMark:
    """Where the last activation stood: its workflow task's start time and history length."""

    seconds: int
    nanos: int
    history_length: int


def task_mark(activation: WorkflowActivation) -> TaskMark:
    return TaskMark(
        activation.timestamp.seconds, activation.timestamp.nanos, activation.history_length
    )


def runs_untaken_events(previous: TaskMark | None, activation: WorkflowActivation) -> bool:
    """True for an activation built from events after the last started workflow task."""
    if previous is None or activation.is_replaying or not activation.HasField("timestamp"):
        return False
    if all(job.WhichOneof("variant") in _EVENTLESS_JOBS for job in activation.jobs):
        return False
    mark = task_mark(activation)
    same_clock = (mark.seconds, mark.nanos) == (previous.seconds, previous.nanos)
    return same_clock and mark.history_length > previous.history_length


class _GuardedInstance(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance) -> None:
        self._inner = inner
        self._last: TaskMark | None = None

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        if runs_untaken_events(self._last, act):
            info = self._inner.get_info()
            log.warning(
                "refused to run %s %s on events no workflow task has taken (a query after "
                "a worker change); it will be replayed from history",
                info.workflow_type,
                info.workflow_id,
            )
            refusal = WorkflowActivationCompletion(run_id=act.run_id)
            refusal.failed.failure.message = QUERY_REFUSED_DURING_TAKEOVER
            return refusal
        if act.HasField("timestamp"):
            self._last = task_mark(act)
        return self._inner.activate(act)

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        return self._inner.get_external_store_context(command_info)

    def get_info(self) -> Info:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()


class TakenEventsOnlyRunner(WorkflowRunner):
    """The SDK's sandboxed runner, refusing activations built from events no task has taken."""

    def __init__(self, inner: WorkflowRunner | None = None) -> None:
        self._inner = inner or SandboxedWorkflowRunner()

    def prepare_workflow(self, defn: _Definition) -> None:
        self._inner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _GuardedInstance(self._inner.create_instance(det))

    def set_worker_level_failure_exception_types(
        self, types: Sequence[type[BaseException]]
    ) -> None:
        self._inner.set_worker_level_failure_exception_types(types)
