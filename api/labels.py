"""Label, annotation and taint keys written on nodes, VMs and Secrets."""

GROUP = "cloudburst.io"
NODEPOOL = "cloudburst.io/nodepool"
NODECLAIM = "cloudburst.io/nodeclaim"
# The namespace of a Node's (and a Secret's) claim and pool: names are unique only within it.
NODEPOOL_NAMESPACE = "cloudburst.io/nodepool-namespace"
# The NodeClaim object's uid, on what a claim holds of shared hardware (a Redfish machine's
# holding record, a Proxmox VM's tags): a name and a VM id are reused, a uid never.
NODECLAIM_UID = "cloudburst.io/nodeclaim-uid"
PROVIDER = "cloudburst.io/provider"
REGION = "cloudburst.io/region"
INSTANCE_TYPE = "cloudburst.io/instance-type"
MANAGED = "cloudburst.io/managed"
CLUSTER = "cloudburst.io/cluster"
# Well-known Kubernetes labels set beside ours, so other tools understand the node.
K8S_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
K8S_REGION = "topology.kubernetes.io/region"
K8S_ARCH = "kubernetes.io/arch"
# spot | on-demand: Karpenter's key, which tools and users already select on, and ours beside
# it, like provider/region/instance-type.
KARPENTER_CAPACITY_TYPE = "karpenter.sh/capacity-type"
CAPACITY_TYPE = "cloudburst.io/capacity-type"
# Put on a node when its claim starts deleting it, so that nothing new lands there.
DISRUPTED_TAINT = "cloudburst.io/disrupted"
# Put on a node by the agent that receives its VM's spot interruption notice (value: what the
# provider said, e.g. "spot-itn", "preempted", "evicted"); see cluster/interruption.py.
INTERRUPTION_TAINT = "cloudburst.io/interruption"
# Secrets made for one claim carry this label so that leftovers can be found.
SECRET_PURPOSE = "cloudburst.io/purpose"
# On a first-boot script Secret: the bootstrap-token Secret (in kube-system, which the worker
# may write but not read) its script carries and when that expires, and the id of the
# Tailscale key minted for it (so a replaced one is revoked).
TOKEN_SECRET = "cloudburst.io/token-secret"
TOKEN_EXPIRES = "cloudburst.io/token-expires"
TAILSCALE_KEY_ID = "cloudburst.io/tailscale-key-id"
# On every NodeClaim resource: deleting it asks the claim's workflow to scale down first.
TERMINATION_FINALIZER = "cloudburst.io/termination"
# Put on a node at registration by its first-boot script; lifted once its labels are synced,
# so nothing is scheduled there before (Karpenter's unregistered taint; NoSchedule, not NoExecute:
# activities/bootstrap.py `registration_taints`).
STARTUP_TAINT = "cloudburst.io/unregistered"


# Labels a kubelet may not put on its own Node (the NodeRestriction admission plugin), so that
# pods can rely on them to choose nodes: only the control plane (here, the worker) sets them.
NODE_RESTRICTION_DOMAIN = "node-restriction.kubernetes.io"
# On every node of a tenant's pool: the namespace whose pods it serves. Set by the worker once
# the node is known to be the claim's VM; a tenant namespace's pods select it
# (`cloudburst tenant-rbac`: the PodNodeSelector annotation).
TENANT_LABEL = f"{NODE_RESTRICTION_DOMAIN}/cloudburst-tenant"
# On every node of a tenant's pool, from its registration: only that namespace's pods
# tolerate it (the PodTolerationRestriction annotations).
TENANT_TAINT = "cloudburst.io/tenant"


def kubelet_may_set(key: str) -> bool:
    """Whether a kubelet may register its node with label `key` (`--node-labels`)."""
    prefix, _, _ = key.rpartition("/")
    return not (prefix == NODE_RESTRICTION_DOMAIN or prefix.endswith("." + NODE_RESTRICTION_DOMAIN))


def ownership_labels(
    claim_name: str,
    *,
    namespace: str | None = None,
    node_pool: str | None = None,
    cluster_id: str | None = None,
    purpose: str | None = None,
) -> dict[str, str]:
    """The labels that mark something as one claim's, the one place they are built.

    A VM gets `cluster_id` and `node_pool` (managed, cluster, pool, claim: what orphan GC
    selects on; the claim's namespace is that of the NodeClass whose account lists it), a
    Node `namespace` and `node_pool` (namespace, pool, claim), a Secret `namespace` and
    `purpose` (namespace, claim, purpose).
    """
    owned: dict[str, str] = {}
    if cluster_id is not None:
        owned[MANAGED] = "true"
        owned[CLUSTER] = cluster_id
    if namespace is not None:
        owned[NODEPOOL_NAMESPACE] = namespace
    if node_pool is not None:
        owned[NODEPOOL] = node_pool
    owned[NODECLAIM] = claim_name
    if purpose is not None:
        owned[SECRET_PURPOSE] = purpose
    return owned
