"""The `cloudburst` command."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from api import NodeClaimStatus, search_attributes
from api.messages import ScaleDownRequest, ScaleDownResult, claim_workflow_id
from cli.bootstrap_cmd import bootstrap_app
from cli.claims import (
    ClaimError,
    build_claim,
    check_offering,
    load_pool,
    new_claim_name,
    parse_offering,
    start_claim,
)
from cli.manifests import load_manifests
from cli.pools_cmd import pools_app
from worker.client import connect_temporal, kube_api_client
from worker.settings import Settings
from workflows.nodeclaim import NodeClaimWorkflow

app = typer.Typer(
    help="Cloudburst on Temporal: burst Kubernetes nodes onto the cheapest cloud.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
claims_app = typer.Typer(help="Inspect and steer NodeClaims (one workflow per node).")
app.add_typer(claims_app, name="claims")
app.add_typer(pools_app, name="pools")
app.add_typer(bootstrap_app, name="bootstrap")

console = Console()
err_console = Console(stderr=True)

TemporalAddress = Annotated[
    str | None, typer.Option("--temporal-address", help="host:port of the Temporal frontend")
]
Kubeconfig = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="kubeconfig (default: $KUBECONFIG or in-cluster)"),
]


def _settings(temporal_address: str | None = None, kubeconfig: Path | None = None) -> Settings:
    settings = Settings()
    updates: dict[str, object] = {}
    if temporal_address:
        updates["temporal_address"] = temporal_address
    if kubeconfig:
        updates["kubeconfig"] = kubeconfig
    return settings.model_copy(update=updates)


def _logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("temporalio").setLevel(logging.WARNING)


def _fail(message: str) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {message}")
    return typer.Exit(code=1)


async def _temporal(settings: Settings) -> Client:
    try:
        return await connect_temporal(settings)
    except RuntimeError as err:
        raise _fail(
            f"cannot reach Temporal at {settings.temporal_address} ({err}); "
            "is `cloudburst dev` or your Temporal server running?"
        ) from None


# --- processes -----------------------------------------------------------------------------


@app.command()
def worker(temporal_address: TemporalAddress = None, kubeconfig: Kubeconfig = None) -> None:
    """Run the worker: NodeClaim workflows and their activities."""
    from worker.main import run_worker

    _logging()
    asyncio.run(
        _until_signalled(lambda stop: run_worker(_settings(temporal_address, kubeconfig), stop))
    )


@app.command()
def trigger(temporal_address: TemporalAddress = None, kubeconfig: Kubeconfig = None) -> None:
    """Run the watchers: pending pods -> pool demand; claim nodes and their pods -> claims."""
    from trigger.nodes import NodeWatcher
    from trigger.pending import PendingPodTrigger

    _logging()
    settings = _settings(temporal_address, kubeconfig)

    async def main(stop: asyncio.Event) -> None:
        client = await _temporal(settings)
        api_client = kube_api_client(settings)
        pending = PendingPodTrigger(
            client, api_client, task_queue=settings.task_queue, cluster_id=settings.cluster_id
        )
        await asyncio.gather(NodeWatcher(client, api_client).run(stop), pending.run(stop))

    asyncio.run(_until_signalled(main))


@app.command()
def dev(
    state_dir: Annotated[
        Path, typer.Option(help="where Temporal's db and the kubeconfig live")
    ] = Path(".cloudburst/dev"),
    port: Annotated[int, typer.Option(help="Temporal gRPC port")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Temporal Web UI port")] = 8233,
    empty_ttl: Annotated[int, typer.Option(help="sample pool's ttlSecondsAfterEmpty")] = 30,
    kube_port: Annotated[int, typer.Option(help="simulated Kubernetes API port")] = 16443,
    cloud_port: Annotated[int, typer.Option(help="fake cloud API port")] = 18788,
) -> None:
    """Run the embedded stack: Temporal + Web UI, simulated cluster, worker, watcher."""
    from cli.devstack import SAMPLE_POOL, StackOptions, cheapest_offering, embedded_stack

    _logging()
    options = StackOptions(
        state_dir=state_dir.resolve(),
        temporal_port=port,
        ui_port=ui_port,
        empty_ttl_s=empty_ttl,
        kube_port=kube_port,
        cloud_port=cloud_port,
    )

    async def main(stop: asyncio.Event) -> None:
        async with embedded_stack(options) as stack:
            kubeconfig = stack.kubeconfig
            offering = cheapest_offering(stack.cluster).key
            console.print(
                f"""
[bold green]Cloudburst embedded stack is up[/bold green]
  Temporal Web UI   http://127.0.0.1:{ui_port}  (claims: WorkflowType = "NodeClaimWorkflow")
  Temporal gRPC     127.0.0.1:{port}
  Kubernetes API    {stack.cluster.kube_url}   (kubeconfig: {kubeconfig})
  Fake cloud API    {stack.cluster.cloud_url}
  Sample NodePool   default/{SAMPLE_POOL} (fake provider, empty TTL {empty_ttl}s)

