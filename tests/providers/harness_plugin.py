"""Contract harness for the `plugin` provider against the reference plug-in of
examples/plugin-provider (the real provider module, over HTTP, to the real server).

`ReferencePlugin` runs that server on a small inventory in a temporary directory, with its
shipped hooks behind a thin wrapper that injects failures the way a machine fails (a
create hook exiting 69 or 75) and counts the machines powered on per claim. It is also a
`BootableCloud` (sim/clouds/base.py) of provider "plugin": given to the simulated kubelets,
a running instance boots from the NoCloud seed the shipped create hook wrote, as the
machine itself would, and its node registers as `plugin:///<region>/<instance id>`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import secrets
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from activities.providers.base import split_instance_id
from activities.providers.plugin import PluginProvider
from api.nodeclass import PluginClass
from tests.providers.harness import ProviderHarness

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugin-provider"
REGION = "lab-1"
INSTANCE_TYPE = "pl-small"
NAMESPACE = "default"
SHAPES = {INSTANCE_TYPE: (2.0, 4.0, "x86_64"), "pl-large": (8.0, 32.0, "x86_64")}

# Stands in front of the shipped hooks: a failure asked for (FAULT_DIR/create) is the
# machine's, by the exit status the reference plug-in maps (69 capacity, 75 retryable); a
# create that went through is counted by claim (FAULT_DIR/created); FAULT_DIR/delete fails the
# next delete.
_CREATE = """#!/bin/sh
set -eu
if [ -f "$FAULT_DIR/create" ]; then
  fault=$(cat "$FAULT_DIR/create")
  rm -f "$FAULT_DIR/create"
  case $fault in
    capacity | quota | unavailable)
      echo "machine $CLOUDBURST_MACHINE_ID did not power on ($fault)" >&2
      exit 69
      ;;
    throttle)
      echo "the power controller is busy" >&2
      exit 75
      ;;
  esac
fi
"$SHIPPED_HOOKS/create"
echo "$CLOUDBURST_CLAIM" >>"$FAULT_DIR/created"
"""
_DELETE = """#!/bin/sh
if [ -f "$FAULT_DIR/delete" ]; then
  rm -f "$FAULT_DIR/delete"
  echo "the BMC of $CLOUDBURST_MACHINE_ID does not answer" >&2
  exit 1
