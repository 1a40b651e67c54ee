"""What the node guard does to a Node and the pods on it: pure judgements over what it read.

- A Node marked as a claim's (the ownership labels its first-boot script registers it with)
  whose NodeClaim is gone, or has ended (Failed or Deleted), is **forgotten**: the kubelet of a claim that ended re-registered
  (its client certificate outlives the claim), or a machine pretends to be a claim's. A
  NodeClaim exists before its VM does (the pool's activity creates it first) and keeps its
  finalizer until its Node and VM are deleted, so no claim's own node is ever judged so.
- On a tenant's node (the tenant label the worker sets at Ready, when it also puts the tenant
  taint back), a pod of another namespace that does not tolerate the tenant taint was bound
  before the taint was there: it is **evicted**. DaemonSet and mirror pods stay (their
  controller puts them back; the operator chose them for every node).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from api import labels
from api.nodeclaim import NodeClaimPhase
from api.nodepool import Taint
from api.planning import Toleration
from cluster.requirements import tolerates

FORGOTTEN_TAINT = "cloudburst.io/forgotten"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class PodOnNode:
    namespace: str
    name: str
    tolerations: tuple[Toleration, ...]
    owner_kinds: tuple[str, ...]
    mirror: bool
    terminating: bool


def claim_of_node(node_name: str, node_labels: Mapping[str, str]) -> tuple[str, str] | None:
    """(namespace, name) of the NodeClaim a Node says it is, or None for no claim's node."""
    namespace = node_labels.get(labels.NODEPOOL_NAMESPACE)
    if not namespace or labels.NODECLAIM not in node_labels:
        return None
    return namespace, node_name


def claim_ended(phase: object) -> bool:
    """Whether a NodeClaim's `status.phase` says its life is over (Failed, Deleted)."""
    return phase in (NodeClaimPhase.FAILED, NodeClaimPhase.DELETED)


def forgotten_message(node_name: str, claim: tuple[str, str]) -> str:
    namespace, name = claim
    return (
        f"Node {node_name} registered as claim {namespace}/{name}'s, which has ended or never "
        "was: cordoned, tainted and deleted (a kubelet whose claim ended keeps "
        "its certificate until it expires; docs/security.md)"
    )


def strangers_on_tenant_node(
    tenant: str, node_taint_value: str | None, pods: Iterable[PodOnNode]
) -> list[PodOnNode]:
    """The pods to evict from a node of `tenant`: of another namespace, neither a DaemonSet's
    nor a mirror pod, not already going, and not tolerating the tenant taint."""
    taint = Taint(key=labels.TENANT_TAINT, value=node_taint_value or tenant, effect="NoSchedule")
    return [
        pod
        for pod in pods
        if pod.namespace != tenant
        and not pod.mirror
        and not pod.terminating
        and "DaemonSet" not in pod.owner_kinds
        and not tolerates(pod.tolerations, taint)
    ]


def eviction_message(pod: PodOnNode, node_name: str, tenant: str) -> str:
    return (
        f"pod {pod.namespace}/{pod.name} was bound to {node_name}, a node of namespace "
        f"{tenant}, before its tenant taint was there, and does not tolerate it: evicted"
    )
