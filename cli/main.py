"""The `cloudburst` app: the short top-level commands here, the others from `cli/commands/`
(one module a command, named after it; see `cli/commands/__init__.py`), each imported only
when it is run, completed or listed by `--help` (`cli/lazy_group.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text
from typer.main import get_command_from_info

from cli.connect import (
    Kubeconfig,
    KubeContext,
    TemporalAddress,
    cli_settings,
    connect_or_exit,
    fail,
)
from cli.lazy_group import LazyGroup
from cli.manifests import Loaded, Problem, load_manifests
from cli.output import stdout_console
from worker.settings import Settings, WorkerQueues

if TYPE_CHECKING:
    # The click typer builds on (its own copy, which it does not re-export).
    from typer._click import Command

# The development harness's commands, of the simulator's distribution (simulator/sim/dev/),
# never the product's: plugged in where it is installed.
SIMULATOR_COMMANDS = {"dev": "sim.dev.commands:dev", "demo": "sim.dev.commands:demo"}


class _CloudburstCommands(LazyGroup):
    """The commands of `cli/commands/`, imported when looked up: a command's dependencies
    (the bootstrap renderer, the activities, the workflows, the Kubernetes and Temporal
    clients) are loaded by the commands that use them, not by every `cloudburst` start.
    `dev` and `demo` are the simulator's where it is installed; elsewhere they say how to
    install it."""

    lazy_commands = {
        "plan": "cli.commands.plan:plan",
        "crds": "cli.commands.crds:crds",
        "config-reference": "cli.commands.config_reference:config_reference",
        "tenant-rbac": "cli.commands.tenant_rbac:tenant_rbac",
        "convert": "cli.commands.convert:convert_command",
        "doctor": "cli.commands.doctor:doctor",
        **SIMULATOR_COMMANDS,
    }
    lazy_groups = {
        "claims": "cli.commands.claims:claims_app",
        "pools": "cli.commands.pools:pools_app",
        "bootstrap": "cli.commands.bootstrap:bootstrap_app",
        "catalog": "cli.commands.catalog:catalog_app",
        "explain": "cli.commands.explain:explain_app",
        "payload-key": "cli.commands.payload_key:payload_key_app",
    }

    def _load(self, name: str) -> Command:
        try:
            return super()._load(name)
        except ModuleNotFoundError as err:
            if name not in SIMULATOR_COMMANDS or (err.name or "").split(".")[0] != "sim":
                raise
        holder = typer.Typer()
        # Whatever options were given (the simulator's), the answer is the same line.
        everything = {"ignore_unknown_options": True, "allow_extra_args": True}
        holder.command(name, context_settings=everything)(_without_the_simulator(name))
        return get_command_from_info(
            holder.registered_commands[0],
            pretty_exceptions_short=self.pretty_exceptions_short,
            rich_markup_mode=self.rich_markup_mode,
        )


app = typer.Typer(
    cls=_CloudburstCommands,
    help="Cloudburst on Temporal: burst Kubernetes nodes onto the cheapest cloud.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _print_version(wanted: bool) -> None:
    if wanted:
        from cli.release import release_info

        info = release_info()
        stdout_console().print(
            f"cloudburst {info.release} (commit {info.commit or 'unknown'})", highlight=False
        )
        raise typer.Exit()


@app.callback()
def _cloudburst(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="print the release and commit, and exit",
        ),
    ] = False,
) -> None:
    """Cloudburst on Temporal: burst Kubernetes nodes onto the cheapest cloud."""


@app.command("version")
def version_command(
    output: Annotated[
        str, typer.Option("--output", "-o", help="text, or json / yaml for scripts")
    ] = "text",
) -> None:
    """The release and the commit it was built from (null where the install recorded none)."""
    from cli.output import OutputFormat, print_data
    from cli.release import release_info

    info = release_info()
    if output in ("json", "yaml"):
        print_data(info.model_dump(mode="json"), OutputFormat(output))
    elif output == "text":
        stdout_console().print(
            f"cloudburst {info.release} (commit {info.commit or 'unknown'})", highlight=False
        )
    else:
        raise fail(f"-o {output!r}: use text, json or yaml")


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
    context: str | None,
    health_port: int | None,
    log_format: str | None,
) -> Settings:
    """Settings of a long-running process, with its logging and telemetry set up."""
    from worker.logs import configure_logging
    from worker.telemetry import setup_telemetry

    settings = cli_settings(temporal_address, kubeconfig, context)
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
    context: KubeContext = None,
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

    settings = _process_settings(
        "worker", temporal_address, kubeconfig, context, health_port, log_format
    )
    if queues is not None:
        settings = settings.model_copy(update={"worker_queues": queues})
    asyncio.run(until_signalled(lambda stop: run_worker(settings, stop)))


@app.command()
def trigger(
    temporal_address: TemporalAddress = None,
    kubeconfig: Kubeconfig = None,
    context: KubeContext = None,
    health_port: HealthPort = None,
    log_format: LogFormat = None,
) -> None:
    """Run the watchers: pending pods -> pool demand; claim nodes and their pods -> claims."""
    from trigger.gauges import serve_cluster_gauges
    from trigger.nodes import NodeWatcher
    from trigger.peers import TriggerPeers, group_label
    from trigger.pending import BatchWindows, PendingPodTrigger
    from worker.client import announce_payload_keys
    from worker.health import serving_health
    from worker.kube_client import kube_api_client

    settings = _process_settings(
        "trigger", temporal_address, kubeconfig, context, health_port, log_format
    )

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
            observes=lambda uid: peers.mine(f"pod/{uid}"),
        )
        serve_cluster_gauges(api_client, peers, pending)
        with serving_health(settings.health_port, client, api_client):
            await asyncio.gather(
                peers.run(stop), NodeWatcher(client, api_client, peers).run(stop), pending.run(stop)
            )

    asyncio.run(until_signalled(main))


@app.command("csr-approver")
def csr_approver(
    kubeconfig: Kubeconfig = None,
    context: KubeContext = None,
    health_port: HealthPort = None,
    log_format: LogFormat = None,
) -> None:
    """Run the CSR approver: approve the kubelet certificates of Cloudburst's claims only,
    forget the Nodes of claims that ended, evict other namespaces' pods from tenant nodes
    (docs/security.md, "Node identity")."""
    from approver.main import approver_loops, running
    from worker.health import serving_kube_health
    from worker.kube_client import kube_api_client

    settings = _process_settings("csr-approver", None, kubeconfig, context, health_port, log_format)
    api_client = kube_api_client(settings)
    loops = approver_loops(api_client, max_expiration_seconds=settings.csr_max_certificate_seconds)

    async def main(stop: asyncio.Event) -> None:
        # At the end the process exits: its loops' threads, blocked in a watch, are not waited.
        with (
            serving_kube_health(settings.health_port, api_client),
            running(loops, stop_within_s=1.0) as stopped,
        ):
            await stop.wait()
            stopped.set()

    asyncio.run(until_signalled(main))


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
        announce_token(path)
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
def validate(
    files: Annotated[
        list[Path] | None, typer.Argument(help="YAML manifests (`-`: standard input)")
    ] = None,
    filenames: Annotated[
        list[Path] | None,
        typer.Option("--filename", "-f", help="YAML manifests, as kubectl's -f (`-`: stdin)"),
    ] = None,
    ignore_unknown: Annotated[
        bool,
        typer.Option(
            "--ignore-unknown",
            help="objects of other groups (a Deployment, Karpenter's NodePool) are listed as "
            "not checked, and do not fail the command",
        ),
    ] = False,
) -> None:
    """Check NodePool/NodeClass/NodeClaim manifests offline; print each problem with its field.

    An object of another group or kind is not checked: it is named, and fails the command
    unless --ignore-unknown (a Karpenter NodePool is one: `cloudburst convert` makes ours)."""
    from cli.karpenter import convertible, is_karpenter

    paths = [*(files or []), *(filenames or [])]
    if not paths:
        raise fail("nothing to validate: give FILE or -f FILE (`-`: standard input)")
    console = stdout_console()
    failed = 0
    for path in paths:
        try:
            loaded = load_manifests(path)
        except Exception as err:  # a bug of ours: still a broken file's verdict, not a traceback
            why = f"could not be checked ({type(err).__name__}): {str(err)[:200]}"
            loaded = Loaded([], [Problem(str(path), "(file)", why)])
        # One line per problem, never wrapped: grep-able, and a field path stays whole.
        for problem in loaded.problems:
            line = Text.assemble(("✗", "red"), f" {problem}")
            console.print(line, highlight=False, soft_wrap=True)
        failed += len(loaded.problems)
        for resource in loaded.resources:
            meta = resource.metadata  # type: ignore[attr-defined]
            kind = resource.kind  # type: ignore[attr-defined]
            line = Text.assemble(("✓", "green"), f" {path}: {kind} {meta.namespace}/{meta.name}")
            console.print(line, highlight=False, soft_wrap=True)
        for other in loaded.others:
            document = {"apiVersion": other.api_version, "kind": other.kind}
            hint = (
                " — try `cloudburst convert`"
                if is_karpenter(document) and convertible(document)
                else ""
            )
            what = f"not a Cloudburst object: {other}{hint}"
            if ignore_unknown:
                line = Text.assemble(("-", "yellow"), f" {other.source}: not checked ({what})")
            else:
                line = Text.assemble(("✗", "red"), f" {other.source}: apiVersion/kind: {what}")
                failed += 1
            console.print(line, highlight=False, soft_wrap=True)
        if loaded.others and (loaded.resources or len(loaded.others) > 1 or loaded.problems):
            checked = len(loaded.resources) + len({p.source for p in loaded.problems})
            console.print(
                Text(
                    f"  {path}: {checked} Cloudburst object(s) checked, "
                    f"{len(loaded.others)} of other groups not checked"
                ),
                highlight=False,
                soft_wrap=True,
            )
    raise typer.Exit(code=1 if failed else 0)


# --- helpers -------------------------------------------------------------------------------


def _without_the_simulator(command: str) -> Callable[[list[str] | None], None]:
    """The command `dev` or `demo` is where the simulator is not installed: one line that
    says how to install it, whatever the arguments."""

    def missing(
        args: Annotated[list[str] | None, typer.Argument(hidden=True)] = None,
    ) -> None:
        raise fail(
            f"`cloudburst {command}` runs on the simulator, which is not installed: "
            "run `make dev` in a checkout of the repository, or `pip install ./simulator` there"
        )

    missing.__doc__ = f"(the simulator's: not installed) `cloudburst {command}`"
    return missing


async def until_signalled(main: object) -> None:
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