fi
exec "$SHIPPED_HOOKS/delete"
"""


def reference_module() -> ModuleType:
    """examples/plugin-provider/plugin_server.py (not a package: loaded by path)."""
    name = "cloudburst_reference_plugin"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE / "plugin_server.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while it loads
        spec.loader.exec_module(module)
    return sys.modules[name]


def inventory(machines: int, env: dict[str, str]) -> dict[str, Any]:
    return {
        "defaultRegion": REGION,
        "instanceTypes": [
            {"name": n, "vcpu": v, "memoryGiB": m, "arch": a, "priceEurPerHour": 0.001}
            for n, (v, m, a) in SHAPES.items()
        ],
        "machines": [
            {
                "id": f"m-{i:02d}",
                "instanceType": INSTANCE_TYPE,
                "address": f"192.168.77.{i}",
                "env": env,
            }
            for i in range(1, machines + 1)
        ]
        + [{"id": "big-01", "instanceType": "pl-large", "address": "192.168.77.200", "env": env}],
    }


class ReferencePlugin:
    """The reference plug-in, started (`with`), as a provider stand-in and a bootable cloud."""

    provider = "plugin"

    def __init__(
        self,
        root: Path,
        *,
        machines: int = 8,
        token: str | None = None,
        namespace: str = NAMESPACE,
    ) -> None:
        self.root = root
        self.credential = token or secrets.token_hex(16)
        # The namespace its one token serves (the tests' NodeClasses live in "default").
        self.namespace = namespace
        self.seeds = root / "seeds"
        self.faults = root / "faults"
        hooks = root / "hooks"
        for d in (self.seeds, self.faults, hooks):
            d.mkdir(parents=True, exist_ok=True)
        for name, text in (("create", _CREATE), ("delete", _DELETE)):
            (hooks / name).write_text(text)
            (hooks / name).chmod(0o755)
        module = reference_module()
        # The hooks' settings, as an operator gives them in a machine's inventory `env`.
        env = {
            "SEED_DIR": str(self.seeds),
            "FAULT_DIR": str(self.faults),
            "SHIPPED_HOOKS": str(EXAMPLE / "hooks"),
        }
        self.homelab = module.Homelab(
            module.Inventory.from_json(inventory(machines, env)),
            hooks,
            root / "state.json",
            module.Contract.load(),
            hook_timeout_s=20.0,
        )
        self.server = module.PluginServer(self.homelab, tokens={self.namespace: self.credential})

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ReferencePlugin:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> ReferencePlugin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        return str(self.server.url)

    def block(self, secret_name: str, secret_key: str) -> dict[str, Any]:
        """The NodeClass `plugin` block that reaches it with the token from that Secret key."""
        return {
            "endpoint": self.endpoint,
            "region": REGION,
            "tokenSecretRef": {"name": secret_name, "key": secret_key},
        }

    # ---- test controls -------------------------------------------------------------------------

    def inject(self, kind: str) -> None:
        if kind == "auth":
            # The caller's token is now a wrong one.
            self.server.tokens = {self.namespace: secrets.token_hex(16)}
        else:
            (self.faults / "create").write_text(kind)

    def fail_next_delete(self) -> None:
        (self.faults / "delete").write_text("bmc")

    def clear(self) -> None:
        self.server.tokens = {self.namespace: self.credential}
        for op in ("create", "delete"):
            (self.faults / op).unlink(missing_ok=True)

    def created_count(self, name: str) -> int:
        log = self.faults / "created"
        return log.read_text().split().count(name) if log.exists() else 0

    def record(self, native_id: str) -> Any | None:
        return next((r for r in self.homelab.records() if r.id == native_id), None)

    def user_data_of(self, instance_id: str) -> str:
        record = self.record(split_instance_id(instance_id)[2])
        assert record is not None, f"{instance_id} does not exist"
        return (self.seeds / record.machine / "user-data").read_text()

    # ---- BootableCloud: the machines as the simulated kubelets see them -----------------------

    def instance_states(self) -> dict[str, str]:
        return {r.id: r.state for r in self.homelab.records()}

    def peek(self, native_id: str) -> dict[str, Any] | None:
        record = self.record(native_id)
        if record is None:
            return None
        seed = self.seeds / record.machine
        machine = self.homelab.inventory.machines[record.machine]
        provider_id = ""
        vendor = seed / "vendor-data"
        if vendor.exists():
            provider_id = vendor.read_text().rsplit('content: "', 1)[-1].split('"')[0]
        user_data = seed / "user-data"
        return {
            "id": record.id,
            "name": record.name,
            "region": record.region,
            "instance_type": record.instance_type,
            "user_data": user_data.read_text() if user_data.exists() else "",
            "private_ip": machine.address,
            "labels": dict(record.labels),
            "provider_id": provider_id,
        }

    def instance_shape(self, instance_type: str) -> tuple[float, float, str] | None:
        return SHAPES.get(instance_type)


@contextlib.contextmanager
def running_reference(machines: int = 8, namespace: str = NAMESPACE) -> Iterator[ReferencePlugin]:
    """The reference plug-in, its one token serving `namespace`."""
    with (
        tempfile.TemporaryDirectory(prefix="cb-plugin-") as tmp,
        ReferencePlugin(Path(tmp), machines=machines, namespace=namespace) as plugin,
    ):
        yield plugin


@contextlib.contextmanager
def harness() -> Iterator[ProviderHarness]:
    with running_reference() as plugin:
        provider = PluginProvider(
            PluginClass(endpoint=plugin.endpoint, region=REGION),
            plugin.credential,
            plugin.namespace,
        )
        try:
            yield ProviderHarness(
                provider=provider,
                region=REGION,
                instance_type=INSTANCE_TYPE,
                inject=plugin.inject,
                clear=plugin.clear,
                user_data_of=plugin.user_data_of,
                created_count=plugin.created_count,
                credential=plugin.credential,
            )
        finally:
            provider.close()
