"""`cloudburst explain pod|node|claim`: why a pod waits, why a node stays. Read-only: the
cluster's objects and Events, and the pools' and claims' queries."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from pydantic import ValidationError
from rich.text import Text
from temporalio.client import Client
from temporalio.service import RPCError
from urllib3.exceptions import HTTPError

from api.explain import ClaimView, EventView, NodeExplanation, PodExplanation, PoolPodView
from api.labels import GROUP, NODEPOOL_NAMESPACE
from api.nodeclaim import NodeClaim, NodeClaimStatus
from api.nodepool import NodePool
from api.nodepool.messages import PoolStatus
from cli import cluster_reads as reads
from cli.connect import (
    Kubeconfig,
    KubeContext,
    TemporalAddress,
    cli_settings,
    fail,
    is_unreachable,
)
from cli.output import (
    Output,
    OutputFormat,
    age,
    dump,
    new_table,
    print_data,
    print_table,
    stdout_console,
)
from cluster.matching import match
from cluster.requirements import pod_demand
from explain.common import claim_view, event_views, price_text
from explain.node import explain_node
from explain.pod import explain_pod
from worker.client import TemporalConfigError, connect_temporal
from worker.kube_client import kube_api_client
from worker.settings import Settings

explain_app = typer.Typer(help="Why a pod waits, why a node stays: read-only answers.")

ObjectName = Annotated[str, typer.Argument(help="NAMESPACE/NAME (or NAME with -n)")]
NamespaceOption = Annotated[
    str, typer.Option("--namespace", "-n", help="namespace, when NAME has none")
]


def _split(name: str, namespace: str) -> tuple[str, str]:
    if "/" in name:
        ns, _, rest = name.partition("/")
        if not ns or not rest or "/" in rest:
            raise fail(f"{name!r}: give NAMESPACE/NAME")
        return ns, rest
    return namespace, name


async def _temporal(settings: Settings) -> tuple[Client | None, str | None]:
    """A client, or why there is none: explaining goes on with the cluster's side."""
    try:
        return await connect_temporal(settings), None
    except TemporalConfigError as err:
        raise fail(str(err)) from None
    except RuntimeError as err:
        return None, f"Temporal at {settings.temporal_address} unreachable: {err}"


@explain_app.command("pod")
def explain_pod_command(
    name: ObjectName,
    namespace: NamespaceOption = "default",
    output: Output = OutputFormat.TABLE,
    temporal_address: TemporalAddress = None,
    kubeconfig: Kubeconfig = None,
    context: KubeContext = None,
) -> None:
    """Why the pod waits: every NodePool and why it does or does not take the pod, what the
    chosen pool did with it (the claim it waits for, with offering and price, or why none
    could be planned), and the pod's Events."""
    ns, pod_name = _split(name, namespace)
    settings = cli_settings(temporal_address, kubeconfig, context)
    answer = _run(_explain_pod(settings, ns, pod_name), settings)
    if output.is_data:
        print_data(dump(answer), output)
    else:
        print_pod(answer)


async def _explain_pod(settings: Settings, namespace: str, name: str) -> PodExplanation:
    api_client = _kube(settings)
    core = k8s.CoreV1Api(api_client)
    pod = _read(lambda: core.read_namespaced_pod(name, namespace), f"pod {namespace}/{name}")
    tenancy, _ = reads.deployed_tenancy(core, settings)
    specs = reads.cluster_specs(api_client, tenancy)
    found = match(pod_demand(pod), specs, tenancy, reads.namespace_labels(core, namespace))
    in_pool: PoolPodView | None = None
    unanswered: str | None = None
    claim: ClaimView | None = None
    now = datetime.now(UTC)
    if found.chosen is not None and not pod.spec.node_name:
        client, unanswered = await _temporal(settings)
        if client is not None:
            in_pool, unanswered = await reads.pool_pod_view(
                client, *found.chosen, pod.metadata.uid or ""
            )
            if in_pool is not None and in_pool.nominated_to:
                status, _ = await reads.claim_status(client, found.chosen[0], in_pool.nominated_to)
                if status is not None:
                    claim = claim_view(found.chosen[0], in_pool.nominated_to, status, now)
    node_labels = None
    if pod.spec.node_name:
        node = _maybe(lambda: core.read_node(pod.spec.node_name))
        node_labels = dict((node.metadata.labels if node and node.metadata else None) or {})
    events = reads.events_of(core, "Pod", name, namespace, pod.metadata.uid)
    return explain_pod(
        pod,
        found,
        worker_namespace=tenancy.worker_namespace,
        in_pool=in_pool,
        pool_unanswered=unanswered,
        claim=claim,
        node_labels=node_labels,
        events=event_views(events),
        now=now,
    )


