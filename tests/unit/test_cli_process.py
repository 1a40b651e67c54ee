"""The `cloudburst` process itself: it ends without the interpreter's teardown (a Temporal
client's threads could abort it there after the command succeeded), so what it wrote must be
flushed and its exit code kept. Run as a user runs it: the installed script, output piped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

CLOUDBURST = Path(sys.executable).parent / "cloudburst"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLOUDBURST), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_long_output_into_a_pipe_arrives_whole() -> None:
    namespaces = [f"team-{i}" for i in range(300)]  # ~150 KB of YAML: many pipe buffers
    done = run("tenant-rbac", *namespaces)
    assert done.returncode == 0, done.stderr
    objects = [o for o in yaml.safe_load_all(done.stdout) if o]
    assert len(objects) == 3 * len(namespaces)  # a Namespace, a Role, a RoleBinding each
    assert objects[-1]["metadata"]["namespace"] == namespaces[-1]


def test_exit_codes_are_kept() -> None:
    assert run("tenant-rbac").returncode == 2  # a usage error: no namespace named
    unreachable = run("claims", "list", "--temporal-address", "127.0.0.1:1")
    assert unreachable.returncode == 1
    assert "127.0.0.1:1" in unreachable.stderr + unreachable.stdout
