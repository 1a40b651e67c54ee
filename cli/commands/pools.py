"""`cloudburst pools`: NodePool workflows as operators see them (Temporal visibility + query),
with the pods running on each claim's node read from the cluster."""

from __future__ import annotations

import asyncio

import typer
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from pydantic import BaseModel
from rich.text import Text
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode
from urllib3.exceptions import HTTPError

from api.nodepool.messages import PoolStatus, pool_key_of, pool_workflow_id
from cli.connect import (
    AllNamespaces,
    Kubeconfig,
    KubeContext,
    ListNamespace,
    Namespace,
    Selector,
    TemporalAddress,
    answered,
    cli_settings,
    connect_or_exit,
    err_console,
    fail,
    is_unreachable,
    list_namespace,
    run_or_exit,
)
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
from cluster.pods import is_left_alone
from worker.kube_client import kube_api_client
from workflows.nodepool import NodePoolWorkflow

pools_app = typer.Typer(help="Inspect NodePools: nodes, pending demand, disruption budgets.")
# A query waits for a worker to answer it: long enough for a busy one, short for a dead one.
_QUERY_TIMEOUT_S = 10.0

LIST_COLUMNS = ("NAMESPACE", "NAME", "NODES", "READY", "PENDING", "WAITING", "DISRUPTING")
LIST_WIDE_COLUMNS = ("QUEUED", "CPU", "MEMORY", "CONFIG ERROR")


class PoolDescription(BaseModel):
    """`pools describe -o json|yaml`: the pool workflow's status (as its query answers) and
    the pods running on each of its claims' nodes ("namespace/name"; None: not read)."""

    status: PoolStatus
    running_pods: dict[str, list[str]] | None


@pools_app.command("list")
def pools_list(
    output: Output = OutputFormat.TABLE,
    namespace: ListNamespace = None,
    all_namespaces: AllNamespaces = False,
    selector: Selector = None,
    temporal_address: TemporalAddress = None,
    kubeconfig: Kubeconfig = None,
    context: KubeContext = None,
) -> None:
    """NAMESPACE NAME NODES READY PENDING WAITING DISRUPTING for every running pool.

    -o wide adds QUEUED (claims waiting for a disruption budget), CPU, MEMORY, CONFIG ERROR.
    -o json|yaml prints an object with "items", each pool's full status.
    Only the pools of this Cloudburst's task queue; one that does not answer (no worker
    polls it, its workflow task fails) is named on stderr, the others are still listed,
    and the exit code is 1. -n narrows the list to a namespace, -l to the NodePools whose
    labels match (read from the cluster)."""
    from cli.cluster_reads import listed

    settings = cli_settings(temporal_address, kubeconfig, context)
    keep = listed(settings, "nodepools", list_namespace(namespace, all_namespaces), selector)

    async def ask(client: Client, workflow_id: str) -> PoolStatus | str:
        handle = client.get_workflow_handle_for(NodePoolWorkflow.run, workflow_id)
        try:
            return await answered(
                lambda: handle.query(NodePoolWorkflow.status), within_s=_QUERY_TIMEOUT_S
            )
        except TimeoutError:
            return f"{workflow_id}: no answer within {_QUERY_TIMEOUT_S:.0f}s (is a worker running?)"
        except WorkflowQueryFailedError as err:
            return f"{workflow_id}: {err}"
        except RPCError as err:
            if is_unreachable(err):
                raise
            return f"{workflow_id}: {err.message}"

    async def main() -> list[PoolStatus | str]:
        client = await connect_or_exit(settings)
        query = (
            "WorkflowType = 'NodePoolWorkflow' AND ExecutionStatus = 'Running'"
            f" AND TaskQueue = '{settings.task_queue}'"
        )
        ids = [
            execution.id
            async for execution in client.list_workflows(query)
            if (key := pool_key_of(execution.id)) is None or keep(*key)
        ]
        return await asyncio.gather(*(ask(client, workflow_id) for workflow_id in ids))

    answers = run_or_exit(main(), settings)
    statuses = sorted(
        (a for a in answers if isinstance(a, PoolStatus)), key=lambda s: (s.namespace, s.name)
    )
    unanswered = sorted(a for a in answers if isinstance(a, str))
    for problem in unanswered:
        err_console.print(f"error: pool {problem}")
    if output.is_data:
        print_data(items(statuses), output)
    else:
        _print_pools_table(statuses, output == OutputFormat.WIDE)
    if unanswered:
        raise typer.Exit(1)


