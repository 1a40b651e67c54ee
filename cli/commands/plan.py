"""`cloudburst plan`: the nodes, offerings and hourly cost a pool would launch for some pods,
beside the cheapest one-instance-type plan and the LP lower bound. Nothing is started: the
planner runs here, on the offerings and overheads the worker's planner uses."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from activities.planning.config import PlanningConfig
from api import NodeClass, NodePool
from api.explain import PlanComparison
from api.nodepool import LIVE_CATALOG_PROVIDERS, NodePoolStatus
from api.planning import PlanRequest, PodDemand, Resources, Toleration
from api.quantity import cpu_millis, memory_bytes
from cli.connect import (
    Kubeconfig,
    KubeContext,
    cli_settings,
    err_console,
    fail,
)
from cli.manifests import read_documents
from cli.output import (
    Output,
    OutputFormat,
    dump,
    items,
    new_table,
    print_data,
    print_table,
    stdout_console,
)
from cluster.matching import ClusterSpecs, PoolKey, match
from cluster.tenancy import Tenancy
from explain.plan import Workload, WorkloadError, compare, expand, limits_text
from planner.catalog import Catalog
from planner.node_size import OverheadFn, kube_reserved
from planner.recommend import OFFERING_LIMIT, CatalogRecommender
from worker.settings import Settings

if TYPE_CHECKING:
    from kubernetes import client as k8s

    from activities.kube_reads import KubeReads

# The Kubernetes client, the worker's planning inputs and the LP solver are imported where
# they are used: without a cluster, a plan needs none but the solver. It never asks Temporal.

Files = Annotated[
    list[Path] | None,
    typer.Option(
        "--filename",
        "-f",
        help="YAML: Pods, Deployments, Jobs… (and NodePools, NodeClasses); `-`: standard input",
    ),
]


def plan(
    files: Files = None,
    pool: Annotated[
        str | None, typer.Option(help="NAMESPACE/NAME: plan every pod for this pool")
    ] = None,
    live_prices: Annotated[
        bool,
        typer.Option(
            "--live-prices",
            help="with the prices the worker's scheduled refresh keeps in the cluster "
            "(ConfigMap cloudburst-catalog), as the worker plans; default: the shipped catalog",
        ),
    ] = False,
    from_cluster: Annotated[
        bool, typer.Option("--from-cluster", help="plan the cluster's pending pods now")
    ] = False,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="namespace of objects that name none")
    ] = "default",
    output: Output = OutputFormat.TABLE,
    kubeconfig: Kubeconfig = None,
    context: KubeContext = None,
) -> None:
    """What a pool would launch for the pods, and what it would cost; launches nothing.

    The pods go to the pool the trigger would give them (or all to --pool). Deployments,
    ReplicaSets and StatefulSets count `replicas` pods, Jobs `min(parallelism, completions)`.
    NodePools and NodeClasses in the files are planned as written (over the cluster's of the
    same name). With a cluster, nodes carry the DaemonSets' overhead and the pool's limits
    count what it holds now (its published status); without one, the shipped catalog
    and kube-reserved alone. Compared with the cheapest plan of one instance type and with the
    LP lower bound (no plan of these pods is cheaper)."""
    if not files and not from_cluster:
        raise fail("nothing to plan: give -f FILE or --from-cluster")
    settings = cli_settings(kubeconfig=kubeconfig, context=context)
    workload = _read_files(files or [], namespace)
    answers = _plan(settings, workload, pool, live_prices, from_cluster)
    if output.is_data:
        print_data(items(answers) if len(answers) != 1 else dump(answers[0]), output)
        return
    for note in workload.notes:
        stdout_console().print(Text(f"note: {note}"))
    for answer in answers:
        print_plan(answer)


def _read_files(files: list[Path], namespace: str) -> Workload:
    documents: list[Any] = []
    for path in files:
        found, problem = read_documents(path)
        if problem is not None:
            raise fail(f"{path}: {problem}")
        documents += found
    try:
        return expand(documents, namespace)
    except WorkloadError as err:
        raise fail(str(err)) from None


def _plan(
    settings: Settings, workload: Workload, pool: str | None, live: bool, from_cluster: bool
) -> list[PlanComparison]:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    from activities.kube_reads import KubeReads
    from cli import cluster_reads as reads
    from worker.kube_client import kube_api_client

    tenancy = settings.tenancy()
    api_client: k8s.ApiClient | None = None
    kube: KubeReads | None = None
    notes: list[str] = []
    try:
        api_client = kube_api_client(settings)
        kube = KubeReads(api_client)
        tenancy, _ = reads.deployed_tenancy(kube, settings)
        specs = reads.cluster_specs(api_client, tenancy)
    except (ConfigException, ApiException, HTTPError, OSError) as err:
        if from_cluster or live:
            raise fail(f"cannot read the cluster: {_why(err)}") from None
        api_client = kube = None
        specs = ClusterSpecs()
        notes.append(f"no cluster ({_why(err)}): shipped catalog, kube-reserved only")
    # Before the files' pools replace the cluster's of the same name: what those hold now.
    held = {key: _published_holdings(found) for key, found in specs.pools.items()}
    for raw in workload.classes:
        specs.put(raw, NodeClass, tenancy)
    for raw in workload.pools:
        specs.put(raw, NodePool, tenancy)
    pods = list(workload.pods)
    if kube is not None:
        pods = _as_admitted(kube, pods)
    if from_cluster:
        assert kube is not None
        pods += _pending_pods(kube)
    if not pods:
        where = "in the files" + (" nor pending in the cluster" if from_cluster else "")
        raise fail(f"nothing to plan: no pod {where}")
    groups = _groups(pods, specs, tenancy, pool, kube)
    config = PlanningConfig.from_env()
    catalog = Catalog.load(config.catalog_path)
    prices = f"the shipped catalog of {catalog.header.get('generated', '?')}"
    if live:
        from activities.prices.price_store import live_catalog, read_store

        assert kube is not None
        catalog = live_catalog(catalog, read_store(kube, tenancy.worker_namespace))
        prices = "the cluster's refreshed prices over the shipped catalog"
    if config.cloudbroker_url:
        notes.append("the worker asks CloudBroker for offerings; this plan uses the catalog")
    answers = []
    for key, pool_pods in groups.items():
        answer = _plan_pool(
            key, pool_pods, specs, catalog, config, tenancy, kube, held.get(key), prices
        )
        answer.notes = notes + answer.notes
        answers.append(answer)
    return answers


def _as_admitted(kube: KubeReads, pods: list[PodDemand]) -> list[PodDemand]:
    """The files' pods with the tolerations their namespace's admission gives them (a tenant
    namespace's default toleration of its own nodes' taint: `cloudburst tenant-rbac`), as
    they will be once created: a plan of them is a plan of what the trigger will see."""
    from cli.cluster_reads import namespace_annotations
    from cluster.tenancy import with_default_tolerations

    annotations: dict[str, dict[str, str]] = {}
    admitted = []
    for pod in pods:
        if pod.namespace not in annotations:
            annotations[pod.namespace] = namespace_annotations(kube, pod.namespace)
        written = [t.model_dump(exclude_none=True) for t in pod.tolerations]
        merged = with_default_tolerations(written, annotations[pod.namespace])
        tolerations = [Toleration.model_validate(t) for t in merged]
        admitted.append(pod.model_copy(update={"tolerations": tolerations}))
    return admitted


def _groups(
    pods: list[PodDemand],
    specs: ClusterSpecs,
    tenancy: Tenancy,
    pool: str | None,
    kube: KubeReads | None,
) -> dict[PoolKey, list[PodDemand]]:
    """Pods by the pool that would plan them: --pool for all, else the trigger's choice."""
    from cli.cluster_reads import namespace_labels

    if pool is not None:
        ns, _, name = pool.partition("/")
        key = (ns, name) if name else ("default", ns)
        if key not in specs.pools:
            why = specs.invalid_pools.get(key)
            raise fail(
                f"NodePool {key[0]}/{key[1]} "
                + (
                    f"is not served: {why.message}"
                    if why
                    else "not found (in the cluster or the files)"
                )
            )
        return {key: pods}
    labels: dict[str, dict[str, str] | None] = {}
    groups: dict[PoolKey, list[PodDemand]] = {}
    unmatched: dict[str, list[str]] = {}  # why -> the pods
    for pod in pods:
        if pod.namespace not in labels:
            labels[pod.namespace] = namespace_labels(kube, pod.namespace) if kube else {}
        found = match(pod, specs, tenancy, labels[pod.namespace])
        if found.chosen is None:
            reason = found.reason(pod.namespace, tenancy.worker_namespace)
            unmatched.setdefault(reason, []).append(f"{pod.namespace}/{pod.name}")
        else:
            groups.setdefault(found.chosen, []).append(pod)
    said = [
        f"{len(names)} pods ({', '.join(names[:3])}{', …' if len(names) > 3 else ''}): {reason}"
        for reason, names in unmatched.items()
    ]
    if not groups:
        raise fail("no NodePool takes these pods: " + "; ".join(said))
    for line in said:
        err_console.print(f"note: no NodePool takes {line}")
    return groups


