"""`cloudburst pools`: NodePool workflows as operators see them (Temporal visibility + query)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from api.pool import PoolStatus, pool_workflow_id
from cli.connect import connect_or_exit, run_or_exit
from worker.settings import Settings
from workflows.nodepool import NodePoolWorkflow

pools_app = typer.Typer(help="Inspect NodePools: nodes, pending demand, disruption budgets.")
# Markup off: pool names, reasons and schedules are user text, never rich markup.
console = Console(markup=False)
err_console = Console(stderr=True, markup=False)


@pools_app.command("list")
def pools_list(
    temporal_address: Annotated[str | None, typer.Option(help="host:port of Temporal")] = None,
) -> None:
    """NAME NODES READY PENDING WAITING DISRUPTING for every running pool."""

    async def main() -> list[PoolStatus]:
        client = await _connect(temporal_address)
        statuses = []
        query = "WorkflowType = 'NodePoolWorkflow' AND ExecutionStatus = 'Running'"
        async for execution in client.list_workflows(query):
            handle = client.get_workflow_handle_for(NodePoolWorkflow.run, execution.id)
            statuses.append(await handle.query(NodePoolWorkflow.status))
        return statuses

    table = Table(
        "NAMESPACE", "NAME", "NODES", "READY", "PENDING", "WAITING", "DISRUPTING", box=None
    )
    for status in sorted(
        run_or_exit(main(), _settings(temporal_address)), key=lambda s: (s.namespace, s.name)
    ):
        table.add_row(
            status.namespace,
            status.name,
            str(status.nodes),
            str(status.ready_nodes),
            str(status.pending_pods),
            str(len(status.blocked)),
            str(len(status.permits)),
        )
    console.print(table)


@pools_app.command("describe")
def pools_describe(
    name: str,
    namespace: Annotated[str, typer.Option(help="namespace of the NodePool")] = "default",
    temporal_address: Annotated[str | None, typer.Option(help="host:port of Temporal")] = None,
) -> None:
    """Claims, pending pods, budgets, permits in use, and why nodes are not being disrupted."""

    async def main() -> PoolStatus:
        client = await _connect(temporal_address)
        handle = client.get_workflow_handle_for(
            NodePoolWorkflow.run, pool_workflow_id(namespace, name)
        )
        try:
            return await handle.query(NodePoolWorkflow.status)
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

    status = run_or_exit(main(), _settings(temporal_address))
    console.print(f"NodePool {namespace}/{name}", style="bold")
    console.print(
        f"  Nodes {status.nodes} ({status.ready_nodes} Ready) · pending pods "
        f"{status.pending_pods} · cpu {status.cpu_m / 1000:g} · memory "
        f"{status.memory_bytes / 2**30:g}Gi",
        highlight=False,
    )
    claims = Table("CLAIM", "PHASE", "OFFERING", "PODS", box=None, title="Claims")
    for claim in status.claims:
        claims.add_row(claim.name, claim.phase.value, claim.offering.key, str(len(claim.nominated)))
    console.print(claims)
    budgets = Table("NODES", "REASONS", "SCHEDULE", "DURATION", "ACTIVE", box=None, title="Budgets")
    for budget in status.budgets:
        budgets.add_row(
            budget.nodes,
            ", ".join(budget.reasons) if budget.reasons else "all",
            budget.schedule or "always",
            budget.duration or "—",
            "yes" if budget.active else "no",
        )
    console.print(budgets)
    allowed = ", ".join(f"{k}={v}" for k, v in status.disruptions_allowed.items())
    console.print(f"  Disruptions allowed now: {allowed}", highlight=False)
    for claim_name, reason in status.permits.items():
        console.print(f"  permit in use: {claim_name} ({reason})", highlight=False)
    for claim_name, reason in status.disruption_queue.items():
        console.print(f"  waiting for a budget: {claim_name} ({reason})", highlight=False)
    for claim_name, reason in status.disruption_blocked.items():
        console.print(f"  not disrupted: {claim_name} — {reason}", highlight=False)
    for uid, reason in status.blocked.items():
        console.print(f"  pod {uid} waits: {reason}", highlight=False)
    for offering, until in status.failed_offerings.items():
        console.print(f"  skipping {offering} until {until:%H:%M:%S}", highlight=False)


def _settings(temporal_address: str | None) -> Settings:
    settings = Settings()
    if temporal_address:
        settings = settings.model_copy(update={"temporal_address": temporal_address})
    return settings


async def _connect(temporal_address: str | None) -> Client:
    return await connect_or_exit(_settings(temporal_address))