@explain_app.command("node")
def explain_node_command(
    name: Annotated[str, typer.Argument(help="the Node's name (a claim's node bears its name)")],
    output: Output = OutputFormat.TABLE,
    temporal_address: TemporalAddress = None,
    kubeconfig: Kubeconfig = None,
    context: KubeContext = None,
) -> None:
    """Why the node is still here: its claim's phase, the pods on it, the empty-TTL left,
    do-not-disrupt pods, disruption budgets and permits, consolidation's verdict (the
    cheaper replacement it found, or why none fits), drift and expiry."""
    settings = cli_settings(temporal_address, kubeconfig, context)
    answer = _run(_explain_node(settings, name, None), settings)
    _print_node_answer(answer, output)


@explain_app.command("claim")
def explain_claim_command(
    name: ObjectName,
    namespace: NamespaceOption = "default",
    output: Output = OutputFormat.TABLE,
    temporal_address: TemporalAddress = None,
    kubeconfig: Kubeconfig = None,
    context: KubeContext = None,
) -> None:
    """`explain node`, for a NodeClaim named NAMESPACE/NAME (its node bears its name)."""
    ns, claim_name = _split(name, namespace)
    settings = cli_settings(temporal_address, kubeconfig, context)
    answer = _run(_explain_node(settings, claim_name, ns), settings)
    _print_node_answer(answer, output)


def _print_node_answer(answer: NodeExplanation, output: OutputFormat) -> None:
    if output.is_data:
        print_data(dump(answer), output)
    else:
        print_node(answer)


async def _explain_node(settings: Settings, name: str, namespace: str | None) -> NodeExplanation:
    api_client = _kube(settings)
    core = k8s.CoreV1Api(api_client)
    custom = k8s.CustomObjectsApi(api_client)
    node = _maybe(lambda: core.read_node(name))
    if namespace is None and node is not None:
        namespace = ((node.metadata.labels if node.metadata else None) or {}).get(
            NODEPOOL_NAMESPACE
        )
    claim_raw = _find_claim(custom, name, namespace)
    if node is None and claim_raw is None:
        raise fail(f"no Node and no NodeClaim named {name}")
    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items
    events = reads.events_of(core, "Node", name, "default", None)
    now = datetime.now(UTC)
    if claim_raw is None:
        return explain_node(
            name,
            claim=None,
            status=None,
            disruption=None,
            pods=pods,
            pool=None,
            pool_spec=None,
            pool_status=None,
            events=event_views(events),
            now=now,
        )
    claim = _claim_model(claim_raw)
    ns = claim.metadata.namespace
    events += reads.events_of(core, "NodeClaim", name, ns, claim.metadata.uid)
    pool_name = claim.spec.node_pool
    pool_spec = _pool_spec(custom, ns, pool_name)
    status: NodeClaimStatus | None = None
    pool_status: PoolStatus | None = None
    unanswered: str | None = None
    client, unanswered = await _temporal(settings)
    if client is not None:
        status, _ = await reads.claim_status(client, ns, name)
        pool_status, unanswered = await reads.pool_status(client, ns, pool_name)
    status = status or claim.status
    return explain_node(
        name,
        claim=claim_view(ns, name, status, now),
        status=status,
        disruption=claim.spec.disruption,
        pods=pods,
        pool=f"{ns}/{pool_name}",
        pool_spec=pool_spec,
        pool_status=pool_status,
        pool_unanswered=unanswered,
        events=event_views(events),
        now=now,
    )


def _find_claim(
    custom: k8s.CustomObjectsApi, name: str, namespace: str | None
) -> dict[str, Any] | None:
    if namespace:
        found = _maybe(
            lambda: custom.get_namespaced_custom_object(
                GROUP, reads.VERSION, namespace, "nodeclaims", name
            )
        )
        return found if isinstance(found, dict) else None
    listing = custom.list_cluster_custom_object(
        GROUP, reads.VERSION, "nodeclaims", field_selector=f"metadata.name={name}"
    )
    items = (listing.get("items") if isinstance(listing, dict) else None) or []
    matches = [c for c in items if c.get("metadata", {}).get("name") == name]
    if len(matches) > 1:
        spaces = ", ".join(sorted(c["metadata"].get("namespace", "") for c in matches))
        raise fail(f"NodeClaims named {name} in {spaces}: use `explain claim NAMESPACE/{name}`")
    return matches[0] if matches else None


def _claim_model(raw: dict[str, Any]) -> NodeClaim:
    try:
        return NodeClaim.model_validate(raw)
    except ValidationError as err:
        raise fail(f"NodeClaim {raw['metadata'].get('name')} cannot be read: {err}") from None


def _pool_spec(custom: k8s.CustomObjectsApi, namespace: str, name: str) -> Any:
    raw = _maybe(
        lambda: custom.get_namespaced_custom_object(
            GROUP, reads.VERSION, namespace, "nodepools", name
        )
    )
    if not isinstance(raw, dict):
        return None
    try:
        return NodePool.model_validate(raw).spec
    except ValidationError:
        return None


