"""Which pools can host a pod, and on which of their offerings: Kubernetes matching rules.

A pool's node carries two kinds of labels:
- static ones, the same on every node of the pool: `template.labels`,
  `cloudburst.io/nodepool=<pool>`, `kubernetes.io/os=linux` (plus `kubernetes.io/hostname`
  and `cloudburst.io/nodeclaim`, which exist but whose value nobody can know in advance);
- offering ones, set from the offering the claim launches: arch, instance type, region,
  zone, provider and capacity type (`kubernetes.io/arch`, `node.kubernetes.io/instance-type`,
  `topology.kubernetes.io/region`, `topology.kubernetes.io/zone`, `karpenter.sh/capacity-type`,
  `cloudburst.io/*`).

Decision on offering labels: a selector on them is *satisfiable by filtering offerings*.
`pool_can_host` accepts it when some offering the pool allows could satisfy it (arch against
`requirements.arch`, region against an explicit region list, provider against
`allowedProviders`, capacity type against `capacityType`; instance type and zone are assumed
possible), and `offering_filter`
then keeps, for that pod, only the offerings whose labels satisfy it; `plan_capacity`
reports the pod unschedulable if none is left. Zones: our nodes carry a zone label only when
the offering names one, so `In` on a zone needs zonal offerings.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from api import labels as L
from api.nodeclaim import Offering
from api.nodepool import NodePoolSpec, Taint
from api.planning import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodDemand,
    Resources,
    Toleration,
)
from api.quantity import cpu_millis, memory_bytes

if TYPE_CHECKING:
    from kubernetes import client as k8s

    from cluster.pod_view import AffinityView, PodView

OS_LABEL = "kubernetes.io/os"
HOSTNAME_LABEL = "kubernetes.io/hostname"
_ARCH_KEYS = frozenset({L.K8S_ARCH, "beta.kubernetes.io/arch"})
_INSTANCE_TYPE_KEYS = frozenset(
    {L.K8S_INSTANCE_TYPE, "beta.kubernetes.io/instance-type", L.INSTANCE_TYPE}
)
_REGION_KEYS = frozenset({L.K8S_REGION, "failure-domain.beta.kubernetes.io/region", L.REGION})
_ZONE_KEYS = frozenset({"topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone"})
_PROVIDER_KEYS = frozenset({L.PROVIDER})
_CAPACITY_TYPE_KEYS = frozenset({L.KARPENTER_CAPACITY_TYPE, L.CAPACITY_TYPE})
OFFERING_KEYS: Final = (
    _ARCH_KEYS | _INSTANCE_TYPE_KEYS | _REGION_KEYS | _ZONE_KEYS | _PROVIDER_KEYS
) | _CAPACITY_TYPE_KEYS
# Labels every node has but whose value is only known once it exists (random claim names).
_OPAQUE_KEYS = frozenset({HOSTNAME_LABEL, L.NODECLAIM})
# Kubernetes spells architectures the Go way; pools may use either spelling.
_ARCH_ALIASES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


class _Opaque:
    """A label that exists with a value nobody knows yet: only NotIn/Exists can be sure."""


class _Any:
    """An offering label before an offering is chosen: optimistic, refined by filtering."""


OPAQUE: Final = _Opaque()
ANY: Final = _Any()
LabelValue = str | None | _Opaque | _Any


def normalize_arch(arch: str) -> str:
    return _ARCH_ALIASES.get(arch, arch)


# ---- public API ---------------------------------------------------------------------------


def pod_demand(pod: k8s.V1Pod | PodView) -> PodDemand:
    """What a pending pod asks of a node, the way the scheduler adds it up; the pod is the
    client's model or the view of its JSON (`cluster.pod_view`), read alike.

    Requests: the sum over containers (a missing request defaults to the limit, as the API
    server does), at least each init container's (sidecar init containers — restartPolicy
    Always — run alongside, so they add up), plus the pod overhead.
    """
    meta = pod.metadata
    spec = pod.spec
    namespace = (meta.namespace if meta else None) or "default"
    name = (meta.name if meta else None) or ""
    uid = meta.uid if meta else None
    if spec is None:
        return PodDemand(
            uid=uid or f"{namespace}/{name}",
            namespace=namespace,
            name=name,
            requests=Resources(pods=1),
        )
    running = Resources()
    for container in spec.containers or []:
        running += _container_requests(container)
    sidecars = Resources()
    init_peak = Resources()
    for init in spec.init_containers or []:
        requests = _container_requests(init)
        if init.restart_policy == "Always":
            sidecars += requests
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, sidecars + requests)
    total = _max(running + sidecars, init_peak)
    if spec.overhead:
        total += _resources(spec.overhead)
    total.pods = 1
    return PodDemand(
        uid=uid or f"{namespace}/{name}",
        namespace=namespace,
        name=name,
        requests=total,
        node_selector=dict(spec.node_selector or {}),
        required_affinity=_required_terms(spec.affinity),
        tolerations=[
            Toleration(
                key=t.key or None,
                operator="Exists" if t.operator == "Exists" else "Equal",
                value=t.value,
                effect=t.effect or None,
            )
            for t in spec.tolerations or []
        ],
    )


def pool_can_host(pool_name: str, pool: NodePoolSpec, pod: PodDemand) -> str | None:
    """None if some node of this pool could host the pod, else why not (for an Event)."""
    for taint in pool.template.taints:
        if taint.effect in _BLOCKING_EFFECTS and not tolerates(pod.tolerations, taint):
            return f"taint {_taint_text(taint)} is not tolerated"
    nodes = list(_abstract_nodes(pool_name, pool))
    if any(_node_matches(pod.node_selector, pod.required_affinity, n) for n in nodes):
        return None
    return _mismatch_reason(pool, pod, nodes)


def rank_pools(
    pools: list[tuple[str, NodePoolSpec]], pod: PodDemand
) -> tuple[list[str], dict[str, str]]:
    """Pools that could host the pod, highest weight first (then by name), and why not the rest."""
    matching: list[tuple[int, str]] = []
    reasons: dict[str, str] = {}
    for name, spec in pools:
        reason = pool_can_host(name, spec, pod)
        if reason is None:
            matching.append((-spec.weight, name))
        else:
            reasons[name] = reason
    return [name for _, name in sorted(matching)], reasons


def offering_filter(
    pool_name: str, pool: NodePoolSpec, pod: PodDemand
) -> Callable[[Offering], bool] | None:
    """A test of offerings for this pod's offering-label selectors; None if it has none."""
    keys = set(pod.node_selector) | {
        e.key for term in pod.required_affinity for e in term.match_expressions
    }
    if not keys & OFFERING_KEYS:
        return None
    static = static_labels(pool_name, pool)

    def allows(offering: Offering) -> bool:
        node = _with_offering(static, offering)
        return _node_matches(pod.node_selector, pod.required_affinity, node)

    return allows


