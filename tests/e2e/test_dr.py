"""The seed's disaster-recovery drill, end to end, as `cloudburst demo --scenario dr` runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_dr_drill_fails_over_from_hetzner_to_scaleway() -> None:
    cli = Path(sys.executable).parent / "cloudburst"
    result = subprocess.run(
        [str(cli), "demo", "--scenario", "dr", "--json"],
        capture_output=True,
        text=True,
        timeout=400,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.returncode == 0, (report, result.stderr[-3000:])
    assert report["first_provider"] == "hetzner"
    assert report["failover_provider"] == "scaleway"
    assert report["node_lost_detected_s"] is not None
    assert report["pod_rescheduled_s"] >= report["node_lost_detected_s"]
    assert report["vms_leaked"] == 0
