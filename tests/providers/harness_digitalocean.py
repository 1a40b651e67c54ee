"""Contract harness for `activities/providers/digitalocean.py` against `sim/clouds/digitalocean.py`."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator

from activities.providers.base import split_instance_id
from activities.providers.digitalocean import DigitalOceanProvider
from api.nodeclass import DigitalOceanClass
from sim.clouds.digitalocean import DigitalOceanStandin
from tests.providers.harness import ProviderHarness


@contextlib.contextmanager
def standin_and_provider(
    **standin_kwargs: object,
) -> Iterator[tuple[DigitalOceanStandin, DigitalOceanProvider]]:
    token = f"dop_v1_{secrets.token_hex(32)}"
    kwargs: dict[str, object] = {"boot_delay_s": 0.1, "delete_delay_s": 0.1, **standin_kwargs}
    with DigitalOceanStandin(token=token, **kwargs) as cloud:  # type: ignore[arg-type]
        block = DigitalOceanClass.model_validate(cloud.nodeclass_block("do", "token"))
        yield cloud, DigitalOceanProvider(block, token)


@contextlib.contextmanager
def harness() -> Iterator[ProviderHarness]:
    with standin_and_provider() as (cloud, provider):

        def user_data_of(iid: str) -> str:
            vm = cloud.peek(split_instance_id(iid)[2])
            assert vm is not None, f"{iid} does not exist"
            return str(vm["user_data"])

        yield ProviderHarness(
            provider=provider,
            region=cloud.region,
            instance_type=cloud.instance_type,
            inject=lambda kind: cloud.inject_failure("create", kind),
            clear=cloud.clear_failures,
            user_data_of=user_data_of,
            created_count=lambda name: int(cloud.stats()["created_by_name"].get(name, 0)),
            credential=cloud.credential,
        )
