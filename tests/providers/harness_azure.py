"""Contract harness for `activities/providers/azure.py` against `sim/clouds/azure.py`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from activities.providers.azure import AzureProvider
from activities.providers.base import split_instance_id
from api.nodeclass import AzureClass
from sim.clouds.azure import AzureStandin
from tests.providers.harness import ProviderHarness


@contextlib.contextmanager
def standin_and_provider(**kwargs: object) -> Iterator[tuple[AzureStandin, AzureProvider]]:
    options: dict[str, object] = {
        "boot_delay_s": 0.1,
        "delete_delay_s": 0.05,
        "op_delay_s": 0.1,
        **kwargs,
    }
    with AzureStandin(**options) as cloud:  # type: ignore[arg-type]
        block = AzureClass.model_validate(cloud.nodeclass_block("azure", "credentials"))
        yield cloud, AzureProvider(block, cloud.credential, polling_interval_s=0.05)


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
            credential=cloud.token,
        )
