"""The gauges of pools and claims, computed from the cluster's objects when Prometheus scrapes.

One truth, one writer: a NodePool's status is written by its pool workflow alone and its limits
are its spec; a NodeClaim's phase is written by its claim workflow alone. Reading them at scrape
time (instead of setting a gauge where an activity ran) means every value is the cluster's
current one, a pool or claim that is gone has no series, and `namespace/name` tells two pools
of one name apart. Of the triggers side by side, one serves these series (`trigger/peers.py`
picks it: `GAUGES_KEY`), so `sum()` over every target counts each pool once.

`cluster_families` is the decision (objects in, metric families out), pure and tested on its
own; `trigger/gauges.py` is the prometheus_client collector that lists the objects for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from api.nodeclaim import NodeClaimPhase
from api.nodepool import LIMIT_REACHED, PRICES_STALE, READY, VALIDATION_SUCCEEDED
from api.quantity import parse_quantity

# What the triggers' rendezvous hashing (trigger/peers.py) is asked about: the one running
# trigger it gives this key to serves the gauges.
GAUGES_KEY = "cloudburst-cluster-gauges"
# The pool conditions exported as 1 (True) / 0 (False); others are for `kubectl describe`.
POOL_CONDITIONS = (READY, LIMIT_REACHED, PRICES_STALE, VALIDATION_SUCCEEDED)

PoolKey = tuple[str, str]  # (namespace, name)
PendingPod = tuple[str, str, PoolKey]  # the pod's namespace and name, the pool it waits for


def cluster_families(
    pools: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    pending_pods: Iterable[PendingPod],
) -> list[GaugeMetricFamily]:
    """The pool and claim gauges of these NodePools and NodeClaims (raw objects, as listed),
    and the pods waiting for a pool as the trigger holds them."""
    usage = GaugeMetricFamily(
        "cloudburst_nodepools_usage",
        "Resources held by a NodePool's claims that are not Deleted or Failed (nodes; cpu in"
        " cores; memory in bytes), from the NodePool's status",
        labels=["namespace", "nodepool", "resource"],
    )
    limit = GaugeMetricFamily(
        "cloudburst_nodepools_limit",
        "A NodePool's limits (spec.limits: maxNodes, cpu in cores, memory in bytes); absent"
        " where unlimited",
        labels=["namespace", "nodepool", "resource"],
    )
    condition = GaugeMetricFamily(
        "cloudburst_nodepools_condition",
        "1 while a NodePool's condition of this type is True, 0 while False",
        labels=["namespace", "nodepool", "type"],
    )
    pending = GaugeMetricFamily(
        "cloudburst_nodepools_pending_pods",
        "Pods unschedulable in the cluster that the trigger sent to this NodePool",
        labels=["namespace", "nodepool"],
    )
    pod_state = GaugeMetricFamily(
        "cloudburst_pods_state",
        "1 per unschedulable pod the trigger sent to a NodePool (namespace: the pod's;"
        " nodepool_namespace: the pool's)",
        labels=["namespace", "name", "nodepool", "nodepool_namespace", "phase"],
    )
    claim_state = GaugeMetricFamily(
        "cloudburst_nodeclaims_state",
        "1 per NodeClaim, labeled by its phase (Deleting once its deletion began)",
        labels=["namespace", "nodeclaim", "nodepool", "provider", "capacity_type", "phase"],
    )
    # The names before Karpenter's vocabulary, by pool name alone (summed over namespaces).
    usage_old = GaugeMetricFamily(
        "cloudburst_nodepool_usage",
        "Deprecated: cloudburst_nodepools_usage",
        labels=["nodepool", "resource"],
    )
    limit_old = GaugeMetricFamily(
        "cloudburst_nodepool_limit",
        "Deprecated: cloudburst_nodepools_limit",
        labels=["nodepool", "resource"],
    )
    waiting: dict[PoolKey, int] = {}
    for pod_namespace, pod_name, (pool_namespace, pool_name) in sorted(pending_pods):
        pod_state.add_metric([pod_namespace, pod_name, pool_name, pool_namespace, "Pending"], 1.0)
        waiting[pool_namespace, pool_name] = waiting.get((pool_namespace, pool_name), 0) + 1
    usage_by_name: dict[tuple[str, str], float] = {}
    limit_by_name: dict[tuple[str, str], float] = {}

    for pool in sorted(pools, key=_key):
        namespace, name = _key(pool)
        for resource, value in pool_usage(pool).items():
            usage.add_metric([namespace, name, resource], value)
            usage_by_name[name, resource] = usage_by_name.get((name, resource), 0.0) + value
        for resource, value in pool_limits(pool).items():
            limit.add_metric([namespace, name, resource], value)
            limit_by_name[name, resource] = limit_by_name.get((name, resource), 0.0) + value
        for type_, true in pool_conditions(pool).items():
            condition.add_metric([namespace, name, type_], 1.0 if true else 0.0)
        pending.add_metric([namespace, name], float(waiting.get((namespace, name), 0)))
    for (name, resource), value in sorted(usage_by_name.items()):
        usage_old.add_metric([name, resource], value)
    for (name, resource), value in sorted(limit_by_name.items()):
        limit_old.add_metric([name, resource], value)

    for claim in sorted(claims, key=_key):
        namespace, name = _key(claim)
        spec = claim.get("spec") or {}
        status = claim.get("status") or {}
        claim_state.add_metric(
            [
                namespace,
                name,
                str(spec.get("nodePool") or ""),
                str(status.get("provider") or ""),
                str(status.get("capacityType") or ""),
                claim_phase(claim),
            ],
            1.0,
        )
    return [usage, limit, condition, pending, pod_state, claim_state, usage_old, limit_old]


def pool_usage(pool: Mapping[str, Any]) -> dict[str, float]:
    """What the pool's workflow last wrote it holds; nothing before its first status."""
    status = pool.get("status")
    if not status:
        return {}
    resources = status.get("resources") or {}
    return {
        "nodes": float(status.get("nodes") or 0),
        "cpu": _quantity(resources.get("cpu")),
        "memory": _quantity(resources.get("memory")),
    }


