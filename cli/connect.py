"""Reaching Temporal from a CLI command, with one clear message when it cannot be reached.

The Temporal client is imported by the functions that reach it, not with this module: every
command imports this one, and some (`plan`, `validate`) never reach it."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from api.errors import QUERY_REFUSED_DURING_TAKEOVER
from worker.settings import Settings

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.service import RPCError

T = TypeVar("T")
# Every command's errors and notes. Markup off: names, messages and manifests are user text,
# never rich markup ("[/red]" in a value must print as it is); styles are given as `style=` or
# `Text` instead. Output goes through `cli.output.stdout_console()`.
err_console = Console(stderr=True, markup=False, emoji=False)

TemporalAddress = Annotated[
    str | None, typer.Option("--temporal-address", help="host:port of the Temporal frontend")
]
# The namespace of the object a command names, as kubectl's -n.
Namespace = Annotated[
    str, typer.Option("--namespace", "-n", help="namespace of the object (as kubectl's -n)")
]
Kubeconfig = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="kubeconfig (default: $KUBECONFIG or in-cluster)"),
]
KubeContext = Annotated[
    str | None,
    typer.Option(
        "--context", help="the kubeconfig context to use (as kubectl's; default: its current)"
    ),
]
# A list command's reach, as kubectl's: every namespace unless -n names one.
AllNamespaces = Annotated[
    bool,
    typer.Option("--all-namespaces", "-A", help="every namespace (the default; as kubectl's -A)"),
]
ListNamespace = Annotated[
    str | None,
    typer.Option("--namespace", "-n", help="only this namespace (default: every one)"),
]
Selector = Annotated[
    str | None,
    typer.Option(
        "--selector",
        "-l",
        help="only objects whose labels match this selector, as kubectl's -l "
        "('team=a,tier!=batch'); read from the cluster",
    ),
]


def is_unreachable(err: RPCError) -> bool:
    """Whether the call's status means "the server is not there (any more)", not "the
    request was wrong"."""
    from temporalio.service import RPCStatusCode

    return err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)


# A worker taking a workflow over refuses a query for a moment (`worker/untaken_events.py`).
_REFUSED_RETRY_S = 1.0


async def answered(ask: Callable[[], Awaitable[T]], within_s: float = 10.0) -> T:
    """A query's answer, asked again while a worker taking the workflow over refuses it."""
    from temporalio.client import WorkflowQueryFailedError

    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        try:
            return await asyncio.wait_for(ask(), timeout=max(deadline - loop.time(), 0.1))
        except WorkflowQueryFailedError as err:
            if (
                str(err) != QUERY_REFUSED_DURING_TAKEOVER
                or loop.time() + _REFUSED_RETRY_S >= deadline
            ):
                raise
        await asyncio.sleep(_REFUSED_RETRY_S)


def cli_settings(
    temporal_address: str | None = None,
    kubeconfig: Path | None = None,
    context: str | None = None,
) -> Settings:
    """Settings from the environment, with a command's --temporal-address / --kubeconfig /
    --context."""
    settings = Settings()
    updates: dict[str, object] = {}
    if temporal_address:
        updates["temporal_address"] = temporal_address
    if kubeconfig:
        updates["kubeconfig"] = kubeconfig
    if context:
        updates["kube_context"] = context
    return settings.model_copy(update=updates)


def list_namespace(namespace: str | None, all_namespaces: bool) -> str | None:
    """The one namespace a list command is narrowed to (None: every one)."""
    if namespace and all_namespaces:
        raise fail("-n/--namespace and -A/--all-namespaces: give one or the other")
    return namespace


def fail(message: str) -> typer.Exit:
    err_console.print(Text.assemble(("error:", "red"), f" {message}"), highlight=False)
    return typer.Exit(code=1)


def unreachable(settings: Settings, cause: object) -> typer.Exit:
    tls = "TLS" if settings.tls_enabled() else "plaintext"
    return fail(
        f"cannot reach Temporal at {settings.temporal_address} (namespace "
        f"{settings.temporal_namespace}, {tls}): {cause}\n"
        "  Is `cloudburst dev` or your Temporal server running? Set the address with "
        "--temporal-address or CLOUDBURST_TEMPORAL_ADDRESS."
    )


async def connect_or_exit(settings: Settings) -> Client:
    from worker.client import TemporalConfigError, connect_temporal

    try:
        return await connect_temporal(settings)
    except TemporalConfigError as err:
        raise fail(str(err)) from None
    except RuntimeError as err:
        raise unreachable(settings, err) from None


def run_or_exit(main: Coroutine[Any, Any, T], settings: Settings) -> T:
    """`asyncio.run`, with Temporal going away mid-command reported like a failed connect."""
    from temporalio.service import RPCError

    try:
        return asyncio.run(main)
    except RPCError as err:
        if is_unreachable(err):
            raise unreachable(settings, err.message) from None
        raise


def stop_on_signals() -> asyncio.Event:
    """An event set by the first SIGINT or SIGTERM; the second cancels the current task (a
    command stuck in a call still ends). For a loop that stops between its calls, never in
    the middle of one. The handlers are the loop's own: they take effect even where the
    process was started with SIGINT ignored (a shell's background job inherits that)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()

    def signalled() -> None:
        if stop.is_set() and task is not None:
            task.cancel()
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, signalled)
    return stop


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less once `stop` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