Try, in another shell:
  export KUBECONFIG={kubeconfig}
  .venv/bin/cloudburst claims create --pool {SAMPLE_POOL} --offering {offering}
  .venv/bin/cloudburst claims list
  .venv/bin/cloudburst claims describe <NAME>
  .venv/bin/cloudburst claims scale-down <NAME> --reason "trying it out"
  kubectl get nodes -L cloudburst.io/nodeclaim
Press Ctrl-C to stop.
""",
                soft_wrap=True,
            )
            await stop.wait()

    asyncio.run(_until_signalled(main))


@app.command()
def demo(
    scenario: Annotated[str, typer.Option(help="lifecycle | burst")] = "lifecycle",
    pods: Annotated[int, typer.Option(help="burst: how many pending pods")] = 20,
    json_output: Annotated[bool, typer.Option("--json", help="last line: one JSON object")] = False,
) -> None:
    """Run a scenario end to end on the embedded stack; exit 0 only if everything held."""
    from cli.demo import BurstReport, LifecycleReport, run_burst, run_lifecycle

    if scenario not in ("lifecycle", "burst"):
        raise _fail(f"unknown scenario {scenario!r}; available: lifecycle, burst")
    logging.basicConfig(level=logging.WARNING)

    def say(text: str) -> None:
        (err_console if json_output else console).print(f"• {text}")

    report: LifecycleReport | BurstReport
    if scenario == "lifecycle":
        report = asyncio.run(run_lifecycle(say))
    else:
        report = asyncio.run(run_burst(say, pods))
    if json_output:
        print(json.dumps(report.as_dict()))
    else:
        for problem in report.problems:
            console.print(f"[red]✗ {problem}[/red]")
        verdict = f"{scenario} held" if report.ok else f"{scenario} failed"
        console.print(f"[green]✓ {verdict}[/green]" if report.ok else f"[red]✗ {verdict}[/red]")
    raise typer.Exit(code=0 if report.ok else 1)


@app.command()
def validate(files: Annotated[list[Path], typer.Argument(help="YAML manifests")]) -> None:
    """Check NodePool/NodeClass/NodeClaim manifests offline; print each problem with its field."""
    problems = 0
    for path in files:
        loaded = load_manifests(path)
        for problem in loaded.problems:
            console.print(f"[red]✗[/red] {problem}", highlight=False)
        problems += len(loaded.problems)
        for resource in loaded.resources:
            meta = resource.metadata  # type: ignore[attr-defined]
            kind = resource.kind  # type: ignore[attr-defined]
            console.print(
                f"[green]✓[/green] {path}: {kind} {meta.namespace}/{meta.name}", highlight=False
            )
    raise typer.Exit(code=1 if problems else 0)


# --- claims --------------------------------------------------------------------------------


@claims_app.command("create")
def claims_create(
    pool: Annotated[str, typer.Option(help="NodePool name")],
    offering: Annotated[
        list[str], typer.Option(help="PROVIDER/REGION/INSTANCE-TYPE; repeat to rank fallbacks")
    ],
    namespace: Annotated[str, typer.Option(help="namespace of the NodePool")] = "default",
    name: Annotated[str | None, typer.Option(help="claim name (default: <pool>-<random>)")] = None,
    temporal_address: TemporalAddress = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Create a NodeClaim by hand: one node of the given offering for the pool."""
    settings = _settings(temporal_address, kubeconfig)
    try:
        offerings = [parse_offering(text) for text in offering]
        context = load_pool(kube_api_client(settings), namespace, pool)
        for candidate in offerings:
            check_offering(context, candidate)
    except ClaimError as err:
        raise _fail(str(err)) from None
    claim = build_claim(context, offerings, name or new_claim_name(pool))

    async def main() -> None:
        client = await _temporal(settings)
        await start_claim(
            client, context, claim, task_queue=settings.task_queue, cluster_id=settings.cluster_id
        )

    try:
        asyncio.run(main())
    except RPCError as err:
        if err.status == RPCStatusCode.ALREADY_EXISTS:
            raise _fail(f"a NodeClaim named {claim.metadata.name} already exists") from None
        raise
    console.print(
        f"NodeClaim [bold]{claim.metadata.name}[/bold] started "
        f"(workflow {claim_workflow_id(claim.metadata.name)})"
    )


