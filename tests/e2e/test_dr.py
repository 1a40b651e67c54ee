"""The seed's disaster-recovery drill and the spot-interruption drill, end to end, as
`cloudburst demo --scenario dr|spot` runs them."""

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


def test_spot_drill_brings_the_interrupted_workload_back_on_a_replacement() -> None:
    cli = Path(sys.executable).parent / "cloudburst"
    result = subprocess.run(
        [str(cli), "demo", "--scenario", "spot", "--json"],
        capture_output=True,
        text=True,
        timeout=400,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.returncode == 0, (report, result.stderr[-3000:])
    assert report["interrupted_capacity_type"] == "spot"
    assert report["replacement_node"] not in (None, report["interrupted_node"])
    assert report["claim_ended_s"] is not None and report["pod_rescheduled_s"] is not None
    assert report["vms_leaked"] == 0
