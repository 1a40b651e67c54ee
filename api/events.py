"""Kubernetes Events the autoscaler records: stable reasons users can filter on."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

# Reasons, named like Karpenter's where the meaning is the same.
NOMINATED = "Nominated"
LAUNCHED = "Launched"
REGISTERED = "Registered"
READY = "Ready"
FAILED_PROVISIONING = "FailedProvisioning"
SCALE_DOWN_EMPTY = "ScaleDownEmpty"
EXPIRED = "Expired"
NODE_LOST = "NodeLost"
INTERRUPTED = "Interrupted"  # the provider reclaims a spot VM: drained and deleted at once
DISRUPTION_BLOCKED = "DisruptionBlocked"
NO_MATCHING_NODEPOOL = "NoMatchingNodePool"
LIMIT_REACHED = "LimitReached"
# A node consolidation looked at and kept, with why (do-not-disrupt pods, no cheaper fit).
UNCONSOLIDATABLE = "Unconsolidatable"
# A Node named like a claim is not its VM (its providerID names another machine, or none).
NODE_NOT_CLAIMED = "NodeNotClaimed"
# The first-boot material a provider keeps outside a Ready node's VM (Proxmox's seed ISO)
# could not be removed: it stays until the VM is deleted.
FIRST_BOOT_KEPT = "FirstBootMaterialKept"


class ObjectRef(BaseModel):
    kind: str
    name: str
    namespace: str = ""
    api_version: str = "v1"
    uid: str | None = None


class KubeEvent(BaseModel):
    regarding: ObjectRef
    reason: str
    message: str
    type: Literal["Normal", "Warning"] = "Normal"


class EventBatch(BaseModel):
    events: list[KubeEvent]
