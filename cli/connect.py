"""Reaching Temporal from a CLI command, with one clear message when it cannot be reached."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from worker.client import TemporalConfigError, connect_temporal
from worker.settings import Settings

T = TypeVar("T")
err_console = Console(stderr=True, markup=False)  # messages carry user text

# Status codes that mean "the server is not there (any more)", not "the request was wrong".
_UNREACHABLE = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)


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
    try:
        return await connect_temporal(settings)
    except TemporalConfigError as err:
        raise fail(str(err)) from None
    except RuntimeError as err:
        raise unreachable(settings, err) from None


def run_or_exit(main: Coroutine[Any, Any, T], settings: Settings) -> T:
    """`asyncio.run`, with Temporal going away mid-command reported like a failed connect."""
    try:
        return asyncio.run(main)
    except RPCError as err:
        if err.status in _UNREACHABLE:
            raise unreachable(settings, err.message) from None
        raise
