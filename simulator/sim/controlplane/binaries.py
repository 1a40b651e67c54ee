"""Kubernetes' control plane, etcd and KWOK as binaries, built from their Go modules once.

`control_plane_binaries()` returns a directory holding `kube-apiserver`,
`kube-controller-manager`, `kube-scheduler`, `kubectl`, `kwok`, `etcd`, KWOK's stage files
(`kwok-stages/`) and `RELEASE` (the Kubernetes release they were built from). It builds them
with `simulator/controlplane/build.sh` the first time, into a cache keyed by the wrapper
modules' go.mod and go.sum and the build script, so every checkout on a machine (and CI's fresh
clone) shares one build, and a change of release builds anew. Go's own module and build caches
keep a rebuild to linking.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

# simulator/controlplane: the wrapper modules and the build script (beside the `sim` package).
GO_MODULES = Path(__file__).resolve().parents[2] / "controlplane"
BUILD_SCRIPT = GO_MODULES / "build.sh"
BINARIES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "etcd",
)
# Where the built binaries are kept; CLOUDBURST_CONTROL_PLANE_BIN names a directory built before.
CACHE_HOME = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cloudburst"
BIN_OVERRIDE = "CLOUDBURST_CONTROL_PLANE_BIN"
GO_MISSING = (
    "Kubernetes' control plane is built from its Go modules and this machine has no `go`: "
    "install Go 1.26 or newer (https://go.dev/dl/) and put it on PATH (the first build takes "
    "about 8 minutes on 2 cores, later ones reuse it)"
)


class ControlPlaneUnavailable(RuntimeError):
    """The control plane's binaries cannot be had on this machine (and why)."""


def build_key(modules: Path = GO_MODULES) -> str:
    """What the build depends on: the wrapper modules' requirements and the build script."""
    digest = hashlib.sha256()
    for path in sorted(
        [
            modules / BUILD_SCRIPT.name,
            *modules.glob("*/go.mod"),
            *modules.glob("*/go.sum"),
        ]
    ):
        digest.update(path.relative_to(modules).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def release(directory: Path) -> str:
    """The Kubernetes release a binaries directory was built from (`v1.37.2`)."""
    return (directory / "RELEASE").read_text().strip()


def _complete(directory: Path) -> bool:
    return (directory / "RELEASE").is_file() and all(
        os.access(directory / name, os.X_OK) for name in BINARIES
    )


def control_plane_binaries() -> Path:
    """The directory of built binaries, building them first where needed (minutes when Go's
    caches are cold, seconds of linking when they are warm)."""
    override = os.environ.get(BIN_OVERRIDE)
    if override:
        directory = Path(override)
        if not _complete(directory):
            raise ControlPlaneUnavailable(
                f"{BIN_OVERRIDE}={override} lacks one of {', '.join(BINARIES)} or RELEASE"
            )
        return directory
    directory = CACHE_HOME / "control-plane" / build_key()
    if _complete(directory):
        return directory
    if shutil.which("go") is None:
        raise ControlPlaneUnavailable(GO_MISSING)
    directory.parent.mkdir(parents=True, exist_ok=True)
    # One build at a time on a machine: test workers starting together wait for the first.
    with open(directory.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(directory):
            return directory
        staging = Path(tempfile.mkdtemp(prefix=".building-", dir=directory.parent))
        log = staging.parent / f"{directory.name}.build.log"
        with open(log, "w") as out:
            done = subprocess.run(
                ["bash", str(BUILD_SCRIPT), str(staging)], stdout=out, stderr=subprocess.STDOUT
            )
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            tail = log.read_text().splitlines()[-20:]
            raise ControlPlaneUnavailable(
                f"building the control plane failed (log: {log}):\n" + "\n".join(tail)
            )
        staging.rename(directory)
    return directory