def _plan_pool(
    key: PoolKey,
    pods: list[PodDemand],
    specs: ClusterSpecs,
    catalog: Catalog,
    config: PlanningConfig,
    tenancy: Tenancy,
    kube: KubeReads | None,
    held: tuple[int, int, int] | None,
    prices: str,
) -> PlanComparison:
    class_key = specs.node_class_of(key)
    if class_key is None:
        raise fail(f"NodePool {key[0]}/{key[1]}: {specs.class_problem(key)}")
    node_class = specs.classes[class_key].spec
    node_spec = specs.node_specs[key]
    limits = node_spec.limits
    nodes, cpu_m, memory = held or (0, 0, 0)
    request = PlanRequest(
        pool_name=key[1],
        namespace=key[0],
        pool=node_spec,
        class_providers=node_class.configured_providers(),
        node_class=node_class,
        pods=pods,
        max_new_nodes=None if limits.max_nodes is None else max(0, limits.max_nodes - nodes),
        remaining_cpu_m=None if limits.cpu is None else max(0, cpu_millis(limits.cpu) - cpu_m),
        remaining_memory_bytes=None
        if limits.memory is None
        else max(0, memory_bytes(limits.memory) - memory),
    )
    notes: list[str] = []
    recommender = CatalogRecommender(catalog)
    if kube is not None:
        from activities.planning.inputs import PlanningInputs

        planning = PlanningInputs(kube, lambda: recommender, config, tenancy)
        try:
            offerings, overhead = planning.planning_inputs(request)
        except Exception as err:  # a provider's catalog the cluster cannot give: say so
            raise fail(f"NodePool {key[0]}/{key[1]}: no offerings: {err}") from None
    else:
        offerings, overhead = _catalog_only(request, recommender, notes)
    answer = compare(
        request,
        offerings,
        overhead,
        pool=f"{key[0]}/{key[1]}",
        prices=prices,
        limits=limits_text(limits, held),
        tight_bound=_has_lp_solver(),
    )
    answer.notes = notes
    return answer


