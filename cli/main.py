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
from rich.live import Live
from rich.table import Table
from rich.text import Text
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from api import NodeClaimStatus, search_attributes
from api.messages import ScaleDownRequest, ScaleDownResult, claim_workflow_id
from cli.bootstrap_cmd import bootstrap_app
from cli.catalog_cmd import catalog_app
from cli.claims import (
    ClaimError,
    build_claim,
    check_offering,
    load_pool,
    new_claim_name,
    parse_offering,
    start_claim,
)
from cli.connect import connect_or_exit, run_or_exit
from cli.crds_cmd import crds
from cli.manifests import Loaded, Problem, load_manifests
from cli.pools_cmd import pools_app
from cli.timeline import PhaseSpan, format_duration, phase_timeline
from worker.client import kube_api_client
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
app.add_typer(catalog_app, name="catalog")
app.command("crds")(crds)

# Markup off: names, messages and manifests are user text, never rich markup ("[/red]" in a
# value must print as it is). Styles are given as `style=` or `Text` instead.
console = Console(markup=False)
err_console = Console(stderr=True, markup=False)

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
    err_console.print(Text.assemble(("error:", "red"), f" {message}"), highlight=False)
    return typer.Exit(code=1)


async def _temporal(settings: Settings) -> Client:
    return await connect_or_exit(settings)


HealthPort = Annotated[
    int | None,
    typer.Option(
        help="port of /healthz and /readyz (default $CLOUDBURST_HEALTH_PORT or 8081; 0: off)"
    ),
]
LogFormat = Annotated[
    str | None, typer.Option(help="text | json (default $CLOUDBURST_LOG_FORMAT or text)")
]


def _process_settings(
    component: str,
    temporal_address: str | None,
    kubeconfig: Path | None,
    health_port: int | None,
    log_format: str | None,
) -> Settings:
    """Settings of a long-running process, with its logging and telemetry set up."""
    from worker.logs import configure_logging
    from worker.telemetry import setup_telemetry

    settings = _settings(temporal_address, kubeconfig)
    updates: dict[str, object] = {}
    if health_port is not None:
        updates["health_port"] = health_port
    if log_format is not None:
        if log_format not in ("text", "json"):
            raise _fail(f"--log-format {log_format!r}: use text or json")
        updates["log_format"] = log_format
    settings = settings.model_copy(update=updates)
    configure_logging(settings.log_format, settings.log_level)
    setup_telemetry(
        service_name=f"cloudburst-{component}",
        metrics_port=settings.metrics_port,
        sdk_metrics_port=settings.sdk_metrics_port,
        tracing=settings.tracing,
    )
    return settings


# --- processes -----------------------------------------------------------------------------


@app.command()
def worker(
    temporal_address: TemporalAddress = None,
    kubeconfig: Kubeconfig = None,
    health_port: HealthPort = None,
    log_format: LogFormat = None,
) -> None:
    """Run the worker: NodeClaim workflows and their activities."""
    from worker.main import run_worker

    settings = _process_settings("worker", temporal_address, kubeconfig, health_port, log_format)
    asyncio.run(_until_signalled(lambda stop: run_worker(settings, stop)))


