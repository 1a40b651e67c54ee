"""Label, annotation and taint keys written on nodes, VMs and Secrets."""

GROUP = "cloudburst.io"
NODEPOOL = "cloudburst.io/nodepool"
NODECLAIM = "cloudburst.io/nodeclaim"
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
# so nothing runs there before (Karpenter's unregistered taint).
STARTUP_TAINT = "cloudburst.io/unregistered"


def ownership_labels(
    claim_name: str,
    *,
    node_pool: str | None = None,
    cluster_id: str | None = None,
    purpose: str | None = None,
) -> dict[str, str]:
    """The labels that mark something as one claim's, the one place they are built.

    A VM gets `cluster_id` and `node_pool` (managed, cluster, pool, claim: what orphan GC
    selects on), a Node `node_pool` (pool, claim), a Secret `purpose` (claim, purpose). Keys
    come in that order, as they always have: recorded histories carry these dicts.
    """
    owned: dict[str, str] = {}
    if cluster_id is not None:
        owned[MANAGED] = "true"
        owned[CLUSTER] = cluster_id
    if node_pool is not None:
        owned[NODEPOOL] = node_pool
    owned[NODECLAIM] = claim_name
    if purpose is not None:
        owned[SECRET_PURPOSE] = purpose
    return owned