def static_labels(pool_name: str, pool: NodePoolSpec) -> dict[str, LabelValue]:
    """The labels every node of the pool carries, whatever the offering."""
    values: dict[str, LabelValue] = dict(pool.template.labels)
    values[L.NODEPOOL] = pool_name
    values[OS_LABEL] = "linux"
    values["beta.kubernetes.io/os"] = "linux"
    for key in _OPAQUE_KEYS:
        values[key] = OPAQUE
    return values


def offering_labels(offering: Offering) -> dict[str, str | None]:
    """The offering-dependent labels a node launched from this offering will carry."""
    out: dict[str, str | None] = {}
    arch = normalize_arch(offering.arch)
    for key in _ARCH_KEYS:
        out[key] = arch
    for key in _INSTANCE_TYPE_KEYS:
        out[key] = offering.instance_type
    for key in _REGION_KEYS:
        out[key] = offering.region
    for key in _ZONE_KEYS:
        out[key] = offering.zone
    for key in _PROVIDER_KEYS:
        out[key] = offering.provider
    for key in _CAPACITY_TYPE_KEYS:
        out[key] = offering.capacity_type
    return out


def node_labels_match(
    node_selector: Mapping[str, str],
    terms: list[NodeSelectorTerm],
    labels: Mapping[str, LabelValue],
) -> bool:
    """Kubernetes semantics: every nodeSelector pair, and (if any terms) one term whose
    expressions all hold. Labels missing from `labels` are absent on the node."""
    return _node_matches(node_selector, terms, labels)


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    return any(_tolerates(t, taint) for t in tolerations)