@app.command()
def trigger(
    temporal_address: TemporalAddress = None,
    kubeconfig: Kubeconfig = None,
    health_port: HealthPort = None,
    log_format: LogFormat = None,
) -> None:
    """Run the watchers: pending pods -> pool demand; claim nodes and their pods -> claims."""
    from trigger.nodes import NodeWatcher
    from trigger.pending import PendingPodTrigger
    from worker.health import serving_health

    settings = _process_settings("trigger", temporal_address, kubeconfig, health_port, log_format)

    async def main(stop: asyncio.Event) -> None:
        client = await _temporal(settings)
        api_client = kube_api_client(settings)
        pending = PendingPodTrigger(
            client, api_client, task_queue=settings.task_queue, cluster_id=settings.cluster_id
        )
        with serving_health(settings.health_port, client, api_client):
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
    clouds: Annotated[
        str,
        typer.Option(
            help="local stand-ins of real clouds to add, comma-separated "
            "(hetzner,scaleway,aws,gcp,azure,digitalocean,ovh); the fake cloud is always there"
        ),
    ] = "",
) -> None:
    """Run the embedded stack: Temporal + Web UI, simulated cluster, worker, watcher."""
    from cli.devstack import (
        SAMPLE_POOL,
        StackOptions,
        cheapest_offering,
        embedded_stack,
        standin_offering,
    )
    from sim.clouds import KNOWN_STANDINS

    _logging()
    wanted = [c.strip() for c in clouds.split(",") if c.strip() and c.strip() != "fake"]
    unknown = [c for c in wanted if c not in KNOWN_STANDINS]
    if unknown:
        raise _fail(
            f"unknown cloud(s) {', '.join(unknown)}; choose from {', '.join(KNOWN_STANDINS)}"
        )
    options = StackOptions(
        state_dir=state_dir.resolve(),
        temporal_port=port,
        ui_port=ui_port,
        empty_ttl_s=empty_ttl,
        kube_port=kube_port,
        cloud_port=cloud_port,
        clouds=wanted,
        missing_standins="skip",
    )

    async def main(stop: asyncio.Event) -> None:
        async with embedded_stack(options) as stack:
            kubeconfig = stack.kubeconfig
            offering = cheapest_offering(stack.cluster).key
            providers = ", ".join(stack.cluster.standins)
            standin_lines = ""
            for name, handle in stack.cluster.standins.items():
                if name == "fake":
                    continue
                try:
                    hint = f"   (try --offering {standin_offering(stack.cluster, name).key})"
                except Exception as err:  # only a hint
                    hint = f"   (no offering found: {err})"
                standin_lines += f"\n  {name + ' API':<17} {handle.endpoint}{hint}"
            for name, why in stack.cluster.missing_standins.items():
                err_console.print(f"! {name} left out: {why}", style="yellow")
            console.print("\nCloudburst embedded stack is up", style="bold green")
            console.print(
                f"""  Temporal Web UI   http://127.0.0.1:{ui_port}  (claims: WorkflowType = "NodeClaimWorkflow")
  Temporal gRPC     127.0.0.1:{port}
  Kubernetes API    {stack.cluster.kube_url}   (kubeconfig: {kubeconfig})
  Fake cloud API    {stack.cluster.cloud_url}{standin_lines}
  Sample NodePool   default/{SAMPLE_POOL} (providers: {providers}; empty TTL {empty_ttl}s)

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
    scenario: Annotated[str, typer.Option(help="lifecycle | burst | dr")] = "lifecycle",
    pods: Annotated[int, typer.Option(help="burst: how many pending pods")] = 20,
    json_output: Annotated[bool, typer.Option("--json", help="last line: one JSON object")] = False,
    provider: Annotated[
        str,
        typer.Option(
            help="lifecycle: the provider module to run it through, against its local "
            "stand-in (fake, hetzner, scaleway, aws, gcp, azure, digitalocean, ovh)"
        ),
    ] = "fake",
) -> None:
    """Run a scenario end to end on the embedded stack; exit 0 only if everything held."""
    from activities.providers import supported_providers
    from cli.demo import BurstReport, LifecycleReport, run_burst, run_lifecycle
    from cli.dr import DrReport, run_dr
    from sim.clouds import StandinMissingError, standin_module

    if scenario not in ("lifecycle", "burst", "dr"):
        raise _fail(f"unknown scenario {scenario!r}; available: lifecycle, burst, dr")
    if provider != "fake":
        if scenario != "lifecycle":
            raise _fail("--provider applies to the lifecycle scenario")
        if provider not in supported_providers():
            raise _fail(
                f"unknown provider {provider!r}; available: {', '.join(supported_providers())}"
            )
        try:
            standin_module(provider)
        except StandinMissingError as err:
            raise _fail(str(err)) from None
    logging.basicConfig(level=logging.WARNING)
    # Activity failures the scenario provokes (a 503, a lost node) are expected, not news.
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)
    logging.getLogger("urllib3").setLevel(logging.ERROR)

    def say(text: str) -> None:
        (err_console if json_output else console).print(f"• {text}")

    report: LifecycleReport | BurstReport | DrReport
    if scenario == "lifecycle":
        report = asyncio.run(run_lifecycle(say, provider=provider))
    elif scenario == "dr":
        report = asyncio.run(run_dr(say))
    else:
        report = asyncio.run(run_burst(say, pods))
    if json_output:
        print(json.dumps(report.as_dict()))
    else:
        for problem in report.problems:
            console.print(f"✗ {problem}", style="red")
        verdict = f"{scenario} held" if report.ok else f"{scenario} failed"
        console.print(
            f"✓ {verdict}" if report.ok else f"✗ {verdict}", style="green" if report.ok else "red"
        )
    raise typer.Exit(code=0 if report.ok else 1)


@app.command()
def validate(files: Annotated[list[Path], typer.Argument(help="YAML manifests")]) -> None:
    """Check NodePool/NodeClass/NodeClaim manifests offline; print each problem with its field."""
    problems = 0
    for path in files:
        try:
            loaded = load_manifests(path)
        except Exception as err:  # a bug of ours: still a broken file's verdict, not a traceback
            why = f"could not be checked ({type(err).__name__}): {str(err)[:200]}"
            loaded = Loaded([], [Problem(str(path), "(file)", why)], 0)
        # One line per problem, never wrapped: grep-able, and a field path stays whole.
        for problem in loaded.problems:
            line = Text.assemble(("✗", "red"), f" {problem}")
            console.print(line, highlight=False, soft_wrap=True)
        problems += len(loaded.problems)
        for resource in loaded.resources:
            meta = resource.metadata  # type: ignore[attr-defined]
            kind = resource.kind  # type: ignore[attr-defined]
            line = Text.assemble(("✓", "green"), f" {path}: {kind} {meta.namespace}/{meta.name}")
            console.print(line, highlight=False, soft_wrap=True)
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
        run_or_exit(main(), settings)
    except RPCError as err:
        if err.status == RPCStatusCode.ALREADY_EXISTS:
            raise _fail(f"a NodeClaim named {claim.metadata.name} already exists") from None
        raise
    console.print(
        Text.assemble(
            "NodeClaim ",
            (claim.metadata.name, "bold"),
            f" started (workflow {claim_workflow_id(claim.metadata.name)})",
        )
    )


@claims_app.command("list")
def claims_list(
    pool: Annotated[str | None, typer.Option(help="only this NodePool")] = None,
    all_claims: Annotated[
        bool, typer.Option("--all", help="include Deleted/Failed claims")
    ] = False,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="keep the table live until Ctrl-C")
    ] = False,
    interval: Annotated[float, typer.Option(help="--watch refresh, seconds")] = 2.0,
    temporal_address: TemporalAddress = None,
) -> None:
    """NAME NODEPOOL PROVIDER REGION INSTANCE PHASE AGE, from Temporal visibility."""
    settings = _settings(temporal_address)
    query = "WorkflowType = 'NodeClaimWorkflow'"
    if pool:
        query += f" AND CloudburstNodePool = '{pool}'"
    if not all_claims:
        query += " AND ExecutionStatus = 'Running'"

    async def claims_table(client: Client) -> Table:
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

    async def main() -> Table | None:
        client = await _temporal(settings)
        if not watch:
            return await claims_table(client)
        with Live(await claims_table(client), console=console, auto_refresh=False) as live:
            while True:
                await asyncio.sleep(interval)
                table = await claims_table(client)
                table.caption = f"every {interval:g}s · {datetime.now():%H:%M:%S} · Ctrl-C to stop"
                live.update(table, refresh=True)

    try:
        table = run_or_exit(main(), settings)
    except KeyboardInterrupt:
        return
    if table is not None:
        console.print(table)


@claims_app.command("describe")
def claims_describe(name: str, temporal_address: TemporalAddress = None) -> None:
    """Phase, offering, instance, node, conditions and the phase timeline of one claim."""
    settings = _settings(temporal_address)

    async def main() -> tuple[NodeClaimStatus, WorkflowExecutionStatus | None, list[PhaseSpan]]:
        client = await _temporal(settings)
        handle = client.get_workflow_handle_for(NodeClaimWorkflow.run, claim_workflow_id(name))
        try:
            description = await handle.describe()
            status = await handle.query(NodeClaimWorkflow.status)
            timeline = await phase_timeline(client, claim_workflow_id(name))
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise _fail(f"no NodeClaim named {name}") from None
            raise
        return status, description.status, timeline

    status, execution, timeline = run_or_exit(main(), settings)
    console.print(
        Text.assemble(
            (f"NodeClaim {name}", "bold"),
            f"  workflow {claim_workflow_id(name)} ({execution.name if execution else '?'})",
        )
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
    console.print(_timeline_table(timeline))


def _timeline_table(timeline: list[PhaseSpan]) -> Table:
    """Each phase with when it began and how long it lasted (the last: so far)."""
    table = Table("PHASE", "SINCE", "DURATION", box=None, title="Timeline", title_justify="left")
    now = datetime.now(UTC)
    for span in timeline:
        lasted = format_duration(span.duration(now))
        table.add_row(
            span.phase,
            span.since.astimezone().strftime("%Y-%m-%d %H:%M:%S"),
            lasted if span.until else f"{lasted} (so far)",
        )
    if timeline:
        end = timeline[-1].until or now
        table.add_row(Text("total", style="bold"), "", format_duration(end - timeline[0].since))
    return table


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

    result = run_or_exit(main(), settings)
    if not result.accepted:
        raise _fail(f"scale-down rejected: {result.reason}")
    console.print(Text.assemble(("accepted", "green"), f": {result.reason}"))


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
