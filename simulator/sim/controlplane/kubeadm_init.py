"""What `kubeadm init` puts into a new cluster for nodes to join it, as objects to apply.

A machine joins with a bootstrap token whose `auth-extra-groups` carry kubeadm's group
`system:bootstrappers:kubeadm:default-node-token`. kubeadm binds that group to what a join
needs (kubeadm's `phases/bootstraptoken/node` and `phases/bootstraptoken/clusterinfo`):

- `system:anonymous` may read `kube-public/cluster-info` (token discovery, the CA pin and the
  bootstrap signer's JWS for the token);
- the group may create CSRs (`system:node-bootstrapper`), read Nodes (a join checks that no
  Ready Node has its name) and the `kubeadm-config` and `kubelet-config` ConfigMaps;

kubeadm also binds the controller-manager's blanket approvals: of any kubelet client CSR the
group makes (`kubeadm:node-autoapprove-bootstrap`: any token's holder may become any node) and
of any node's renewal of its own (`kubeadm:node-autoapprove-certificate-rotation`: a node whose
claim ended renews forever). docs/security.md has the operator remove both and run Cloudburst's
CSR approver instead; this cluster is set up so (neither is made here).
"""

from __future__ import annotations

import base64
from typing import Any

import yaml

Obj = dict[str, Any]
NODE_TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token"
NODES_GROUP = "system:nodes"


def _cluster_role_binding(name: str, role: str, *subjects: Obj) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": list(subjects),
    }


def _group(name: str) -> Obj:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}


def _config_map_reader(namespace: str, role: str, config_map: str, *groups: str) -> list[Obj]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": role, "namespace": namespace},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [config_map],
                    "verbs": ["get"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": role, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [_group(group) for group in groups],
        },
    ]


def kubeadm_init_objects(server_url: str, ca_pem: str, release: str) -> list[Obj]:
    """The objects, in the order to apply them."""
    cluster_info_role = "kubeadm:bootstrap-signer-clusterinfo"
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cluster-info", "namespace": "kube-public"},
            "data": {"kubeconfig": cluster_info_kubeconfig(server_url, ca_pem)},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": cluster_info_role, "namespace": "kube-public"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": ["cluster-info"],
                    "verbs": ["get"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": cluster_info_role, "namespace": "kube-public"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": cluster_info_role,
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": "system:anonymous",
                }
            ],
        },
        _cluster_role_binding(
            "kubeadm:kubelet-bootstrap", "system:node-bootstrapper", _group(NODE_TOKEN_GROUP)
        ),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "kubeadm:get-nodes"},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
        },
        _cluster_role_binding("kubeadm:get-nodes", "kubeadm:get-nodes", _group(NODE_TOKEN_GROUP)),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
            "data": {
                "ClusterConfiguration": yaml.safe_dump(
                    {
                        "apiVersion": "kubeadm.k8s.io/v1beta4",
                        "kind": "ClusterConfiguration",
                        "kubernetesVersion": release,
                        "controlPlaneEndpoint": server_url.removeprefix("https://"),
                    }
                )
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kubelet-config", "namespace": "kube-system"},
            "data": {
                "kubelet": yaml.safe_dump(
                    {
                        "apiVersion": "kubelet.config.k8s.io/v1beta1",
                        "kind": "KubeletConfiguration",
                        "rotateCertificates": True,
                    }
                )
            },
        },
        *_config_map_reader(
            "kube-system",
            "kubeadm:nodes-kubeadm-config",
            "kubeadm-config",
            NODE_TOKEN_GROUP,
            NODES_GROUP,
        ),
        *_config_map_reader(
            "kube-system", "kubeadm:kubelet-config", "kubelet-config", NODE_TOKEN_GROUP, NODES_GROUP
        ),
    ]


def cluster_info_kubeconfig(server: str, ca_pem: str) -> str:
    """The `kubeconfig` key of `kube-public/cluster-info`, shaped exactly like kubeadm's."""
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "clusters": [
            {
                "cluster": {
                    "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode(),
                    "server": server,
                },
                "name": "",
            }
        ],
        "contexts": None,
        "current-context": "",
        "kind": "Config",
        "preferences": {},
        "users": None,
    }
    return yaml.safe_dump(doc, sort_keys=False)
