"""What `cloudburst plan -f` loads (issue #45: it answers well under a second, and most of a
command's time was importing what it never uses). Without a cluster, a plan needs the
planner and the LP solver of its bound: no other command's module, no workflow, no
Kubernetes API class nor the client's pod models, nothing of Temporal (a plan never asks
Temporal: a pool's holdings are its published status), no scipy. Checked on the
modules a real run left loaded, in a process of its own; what is asserted is what was
imported, never how long it took.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer.main
import yaml

# Modules a plan without a cluster must not import (a prefix covers
# the package's submodules).
NOT_NEEDED = (
    # the other commands, and what they need
    "cli.commands.bootstrap",
    "cli.commands.catalog",
    "cli.commands.claims",
    "cli.commands.config_reference",
    "cli.commands.crds",
    "cli.commands.explain",
    "cli.commands.pools",
    "cli.commands.tenant_rbac",
    "activities.bootstrap",
    "workflows.",
    # the cluster's reads: no kubeconfig, so no API class and not the worker's activity
    "kubernetes.client.api.",
    "activities.planning.activity",
    # a plan never asks Temporal, and raises none of its errors unless it fails
    "temporalio",
    "worker.client",
    # the file's pods are read as JSON (cluster/pod_view.py), not as the client's models
    "kubernetes.client.models.v1_pod",
    # the bound's solver is HiGHS itself, not scipy's wrapper of it
    "scipy",
    # the price refresh's SDKs
    "boto3",
    "google.cloud",
)

# `cloudburst plan ARGS...` in a process of its own, which writes its exit code and every
# module loaded to the file named first.
PLAN = """
import json, sys
from cli.main import app
try:
    app(["plan", *sys.argv[2:]], prog_name="cloudburst")
except SystemExit as ended:
    code = ended.code
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""


def run_plan(
    args: list[str], report: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The command's output, and what it loaded (its exit code, its modules)."""
    done = subprocess.run(
        [sys.executable, "-c", PLAN, str(report), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200", **env},
    )
    ran: dict[str, Any] = json.loads(report.read_text())
    return done, ran


def test_a_plan_without_a_cluster_imports_only_what_it_uses(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(yaml.safe_dump_all(_workload()))
    done, ran = run_plan(
        ["-f", str(path)],
        tmp_path / "modules.json",
        {
            "KUBECONFIG": str(tmp_path / "no-kubeconfig"),
            "CLOUDBURST_TEMPORAL_ADDRESS": f"127.0.0.1:{_refusing_port()}",
        },
    )
    assert ran["code"] in (0, None), done.stderr
    # The plan was made and compared, the bound with HiGHS (the dev extra's highspy).
    assert "Cost: €" in done.stdout, done.stdout
    assert "assignment LP" in done.stdout, done.stdout
    assert "highspy" in ran["modules"]
    unneeded = [m for m in ran["modules"] if any(_covers(p, m) for p in NOT_NEEDED)]
    assert unneeded == []


def test_importing_the_app_imports_no_command() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, cli.main\nprint([m for m in sys.modules if m.startswith('cli.commands.')])",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_command_named_by_the_app_is_found() -> None:
    from cli.main import app

    group = typer.main.get_command(app)
    context = group.make_context("cloudburst", [], resilient_parsing=True)
    names = group.list_commands(context)  # type: ignore[attr-defined]
    assert {"plan", "claims", "explain", "tenant-rbac", "worker", "validate"} <= set(names)
    for name in names:
        command = group.get_command(context, name)  # type: ignore[attr-defined]
        assert command is not None, name
        assert command.get_short_help_str(), name


def _covers(prefix: str, module: str) -> bool:
    """Whether `prefix` names the module: "a.b." its submodules, "a.b" it and its own."""
    if prefix.endswith("."):
        return module.startswith(prefix)
    return module == prefix or module.startswith(prefix + ".")


def _refusing_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _workload() -> list[dict[str, object]]:
    pool: dict[str, object] = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "burst", "namespace": "default"},
        "spec": {"nodeClassRef": "burst", "requirements": {"allowedProviders": ["hetzner"]}},
    }
    node_class: dict[str, object] = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodeClass",
        "metadata": {"name": "burst", "namespace": "default"},
        "spec": {
            "hetzner": {"location": "fsn1", "apiTokenSecretRef": {"name": "h", "key": "token"}},
            "join": {"hostApiServer": "https://10.0.0.1:6443"},
        },
    }
    web: dict[str, object] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 5,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}
                    ]
                }
            },
        },
    }
    return [pool, node_class, web]
