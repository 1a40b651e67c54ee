"""Contract harness for `activities/providers/ovh.py` against `sim/clouds/ovh.py`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from activities.providers.base import split_instance_id
from activities.providers.ovh import OvhProvider, vm_name
from api.nodeclass import OvhClass
from sim.clouds.ovh import OvhStandin
from tests.providers.harness import ProviderHarness


@contextlib.contextmanager
def standin_and_provider(**standin_kwargs: object) -> Iterator[tuple[OvhStandin, OvhProvider]]:
    kwargs: dict[str, object] = {"boot_delay_s": 0.1, "delete_delay_s": 0.1, **standin_kwargs}
    with OvhStandin(**kwargs) as cloud:  # type: ignore[arg-type]
        block = OvhClass.model_validate(cloud.nodeclass_block("ovh", "credentials"))
        yield cloud, OvhProvider(block, cloud.credential)


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
            created_count=lambda claim: int(cloud.stats()["created_by_name"].get(claim, 0)),
            credential=cloud.application_secret,
        )


__all__ = ["harness", "standin_and_provider", "vm_name"]
