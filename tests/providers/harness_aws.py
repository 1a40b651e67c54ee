"""Contract harness for `activities/providers/aws.py` against moto (`sim/clouds/aws.py`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from activities.providers.aws import AwsProvider
from activities.providers.base import split_instance_id
from api.nodeclass import AwsClass
from sim.clouds.aws import AwsStandin
from tests.providers.harness import ProviderHarness


@contextlib.contextmanager
def standin_and_provider(**kwargs: object) -> Iterator[tuple[AwsStandin, AwsProvider]]:
    options: dict[str, object] = {"boot_delay_s": 0.1, **kwargs}
    with AwsStandin(**options) as cloud:  # type: ignore[arg-type]
        block = AwsClass.model_validate(cloud.nodeclass_block("aws", "credentials"))
        yield cloud, AwsProvider(block, cloud.credential)


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
            credential=cloud.secret_access_key,
        )
