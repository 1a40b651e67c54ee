"""The resource types the emulator serves, registered like the built-ins of a real API server."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: where it lives in the URL space and how it behaves."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    # With a status subresource, main-resource writes keep `.status` and `/status` writes
    # touch only `.status`. Built-in kinds stay lenient: their main writes may change status.
    status_subresource: bool = False
    # True for custom resources: the main resource can never change `.status`, and
    # strategic-merge patches are refused with 415, like a real API server does for CRs.
    custom: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Storage key; also the qualified name used in error messages (`pods`, `nodeclaims.cloudburst.io`)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


CLOUDBURST_GROUP = "cloudburst.io"
CLOUDBURST_VERSION = "v1alpha1"

_ALL = [
    ResourceType("", "v1", "namespaces", "Namespace", False, status_subresource=True),
    ResourceType("", "v1", "nodes", "Node", False, status_subresource=True),
    ResourceType("", "v1", "pods", "Pod", True, status_subresource=True),
    ResourceType("", "v1", "secrets", "Secret", True),
    ResourceType("", "v1", "configmaps", "ConfigMap", True),
    ResourceType("", "v1", "events", "Event", True),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True),
    ResourceType("", "v1", "services", "Service", True, status_subresource=True),
    ResourceType("events.k8s.io", "v1", "events", "Event", True),
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, True),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, status_subresource=True),
    ResourceType("apps", "v1", "deployments", "Deployment", True, status_subresource=True),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    *(
        ResourceType(CLOUDBURST_GROUP, CLOUDBURST_VERSION, plural, kind, True, True, custom=True)
        for plural, kind in (
            ("nodepools", "NodePool"),
            ("nodeclasses", "NodeClass"),
            ("nodeclaims", "NodeClaim"),
        )
    ),
]

# (group, version, plural) -> resource type
REGISTRY: dict[tuple[str, str, str], ResourceType] = {
    (rt.group, rt.version, rt.plural): rt for rt in _ALL
}

NAMESPACES = REGISTRY[("", "v1", "namespaces")]
PODS = REGISTRY[("", "v1", "pods")]
PDBS = REGISTRY[("policy", "v1", "poddisruptionbudgets")]
CONFIGMAPS = REGISTRY[("", "v1", "configmaps")]


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    return REGISTRY.get((group, version, plural))


def group_versions() -> dict[str, list[str]]:
    """group -> versions, for discovery."""
    out: dict[str, list[str]] = {}
    for rt in _ALL:
        versions = out.setdefault(rt.group, [])
        if rt.version not in versions:
            versions.append(rt.version)
    return out


def resources_in(group: str, version: str) -> list[ResourceType]:
    return [rt for rt in _ALL if rt.group == group and rt.version == version]