def pool_limits(pool: Mapping[str, Any]) -> dict[str, float]:
    limits = (pool.get("spec") or {}).get("limits") or {}
    found = {
        "nodes": limits.get("maxNodes"),
        "cpu": limits.get("cpu"),
        "memory": limits.get("memory"),
    }
    return {resource: _quantity(value) for resource, value in found.items() if value is not None}


def pool_conditions(pool: Mapping[str, Any]) -> dict[str, bool]:
    """The exported conditions the pool has, True or False (Unknown ones are left out)."""
    found: dict[str, bool] = {}
    for condition in (pool.get("status") or {}).get("conditions") or []:
        type_, status = condition.get("type"), condition.get("status")
        if type_ in POOL_CONDITIONS and status in ("True", "False"):
            found[type_] = status == "True"
    return found


def claim_phase(claim: Mapping[str, Any]) -> str:
    """The claim's phase as its workflow wrote it; `Deleting` once the object's deletion began
    (`kubectl delete nodeclaim`) and the claim has not ended yet."""
    phase = str((claim.get("status") or {}).get("phase") or NodeClaimPhase.PENDING.value)
    deleting = (claim.get("metadata") or {}).get("deletionTimestamp")
    if deleting and phase not in (NodeClaimPhase.DELETED.value, NodeClaimPhase.FAILED.value):
        return NodeClaimPhase.DELETING.value
    return phase


def _key(obj: Mapping[str, Any]) -> PoolKey:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _quantity(value: Any) -> float:
    if value is None or value == "":
        return 0.0
    try:
        return float(parse_quantity(value))
    except (ValueError, ArithmeticError):
        return 0.0
