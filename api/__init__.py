"""The resource model: NodePool, NodeClass, NodeClaim and workflow payloads. Pure, sandbox-safe."""

from api.nodeclaim import NodeClaim, NodeClaimPhase, NodeClaimSpec, NodeClaimStatus, Offering
from api.nodeclass import NodeClass, NodeClassSpec
from api.nodepool import NodePool, NodePoolSpec

__all__ = [
    "NodeClaim",
    "NodeClaimPhase",
    "NodeClaimSpec",
    "NodeClaimStatus",
    "NodeClass",
    "NodeClassSpec",
    "NodePool",
    "NodePoolSpec",
    "Offering",
]