@claims_app.command("list")
def claims_list(
    pool: Annotated[str | None, typer.Option(help="only this NodePool")] = None,
    all_claims: Annotated[
        bool, typer.Option("--all", help="include Deleted/Failed claims")
    ] = False,
    temporal_address: TemporalAddress = None,
) -> None:
    """NAME NODEPOOL PROVIDER REGION INSTANCE PHASE AGE, from Temporal visibility."""
    settings = _settings(temporal_address)
    query = "WorkflowType = 'NodeClaimWorkflow'"
    if pool:
        query += f" AND CloudburstNodePool = '{pool}'"
    if not all_claims:
        query += " AND ExecutionStatus = 'Running'"

    async def main() -> Table:
        client = await _temporal(settings)
        table = Table(
            "NAME", "NODEPOOL", "PROVIDER", "REGION", "INSTANCE", "PHASE", "AGE", box=None
        )
        async for execution in client.list_workflows(query):
            attrs = execution.typed_search_attributes
            table.add_row(
                execution.id.removeprefix("nodeclaim-"),
                attrs.get(search_attributes.NODE_POOL) or "",
                attrs.get(search_attributes.PROVIDER) or "",
                attrs.get(search_attributes.REGION) or "",
                attrs.get(search_attributes.INSTANCE_TYPE) or "",
                attrs.get(search_attributes.PHASE) or "",
                _age(execution.start_time),
            )
        return table

    console.print(asyncio.run(main()))


@claims_app.command("describe")
def claims_describe(name: str, temporal_address: TemporalAddress = None) -> None:
    """Phase, offering, instance, node and conditions of one claim."""
    settings = _settings(temporal_address)

    async def main() -> tuple[NodeClaimStatus, WorkflowExecutionStatus | None]:
        client = await _temporal(settings)
        handle = client.get_workflow_handle_for(NodeClaimWorkflow.run, claim_workflow_id(name))
        try:
            description = await handle.describe()
            status = await handle.query(NodeClaimWorkflow.status)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise _fail(f"no NodeClaim named {name}") from None
            raise
        return status, description.status

    status, execution = asyncio.run(main())
    console.print(
        f"[bold]NodeClaim {name}[/bold]  workflow {claim_workflow_id(name)} ({execution.name if execution else '?'})"
    )
    rows = [
        ("Phase", status.phase.value),
        (
            "Provider",
            f"{status.provider or '—'} / {status.region or '—'} / {status.instance_type or '—'}",
        ),
        ("Price", f"€{status.price_eur_per_hour:.4f}/h" if status.price_eur_per_hour else "—"),
        ("Instance", status.instance_id or "—"),
        ("Node", status.node_name or "—"),
        ("Capacity", ", ".join(f"{k}={v}" for k, v in status.capacity.items()) or "—"),
    ]
    if status.failure_message:
        rows.append(("Failure", f"{status.failure_reason}: {status.failure_message}"))
    if status.deletion_reason:
        rows.append(("Deletion reason", status.deletion_reason))
    for key, value in rows:
        console.print(f"  {key:<16}{value}", highlight=False)
    table = Table("TYPE", "STATUS", "REASON", "MESSAGE", "SINCE", box=None)
    for condition in status.conditions:
        table.add_row(
            condition.type,
            condition.status,
            condition.reason,
            condition.message,
            condition.last_transition_time.strftime("%Y-%m-%d %H:%M:%S"),
        )
    console.print(table)


@claims_app.command("scale-down")
def claims_scale_down(
    name: str,
    reason: Annotated[str, typer.Option(help="why; recorded on the claim")] = "Manual",
    force: Annotated[
        bool, typer.Option(help="skip the pool's disruption budgets and do-not-disrupt pods")
    ] = False,
    temporal_address: TemporalAddress = None,
) -> None:
    """Drain and delete a claim's node (an update: answered accepted/rejected).

    A pool's claim waits for a disruption permit within the pool's budgets unless --force."""
    settings = _settings(temporal_address)

    async def main() -> ScaleDownResult:
        client = await _temporal(settings)
        handle = client.get_workflow_handle_for(NodeClaimWorkflow.run, claim_workflow_id(name))
        try:
            return await handle.execute_update(
                NodeClaimWorkflow.request_scale_down, ScaleDownRequest(reason=reason, force=force)
            )
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            message = getattr(cause, "message", None) or str(cause)
            return ScaleDownResult(accepted=False, reason=message)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise _fail(f"no running NodeClaim named {name}") from None
            raise

    result = asyncio.run(main())
    if not result.accepted:
        raise _fail(f"scale-down rejected: {result.reason}")
    console.print(f"[green]accepted[/green]: {result.reason}")


# --- helpers -------------------------------------------------------------------------------


async def _until_signalled(main: object) -> None:
    """Run `main(stop)` until SIGINT/SIGTERM sets `stop` (graceful shutdown for every process)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await main(stop)  # type: ignore[operator]


def _age(start: datetime) -> str:
    seconds = int((datetime.now(UTC) - start).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


if __name__ == "__main__":
    sys.exit(app())
