"""A plug-in's machine has no metadata service: the first-boot script takes the kubelet's
--provider-id from the file the plug-in's own first-boot handling wrote (the reference
plug-in's create hook: a NoCloud vendor-data `write_files`), and refuses to join without it.

Run in a temporary root with stub commands, as tests/activities/test_script_runs.py runs
the script for the clouds' metadata services.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from api import plugin as contract
from tests.activities.test_script_runs import (
    UBUNTU_2404,
    Machine,
    kubelet_args,
    metadata_service,
    script,
)
from tests.providers.harness_plugin import EXAMPLE

PROVIDER_ID = "plugin:///lab-1/mini-01.3"


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path, UBUNTU_2404)


def provider_id_file(machine: Machine, content: str) -> Path:
    path = machine.root / contract.PROVIDER_ID_FILE.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


def test_the_kubelet_gets_the_provider_id_the_plugin_wrote(machine: Machine) -> None:
    metadata_service(machine, {}, silent=True)  # any metadata request would fail the run
    provider_id_file(machine, PROVIDER_ID + "\n")
    run = machine.run(script(provider="plugin"))
    assert run.returncode == 0, run.output
    assert kubelet_args(run.join_config())["provider-id"] == PROVIDER_ID
    assert f"[provider-id] provider ID is {PROVIDER_ID}" in run.log
    assert not any("169.254." in c for c in run.calls)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "the plug-in wrote no /etc/cloudburst/provider-id"),
        ("fake:///lab-1/mini-01.3", "holds no plugin:///<region>/<id> providerID"),
        ("plugin:///lab-1/a/b", "gave no usable identity"),
        ("plugin:///lab-1/$(reboot)", "gave no usable identity"),
    ],
)
def test_without_a_usable_provider_id_the_node_does_not_join(
    machine: Machine, content: str | None, said: str
) -> None:
    metadata_service(machine, {}, silent=True)
    if content is not None:
        provider_id_file(machine, content)
    run = machine.run(script(provider="plugin"))
    assert run.returncode != 0
    assert said in run.log
    assert "FAILED in step 'provider-id'" in run.log
    assert not any(c.startswith("kubeadm join") for c in run.calls)


def test_the_reference_hook_writes_what_the_script_reads(tmp_path: Path) -> None:
    """The shipped create hook's vendor-data writes the file the script reads."""
    env = {
        **os.environ,
        "SEED_DIR": str(tmp_path),
        "CLOUDBURST_MACHINE_ID": "mini-01",
        "CLOUDBURST_INSTANCE_ID": "mini-01.3",
        "CLOUDBURST_CLAIM": "nodeclaim-burst-x7k2p",
        "CLOUDBURST_PROVIDER_ID": PROVIDER_ID,
    }
    subprocess.run([str(EXAMPLE / "hooks" / "create")], input=b"#!/bin/sh\n", env=env, check=True)
    vendor = yaml.safe_load((tmp_path / "mini-01" / "vendor-data").read_text())
    (written,) = vendor["write_files"]
    assert written["path"] == contract.PROVIDER_ID_FILE
    assert written["content"] == PROVIDER_ID
    assert (tmp_path / "mini-01" / "vendor-data").read_text().startswith("#cloud-config\n")
