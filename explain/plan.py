"""`cloudburst plan`: the pods of a file (or the cluster's pending pods), as the pool would plan
them now, compared with the cheapest plan of one instance type and with the LP lower bound.

Workloads become the pods their controllers would make: a Deployment, ReplicaSet or
StatefulSet its `replicas` (default 1), a Job `min(parallelism, completions)` (default 1), a
CronJob one run of its Job, a List its items. DaemonSets are per-node overhead, not pods to
plan; other kinds are named and left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from api.explain import PlanComparison, PlannedNodeView, SingleTypePlan
from api.nodeclaim import Offering
from api.nodepool import Limits
from api.planning import PlanRequest, PodDemand
from api.quantity import format_cpu, format_memory
from cluster.pod_view import pod_view
from cluster.requirements import pod_demand
from planner.node_size import OverheadFn, usable_capacity
from planner.plan import lp_lower_bound, plan_capacity

_REPLICATED = ("Deployment", "ReplicaSet", "StatefulSet")
# A file asking for more pods than this is refused: a plan is for trying, not a load test.
MAX_PODS = 20_000


@dataclass
class Workload:
    """What a file asks for: the pods to plan, the pools and classes it carries, and what was
    left out (with why)."""

    pods: list[PodDemand] = field(default_factory=list)
    pools: list[dict[str, Any]] = field(default_factory=list)
    classes: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class WorkloadError(ValueError):
    """A document that cannot be planned: says which and why."""


def expand(documents: Iterable[Any], default_namespace: str = "default") -> Workload:
    """The pods the documents' controllers would make, each with its own uid
    (`plan/<namespace>/<name>`)."""
    out = Workload()
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        _expand_one(doc, default_namespace, out, f"document {index + 1}")
        if len(out.pods) > MAX_PODS:
            raise WorkloadError(f"more than {MAX_PODS} pods: plan a smaller file")
    return out


def _expand_one(doc: Any, default_namespace: str, out: Workload, where: str) -> None:
    if not isinstance(doc, dict):
        raise WorkloadError(f"{where}: not a Kubernetes object")
    kind = doc.get("kind")
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict):
        raise WorkloadError(f"{where} ({kind}): metadata must be an object")
    name = meta.get("name") or ""
    namespace = meta.get("namespace") or default_namespace
    if not isinstance(name, str) or not isinstance(namespace, str):
        raise WorkloadError(f"{where} ({kind}): metadata.name and .namespace must be strings")
    label = f"{kind} {namespace}/{name}" if name else f"{where} ({kind})"
    spec = doc.get("spec") or {}
    if not isinstance(spec, dict):
        raise WorkloadError(f"{label}: spec must be an object")
    if kind == "List":
        for i, item in enumerate(doc.get("items") or []):
            _expand_one(item, default_namespace, out, f"{where} item {i + 1}")
    elif kind == "NodePool":
        out.pools.append(doc)
    elif kind == "NodeClass":
        out.classes.append(doc)
    elif kind == "Pod":
        _add(out, label, namespace, name, (doc, ""), 1)
    elif kind in _REPLICATED:
        count = _count(spec, "replicas", label)
        _add(out, label, namespace, name, (spec.get("template") or {}, "spec.template."), count)
    elif kind == "Job":
        count = _job_pods(spec, label)
        _add(out, label, namespace, name, (spec.get("template") or {}, "spec.template."), count)
    elif kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        template = (job.get("template") or {}, "spec.jobTemplate.spec.template.")
        _add(out, label, namespace, name, template, _job_pods(job, label))
    elif kind == "DaemonSet":
        out.notes.append(f"{label}: a DaemonSet runs on every node; the pool counts it as overhead")
    else:
        out.notes.append(f"{label}: not a workload, left out")


def _count(spec: dict[str, Any], key: str, label: str) -> int:
    value = spec.get(key, 1)
    if value is None:
        return 1
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise WorkloadError(f"{label}: spec.{key} must be a whole number ≥ 0, not {value!r}")
    return value


def _job_pods(spec: dict[str, Any], label: str) -> int:
    parallelism = _count(spec, "parallelism", label)
    completions = spec.get("completions")
    if completions is None:
        return parallelism
    return min(parallelism, _count(spec, "completions", label))


def _add(
    out: Workload,
    label: str,
    namespace: str,
    name: str,
    found: tuple[dict[str, Any], str],
    count: int,
) -> None:
    """`count` pods of the template found at a path of the document, each named for itself."""
    template, at = found
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise WorkloadError(f"{label}: {at}spec must be a pod's spec")
    if not template["spec"].get("containers"):
        raise WorkloadError(f"{label}: its pod has no containers")
    meta = template.get("metadata") or {}
    if not isinstance(meta, dict):
        raise WorkloadError(f"{label}: {at}metadata must be an object")
    try:
        demand = pod_demand(pod_view({"metadata": meta, "spec": template["spec"]}, at))
    except ValueError as err:
        raise WorkloadError(f"{label}: its pod cannot be read: {err}") from None
    for i in range(count):
        pod_name = name if count == 1 and label.startswith("Pod") else f"{name}-{i}"
        uid = f"plan/{namespace}/{pod_name}"
        out.pods.append(
            demand.model_copy(update={"uid": uid, "namespace": namespace, "name": pod_name})
        )


# ---- comparing plans ----------------------------------------------------------------------


def compare(
    request: PlanRequest,
    offerings: Sequence[Offering],
    overhead: OverheadFn,
    *,
    pool: str,
    prices: str,
    limits: str,
    lower_bound: Callable[..., float] = lp_lower_bound,
    tight_bound: bool = True,
) -> PlanComparison:
    """The pool's plan for the request's pods, beside the cheapest one-instance-type plan and
    the LP lower bound (both for every pod some offering hosts, without the limits)."""
    plan = plan_capacity(request, offerings, overhead)
    names = {p.uid: f"{p.namespace}/{p.name}" for p in request.pods}
    answer = PlanComparison(
        pool=pool,
        pods=len(request.pods),
        prices=prices,
        nodes=[_node_view(node, names) for node in plan.new_nodes],
        cost_eur_per_hour=plan.cost_eur_per_hour,
        unschedulable={names[uid]: why for uid, why in plan.unschedulable.items()},
        limited=[names[uid] for uid in plan.limited],
        limits=limits,
        offerings_considered=len({o.key for o in offerings}),
    )
    unlimited = request.model_copy(
        update={
            "max_new_nodes": None,
            "remaining_cpu_m": None,
            "remaining_memory_bytes": None,
            "in_flight": [],
        }
    )
    hosted = {p.uid for p in request.pods} - set(plan.unschedulable)
    single, answer.single_type_note = cheapest_single_type(unlimited, offerings, overhead, hosted)
    answer.single_type = single
    if hosted:
        answer.lower_bound_eur_per_hour = round(
            lower_bound(unlimited, offerings, overhead, tight=tight_bound), 6
        )
        answer.lower_bound_kind = (
            "assignment LP (pods' offerings respected)" if tight_bound else "fractional cover LP"
        )
    return answer


def limits_text(limits: Limits, held: tuple[int, int, int] | None) -> str:
    """`maxNodes=3, cpu=8 (the pool holds 2 nodes, 4 cpu, 8Gi now)`, or `none`."""
    parts = [
        f"maxNodes={limits.max_nodes}" if limits.max_nodes is not None else "",
        f"cpu={limits.cpu}" if limits.cpu else "",
        f"memory={limits.memory}" if limits.memory else "",
    ]
    text = ", ".join(p for p in parts if p) or "none"
    if held is None:
        return f"{text} (counted as if the pool held no node)"
    nodes, cpu_m, memory = held
    return (
        f"{text} (the pool holds {nodes} nodes, {format_cpu(cpu_m)} cpu, "
        f"{format_memory(memory)} now)"
    )


def cheapest_single_type(
    request: PlanRequest,
    offerings: Sequence[Offering],
    overhead: OverheadFn,
    hosted: set[str],
) -> tuple[SingleTypePlan | None, str]:
    """The cheapest plan that puts every hosted pod on nodes of one offering, and a note when
    there is none. Offerings are tried cheapest bound first (no plan of an offering costs less
    than its price times the nodes the pods' total needs at least), and the search stops once
    no bound is below the best plan found."""
    if not hosted:
        return None, "no pod to plan"
    total = [0, 0, 0]
    for pod in request.pods:
        if pod.uid in hosted:
            total[0] += pod.requests.cpu_m
            total[1] += pod.requests.memory_bytes
            total[2] += max(1, pod.requests.pods)
    bounded: list[tuple[float, Offering]] = []
    for offering in {o.key: o for o in offerings}.values():
        cap = usable_capacity(offering, overhead(offering))
        room = (cap.cpu_m, cap.memory_bytes, cap.pods)
        if min(room) <= 0:
            continue
        nodes = max(-(-need // have) for need, have in zip(total, room, strict=True))
        bounded.append((nodes * float(offering.price_eur_per_hour or 0.0), offering))
    bounded.sort(key=lambda pair: (pair[0], pair[1].key))
    best: SingleTypePlan | None = None
    for bound, offering in bounded:
        if best is not None and bound >= best.cost_eur_per_hour:
            break
        plan = plan_capacity(request, [offering], overhead)
        if hosted & set(plan.unschedulable) or plan.limited:
            continue  # some pod this offering cannot host
        if best is None or plan.cost_eur_per_hour < best.cost_eur_per_hour:
            best = SingleTypePlan(
                offering=offering.key,
                nodes=len(plan.new_nodes),
                cost_eur_per_hour=plan.cost_eur_per_hour,
            )
    if best is None:
        return None, "no single offering hosts every pod (their selectors or sizes differ)"
    return best, ""


def _node_view(node: Any, names: dict[str, str]) -> PlannedNodeView:
    first: Offering = node.offerings[0]
    return PlannedNodeView(
        offering=first.key,
        capacity_type=first.capacity_type,
        price_eur_per_hour=first.price_eur_per_hour or 0.0,
        price_source=first.price_source,
        price_as_of=first.price_as_of,
        pods=[names.get(uid, uid) for uid in node.pod_uids],
        requests=node.requests,
        allocatable=node.allocatable,
        fallbacks=[o.key for o in node.offerings[1:]],
    )
