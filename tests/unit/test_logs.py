"""JSON log lines carry the workflow, claim and activity they are about."""

from __future__ import annotations

import dataclasses
import json
import logging

from temporalio import activity
from temporalio.testing import ActivityEnvironment

from worker.logs import JsonFormatter


def format_record(record: logging.LogRecord) -> dict[str, object]:
    return json.loads(JsonFormatter().format(record))


def test_plain_line() -> None:
    record = logging.LogRecord("cloudburst", logging.INFO, __file__, 1, "hello %s", ("x",), None)
    entry = format_record(record)
    assert entry["message"] == "hello x" and entry["level"] == "INFO"
    assert "workflow_id" not in entry


def test_workflow_logger_extra_names_the_claim() -> None:
    record = logging.LogRecord("temporalio.workflow", logging.INFO, __file__, 1, "m", (), None)
    record.temporal_workflow = {
        "workflow_id": "nodeclaim-sample-abcde",
        "run_id": "r1",
        "workflow_type": "NodeClaimWorkflow",
        "task_queue": "cloudburst",
    }
    entry = format_record(record)
    assert entry["workflow_id"] == "nodeclaim-sample-abcde"
    assert entry["claim"] == "sample-abcde"
    assert entry["workflow_type"] == "NodeClaimWorkflow"


def test_module_logger_inside_an_activity_gets_the_activity_context() -> None:
    lines: list[dict[str, object]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(JsonFormatter().format(record)))

    log = logging.getLogger("activities.compute.test")
    log.addHandler(Capture())
    log.propagate = False

    @activity.defn(name="create_instance")
    def create_instance() -> None:
        log.warning("creating")

    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, workflow_id="nodeclaim-pool-xyz12", activity_type="create_instance"
    )
    env.run(create_instance)
    (entry,) = lines
    assert entry["activity_type"] == "create_instance"
    assert entry["workflow_id"] == "nodeclaim-pool-xyz12"
    assert entry["claim"] == "pool-xyz12"
