"""The wrapper modules the test control plane is built from (simulator/controlplane/).

The Kubernetes wrapper's `replace` block is generated from the release's own go.mod
(`gen_kubernetes_gomod.py`); these tests read that go.mod again through the module cache and
check the committed file against it, so a hand edit or a release bumped without the generator
fails here, not at build time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sim.controlplane import pinned_release
from sim.controlplane.binaries import GO_MISSING, GO_MODULES, build_key

KUBERNETES_GOMOD = GO_MODULES / "kubernetes" / "go.mod"
ETCD_GOMOD = GO_MODULES / "etcd" / "go.mod"
REPLACE = re.compile(r"^\s*(k8s\.io/[\w.-]+) => (k8s\.io/[\w.-]+) (v\S+)\s*$", re.M)


def release_gomod(release: str) -> str:
    if shutil.which("go") is None:
        pytest.fail(GO_MISSING)
    listing = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{release}"],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "GOTOOLCHAIN": "local"},
    )
    return Path(json.loads(listing.stdout)["GoMod"]).read_text()


def test_one_replace_per_staging_module_of_the_release_at_its_tag() -> None:
    release = pinned_release()
    staging = set(
        re.findall(
            r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/src/\1\s*$", release_gomod(release), re.M
        )
    )
    assert len(staging) > 30, staging  # the release's whole staging tree
    replaced = REPLACE.findall(KUBERNETES_GOMOD.read_text())
    parsed = re.fullmatch(r"v1\.(\d+)\.(\d+)", release)
    assert parsed is not None, release
    minor, patch = parsed.groups()
    assert {source for source, _, _ in replaced} == staging
    assert all(source == target for source, target, _ in replaced)
    assert {version for _, _, version in replaced} == {f"v0.{minor}.{patch}"}


def test_the_release_kwok_and_etcd_are_pinned() -> None:
    kubernetes = KUBERNETES_GOMOD.read_text()
    assert re.search(r"^\s*k8s\.io/kubernetes v1\.37\.\d+( // indirect)?$", kubernetes, re.M), (
        "1.37.x"
    )
    assert re.search(r"^\s*sigs\.k8s\.io/kwok v0\.8\.0( // indirect)?$", kubernetes, re.M)
    for tool in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"):
        assert f"k8s.io/kubernetes/cmd/{tool}" in kubernetes
    assert re.search(
        r"^\s*go\.etcd\.io/etcd/server/v3 v3\.6\.\d+( // indirect)?$", ETCD_GOMOD.read_text(), re.M
    )
    # The machine's own Go, never a toolchain fetched for a newer go line.
    for gomod in (kubernetes, ETCD_GOMOD.read_text()):
        assert re.search(r"^go 1\.26\.\d+$", gomod, re.M)
        assert "toolchain" not in gomod


def test_a_change_of_requirements_is_a_new_build(tmp_path: Path) -> None:
    """The binaries' cache is keyed by what they are built from: a bumped release is never
    served by the last release's binaries."""
    copy = tmp_path / "controlplane"
    shutil.copytree(GO_MODULES, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert build_key(copy) == build_key()
    gomod = copy / "kubernetes" / "go.mod"
    gomod.write_text(gomod.read_text().replace(pinned_release(), "v1.37.999"))
    assert build_key(copy) != build_key()
