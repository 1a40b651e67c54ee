"""Process logging: human text, or one JSON object a line for a log pipeline.

JSON lines carry what an operator searches by: the workflow id and the claim or pool it is
about, the activity, the attempt, and the trace and span ids when tracing is on. Temporal's
workflow and activity loggers put `temporal_workflow` / `temporal_activity` dicts in a
record's extra; plain module loggers inside an activity get the same from the activity context.

One line per expected condition: an activity failing with an `ApplicationError` (a missing
Secret, a refused endpoint, a cloud out of capacity) is logged without its traceback, the
error's type and message on the line instead; any other exception keeps its traceback. And a
keep-alive connection the API server closed under the Kubernetes client (urllib3's
"Retrying ... RemoteDisconnected", retried at once) is DEBUG, not a WARNING.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace
from temporalio import activity
from temporalio.exceptions import ApplicationError

from api.messages import claim_key_of
from api.nodepool.messages import pool_key_of

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(log_format: str = "text", level: str | int = "INFO") -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    elif log_format == "text":
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    else:
        raise ValueError(f"log format {log_format!r}: use text or json")
    handler.addFilter(ExpectedFailures())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level if isinstance(level, int) else level.upper())
    logging.getLogger("temporalio").setLevel(logging.WARNING)
    pool = logging.getLogger(URLLIB3_POOL_LOGGER)
    if not any(isinstance(f, KeepAliveRetries) for f in pool.filters):
        pool.addFilter(KeepAliveRetries())


class ExpectedFailures(logging.Filter):
    """An `ApplicationError` is how an activity reports a failure it foresaw, with a message
    that says what to fix (our activities classify every such failure: InvalidConfiguration,
    CapacityError, ProviderFatal, ...); its traceback adds nothing but lines. The record
    keeps its level and gets the error's type and message; other exceptions are untouched.
    (Temporal logs each failed attempt as "Completing activity as failed", with exc_info.)
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, ApplicationError):
            kind = error.type or type(error).__name__
            message = " ".join(error.message.splitlines())
            record.msg = f"{record.getMessage()}: {kind}: {message}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
            record.__dict__["error_type"] = kind  # for the JSON lines
        return True


URLLIB3_POOL_LOGGER = "urllib3.connectionpool"


class KeepAliveRetries(logging.Filter):
    """urllib3 warns "Retrying (Retry(...)) after connection broken by 'RemoteDisconnected(...)'"
    whenever a server closed an idle keep-alive connection just as the client reused it
    (the API server's idle timeout) and then retries at once, which
    works. That is DEBUG. A retry after a refused connection or a timeout stays a WARNING,
    and so does a request that runs out of retries (it fails with an error of its own).
    """

    CLOSED_BY_PEER = ("RemoteDisconnected", "ConnectionResetError", "BrokenPipeError")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or not str(record.msg).startswith("Retrying"):
            return True
        if not any(marker in record.getMessage() for marker in self.CLOSED_BY_PEER):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


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
        error_type = getattr(record, "error_type", None)
        if error_type:
            entry["error_type"] = error_type
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
    claim = claim_key_of(workflow_id)
    pool = pool_key_of(workflow_id)
    if claim is not None:
        fields["claim"] = "/".join(claim)
    elif pool is not None:
        fields["nodepool"] = "/".join(pool)
    return fields
