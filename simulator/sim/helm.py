"""Helm, built from its Go module (`helm.sh/helm/v4`, simulator/helm/) once per machine.

`helm_binary()` returns the path of a `helm` built with the version simulator/helm/go.mod
requires, into a cache keyed by that go.mod and go.sum (as the control plane's binaries are,
sim/controlplane/binaries.py): every checkout on a machine, and CI's fresh clone, share one
build, and Go's module and build caches keep a rebuild to linking. Its `k8s.io/*` modules are
the control plane's release, so what it renders and installs is checked by the same
Kubernetes libraries the tests' API server runs. `python -m sim.helm` builds it and prints
where it is; `make helm` runs that.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sim.controlplane.binaries import CACHE_HOME, GO_MISSING, ControlPlaneUnavailable

GO_MODULE = Path(__file__).resolve().parents[1] / "helm"
# Helm's version string (`helm version`), stamped as Helm's own release build does.
VERSION_VARIABLE = "helm.sh/helm/v4/internal/version.version"


def build_key(module: Path = GO_MODULE) -> str:
    """What the build depends on: the module's requirements."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "tools.go"):
        digest.update(name.encode())
        digest.update((module / name).read_bytes())
    return digest.hexdigest()[:16]


def helm_binary() -> Path:
    """The built `helm`, building it first where needed (minutes with Go's caches cold,
    seconds of linking when warm). Raises ControlPlaneUnavailable without Go."""
    directory = CACHE_HOME / "helm" / build_key()
    binary = directory / "helm"
    if os.access(binary, os.X_OK):
        return binary
    if shutil.which("go") is None:
        raise ControlPlaneUnavailable(GO_MISSING.replace("Kubernetes' control plane", "Helm"))
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # test workers starting together wait for the first
        if os.access(binary, os.X_OK):
            return binary
        staging = Path(tempfile.mkdtemp(prefix=".building-", dir=directory.parent))
        version = subprocess.run(
            ["go", "list", "-m", "-f", "{{.Version}}", "helm.sh/helm/v4"],
            cwd=GO_MODULE,
            env=_go_env(),
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        done = subprocess.run(
            [
                "go",
                "build",
                "-trimpath",
                "-ldflags",
                f"-s -w -X {VERSION_VARIABLE}={version}",
                "-o",
                str(staging / "helm"),
                "helm.sh/helm/v4/cmd/helm",
            ],
            cwd=GO_MODULE,
            env=_go_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not version:
            shutil.rmtree(staging, ignore_errors=True)
            raise ControlPlaneUnavailable(f"building Helm failed:\n{done.stderr[-4000:]}")
        staging.rename(directory)
    return binary


def _go_env() -> dict[str, str]:
    # The committed go.mod and go.sum are the whole truth: a build never rewrites them.
    return {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}


if __name__ == "__main__":
    try:
        print(helm_binary())
    except ControlPlaneUnavailable as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
