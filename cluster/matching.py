"""Which pool a pending pod goes to, and why each pool does or does not take it: the one
place the trigger decides it and `cloudburst explain pod` tells it.

Pure: it reads what a watcher knows of the cluster's NodePools and NodeClasses
(`ClusterSpecs`) and the pod's demand. A pool takes a pod when it serves the pod's namespace
(`cluster/tenancy.py`), is valid and served, has a usable NodeClass, and some node of it could
host the pod (`cluster/requirements.py`, with the tenant's marks its nodes carry); the
highest weight wins, ties by namespace and name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from api import NodeClass, NodePool
from api.labels import TENANT_TAINT
from api.nodepool import NodePoolSpec
from api.planning import PodDemand
from api.problems import summary
from cluster.requirements import pool_can_host
from cluster.tenancy import INVALID_SPEC, Refusal, Tenancy

PoolKey = tuple[str, str]  # (namespace, name)


@dataclass
class ClusterSpecs:
    """The NodePools and NodeClasses a watcher has seen: the valid and served ones (with each
    pool's spec as its nodes are built), and why each other one is not served."""

    pools: dict[PoolKey, NodePool] = field(default_factory=dict)
    node_specs: dict[PoolKey, NodePoolSpec] = field(default_factory=dict)
    classes: dict[PoolKey, NodeClass] = field(default_factory=dict)
    invalid_pools: dict[PoolKey, Refusal] = field(default_factory=dict)
    invalid_classes: dict[PoolKey, Refusal] = field(default_factory=dict)

    def node_class_of(self, key: PoolKey) -> PoolKey | None:
        """The NodeClass the pool's nodes are built from: its `nodeClassRef`, else the only
        one of its namespace; None when there is no usable one."""
        pool = self.pools.get(key)
        if pool is None:
            return None
        namespace = key[0]
        if pool.spec.node_class_ref:
            ref = (namespace, pool.spec.node_class_ref)
            return ref if ref in self.classes else None
        in_namespace = [k for k in self.classes if k[0] == namespace]
        return in_namespace[0] if len(in_namespace) == 1 else None

    def class_problem(self, key: PoolKey) -> str:
        """Why the pool has no usable NodeClass, in words that say what to fix."""
        namespace = key[0]
        ref = self.pools[key].spec.node_class_ref
        if ref:
            why = self.invalid_classes.get((namespace, ref))
            if why is not None:
                return f"its NodeClass {ref} {described(why)}"
            return f"its NodeClass {ref} (spec.nodeClassRef) does not exist in {namespace}"
        names = sorted(k[1] for k in (*self.classes, *self.invalid_classes) if k[0] == namespace)
        if not names:
            return f"no NodeClass exists in namespace {namespace}"
        if len(names) > 1:
            return (
                f"it has no spec.nodeClassRef and namespace {namespace} has "
                f"{len(names)} NodeClasses ({', '.join(names)}): name one"
            )
        return f"its NodeClass {names[0]} {described(self.invalid_classes[(namespace, names[0])])}"

    def put(self, raw: dict[str, Any], model: type[NodePool | NodeClass], tenancy: Tenancy) -> None:
        """Judge one NodePool or NodeClass object (as the API server returned it) and keep it,
        valid and served, or its refusal: invalid (field paths) or not served."""
        key = (raw["metadata"].get("namespace", "default"), raw["metadata"]["name"])
        store: dict[PoolKey, Any] = self.pools if model is NodePool else self.classes
        refused = self.invalid_pools if model is NodePool else self.invalid_classes
        store.pop(key, None)
        refused.pop(key, None)
        if model is NodePool:
            self.node_specs.pop(key, None)
        judged = judge(raw, model, key[0], tenancy)
        if isinstance(judged, Refusal):
            refused[key] = judged
            return
        store[key] = judged
        if isinstance(judged, NodePool):
            self.node_specs[key] = tenancy.node_spec(key[0], judged.spec)


def judge(
    raw: dict[str, Any], model: type[NodePool | NodeClass], namespace: str, tenancy: Tenancy
) -> NodePool | NodeClass | Refusal:
    """The object, or why it is not served: invalid (the model's field paths), or refused by
    the tenancy rules (its namespace, an endpoint, a tenant's namespaceSelector)."""
    try:
        parsed = model.model_validate(raw)
    except ValidationError as err:
        return Refusal(INVALID_SPEC, summary(err))
    except Exception as err:  # a model bug must not stop a watcher either
        return Refusal(INVALID_SPEC, f"could not be read: {type(err).__name__}")
    if isinstance(parsed, NodePool):
        refusal = tenancy.pool_refusal(namespace, parsed.spec)
    else:
        refusal = tenancy.refusal(namespace, parsed.spec)
    return parsed if refusal is None else refusal


@dataclass(frozen=True)
class PoolVerdict:
    """One pool, judged for one pod: whether it serves the pod's namespace, whether it could
    host the pod, and why not."""

    pool: PoolKey
    serves: bool
    hosts: bool
    why: str | None = None  # None when it hosts
    weight: int = 0

    @property
    def name(self) -> str:
        return f"{self.pool[0]}/{self.pool[1]}"


@dataclass(frozen=True)
class Match:
    chosen: PoolKey | None
    verdicts: list[PoolVerdict]  # every pool of the cluster, by namespace and name

    def reason(self, namespace: str, worker_namespace: str) -> str:
        """Why no pool takes the pod, naming only the pools that serve its namespace (another
        tenant's pools are neither used nor shown): the `NoMatchingNodePool` Event's words."""
        said = [f"{v.name}: {v.why}" for v in self.verdicts if v.serves and not v.hosts]
        return "; ".join(said) or (
            f"no NodePool serves namespace {namespace} (a NodePool serves its own namespace's "
            f"pods; a shared pool in {worker_namespace} those of the namespaces its "
            "namespaceSelector selects)"
        )


def match(
    demand: PodDemand,
    specs: ClusterSpecs,
    tenancy: Tenancy,
    namespace_labels: Mapping[str, str] | None,
) -> Match:
    """The pool the pod goes to (highest weight, ties by namespace and name), and every
    pool's verdict."""
    namespace = demand.namespace
    verdicts: list[PoolVerdict] = []
    for key, refusal in specs.invalid_pools.items():
        serves = key[0] == namespace
        verdicts.append(PoolVerdict(key, serves, False, f"the NodePool {described(refusal)}"))
    for key, pool in specs.pools.items():
        weight = pool.spec.weight
        if not tenancy.pool_serves(key[0], pool.spec, namespace, namespace_labels):
            why = _serves_not(key, pool, namespace, tenancy)
            verdicts.append(PoolVerdict(key, False, False, why, weight))
            continue
        if specs.node_class_of(key) is None:
            verdicts.append(PoolVerdict(key, True, False, specs.class_problem(key), weight))
            continue
        unfit = pool_can_host(key[1], specs.node_specs[key], demand)
        if unfit is None:
            verdicts.append(PoolVerdict(key, True, True, None, weight))
        else:
            verdicts.append(PoolVerdict(key, True, False, explained(unfit, key[0]), weight))
    verdicts.sort(key=lambda v: v.pool)
    hosting = [(-v.weight, v.pool) for v in verdicts if v.hosts]
    return Match(min(hosting)[1] if hosting else None, verdicts)


def explained(why: str, pool_namespace: str) -> str:
    """Why a pool cannot host a pod, with what to do when it is its tenant taint."""
    if TENANT_TAINT not in why:
        return why
    return (
        f"{why}: every node of a pool in {pool_namespace} carries it; the pods of "
        f"{pool_namespace} get its toleration from the namespace's "
        f"scheduler.alpha.kubernetes.io/defaultTolerations annotation (`cloudburst tenant-rbac "
        f"{pool_namespace}`, docs/security.md)"
    )


def described(refusal: Refusal) -> str:
    """`is invalid: <field paths>`, or `is refused (<reason>): <what to change>`."""
    if refusal.reason == INVALID_SPEC:
        return f"is invalid: {refusal.message}"
    return f"is refused ({refusal.reason}): {refusal.message}"


def _serves_not(key: PoolKey, pool: NodePool, namespace: str, tenancy: Tenancy) -> str:
    if tenancy.is_shared(key[0]) and pool.spec.namespace_selector is not None:
        selected = pool.spec.namespace_selector.describe() or "every namespace"
        return f"a shared pool for the namespaces selected by {selected}; {namespace} is not one"
    return f"serves the pods of namespace {key[0]} only"
