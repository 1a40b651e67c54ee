"""Building a NodeClaim from its pool: shared by the pool workflow and `claims create`."""

from __future__ import annotations

import hashlib
import json

from api import labels
from api._base import ObjectMeta, OwnerReference
from api.nodeclaim import (
    ClaimDisruption,
    ClaimResources,
    NodeClaim,
    NodeClaimSpec,
    Offering,
    ResourceRequests,
)
from api.nodeclass import NodeClassSpec
from api.nodepool import API_VERSION, ON_DEMAND, NodePoolSpec
from api.quantity import format_cpu, format_memory

CLAIM_SUFFIX_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
DRIFT_HASH_ANNOTATION = "cloudburst.io/drift-hash"


def drift_hash(pool: NodePoolSpec, node_class: NodeClassSpec) -> str:
    """What a node is built from: the pool's template and requirements and the whole class.

    A node whose hash differs from its pool's current one has drifted and gets replaced.
    """
    requirements = pool.requirements.model_dump(mode="json")
    if pool.requirements.capacity_type == [ON_DEMAND]:
        # The default, left out so that hashes from before the field existed stay the same
        # (else every running node would look drifted after an upgrade).
        del requirements["capacityType"]
    basis = {
        "template": pool.template.model_dump(mode="json"),
        "requirements": requirements,
        "nodeClass": node_class.model_dump(mode="json"),
    }
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]


def pool_owner(pool_name: str, pool_uid: str) -> OwnerReference:
    """A NodeClaim's owner: deleting the pool deletes its claims' resources (each then a
    scale-down, by its finalizer), as Karpenter's NodePool owns its NodeClaims. Blocking the
    owner's deletion lets `kubectl delete nodepool --cascade=foreground` wait for them."""
    return OwnerReference(
        api_version=API_VERSION,
        kind="NodePool",
        name=pool_name,
        uid=pool_uid,
        block_owner_deletion=True,
    )


def new_claim(
    *,
    name: str,
    namespace: str,
    pool_name: str,
    pool: NodePoolSpec,
    node_class_name: str,
    offerings: list[Offering],
    cpu_m: int | None = None,
    memory_bytes: int | None = None,
    pods: int | None = None,
    annotations: dict[str, str] | None = None,
    pool_uid: str | None = None,
) -> NodeClaim:
    """The claim for a node of the pool; owned by it when its uid is known (`pool_uid`)."""
    disruption = pool.disruption
    return NodeClaim(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            labels={labels.NODEPOOL: pool_name},
            annotations=annotations or {},
            owner_references=[pool_owner(pool_name, pool_uid)] if pool_uid else [],
        ),
        spec=NodeClaimSpec(
            node_pool=pool_name,
            node_class=node_class_name,
            offerings=offerings,
            resources=ClaimResources(
                requests=ResourceRequests(
                    cpu=format_cpu(cpu_m) if cpu_m else None,
                    memory=format_memory(memory_bytes) if memory_bytes else None,
                    pods=pods or None,
                )
            ),
            labels=dict(pool.template.labels),
            taints=list(pool.template.taints),
            disruption=ClaimDisruption(
                ttl_seconds_after_empty=disruption.ttl_seconds_after_empty,
                ttl_seconds_until_expired=disruption.ttl_seconds_until_expired,
                termination_grace_period_seconds=disruption.termination_grace_period_seconds,
                node_unreachable_grace_period_seconds=(
                    disruption.node_unreachable_grace_period_seconds
                ),
            ),
        ),
    )


def claim_summary(claim: NodeClaim) -> str:
    return f"NodeClaim {claim.metadata.name} · pool {claim.spec.node_pool}"


def claim_details(claim: NodeClaim) -> str:
    offerings = ", ".join(o.key for o in claim.spec.offerings)
    requests = claim.spec.resources.requests
    return (
        f"**NodeClaim** `{claim.metadata.name}` in `{claim.metadata.namespace}`\n\n"
        f"- pool: `{claim.spec.node_pool}`, class: `{claim.spec.node_class}`\n"
        f"- offerings (in order): {offerings}\n"
        f"- requests: cpu {requests.cpu or '—'}, memory {requests.memory or '—'}, "
        f"pods {requests.pods or '—'}\n"
        f"- empty TTL: {claim.spec.disruption.ttl_seconds_after_empty}s"
    )
