"""The workflow histories a test session's Temporal server holds, and their hand-over from the
end-to-end run to the replay run.

`make test` runs the end-to-end tests on several xdist workers, each with a Temporal server
and a simulated cluster of its own, then the replay tests in a session of their own: every
end-to-end worker writes the histories it made, and every Secret value its cluster held, into
the directory named by `CLOUDBURST_E2E_HISTORIES`, and the replay tests read them all back.
Unset, nothing is written or read (`pytest tests/e2e tests/replay` in one session sees its
own server's histories directly).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory

from tests.payload_keys import KEYRING
from worker.payload_codec import decompressed, opened

EXPORT_DIR_ENV = "CLOUDBURST_E2E_HISTORIES"


def export_dir() -> Path | None:
    value = os.environ.get(EXPORT_DIR_ENV)
    return Path(value) if value else None


async def session_histories(client: Client) -> list[WorkflowHistory]:
    """Every closed claim of the server, and every pool run (a pool never ends: its history
    so far replays just as well, and it is where a pool's changes would break)."""
    histories = []
    async for execution in client.list_workflows(
        "WorkflowType = 'NodeClaimWorkflow' OR WorkflowType = 'NodePoolWorkflow'"
    ):
        if execution.workflow_type == "NodeClaimWorkflow" and execution.close_time is None:
            continue  # a claim still running: not a complete history
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        histories.append(await handle.fetch_history())
    return histories


def export(
    directory: Path, session: str, histories: list[WorkflowHistory], secret_values: set[str]
) -> None:
    """One file a session (an xdist worker): its histories and its cluster's Secret values."""
    directory.mkdir(parents=True, exist_ok=True)
    document = {
        "histories": [
            {"workflow_id": h.workflow_id, "history": h.to_json_dict()} for h in histories
        ],
        "secret_values": sorted(secret_values),
    }
    (directory / f"{session}.json").write_text(json.dumps(document))


def exported(directory: Path) -> tuple[list[WorkflowHistory], set[str]]:
    """Every exported session's histories and Secret values."""
    histories: list[WorkflowHistory] = []
    secret_values: set[str] = set()
    for path in sorted(directory.glob("*.json")):
        document = json.loads(path.read_text())
        histories += [
            WorkflowHistory.from_json(item["workflow_id"], item["history"])
            for item in document["histories"]
        ]
        secret_values |= set(document["secret_values"])
    return histories, secret_values


def history_text(history: WorkflowHistory) -> str:
    """The history as text with every payload decoded: opened and inflated as our processes
    read it (payload data is base64 in JSON)."""
    parts = [json.dumps(history.to_json_dict())]

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "data" in node and "metadata" in node and isinstance(node["data"], str):
                parts.append(_opened(node).decode(errors="replace"))
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(history.to_json_dict())
    return "\n".join(parts)


def _opened(node: dict[str, object]) -> bytes:
    """A payload's data as our processes read it: opened with the suite's key (an unsealed one
    as it is), inflated."""
    try:
        payload = json_format.ParseDict(node, Payload(), ignore_unknown_fields=True)
    except json_format.ParseError:
        return base64.b64decode(str(node["data"]))
    return decompressed(opened(payload, KEYRING, accept_unsealed=True)).data


def payload_data(payload: Payload) -> bytes:
    """A payload's data as our processes read it (opened with the suite's key, inflated): the
    JSON of a signal's input, the text of a timer's summary."""
    return decompressed(opened(payload, KEYRING, accept_unsealed=True)).data