def selector_from_terms(
    node_selector: Mapping[str, str] | None, affinity: k8s.V1Affinity | AffinityView | None
) -> tuple[dict[str, str], list[NodeSelectorTerm]]:
    """A pod template's placement rules in our models (DaemonSets use this too)."""
    return dict(node_selector or {}), _required_terms(affinity)


# ---- matching -----------------------------------------------------------------------------


def _node_matches(
    node_selector: Mapping[str, str],
    terms: list[NodeSelectorTerm],
    node: Mapping[str, LabelValue],
) -> bool:
    for key, value in node_selector.items():
        if not _holds(NodeSelectorRequirement(key=key, operator="In", values=[value]), node):
            return False
    if not terms:
        return True
    return any(_term_holds(term, node) for term in terms)


def _term_holds(term: NodeSelectorTerm, node: Mapping[str, LabelValue]) -> bool:
    # Kubernetes: an empty term matches no node.
    return bool(term.match_expressions) and all(_holds(e, node) for e in term.match_expressions)


def _holds(expr: NodeSelectorRequirement, node: Mapping[str, LabelValue]) -> bool:
    value = node.get(expr.key)
    values = expr.values
    if expr.key in _ARCH_KEYS:
        values = [normalize_arch(v) for v in values]
        if isinstance(value, str):
            value = normalize_arch(value)
    op = expr.operator
    if isinstance(value, _Any):
        # Not yet known: possible unless it asks for the label to be absent (offering labels
        # always exist, but a zone might not).
        return op != "DoesNotExist" or expr.key in _ZONE_KEYS
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op == "NotIn":
        return value is None or (isinstance(value, str) and value not in values)
    if not isinstance(value, str):
        return False  # absent, or unknowable (a hostname of a node not yet made)
    if op == "In":
        return value in values
    # Gt/Lt: both sides must be integers, else the expression does not hold.
    try:
        number, bound = int(value), int(values[0])
    except (ValueError, IndexError):
        return False
    return number > bound if op == "Gt" else number < bound


def _tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if not toleration.key:
        # An empty key tolerates everything only with operator Exists.
        return toleration.operator == "Exists"
    if toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return (toleration.value or "") == (taint.value or "")


def _abstract_nodes(pool_name: str, pool: NodePoolSpec) -> Iterable[dict[str, LabelValue]]:
    """One label view per combination of what the pool pins down (arch, explicit regions,
    allowed providers); everything else about the offering is ANY."""
    static = static_labels(pool_name, pool)
    archs = sorted({normalize_arch(a) for a in pool.requirements.arch}) or ["amd64"]
    regions: list[str | _Any] = (
        list(pool.requirements.region_constraint)
        if isinstance(pool.requirements.region_constraint, list)
        else [ANY]
    )
    providers: list[str | _Any] = list(pool.requirements.allowed_providers) or [ANY]
    capacity_types = sorted(pool.requirements.capacity_type)
    for arch, region, provider, capacity_type in itertools.product(
        archs, regions, providers, capacity_types
    ):
        node = dict(static)
        for key in OFFERING_KEYS:
            node[key] = ANY
        for key in _ARCH_KEYS:
            node[key] = arch
        for key in _REGION_KEYS:
            node[key] = region
        for key in _PROVIDER_KEYS:
            node[key] = provider
        for key in _CAPACITY_TYPE_KEYS:
            node[key] = capacity_type
        yield node


def _with_offering(static: Mapping[str, LabelValue], offering: Offering) -> dict[str, LabelValue]:
    node = dict(static)
    node.update(offering_labels(offering))
    return node


# ---- reasons ------------------------------------------------------------------------------


def _mismatch_reason(pool: NodePoolSpec, pod: PodDemand, nodes: list[dict[str, LabelValue]]) -> str:
    for key, value in pod.node_selector.items():
        expr = NodeSelectorRequirement(key=key, operator="In", values=[value])
        if not any(_holds(expr, n) for n in nodes):
            return f"nodeSelector {key}={value}: {_why_not(expr, pool, nodes)}"
    failing: list[str] = []
    for term in pod.required_affinity:
        failing.append(_term_reason(term, pool, nodes))
    if len(failing) == 1:
        return f"required node affinity: {failing[0]}"
    if failing:
        numbered = "; ".join(f"term {i + 1}: {text}" for i, text in enumerate(failing))
        return f"none of the {len(failing)} required node affinity terms matches ({numbered})"
    return "no node of the pool matches the pod's node selector and affinity together"


