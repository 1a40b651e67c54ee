"""Kubernetes' own control plane for development and tests: built from its Go modules
(binaries.py), started per test session or dev stack (cluster.py), with machines that join it
as kubelets do and KWOK to keep them (joining.py)."""

import re
from pathlib import Path

_KUBERNETES_GOMOD = Path(__file__).resolve().parents[2] / "controlplane" / "kubernetes" / "go.mod"


def pinned_release() -> str:
    """The Kubernetes release the wrapper module requires (`v1.37.2`): what every control plane
    started here must report as its gitVersion."""
    found = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", _KUBERNETES_GOMOD.read_text(), re.M)
    if found is None:
        raise RuntimeError(f"{_KUBERNETES_GOMOD} requires no k8s.io/kubernetes")
    return found.group(1)