def _print_pools_table(statuses: list[PoolStatus], wide: bool) -> None:
    table = new_table(*LIST_COLUMNS, *(LIST_WIDE_COLUMNS if wide else ()))
    for status in statuses:
        row = [
            status.namespace,
            status.name,
            str(status.nodes),
            str(status.ready_nodes),
            str(status.pending_pods),
            str(len(status.blocked)),
            str(len(status.permits)),
        ]
        if wide:
            row += [
                str(len(status.disruption_queue)),
                _cpu(status.cpu_m),
                _memory(status.memory_bytes),
                status.config_error or "—",
            ]
        table.add_row(*row)
    print_table(table)


@pools_app.command("describe")
def pools_describe(
    name: str,
    namespace: Namespace = "default",
    output: Output = OutputFormat.TABLE,
    temporal_address: TemporalAddress = None,
    kubeconfig: Kubeconfig = None,
    context: KubeContext = None,
) -> None:
    """Claims, pending pods, budgets, permits in use, and why nodes are not being disrupted.

    PODS: the pods running on the claim's node (read from the cluster; DaemonSet, mirror and
    finished pods left out). NOMINATED: pending pods the pool expects to land there.
    -o wide adds each claim's allocatable CPU and memory, start and replacement.
    -o json|yaml prints the pool's full status and the running pods by claim."""
    settings = cli_settings(temporal_address, kubeconfig, context)

    async def main() -> PoolStatus:
        client = await connect_or_exit(settings)
        handle = client.get_workflow_handle_for(
            NodePoolWorkflow.run, pool_workflow_id(namespace, name)
        )
        try:
            return await answered(lambda: handle.query(NodePoolWorkflow.status))
        except TimeoutError:
            raise fail(f"NodePool {namespace}/{name}: no answer (is a worker running?)") from None
        except WorkflowQueryFailedError as err:
            raise fail(f"NodePool {namespace}/{name}: {err}") from None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                err_console.print(
                    Text.assemble(
                        ("error:", "red"),
                        f" no workflow for NodePool {namespace}/{name} "
                        "(it starts with the first pending pod, or at once with minNodes)",
                    )
                )
                raise typer.Exit(1) from None
            raise

    status = run_or_exit(main(), settings)
    pods: dict[str, list[str]] | None = None
    try:
        pods = running_pods(kube_api_client(settings), [claim.name for claim in status.claims])
    except (ApiException, ConfigException, HTTPError, OSError) as err:
        why = f"{err.status} {err.reason}" if isinstance(err, ApiException) else str(err)
        err_console.print(f"note: pods on the nodes not read from the cluster: {why}")
    if output.is_data:
        print_data(dump(PoolDescription(status=status, running_pods=pods)), output)
        return
    print_pool(status, pods, wide=output == OutputFormat.WIDE)


@pools_app.command("retry")
def pools_retry(
    name: str,
    namespace: Namespace = "default",
    temporal_address: TemporalAddress = None,
) -> None:
    """Try new claims again now, after they failed on the configuration.

    A claim failing on the configuration (a missing Secret, a refused credential) holds the
    pool's new claims back, 30 s doubling to 10 min; a change of the NodePool or NodeClass
    ends the wait. Fixed otherwise (the Secret created), this ends it (a signal)."""
    settings = cli_settings(temporal_address)

    async def main() -> None:
        client = await connect_or_exit(settings)
        handle = client.get_workflow_handle_for(
            NodePoolWorkflow.run, pool_workflow_id(namespace, name)
        )
        try:
            await handle.signal(NodePoolWorkflow.retry_now)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise fail(f"no running workflow for NodePool {namespace}/{name}") from None
            raise

    run_or_exit(main(), settings)
    stdout_console().print(
        Text.assemble(
            ("sent", "green"),
            f": NodePool {namespace}/{name} plans its waiting pods again now",
        )
    )


