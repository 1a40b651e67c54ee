"""Contract harness for the Scaleway provider (scaleway SDK) against `sim.clouds.scaleway`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from activities.providers.base import split_instance_id
from activities.providers.scaleway import ScalewayProvider
from api._base import SecretKeyRef
from api.nodeclass import ScalewayClass
from sim.clouds.scaleway import ScalewayStandin, new_secret_key
from tests.providers.harness import ProviderHarness


def block(cloud: ScalewayStandin, zone: str = "fr-par-1") -> ScalewayClass:
    return ScalewayClass(
        endpoint=cloud.endpoint,
        zone=zone,
        project_id=cloud.project_id,
        api_key_secret_ref=SecretKeyRef(name="scw", key="secret-key"),
    )


@contextlib.contextmanager
def harness() -> Iterator[ProviderHarness]:
    secret = new_secret_key()
    with ScalewayStandin(secret_key=secret, boot_delay_s=0.1, delete_delay_s=0.1) as cloud:
        provider = ScalewayProvider(block(cloud), secret)

        def user_data_of(iid: str) -> str:
            vm = cloud.peek(split_instance_id(iid)[2])
            assert vm is not None, f"{iid} does not exist"
            return str(vm["user_data"])  # what cloud-init read when the server powered on

        yield ProviderHarness(
            provider=provider,
            region="fr-par",
            instance_type="PLAY2-NANO",
            inject=lambda kind: cloud.inject_failure("create", kind),
            clear=cloud.clear_failures,
            user_data_of=user_data_of,
            created_count=lambda name: int(cloud.stats()["created_by_name"].get(name, 0)),
            credential=secret,
        )
