"""Local stand-ins of the real clouds' APIs, one module per cloud (`sim/clouds/<provider>.py`).

Each is a stateful HTTP fake of the subset of its cloud's API that
`activities/providers/<provider>.py` calls, with in-process failure injection, and a
`BootableCloud` (see `sim/clouds/base.py`) so that the simulated kubelets boot its VMs.
Modules load lazily: `standin_module("hetzner")`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sim.clouds.base import (
    FAILURE_KINDS,
    BootableCloud,
    Failures,
    FakeCloudBootable,
    Request,
    Response,
    StandinHTTPServer,
    as_bootable,
)

# Every cloud a stand-in is planned for (EC2's is moto, wrapped in sim/clouds/aws.py; Redfish's
# is sushy-tools' emulator, bridged to the kubelets by sim/clouds/redfish.py).
KNOWN_STANDINS = (
    "hetzner",
    "scaleway",
    "aws",
    "gcp",
    "azure",
    "digitalocean",
    "ovh",
    "proxmox",
    "redfish",
)


class StandinMissingError(LookupError):
    """No stand-in module for that cloud (yet)."""


def standin_module(provider: str) -> ModuleType:
    """`sim.clouds.<provider>`, imported on first use; StandinMissingError when absent."""
    if provider not in KNOWN_STANDINS:
        raise StandinMissingError(f"no stand-in is planned for {provider!r}")
    name = f"sim.clouds.{provider}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name in (name, "sim.clouds"):
            raise StandinMissingError(
                f"the {provider} stand-in ({name}) does not exist yet"
            ) from exc
        raise


def available_standins() -> list[str]:
    """The planned stand-ins whose module exists (its SDK-free import is not attempted)."""
    import importlib.util

    return [p for p in KNOWN_STANDINS if importlib.util.find_spec(f"sim.clouds.{p}") is not None]


__all__ = [
    "FAILURE_KINDS",
    "KNOWN_STANDINS",
    "BootableCloud",
    "Failures",
    "FakeCloudBootable",
    "Request",
    "Response",
    "StandinHTTPServer",
    "StandinMissingError",
    "as_bootable",
    "available_standins",
    "standin_module",
]
