"""Contract harness for the Redfish provider (sushy) against sushy-tools' own emulator.

The BMCs are `sushy-emulator` with its fake driver, run as a subprocess (sim/clouds/redfish.py);
the seed server is the operator's netboot side. Where the suite's expectations meet bare metal:

- `capacity` and `quota`: every free machine is recorded as another cluster's, so no machine
  of the shape is free (bare metal has no quota: the inventory is all there is);
- `unavailable` and `throttle`: the seed server answers 503 / 429 (a BMC of the emulator
  cannot be made to fail on demand; the seed server is the other service a create needs);
- `auth`: the emulator's BMC password is changed (its htpasswd file is read per request), so
  the emulator itself answers 401.

User data is what the seed server last received for the machine (at its one-time address). Powering off takes the fake driver
1-11 s, and a machine is free only once off: the inventory has machines enough for the suite.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

from activities.providers.base import split_instance_id
from activities.providers.redfish import RedfishProvider
from api.nodeclass import RedfishClass
from sim.clouds.redfish import RedfishBridge, inventory
from tests.providers.harness import ProviderHarness


def block(bridge: RedfishBridge, **overrides: object) -> RedfishClass:
    values = bridge.nodeclass_block("bmc-login", "login")
    values.update(overrides)
    return RedfishClass.model_validate(values)


def logins(bridge: RedfishBridge) -> str:
    """What the worker reads for the provider: each machine's Secret value, by name."""
    return json.dumps({m.name: bridge.credential for m in bridge.machines})


@contextlib.contextmanager
def harness() -> Iterator[ProviderHarness]:
    with RedfishBridge(machines=inventory((("metal", 12, 16, 64),)), boot_delay_s=0.1) as bridge:
        provider = RedfishProvider(block(bridge), logins(bridge))

        def user_data_of(iid: str) -> str:
            machine = split_instance_id(iid)[2].rsplit("/", 1)[-1]
            data = bridge.seed.script_of(machine)
            assert data is not None, f"{iid} has no seed"
            return data.decode()

        yield ProviderHarness(
            provider=provider,
            region=bridge.region,
            instance_type=bridge.instance_type,
            inject=lambda kind: bridge.inject_failure("create", kind),
            clear=bridge.clear_failures,
            user_data_of=user_data_of,
            created_count=lambda name: int(bridge.stats()["created_by_name"].get(name, 0)),
            credential=bridge.password,
        )