def _term_reason(
    term: NodeSelectorTerm, pool: NodePoolSpec, nodes: list[dict[str, LabelValue]]
) -> str:
    if not term.match_expressions:
        return "an empty term matches no node"
    for expr in term.match_expressions:
        if not any(_holds(expr, n) for n in nodes):
            return f"{_expr_text(expr)}: {_why_not(expr, pool, nodes)}"
    return "its expressions hold separately but no single node type satisfies all of them"


def _why_not(
    expr: NodeSelectorRequirement, pool: NodePoolSpec, nodes: list[dict[str, LabelValue]]
) -> str:
    if expr.key in _ARCH_KEYS:
        wanted = ", ".join(expr.values) or "-"
        return f"arch {wanted} not in pool arch [{', '.join(pool.requirements.arch)}]"
    if expr.key in _REGION_KEYS:
        return f"not among the pool's regions {pool.requirements.region_constraint}"
    if expr.key in _PROVIDER_KEYS:
        return f"not among the pool's allowedProviders {pool.requirements.allowed_providers}"
    if expr.key in _CAPACITY_TYPE_KEYS:
        return f"not among the pool's capacityType {pool.requirements.capacity_type}"
    value = nodes[0].get(expr.key) if nodes else None
    if expr.key in _OPAQUE_KEYS:
        return f"{expr.key} of a new node is not known in advance"
    if value is None:
        if expr.operator == "In" and len(expr.values) == 1:
            return f"{expr.key}={expr.values[0]} is not among the pool's labels"
        return f"the pool's nodes have no label {expr.key}"
    return f"the pool's nodes have {expr.key}={value}"


def _expr_text(expr: NodeSelectorRequirement) -> str:
    if expr.operator in ("Exists", "DoesNotExist"):
        return f"{expr.key} {expr.operator}"
    return f"{expr.key} {expr.operator} [{', '.join(expr.values)}]"


def _taint_text(taint: Taint) -> str:
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"


# ---- parsing the Kubernetes objects -------------------------------------------------------


def _required_terms(affinity: k8s.V1Affinity | AffinityView | None) -> list[NodeSelectorTerm]:
    required = (
        affinity.node_affinity.required_during_scheduling_ignored_during_execution
        if affinity and affinity.node_affinity
        else None
    )
    if required is None:
        return []
    terms: list[NodeSelectorTerm] = []
    for term in required.node_selector_terms or []:
        expressions = [
            NodeSelectorRequirement(key=e.key, operator=e.operator, values=list(e.values or []))
            for e in term.match_expressions or []
        ]
        # matchFields can only name metadata.name: a node that does not exist yet never
        # matches `In`, which the missing label reproduces.
        expressions += [
            NodeSelectorRequirement(
                key=f"field:{f.key}", operator=f.operator, values=list(f.values or [])
            )
            for f in term.match_fields or []
        ]
        terms.append(NodeSelectorTerm(match_expressions=expressions))
    # A required selector with no terms matches nothing: keep that as one empty term.
    return terms or [NodeSelectorTerm()]


def _container_requests(container: Any) -> Resources:
    res = container.resources
    if res is None:
        return Resources()
    requests = dict(res.requests or {})
    for key, value in (res.limits or {}).items():
        requests.setdefault(key, value)  # the API server defaults requests to limits
    return _resources(requests)


def _resources(values: Mapping[str, Any]) -> Resources:
    return Resources(
        cpu_m=cpu_millis(values["cpu"]) if "cpu" in values else 0,
        memory_bytes=memory_bytes(values["memory"]) if "memory" in values else 0,
    )


def _max(a: Resources, b: Resources) -> Resources:
    return Resources(
        cpu_m=max(a.cpu_m, b.cpu_m),
        memory_bytes=max(a.memory_bytes, b.memory_bytes),
        pods=max(a.pods, b.pods),
    )
