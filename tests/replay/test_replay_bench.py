"""bench/replay.py stays runnable, and says so when a history does not replay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "replay" / "histories"


def _bench(*histories: Path) -> tuple[int, dict[str, Any]]:
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "replay.py"), "--repeat", "1", "--json",
         *map(str, histories)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    lines = run.stdout.strip().splitlines()
    assert lines, (run.returncode, run.stderr[-3000:])
    return run.returncode, json.loads(lines[-1])


def test_a_pool_history_replays_with_its_cost() -> None:
    code, report = _bench(CORPUS / "nodepool-capped.json")
    [replayed] = report["replays"]
    assert code == 0 and replayed["failure"] is None, report
    assert replayed["events"] > 0 and replayed["workflow_tasks"] > 0, report
    assert replayed["wall_s"] > 0 and replayed["ms_per_task"] > 0, report


def test_a_history_that_does_not_replay_fails_the_bench(tmp_path: Path) -> None:
    # A pool's history given the claim workflow's type: today's code cannot replay it.
    history = json.loads((CORPUS / "nodepool-capped.json").read_text())
    started = history["events"][0]["workflowExecutionStartedEventAttributes"]
    started["workflowType"]["name"] = "NoSuchWorkflow"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(history))
    code, report = _bench(broken)
    [replayed] = report["replays"]
    assert code == 1 and replayed["failure"], report
