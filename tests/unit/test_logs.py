"""Process logs: JSON lines carry the workflow, claim and activity they are about; an expected
condition is one line (no traceback for a configuration error, no keep-alive retry warnings)."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import urllib3
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from worker.logs import URLLIB3_POOL_LOGGER, ExpectedFailures, JsonFormatter, configure_logging


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
        "workflow_id": "nodeclaim/default/sample-abcde",
        "run_id": "r1",
        "workflow_type": "NodeClaimWorkflow",
        "task_queue": "cloudburst",
    }
    entry = format_record(record)
    assert entry["workflow_id"] == "nodeclaim/default/sample-abcde"
    assert entry["claim"] == "default/sample-abcde"
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
        env.info, workflow_id="nodeclaim/default/pool-xyz12", activity_type="create_instance"
    )
    env.run(create_instance)
    (entry,) = lines
    assert entry["activity_type"] == "create_instance"
    assert entry["workflow_id"] == "nodeclaim/default/pool-xyz12"
    assert entry["claim"] == "default/pool-xyz12"


# --- one line per expected condition (configure_logging's filters) -----------------------


@pytest.fixture
def logged() -> Iterator[Callable[[], list[str]]]:
    """configure_logging as a process sets it up; yields: the lines logged since last asked.
    The root logger's handlers and the urllib3 filter are put back afterwards."""
    root = logging.getLogger()
    pool = logging.getLogger(URLLIB3_POOL_LOGGER)
    saved = (root.handlers[:], root.level, pool.filters[:])
    configure_logging("text", "INFO")
    stream = io.StringIO()
    handler = root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)

    def lines() -> list[str]:
        text = stream.getvalue()
        stream.seek(0)
        stream.truncate()
        return text.splitlines()

    try:
        yield lines
    finally:
        root.handlers[:], pool.filters[:] = saved[0], saved[2]
        root.setLevel(saved[1])


def fail_activity(error: BaseException) -> None:
    """What the SDK's activity worker logs for a failed attempt (temporalio/worker/_activity.py)."""
    try:
        raise error
    except BaseException:
        logging.getLogger("temporalio.activity").warning(
            "Completing activity as failed", exc_info=True
        )


def test_a_configuration_error_is_one_line_with_its_type_and_message(
    logged: Callable[[], list[str]],
) -> None:
    fail_activity(
        ApplicationError(
            "Secret default/hetzner-token not found (referenced for key 'token')",
            type="InvalidConfiguration",
            non_retryable=True,
        )
    )
    (line,) = logged()
    assert line.endswith(
        "WARNING temporalio.activity: Completing activity as failed: InvalidConfiguration: "
        "Secret default/hetzner-token not found (referenced for key 'token')"
    )


def test_a_retryable_application_error_is_one_line_too(logged: Callable[[], list[str]]) -> None:
    fail_activity(ApplicationError("fake: out of capacity\nin sim-1", type="CapacityError"))
    (line,) = logged()
    assert line.endswith(
        "Completing activity as failed: CapacityError: fake: out of capacity in sim-1"
    )


def test_an_unexpected_exception_keeps_its_traceback(logged: Callable[[], list[str]]) -> None:
    fail_activity(KeyError("spec"))
    lines = logged()
    assert lines[0].endswith("Completing activity as failed")
    assert "Traceback (most recent call last):" in lines
    assert lines[-1] == "KeyError: 'spec'"


def test_json_lines_name_the_error_type(capsys: pytest.CaptureFixture[str]) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ExpectedFailures())
    log = logging.getLogger("temporalio.activity.json-test")
    log.addHandler(handler)
    log.propagate = False
    try:
        raise ApplicationError("no such Secret", type="InvalidConfiguration")
    except ApplicationError:
        log.warning("Completing activity as failed", exc_info=True)
    entry = json.loads(capsys.readouterr().err)
    assert entry["error_type"] == "InvalidConfiguration" and "exception" not in entry
    assert entry["message"] == "Completing activity as failed: InvalidConfiguration: no such Secret"


@pytest.fixture
def server_closing_keepalive() -> Iterator[str]:
    """An HTTP server that answers a connection's first request and closes the connection
    on its second without a word: what an API server's idle timeout does to a pooled
    keep-alive connection the client reuses at that moment."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            served = getattr(self, "served", 0)
            if served == 1:
                self.close_connection = True
                return
            self.served = served + 1
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_keepalive_connection_closed_by_the_server_is_not_a_warning(
    logged: Callable[[], list[str]], server_closing_keepalive: str
) -> None:
    url = f"{server_closing_keepalive}/keepalive-test"
    http = urllib3.PoolManager()
    for _ in range(3):  # the second request meets the closed connection and is retried
        assert http.request("GET", url).data == b"ok"
    assert [line for line in logged() if "keepalive-test" in line] == []
    logging.getLogger().setLevel(logging.DEBUG)
    assert http.request("GET", url).data == b"ok"
    debug = [line for line in logged() if "Retrying" in line and "keepalive-test" in line]
    assert debug and "DEBUG urllib3.connectionpool" in debug[0]
    assert "RemoteDisconnected" in debug[0]


def test_a_retry_after_a_refused_connection_stays_a_warning(
    logged: Callable[[], list[str]],
) -> None:
    http = urllib3.PoolManager(retries=urllib3.Retry(total=1, backoff_factor=0))
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        http.request("GET", "http://127.0.0.1:9/refused-test")
    (line,) = [line for line in logged() if "refused-test" in line]
    assert "WARNING urllib3.connectionpool" in line and "refused" in line.lower()
