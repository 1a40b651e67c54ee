"""Contract harness for the `fake` provider against `sim.cloud` (the reference)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator

from activities.providers.base import split_instance_id
from activities.providers.fake import FakeProvider
from api.nodeclass import FakeClass
from sim.cloud import FakeCloud, FakeCloudServer
from tests.providers.harness import ProviderHarness


@contextlib.contextmanager
def harness() -> Iterator[ProviderHarness]:
    token = secrets.token_hex(16)
    cloud = FakeCloud(boot_delay_s=0.1, delete_delay_s=0.1, token=token)
    with FakeCloudServer(cloud) as server:
        provider = FakeProvider(FakeClass(endpoint=server.url, region="sim-1"), token)

        def user_data_of(iid: str) -> str:
            vm = cloud.peek(split_instance_id(iid)[2])
            assert vm is not None, f"{iid} does not exist"
            return str(vm["user_data"])

        try:
            yield ProviderHarness(
                provider=provider,
                region="sim-1",
                instance_type="fk-small",
                inject=lambda kind: cloud.inject_failure("create", kind),
                clear=cloud.clear_failures,
                user_data_of=user_data_of,
                created_count=lambda name: int(cloud.stats()["created_by_name"].get(name, 0)),
                credential=token,
            )
        finally:
            provider.close()
