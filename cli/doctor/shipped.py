"""What the shipped manifests (deploy/base) install, as `cloudburst doctor` checks it: the
rights each ServiceAccount needs, the NetworkPolicies and the Deployments.

An installed `cloudburst` has no deploy/ directory beside it, so these are kept here;
`tests/deploy/test_doctor_shipped.py` fails when they and deploy/base part ways (a rule added
to rbac.yaml without its need here, or the reverse).
"""

from __future__ import annotations

from dataclasses import dataclass

WORKER_ACCOUNT = "cloudburst-worker"
TRIGGER_ACCOUNT = "cloudburst-trigger"
CSR_APPROVER_ACCOUNT = "cloudburst-csr-approver"
WORKER_DEPLOYMENT = "cloudburst-worker"
TRIGGER_DEPLOYMENT = "cloudburst-trigger"
# `cloudburst csr-approver`'s Deployment, in the install namespace (docs/security.md "Node
# identity").
CSR_APPROVER_DEPLOYMENT = "cloudburst-csr-approver"
# kubeadm's blanket approval of every kubelet client CSR a bootstrap token sends, for any node
# name: the CSR approver replaces it, so it must be gone.
KUBEADM_AUTOAPPROVE_BINDING = "kubeadm:node-autoapprove-bootstrap"
# kubeadm's blanket approval of every node's renewal of its own client certificate, its claim
# ended or not: the CSR approver renews only while the claim lives, so it must be gone too.
KUBEADM_RENEWAL_BINDING = "kubeadm:node-autoapprove-certificate-rotation"
CONFIG_MAP = "cloudburst-config"
NETWORK_POLICIES = ("cloudburst-default-deny-ingress", "cloudburst-metrics")
CRD_GROUP = "cloudburst.io"

# Where a grant applies: "cluster" (cluster-wide), "install" (the install namespace), or the
# name of a namespace.
Scope = str
CLUSTER = "cluster"
INSTALL = "install"


@dataclass(frozen=True)
class Need:
    """Rights a ServiceAccount of the install namespace needs (a rule of deploy/base's RBAC)."""

    account: str
    scope: Scope
    group: str
    resource: str
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()

    def namespace(self, install_namespace: str) -> str | None:
        if self.scope == CLUSTER:
            return None
        return install_namespace if self.scope == INSTALL else self.scope


def _worker(
    scope: Scope, group: str, resource: str, *verbs: str, names: tuple[str, ...] = ()
) -> Need:
    return Need(WORKER_ACCOUNT, scope, group, resource, verbs, names)


def _trigger(scope: Scope, group: str, resource: str, *verbs: str) -> Need:
    return Need(TRIGGER_ACCOUNT, scope, group, resource, verbs)


def _approver(
    scope: Scope, group: str, resource: str, *verbs: str, names: tuple[str, ...] = ()
) -> Need:
    return Need(CSR_APPROVER_ACCOUNT, scope, group, resource, verbs, names)


NEEDS: tuple[Need, ...] = (
    # ClusterRole cloudburst-worker
    _worker("cluster", "", "nodes", "get", "patch", "delete"),
    _worker("cluster", "", "pods", "list", "delete"),
    _worker("cluster", "", "pods/eviction", "create"),
    _worker("cluster", "", "events", "create", "get", "patch"),
    _worker("cluster", "apps", "daemonsets", "list"),
    _worker("cluster", CRD_GROUP, "nodeclaims", "get", "list", "create", "patch", "delete"),
    _worker("cluster", CRD_GROUP, "nodeclaims/status", "patch"),
    _worker("cluster", CRD_GROUP, "nodepools", "get"),
    _worker("cluster", "", "namespaces", "get"),
    _worker("cluster", CRD_GROUP, "nodeclasses", "get", "list"),
    _worker("cluster", CRD_GROUP, "nodepools/finalizers", "update"),
    _worker("cluster", CRD_GROUP, "nodepools/status", "patch"),
    # Roles of the worker
    _worker("kube-system", "", "secrets", "create", "delete"),
    _worker("install", "", "secrets", "get", "list", "create", "patch", "delete"),
    _worker("kube-public", "", "configmaps", "get", names=("cluster-info",)),
    _worker("install", "", "configmaps", "get", "patch", names=("cloudburst-catalog",)),
    _worker("install", "", "configmaps", "create"),
    _worker("install", "", "configmaps", "get", "patch", names=("cloudburst-release",)),
    _worker("install", "", "configmaps", "get", "update", names=("cloudburst-machines",)),
    # ClusterRole cloudburst-trigger
    _trigger("cluster", "", "nodes", "get", "list", "watch"),
    _trigger("cluster", "", "pods", "get", "list", "watch"),
    _trigger("cluster", "", "namespaces", "list", "watch"),
    _trigger("cluster", "", "events", "create", "get", "patch"),
    _trigger("cluster", CRD_GROUP, "nodepools", "get", "list", "watch"),
    _trigger("cluster", CRD_GROUP, "nodeclasses", "get", "list", "watch"),
    _trigger("cluster", CRD_GROUP, "nodepools/status", "patch"),
    _trigger("cluster", CRD_GROUP, "nodeclasses/status", "patch"),
    _trigger("cluster", CRD_GROUP, "nodeclaims", "list", "watch", "patch"),
    # Role cloudburst-trigger-peers
    _trigger("install", "coordination.k8s.io", "leases", "list", "create", "patch", "delete"),
    # ClusterRole cloudburst-csr-approver
    _approver("cluster", "certificates.k8s.io", "certificatesigningrequests", "list", "watch"),
    _approver("cluster", "certificates.k8s.io", "certificatesigningrequests/approval", "update"),
    _approver(
        "cluster",
        "certificates.k8s.io",
        "signers",
        "approve",
        names=("kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"),
    ),
    _approver("cluster", CRD_GROUP, "nodeclaims", "get", "list"),
    _approver("cluster", "", "nodes", "get", "list", "watch", "patch", "delete"),
    _approver("cluster", "", "pods", "list"),
    _approver("cluster", "", "pods/eviction", "create"),
    _approver("cluster", "", "events", "create", "get", "patch"),
)


def tenant_need(namespace: str) -> Need:
    """The worker's read of the credential Secrets in a namespace it serves (the Role that
    `cloudburst tenant-rbac` prints)."""
    return Need(WORKER_ACCOUNT, namespace, "", "secrets", ("get",))
