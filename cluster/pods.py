"""What a pod means for a node: kubectl drain's rules, do-not-disrupt, unschedulable."""

from __future__ import annotations

from typing import Any

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# Pods annotated with either (value "true") hold voluntary disruption of their node back.
DO_NOT_DISRUPT_ANNOTATIONS = ("cloudburst.io/do-not-disrupt", "karpenter.sh/do-not-disrupt")


def is_daemonset_pod(pod: Any) -> bool:
    owners = (pod.metadata.owner_references if pod.metadata else None) or []
    return any(owner.kind == "DaemonSet" for owner in owners)


def is_mirror_pod(pod: Any) -> bool:
    annotations = (pod.metadata.annotations if pod.metadata else None) or {}
    return MIRROR_ANNOTATION in annotations


def is_finished_pod(pod: Any) -> bool:
    phase = pod.status.phase if pod.status else None
    return phase in ("Succeeded", "Failed")


def is_left_alone(pod: Any) -> bool:
    """Pods a drain never evicts and that do not make a node busy (kubectl drain's rules)."""
    return is_daemonset_pod(pod) or is_mirror_pod(pod) or is_finished_pod(pod)


def has_do_not_disrupt(annotations: dict[str, str] | None) -> bool:
    return any((annotations or {}).get(key) == "true" for key in DO_NOT_DISRUPT_ANNOTATIONS)


def is_do_not_disrupt(pod: Any) -> bool:
    return has_do_not_disrupt(pod.metadata.annotations if pod.metadata else None)


def is_unschedulable(pod: Any) -> bool:
    """Marked Unschedulable by the scheduler, unbound, not terminating, not a DaemonSet's
    (the DaemonSet controller places those, not an autoscaler)."""
    if pod.spec.node_name or pod.metadata.deletion_timestamp:
        return False
    if is_daemonset_pod(pod):
        return False
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in conditions
    )