def _catalog_only(
    request: PlanRequest, recommender: CatalogRecommender, notes: list[str]
) -> tuple[list[Any], OverheadFn]:
    live = [p for p in request.class_providers if p in LIVE_CATALOG_PROVIDERS]
    if live:
        notes.append(
            f"without a cluster, no offerings of {', '.join(live)} (their catalog is live)"
        )
    smallest = Resources(
        cpu_m=min((p.requests.cpu_m for p in request.pods), default=0),
        memory_bytes=min((p.requests.memory_bytes for p in request.pods), default=0),
    )
    return (
        recommender.recommend(
            smallest, request.pool.requirements, request.class_providers, OFFERING_LIMIT
        ),
        kube_reserved,
    )


def _pending_pods(core: KubeReads) -> list[PodDemand]:
    from cluster.pods import is_unschedulable
    from cluster.requirements import pod_demand

    listing = core.list_pod_for_all_namespaces(field_selector="status.phase=Pending")
    return [pod_demand(pod) for pod in listing.items if is_unschedulable(pod)]


def _published_holdings(pool: NodePool) -> tuple[int, int, int] | None:
    """What a pool holds now (nodes, cpu, memory) as it last published it in its status (what
    `kubectl get nodepool` shows; the pool publishes after each round that changed it); None
    before its first status."""
    if not pool.status:
        return None
    status = NodePoolStatus.model_validate(pool.status)
    return (
        status.nodes,
        cpu_millis(status.resources.cpu or "0"),
        memory_bytes(status.resources.memory or "0"),
    )


