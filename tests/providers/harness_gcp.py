"""Contract harness for `activities/providers/gcp.py` against `sim/clouds/gcp.py`.

The provider gets a real service-account key JSON whose `token_uri` is the stand-in, so the
whole credential path (JWT assertion → token → bearer) runs as against Google.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from activities.providers.base import split_instance_id
from activities.providers.gcp import GcpProvider
from api.nodeclass import GcpClass
from sim.clouds.gcp import GcpStandin
from tests.providers.harness import ProviderHarness


@contextlib.contextmanager
def standin_and_provider(
    *, credential: bool = True, **kwargs: object
) -> Iterator[tuple[GcpStandin, GcpProvider]]:
    options: dict[str, object] = {
        "boot_delay_s": 0.1,
        "delete_delay_s": 0.1,
        "op_delay_s": 0.15,
        "require_auth": credential,
        **kwargs,
    }
    with GcpStandin(**options) as cloud:  # type: ignore[arg-type]
        block = GcpClass.model_validate(cloud.nodeclass_block("gcp", "key.json"))
        provider = GcpProvider(
            block, cloud.credential if credential else None, poll_interval_s=0.05
        )
        yield cloud, provider


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
            # google-auth refreshes the token and retries on a 401 (twice): a lasting auth
            # failure is what reaches the provider.
            inject=lambda kind: cloud.inject_failure("create", kind, 3 if kind == "auth" else 1),
            clear=cloud.clear_failures,
            user_data_of=user_data_of,
            created_count=lambda name: int(cloud.stats()["created_by_name"].get(name, 0)),
            credential=cloud.private_key_pem,
        )
