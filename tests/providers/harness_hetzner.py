"""Contract harness for the Hetzner provider (hcloud) against `sim.clouds.hetzner`."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator

from activities.providers.base import split_instance_id
from activities.providers.hetzner import HetznerProvider
from api._base import SecretKeyRef
from api.nodeclass import HetznerClass
from sim.clouds.hetzner import HetznerStandin
from tests.providers.harness import ProviderHarness

# hcloud retries rate_limit_exceeded 5 times by itself (no constructor option turns that
# off): a throttle must outlast them to reach our classification.
SDK_ATTEMPTS = {"throttle": 6}


def block(cloud: HetznerStandin, location: str = "fsn1") -> HetznerClass:
    return HetznerClass(
        endpoint=cloud.endpoint,
        location=location,
        api_token_secret_ref=SecretKeyRef(name="hcloud", key="token"),
    )


@contextlib.contextmanager
def harness() -> Iterator[ProviderHarness]:
    token = secrets.token_hex(32)
    with HetznerStandin(token=token, boot_delay_s=0.1, delete_delay_s=0.1) as cloud:
        provider = HetznerProvider(block(cloud), token)

        def user_data_of(iid: str) -> str:
            vm = cloud.peek(split_instance_id(iid)[2])
            assert vm is not None, f"{iid} does not exist"
            return str(vm["user_data"])

        yield ProviderHarness(
            provider=provider,
            region="fsn1",
            instance_type="cx22",
            inject=lambda kind: cloud.inject_failure("create", kind, SDK_ATTEMPTS.get(kind, 1)),
            clear=cloud.clear_failures,
            user_data_of=user_data_of,
            created_count=lambda name: int(cloud.stats()["created_by_name"].get(name, 0)),
            credential=token,
        )
