"""Which activations the worker's runner refuses: those built from events no task took."""

from __future__ import annotations

from temporalio.bridge.proto.workflow_activation import WorkflowActivation

from worker.untaken_events import runs_untaken_events, task_mark


def activation(
    *jobs: str, seconds: int = 100, nanos: int = 5, length: int = 10, replaying: bool = False
) -> WorkflowActivation:
    act = WorkflowActivation(run_id="r", history_length=length, is_replaying=replaying)
    act.timestamp.seconds, act.timestamp.nanos = seconds, nanos
    for job in jobs:
        getattr(act.jobs.add(), job).SetInParent()
    return act


TASK = task_mark(activation("signal_workflow", length=10))


def test_a_signal_on_the_last_tasks_clock_with_a_longer_history_is_refused() -> None:
    assert runs_untaken_events(TASK, activation("signal_workflow", length=13))
    assert runs_untaken_events(TASK, activation("fire_timer", "signal_workflow", length=12))


def test_a_new_task_moves_the_clock_and_is_run() -> None:
    assert not runs_untaken_events(TASK, activation("signal_workflow", nanos=6, length=13))
    assert not runs_untaken_events(TASK, activation("signal_workflow", seconds=101, length=13))


def test_more_activations_of_the_same_task_are_run() -> None:
    assert not runs_untaken_events(TASK, activation("resolve_activity", length=10))


def test_replays_queries_and_evictions_are_run() -> None:
    assert not runs_untaken_events(TASK, activation("signal_workflow", length=13, replaying=True))
    assert not runs_untaken_events(TASK, activation("query_workflow", length=13))
    assert not runs_untaken_events(TASK, activation("remove_from_cache", length=13))


def test_the_first_activation_of_a_workflow_is_run() -> None:
    assert not runs_untaken_events(None, activation("initialize_workflow", length=3))
