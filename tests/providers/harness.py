"""What a provider's contract-test harness gives the shared suite (`test_contract.py`).

Each cloud has a module `tests/providers/harness_<provider>.py` with

    @contextlib.contextmanager
    def harness() -> Iterator[ProviderHarness]: ...

that starts the cloud's stand-in, builds the REAL provider module pointed at it (endpoint
settings only) and yields the hooks below; leaving the context stops the stand-in. The suite
finds harness modules by file name, so a new cloud joins by adding its module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from activities.providers.base import Provider


@dataclass
class ProviderHarness:
    provider: Provider  # the real module pointed at the stand-in
    region: str  # an offering the stand-in accepts
    instance_type: str
    inject: Callable[[str], None]  # "capacity"|"quota"|"unavailable"|"throttle"|"auth", next create
    clear: Callable[[], None]
    user_data_of: Callable[[str], str]  # instance id -> user data as the VM received it (decoded)
    created_count: Callable[[str], int]  # claim name -> VMs ever created with that name
    # Optional: the credential the provider was given, so the suite can check that no error
    # message carries it.
    credential: str | None = None


HERE = Path(__file__).parent


def harness_names() -> list[str]:
    """Providers with a harness module here, sorted ("fake", "hetzner", ...)."""
    return sorted(p.stem.removeprefix("harness_") for p in HERE.glob("harness_*.py"))


def harness_module(provider: str) -> object:
    return importlib.import_module(f"tests.providers.harness_{provider}")
