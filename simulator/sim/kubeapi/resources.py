"""The resource types the emulator serves, registered like the built-ins of a real API server.

Each one carries what discovery tells kubectl about it (short names, categories, verbs,
subresources), so `kubectl get no,po,deploy`, `kubectl get all` and `kubectl get cloudburst`
resolve as on a real cluster. The custom resources' names and categories are the CRDs' own
(deploy/base/crds); they are repeated here so discovery needs no file read.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
CREATE_ONLY = ("create",)


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
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    scale_subresource: bool = False
    # Another resource whose objects these are (events.k8s.io/v1 events are core/v1 events).
    same_as: tuple[str, str, str] | None = None
    # Never stored: a POST is answered and forgotten (SelfSubjectAccessReview...).
    virtual: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """The qualified name used in error messages (`pods`, `nodeclaims.cloudburst.io`)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def storage(self) -> str:
        """Where the objects are kept: shared by resources that are one kind in two shapes."""
        if self.same_as is not None:
            group, _, plural = self.same_as
            return f"{plural}.{group}" if group else plural
        return self.key

    @property
    def singular(self) -> str:
        return self.kind.lower()


CLOUDBURST_GROUP = "cloudburst.io"
CLOUDBURST_VERSION = "v1alpha1"
_ALL_CATEGORY = ("all",)

_ALL = [
    ResourceType("", "v1", "namespaces", "Namespace", False, True, short_names=("ns",)),
    ResourceType("", "v1", "nodes", "Node", False, True, short_names=("no",)),
    ResourceType(
        "", "v1", "pods", "Pod", True, True, short_names=("po",), categories=_ALL_CATEGORY
    ),
    ResourceType("", "v1", "secrets", "Secret", True),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",)),
    ResourceType("", "v1", "events", "Event", True, short_names=("ev",)),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, short_names=("sa",)),
    ResourceType(
        "", "v1", "services", "Service", True, True, short_names=("svc",), categories=_ALL_CATEGORY
    ),
    ResourceType(
        "",
        "v1",
        "replicationcontrollers",
        "ReplicationController",
        True,
        True,
        short_names=("rc",),
        categories=_ALL_CATEGORY,
        scale_subresource=True,
    ),
    ResourceType(
        "events.k8s.io", "v1", "events", "Event", True, short_names=("ev",), same_as=("", "v1", "events")
    ),
    ResourceType(
        "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, True,
        short_names=("pdb",),
    ),
    ResourceType(
        "apps", "v1", "daemonsets", "DaemonSet", True, True,
        short_names=("ds",), categories=_ALL_CATEGORY,
    ),
    ResourceType(
        "apps", "v1", "deployments", "Deployment", True, True,
        short_names=("deploy",), categories=_ALL_CATEGORY, scale_subresource=True,
    ),
    ResourceType(
        "apps", "v1", "replicasets", "ReplicaSet", True, True,
        short_names=("rs",), categories=_ALL_CATEGORY, scale_subresource=True,
    ),
    ResourceType(
        "apps", "v1", "statefulsets", "StatefulSet", True, True,
        short_names=("sts",), categories=_ALL_CATEGORY, scale_subresource=True,
    ),
    ResourceType("batch", "v1", "jobs", "Job", True, True, categories=_ALL_CATEGORY),
    ResourceType(
        "batch", "v1", "cronjobs", "CronJob", True, True,
        short_names=("cj",), categories=_ALL_CATEGORY,
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType(
        "networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True,
        short_names=("netpol",),
    ),
    *(
        ResourceType("rbac.authorization.k8s.io", "v1", plural, kind, namespaced)
        for plural, kind, namespaced in (
            ("roles", "Role", True),
            ("rolebindings", "RoleBinding", True),
            ("clusterroles", "ClusterRole", False),
            ("clusterrolebindings", "ClusterRoleBinding", False),
        )
    ),
    ResourceType(
        "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
        False, verbs=CREATE_ONLY, virtual=True,
    ),
    ResourceType(
        "authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview",
        False, verbs=CREATE_ONLY, virtual=True,
    ),
    ResourceType(
        "authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview",
        False, verbs=CREATE_ONLY, virtual=True,
    ),
    ResourceType("apiregistration.k8s.io", "v1", "apiservices", "APIService", False, True),
    ResourceType(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
        False, True, short_names=("crd", "crds"),
    ),
    *(
        ResourceType(
            CLOUDBURST_GROUP, CLOUDBURST_VERSION, plural, kind, True, True, custom=True,
            short_names=(short,), categories=("cloudburst",),
        )
        for plural, kind, short in (
            ("nodepools", "NodePool", "cbpool"),
            ("nodeclasses", "NodeClass", "cbclass"),
            ("nodeclaims", "NodeClaim", "cbclaim"),
        )
    ),
]  # fmt: skip

# (group, version, plural) -> resource type
REGISTRY: dict[tuple[str, str, str], ResourceType] = {
    (rt.group, rt.version, rt.plural): rt for rt in _ALL
}

NAMESPACES = REGISTRY[("", "v1", "namespaces")]
NODES = REGISTRY[("", "v1", "nodes")]
PODS = REGISTRY[("", "v1", "pods")]
PDBS = REGISTRY[("policy", "v1", "poddisruptionbudgets")]
CONFIGMAPS = REGISTRY[("", "v1", "configmaps")]
SERVICES = REGISTRY[("", "v1", "services")]
SERVICEACCOUNTS = REGISTRY[("", "v1", "serviceaccounts")]
EVENTS = REGISTRY[("", "v1", "events")]
EVENTS_V1 = REGISTRY[("events.k8s.io", "v1", "events")]
DEPLOYMENTS = REGISTRY[("apps", "v1", "deployments")]
REPLICASETS = REGISTRY[("apps", "v1", "replicasets")]
APISERVICES = REGISTRY[("apiregistration.k8s.io", "v1", "apiservices")]
CRDS = REGISTRY[("apiextensions.k8s.io", "v1", "customresourcedefinitions")]
STORED = [rt for rt in _ALL if not rt.virtual and rt.same_as is None]


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


def all_types() -> list[ResourceType]:
    return list(_ALL)