def running_pods(api_client: k8s.ApiClient, nodes: list[str]) -> dict[str, list[str]]:
    """node -> "namespace/name" of the pods that run there and make it busy: as a drain
    counts them, without DaemonSet, mirror and finished pods. A claim's node bears its name."""
    core = k8s.CoreV1Api(api_client)
    found: dict[str, list[str]] = {}
    for node in nodes:
        listing = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        found[node] = sorted(
            f"{meta.namespace}/{meta.name}"
            for pod in listing.items
            if not is_left_alone(pod) and (meta := pod.metadata) is not None
        )
    return found


def print_pool(status: PoolStatus, pods: dict[str, list[str]] | None, *, wide: bool) -> None:
    """`pools describe` for a person."""
    console = stdout_console()
    console.print(f"NodePool {status.namespace}/{status.name}", style="bold")
    console.print(
        f"  Nodes {status.nodes} ({status.ready_nodes} Ready) · pending pods "
        f"{status.pending_pods} · cpu {_cpu(status.cpu_m)} · memory {_memory(status.memory_bytes)}"
    )
    if status.config_error:
        console.print(f"  New claims held back: {status.config_error}")
        until = status.config_retry_at
        again = f"tried again at {until.astimezone():%H:%M:%S}" if until else "tried again"
        console.print(
            f"  ({again}; at once when the NodePool or NodeClass changes, or with "
            f"`cloudburst pools retry {status.name} --namespace {status.namespace}`)"
        )
    columns = ["CLAIM", "PHASE", "OFFERING", "PODS", "NOMINATED"]
    if wide:
        columns += ["CPU", "MEMORY", "STARTED", "REPLACES", "REPLACED BY"]
    claims = new_table(*columns, title="Claims")
    for claim in status.claims:
        running = pods.get(claim.name) if pods is not None else None
        row = [
            claim.name,
            claim.phase.value,
            claim.offering.key,
            str(len(running)) if running is not None else "?",
            str(len(claim.nominated)),
        ]
        if wide:
            row += [
                _cpu(claim.allocatable.cpu_m),
                _memory(claim.allocatable.memory_bytes),
                claim.started_at.astimezone().strftime("%Y-%m-%d %H:%M:%S"),
                claim.replaces or "—",
                claim.replaced_by or "—",
            ]
        claims.add_row(*row)
    print_table(claims)
    budgets = new_table("NODES", "REASONS", "SCHEDULE", "DURATION", "ACTIVE", title="Budgets")
    for budget in status.budgets:
        budgets.add_row(
            budget.nodes,
            ", ".join(budget.reasons) if budget.reasons else "all",
            budget.schedule or "always",
            budget.duration or "—",
            "yes" if budget.active else "no",
        )
    print_table(budgets)
    allowed = ", ".join(f"{k}={v}" for k, v in status.disruptions_allowed.items())
    console.print(f"  Disruptions allowed now: {allowed}")
    for claim_name, reason in status.permits.items():
        console.print(f"  permit in use: {claim_name} ({reason})")
    for claim_name, reason in status.disruption_queue.items():
        console.print(f"  waiting for a budget: {claim_name} ({reason})")
    for claim_name, reason in status.disruption_blocked.items():
        console.print(f"  not disrupted: {claim_name} — {reason}")
    for uid, reason in status.blocked.items():
        console.print(f"  pod {uid} waits: {reason}")
    for offering, until in status.failed_offerings.items():
        console.print(f"  skipping {offering} until {until:%H:%M:%S}")


def _cpu(millicores: int) -> str:
    return f"{millicores / 1000:g}"


def _memory(size: int) -> str:
    return f"{size / 2**30:g}Gi"
