"""A short chaos soak (bench/chaos.py): the production topology as separate processes, the
worker, the trigger and the Temporal server killed at random while waves of pods come and
go and an operator keeps querying. Nothing may leak, be made twice, get stuck or fail — not a
workflow, not one workflow task — and every history it made replays with today's code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from tests.payload_keys import REPLAY_CONVERTER
from worker.main import workflow_runner
from workflows.registry import WORKFLOWS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
async def test_a_short_soak_leaks_nothing_and_every_history_replays(tmp_path: Path) -> None:
    histories = tmp_path / "histories"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "chaos.py"),
            "--waves", "4",
            "--pods", "2",
            "--kill-every", "3", "8",
            "--server-kills", "1",
            "--server-kill-chance", "0.3",
            "--seed", "7",
            "--histories", str(histories),
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert run.returncode == 0 and report["ok"], (report, run.stderr[-3000:])
    assert report["lifecycles_completed"] >= 4, report
    assert sum(report["kills"].values()) >= 3, report
    assert report["queries"] > 0, report

    recorded = sorted(histories.glob("*.json"))
    assert any(p.name.startswith("nodepool_") for p in recorded), recorded
    assert any(p.name.startswith("nodeclaim_") for p in recorded), recorded
    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=REPLAY_CONVERTER,
        workflow_runner=workflow_runner(REPLAY_CONVERTER),  # as the workers run them
    )
    failures = {}
    for path in recorded:
        history = WorkflowHistory.from_json(path.name.split(".")[0], path.read_text())
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure:
            failures[path.name] = str(result.replay_failure)
    assert failures == {}
