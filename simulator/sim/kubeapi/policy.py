"""Pod subresources with rules: eviction (PodDisruptionBudgets) and binding; PDB status."""

from __future__ import annotations

import math
from typing import Any

from sim.kubeapi import errors
from sim.kubeapi.errors import ApiError, status_body
from sim.kubeapi.resources import PDBS, PODS
from sim.kubeapi.selectors import match_label_selector_object
from sim.kubeapi.store import Obj, Store, meta, now_rfc3339

EVICTION_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


def evict(store: Store, namespace: str, name: str, delete_options: Obj | None = None) -> Obj:
    """Delete the pod unless that violates a PodDisruptionBudget (429 TooManyRequests).

    Pods that are not Running (Pending, Succeeded, Failed) or already deleting may always be
    evicted, as on a real server. A Running but not Ready pod may be evicted while every
    budget still has its desired healthy count (the IfHealthyBudget policy), or always with
    `unhealthyPodEvictionPolicy: AlwaysAllow`.
    """
    with store.lock:
        pod = store.get(PODS, namespace, name)
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Running" and "deletionTimestamp" not in meta(pod):
            for pdb in _matching_pdbs(store, pod):
                st = pdb_status(store, pdb)
                if is_healthy(pod):
                    ok = st["disruptionsAllowed"] > 0
                else:
                    always = (pdb.get("spec") or {}).get(
                        "unhealthyPodEvictionPolicy"
                    ) == "AlwaysAllow"
                    ok = always or st["currentHealthy"] >= st["desiredHealthy"]
                if not ok:
                    raise _refused(pdb, st)
        preconditions = (delete_options or {}).get("preconditions")
        store.delete(PODS, namespace, name, preconditions)
    return status_body(201, "", "", failure=False)


def bind(store: Store, namespace: str, name: str, binding: Obj) -> Obj:
    """Set `spec.nodeName` (and PodScheduled=True); a pod that is already bound is a 409.

    Note for callers: `CoreV1Api.create_namespaced_pod_binding` fails while deserialising
    the 201 Status reply unless called with `_preload_content=False` (a known issue of the
    `kubernetes` client; a real API server triggers it too).
    """
    node = ((binding.get("target") or {}).get("name")) or ""
    if not node:
        raise errors.invalid(PODS, name, "target.name", "Required value")

    def assign(pod: Obj) -> Obj:
        current = (pod.get("spec") or {}).get("nodeName")
        if current:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned to node "{current}"',
                {"name": name, "kind": "pods/binding"},
            )
        new = dict(pod)
        new["spec"] = dict(pod.get("spec") or {}, nodeName=node)
        status = dict(pod.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}
        )
        status["conditions"] = conditions
        new["status"] = status
        return new

    store.update(PODS, namespace, name, assign)
    return status_body(201, "", "", failure=False)


def pdb_status(store: Store, pdb: Obj) -> dict[str, Any]:
    """What the disruption controller would write: expected/current/desired/allowed."""
    spec = pdb.get("spec") or {}
    md = meta(pdb)
    pods, _ = store.list_objects(PODS, md.get("namespace") or "")
    selected = [
        p
        for p in pods
        if match_label_selector_object(spec.get("selector"), meta(p).get("labels") or {})
        and "deletionTimestamp" not in meta(p)
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    expected = len(selected)
    healthy = sum(1 for p in selected if is_healthy(p))
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = expected  # no bound given: nothing may be disrupted
    return {
        "observedGeneration": md.get("generation", 1),
        "expectedPods": expected,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "disruptionsAllowed": max(0, healthy - desired),
    }


def with_pdb_status(store: Store, pdb: Obj) -> Obj:
    """A PDB as read: status computed now (no disruption controller runs in the emulator)."""
    status = dict(pdb.get("status") or {})
    status.update(pdb_status(store, pdb))
    return dict(pdb, status=status)


def is_healthy(pod: Obj) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or "deletionTimestamp" in meta(pod):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _matching_pdbs(store: Store, pod: Obj) -> list[Obj]:
    pdbs, _ = store.list_objects(PDBS, meta(pod).get("namespace") or "")
    labels = meta(pod).get("labels") or {}
    return [
        p
        for p in pdbs
        if match_label_selector_object((p.get("spec") or {}).get("selector"), labels)
    ]


def _scaled(value: Any, total: int) -> int:
    """An IntOrString: an int, or a percentage of `total` rounded up (as the controller does)."""
    if isinstance(value, str) and value.endswith("%"):
        try:
            return math.ceil(int(value[:-1]) * total / 100)
        except ValueError:
            raise errors.bad_request(f"invalid percentage: {value}") from None
    return int(value)


def _refused(pdb: Obj, st: dict[str, Any]) -> ApiError:
    cause = (
        f"The disruption budget {meta(pdb).get('name')} needs {st['desiredHealthy']} healthy "
        f"pods and has {st['currentHealthy']} currently"
    )
    details = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    return ApiError(429, "TooManyRequests", EVICTION_REFUSED, details)
