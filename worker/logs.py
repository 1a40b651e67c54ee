"""Process logging: human text, or one JSON object a line for a log pipeline.

JSON lines carry what an operator searches by: the workflow id and the claim or pool it is
about, the activity, the attempt, and the trace and span ids when tracing is on. Temporal's
workflow and activity loggers put `temporal_workflow` / `temporal_activity` dicts in a
record's extra; plain module loggers inside an activity get the same from the activity context.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace
from temporalio import activity

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(log_format: str = "text", level: str | int = "INFO") -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    elif log_format == "text":
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    else:
        raise ValueError(f"log format {log_format!r}: use text or json")
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level if isinstance(level, int) else level.upper())
    logging.getLogger("temporalio").setLevel(logging.WARNING)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_temporal_fields(record))
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            entry["trace_id"] = format(span.trace_id, "032x")
            entry["span_id"] = format(span.span_id, "016x")
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _temporal_fields(record: logging.LogRecord) -> dict[str, Any]:
    details: dict[str, Any] = {}
    workflow = getattr(record, "temporal_workflow", None)
    activity_extra = getattr(record, "temporal_activity", None)
    if isinstance(workflow, dict):
        details.update(workflow)
    if isinstance(activity_extra, dict):
        details.update(activity_extra)
    elif activity.in_activity():
        info = activity.info()
        details.update(
            activity_id=info.activity_id,
            activity_type=info.activity_type,
            attempt=info.attempt,
            workflow_id=info.workflow_id,
            workflow_type=info.workflow_type,
        )
    fields = {
        key: details[key]
        for key in (
            "workflow_id",
            "run_id",
            "workflow_type",
            "activity_id",
            "activity_type",
            "attempt",
            "task_queue",
        )
        if details.get(key) is not None
    }
    workflow_id = str(fields.get("workflow_id", ""))
    if workflow_id.startswith("nodeclaim-"):
        fields["claim"] = workflow_id.removeprefix("nodeclaim-")
    elif workflow_id.startswith("nodepool-"):
        fields["nodepool"] = workflow_id.removeprefix("nodepool-")
    return fields