# ---- reading, with clear errors ------------------------------------------------------------


def _kube(settings: Settings) -> k8s.ApiClient:
    try:
        return kube_api_client(settings)
    except (ConfigException, OSError) as err:
        raise fail(f"no cluster to read: {err} (set --kubeconfig or KUBECONFIG)") from None


def _read(call: Any, what: str) -> Any:
    try:
        return call()
    except ApiException as err:
        if err.status == 404:
            raise fail(f"{what} not found") from None
        raise


def _maybe(call: Any) -> Any:
    try:
        return call()
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _run(main: Any, settings: Settings) -> Any:
    try:
        return asyncio.run(main)
    except ApiException as err:
        raise fail(f"the cluster refused: {err.status} {err.reason}") from None
    except (HTTPError, OSError) as err:
        raise fail(f"cannot reach the cluster: {err}") from None
    except RPCError as err:
        if is_unreachable(err):
            raise fail(
                f"Temporal at {settings.temporal_address} went away: {err.message}"
            ) from None
        raise


# ---- printing ------------------------------------------------------------------------------


def print_pod(answer: PodExplanation) -> None:
    console = stdout_console()
    console.print(Text(f"Pod {answer.pod} ({answer.phase})", style="bold"))
    console.print(Text(f"  {answer.summary}"))
    if answer.pools:
        console.print(Text("\nNodePools", style="bold"))
        table = new_table("POOL", "SERVES NAMESPACE", "HOSTS", "WEIGHT", "WHY NOT")
        for v in answer.pools:
            table.add_row(
                v.pool + (" (chosen)" if v.chosen else ""),
                "yes" if v.serves_namespace else "no",
                "yes" if v.hosts else "no",
                str(v.weight),
                v.reason or "—",
            )
        print_table(table)
    else:
        console.print(Text("\nNo NodePool exists in the cluster."))
    view = answer.in_pool
    if view is not None and view.known:
        console.print(Text(f"\nIn NodePool {answer.chosen_pool}", style="bold"))
        if view.nominated_to:
            console.print(Text(f"  nominated to NodeClaim {view.nominated_to}"))
        if view.blocked:
            console.print(Text(f"  waits: {view.blocked}"))
        if view.limits != "pool limits " and view.limits not in (view.blocked or ""):
            console.print(Text(f"  {view.limits}"))
    if answer.pool_unanswered:
        console.print(Text(f"\nThe pool's view: {answer.pool_unanswered}"))
    if answer.claim is not None:
        _print_claim(answer.claim)
    _print_events(answer.events)


def print_node(answer: NodeExplanation) -> None:
    console = stdout_console()
    title = f"Node {answer.node}" + (f" (NodePool {answer.pool})" if answer.pool else "")
    console.print(Text(title, style="bold"))
    console.print(Text(f"  {answer.summary}"))
    if answer.claim is not None:
        _print_claim(answer.claim)
    if answer.blockers:
        console.print(Text("\nWhat keeps it", style="bold"))
        table = new_table("KIND", "WHY")
        for blocker in answer.blockers:
            table.add_row(blocker.kind, blocker.message)
        print_table(table)
    if answer.consolidation and not any(b.kind == "Consolidation" for b in answer.blockers):
        console.print(Text(f"\nConsolidation: {answer.consolidation}"))
    if answer.disruptions_allowed:
        allowed = ", ".join(f"{k} {v}" for k, v in answer.disruptions_allowed.items())
        console.print(Text(f"Disruptions the budgets allow now: {allowed}"))
    if answer.pool_unanswered:
        console.print(Text(f"The pool's view: {answer.pool_unanswered}"))
    _print_events(answer.events)


def _print_claim(claim: ClaimView) -> None:
    console = stdout_console()
    age_text = f", {age_seconds(claim.age_s)} old" if claim.age_s is not None else ""
    console.print(Text(f"\nNodeClaim {claim.namespace}/{claim.name}", style="bold"))
    console.print(Text(f"  {claim.phase}{age_text}"))
    if claim.offering:
        console.print(Text(f"  {claim.offering} {price_text(claim)}"))


def _print_events(events: list[EventView]) -> None:
    console = stdout_console()
    if not events:
        console.print(Text("\nEvents: none"))
        return
    console.print(Text("\nEvents", style="bold"))
    table = new_table("TYPE", "REASON", "AGE", "FROM", "MESSAGE")
    now = datetime.now(UTC)
    for event in events:
        seen = age(now - event.last_seen) if event.last_seen else "?"
        count = f" (x{event.count})" if event.count > 1 else ""
        table.add_row(event.type, event.reason, seen + count, event.source, event.message)
    print_table(table)


def age_seconds(seconds: float) -> str:
    return age(timedelta(seconds=seconds))