def _has_lp_solver() -> bool:
    """Whether the assignment LP bound can be solved here (its solver, HiGHS, comes with the
    dev extra); found without importing it, which only the bound itself does."""
    return importlib.util.find_spec("highspy") is not None


def _why(err: BaseException) -> str:
    from kubernetes.client.exceptions import ApiException

    return f"{err.status} {err.reason}" if isinstance(err, ApiException) else str(err)


def print_plan(answer: PlanComparison) -> None:
    console = stdout_console()
    console.print(
        Text(
            f"NodePool {answer.pool}: {answer.pods} pods, prices from {answer.prices}", style="bold"
        )
    )
    if answer.nodes:
        table = new_table(
            "#", "OFFERING", "CAPACITY", "€/H", "PODS", "CPU", "MEMORY", "PRICE SOURCE"
        )
        for i, node in enumerate(answer.nodes, start=1):
            table.add_row(
                str(i),
                node.offering,
                node.capacity_type,
                f"{node.price_eur_per_hour:.4f}",
                str(len(node.pods)),
                f"{node.requests.cpu_m}m/{node.allocatable.cpu_m}m",
                f"{node.requests.memory_bytes // 2**20}Mi/{node.allocatable.memory_bytes // 2**20}Mi",
                ", ".join(p for p in (node.price_source, node.price_as_of) if p) or "—",
            )
        print_table(table)
    console.print(Text(f"Cost: €{answer.cost_eur_per_hour:.4f}/h for {len(answer.nodes)} nodes"))
    if answer.single_type is not None:
        single = answer.single_type
        ratio = (
            f" ({single.cost_eur_per_hour / answer.cost_eur_per_hour:.2f}x)"
            if answer.cost_eur_per_hour
            else ""
        )
        console.print(
            Text(
                f"One instance type at best: €{single.cost_eur_per_hour:.4f}/h, {single.nodes} x {single.offering}{ratio}"
            )
        )
    elif answer.single_type_note:
        console.print(Text(f"One instance type: {answer.single_type_note}"))
    if answer.lower_bound_eur_per_hour is not None:
        gap = (
            f" (plan is {answer.cost_eur_per_hour / answer.lower_bound_eur_per_hour:.3f}x the bound)"
            if answer.lower_bound_eur_per_hour
            else ""
        )
        console.print(
            Text(
                f"Lower bound: €{answer.lower_bound_eur_per_hour:.4f}/h, {answer.lower_bound_kind}{gap}"
            )
        )
    if answer.limited:
        console.print(
            Text(f"Held back by the limits ({answer.limits}): {len(answer.limited)} pods")
        )
    for pod, why in list(answer.unschedulable.items())[:10]:
        console.print(Text(f"Cannot place {pod}: {why}"))
    for note in answer.notes:
        console.print(Text(f"note: {note}"))
    console.print(
        Text(f"Nothing was launched ({answer.offerings_considered} offerings considered).")
    )
