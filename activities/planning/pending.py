"""The pods a pool plans for, as the cluster has them: a pool acts on the pending pods the
worker reads, never on a list a signal hands it (docs/security.md, "Authority from the
cluster").

The pool's workflow learns of pending pods from the trigger's `demand` signals, and whoever can
signal it could name any pods, with any requests. So before a plan the activity reads, per
namespace the request names, the unbound pods there and keeps a requested pod only if the
cluster has it with that uid, the scheduler found no room for it (`cluster.pods.
is_unschedulable`: unbound, not terminating, not a DaemonSet's), and its namespace is one the
NodePool — read from the cluster too — serves (`Tenancy.pool_serves`). What is planned is the
pod as the cluster has it (`cluster.requirements.pod_demand`: its requests, selectors,
affinity and tolerations), not as the request said. The pool's own demand for a drifted
node's replacement (`api.planning.replacement_uid`) is kept when the NodeClaim it replaces is
the pool's in the cluster. The others are returned with why, for the pool to forget them
(`Plan.not_pending`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s

from activities.kube_reads import KubeReads
from api.nodepool import API_VERSION, NodePool
from api.planning import REPLACEMENT_FOR, PlanRequest, PodDemand
from cluster.pods import is_unschedulable, pod_fields, pod_model
from cluster.requirements import pod_demand
from cluster.tenancy import Tenancy

_GROUP, _, _VERSION = API_VERSION.partition("/")
UNBOUND = "spec.nodeName="
# Where the replacements' demands are grouped (no namespace has this name).
REPLACEMENT_NAMESPACE_KEY = "/replacements"


class PendingInCluster:
    """Reads what a plan's pods are in the cluster; one per worker, thread-safe."""

    def __init__(self, reads: KubeReads, tenancy: Tenancy) -> None:
        self._reads = reads
        self._tenancy = tenancy

    def of(self, request: PlanRequest) -> tuple[list[PodDemand], dict[str, str]]:
        """The request's pods as the cluster has them, and (uid -> why) those it has not
        pending for this pool."""
        if not request.pods:
            return [], {}
        dropped: dict[str, str] = {}
        pool = self._pool(request.namespace, request.pool_name)
        by_namespace: dict[str, list[PodDemand]] = {}
        for requested in request.pods:
            # The pool's own demand for a drifted node's replacement is no pod of the cluster's:
            # the NodeClaim it replaces is what stands behind it.
            key = (
                REPLACEMENT_NAMESPACE_KEY
                if requested.uid.startswith(REPLACEMENT_FOR)
                else requested.namespace
            )
            by_namespace.setdefault(key, []).append(requested)
        kept: list[PodDemand] = []
        for replacement in by_namespace.pop(REPLACEMENT_NAMESPACE_KEY, []):
            why = self._not_replaceable(request, pool, replacement)
            if why is None:
                kept.append(replacement)
            else:
                dropped[replacement.uid] = why
        for namespace, asked in by_namespace.items():
            why = self._not_served(request, pool, namespace)
            if why is not None:
                dropped.update((each.uid, why) for each in asked)
                continue
            found = {}
            for raw in self._reads.list_namespaced_pod(namespace, field_selector=UNBOUND):
                pod = pod_model(pod_fields(raw))
                if pod.metadata is not None:
                    found[pod.metadata.uid] = pod
            for demand in asked:
                seen = found.get(demand.uid)
                if seen is None or not is_unschedulable(seen):
                    dropped[demand.uid] = (
                        f"pod {namespace}/{demand.name} (uid {demand.uid}) is not pending in the "
                        "cluster: bound, deleted, not marked unschedulable, or never there"
                    )
                    continue
                kept.append(pod_demand(seen))
        return kept, dropped

    def _not_replaceable(
        self, request: PlanRequest, pool: NodePool | None, demand: PodDemand
    ) -> str | None:
        """Why `demand`, a replacement's, is none the cluster stands behind: its NodeClaim,
        of this pool, must be there."""
        claim_name = demand.uid.removeprefix(REPLACEMENT_FOR)
        if pool is None:
            return f"NodePool {request.namespace}/{request.pool_name} is not in the cluster"
        try:
            claim = self._reads.get_namespaced_custom_object(
                _GROUP, _VERSION, request.namespace, "nodeclaims", claim_name
            )
        except k8s.ApiException as err:
            if err.status != 404:
                raise
            return (
                f"NodeClaim {request.namespace}/{claim_name}, to be replaced, is not in the cluster"
            )
        if (claim.get("spec") or {}).get("nodePool") != request.pool_name:
            return (
                f"NodeClaim {request.namespace}/{claim_name} is not NodePool {request.pool_name}'s"
            )
        return None

    def _pool(self, namespace: str, name: str) -> NodePool | None:
        try:
            raw = self._reads.get_namespaced_custom_object(
                _GROUP, _VERSION, namespace, "nodepools", name
            )
        except k8s.ApiException as err:
            if err.status == 404:
                return None
            raise
        return NodePool.model_validate(raw)

    def _not_served(
        self, request: PlanRequest, pool: NodePool | None, namespace: str
    ) -> str | None:
        if pool is None:
            return f"NodePool {request.namespace}/{request.pool_name} is not in the cluster"
        labels: Mapping[str, str] | None = None
        shared = self._tenancy.is_shared(request.namespace) and pool.spec.namespace_selector
        if namespace != request.namespace and shared:
            # A shared pool serves the namespaces its selector selects: their labels now.
            found: Any = self._reads.read_namespace(namespace)
            labels = (found.metadata.labels if found.metadata else None) or {}
        if self._tenancy.pool_serves(request.namespace, pool.spec, namespace, labels):
            return None
        return (
            f"NodePool {request.namespace}/{request.pool_name} does not serve namespace "
            f"{namespace} in the cluster"
        )
