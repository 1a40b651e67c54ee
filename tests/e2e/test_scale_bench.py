"""bench/scale.py stays runnable: three floor claims in the production topology, a short idle
window past their empty TTL, torn down with nothing leaked. Figures only: no time is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_three_claims_ready_idle_and_gone() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scale.py"), "--claims", "3",
         "--idle-minutes", "0.2", "--empty-ttl", "2", "--json",
         # As a large cluster deploys it: the pools on a worker of their own.
         "--pool-workers", "1", "--pool-task-timeout", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )  # fmt: skip
    lines = run.stdout.strip().splitlines()
    assert lines, (run.returncode, run.stderr[-4000:])
    report = json.loads(lines[-1])
    assert run.returncode == 0 and report["ok"], (report, run.stderr[-3000:])
    assert report["ready"] == 3 and report["failed"] == 0, report
    # One VM per floor claim: their empty TTL (2 s) passes while idle, and the pool holds
    # them at its minNodes instead of letting them go and starting others.
    assert report["vms_created"] == 3 and report["vms_leaked"] == 0, report
    assert report["claim_events_to_ready_mean"] > 0 and report["rss_mb_at_all_ready"] > 0, report
    assert report["pool_worker_rss_mb_at_all_ready"] > 0, report
