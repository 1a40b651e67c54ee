"""What a pod means for a node: kubectl drain's rules, do-not-disrupt, unschedulable."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from pydantic import ValidationError

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# Pods annotated with either (value "true") hold voluntary disruption of their node back.
DO_NOT_DISRUPT_ANNOTATIONS = ("cloudburst.io/do-not-disrupt", "karpenter.sh/do-not-disrupt")


def is_daemonset_pod(pod: Any) -> bool:
    owners = (pod.metadata.owner_references if pod.metadata else None) or []
    return any(owner.kind == "DaemonSet" for owner in owners)


def is_mirror_pod(pod: Any) -> bool:
    annotations = (pod.metadata.annotations if pod.metadata else None) or {}
    return MIRROR_ANNOTATION in annotations


_FINISHED = ("Succeeded", "Failed")


def is_finished_pod(pod: Any) -> bool:
    phase = pod.status.phase if pod.status else None
    return phase in _FINISHED


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


# What the watchers read of a pod (here and in `cluster.requirements.pod_demand`); the rest
# (images, env, probes, volumes, container statuses, managed fields) is left out before the
# client builds its model, which cost more than half of a trigger's CPU during a burst. What
# changes on every write and no watcher reads (the resourceVersion, a condition's message and
# probe time) is left out too: a watch passes an event on only when what it keeps changed
# (`trigger.watch.Slim`), and most of a burst's pod events are the scheduler rewriting why a
# pod waits and the kubelet reporting its containers.
_METADATA = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "annotations",
    "ownerReferences",
)
# Where a pending pod may go: the trigger's match of a pool (not the node watcher's concern).
_SCHEDULING = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "priority",
    "schedulerName",
)
_CONTAINER = ("name", "resources", "restartPolicy")
_CONDITION = ("type", "status", "reason", "lastTransitionTime")


def pod_fields(raw: dict[str, Any], *, bound: bool = False) -> dict[str, Any]:
    """What the watchers read of a pod, from its JSON. With `bound`, what the node watcher
    reads of a bound pod: where it runs, what it holds, what keeps its node, and whether it
    is done (its phase only once finished: Pending and Running are alike to it); not where
    it could have gone, nor why it waited."""
    metadata = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}

    def containers(key: str) -> list[dict[str, Any]]:
        listed = spec.get(key) or []
        return [{k: c[k] for k in _CONTAINER if k in c} for c in listed if isinstance(c, dict)]

    kept_spec = ("nodeName", "overhead", *(() if bound else _SCHEDULING))
    phase = status.get("phase")
    fields: dict[str, Any] = {
        "metadata": {k: metadata[k] for k in _METADATA if k in metadata},
        "spec": {
            **{k: spec[k] for k in kept_spec if k in spec},
            "containers": containers("containers"),
            "initContainers": containers("initContainers"),
        },
        "status": {"phase": phase} if phase and (not bound or phase in _FINISHED) else {},
    }
    conditions = status.get("conditions")
    if not bound and isinstance(conditions, list):
        fields["status"]["conditions"] = [
            {k: c[k] for k in _CONDITION if k in c} for c in conditions if isinstance(c, dict)
        ]
    return fields


def bound_pod_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """A bound pod as the node watcher reads it: the kubelet's reports of it (its
    readiness, its containers starting) are no news there."""
    return pod_fields(raw, bound=True)


def pod_model(fields: dict[str, Any]) -> k8s.V1Pod:
    """The client's model of a pod's `pod_fields`."""
    try:
        # One pass of pydantic-core over the whole pod: about a sixth of the cost of the
        # client's `from_dict`, which builds every nested model in Python.
        return k8s.V1Pod.model_validate(fields)
    except ValidationError:
        pass
    # A field this client does not know (a newer API server: its models forbid extras),
    # or a value it refuses: `from_dict` leaves unknown fields out, as the client does.
    pod = k8s.V1Pod.from_dict(fields)
    if pod is None:  # from_dict gives None only for None
        raise ValueError("no pod")
    return pod
