"""The seed's disaster-recovery drill, the spot-interruption drill and the hybrid burst (the
machines on premises first, a cloud for the rest), end to end, as `cloudburst demo --scenario
dr|spot|hybrid` runs them."""

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


def test_a_burst_fills_the_machines_on_premises_first_and_the_cloud_takes_the_rest() -> None:
    cli = Path(sys.executable).parent / "cloudburst"
    result = subprocess.run(
        [
            str(cli),
            "demo",
            "--scenario",
            "hybrid",
            "--pods",
            "20",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.returncode == 0, (report, result.stderr[-3000:])
    # Six machines (4 of 16 cores, 2 of 32) hold 16 pods of 7 cores; Hetzner takes 4.
    assert report["nodes_by_provider"]["redfish"] == report["machines"] == 6
    assert (report["pods_on_premises"], report["pods_in_cloud"]) == (16, 4)
    assert report["first_plan_providers"] == ["hetzner", "redfish"]
    assert report["machines_powered_on_at_end"] == report["machines_held_at_end"] == 0
    assert report["vms_leaked"] == 0
