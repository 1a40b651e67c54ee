"""Contract harness for the Proxmox VE provider (proxmoxer) against `sim.clouds.proxmox`.

The stand-in serves HTTPS with a CA of its own, which the block trusts through `caBundle`:
proxmoxer speaks HTTPS only, so the TLS path is the one every test takes. Injected
`capacity` and `quota` make the new VM's start fail for lack of memory (what running out of
room on a Proxmox host looks like); `unavailable` is pveproxy's 595 (the node does not
answer), `throttle` a lock timeout (500), `auth` a 401.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from activities.providers.base import split_instance_id
from activities.providers.proxmox import ProxmoxProvider
from api._base import SecretKeyRef
from api.nodeclass import ProxmoxClass
from sim.clouds.proxmox import SHAPES, TEMPLATE_VMID, ProxmoxStandin
from tests.providers.harness import ProviderHarness

VMID_RANGE = (1200, 1299)


def block(cloud: ProxmoxStandin, **overrides: object) -> ProxmoxClass:
    values: dict[str, object] = {
        "endpoint": cloud.endpoint,
        "api_token_secret_ref": SecretKeyRef(name="pve", key="token"),
        "cluster": cloud.cluster,
        "nodes": list(cloud.nodes),
        "vmid_range": {"lower": VMID_RANGE[0], "upper": VMID_RANGE[1]},
        "template": TEMPLATE_VMID,
        "memory_overhead_mib": 256,
        "shapes": [{"name": n, "cpu": c, "memoryGiB": g} for n, c, g in SHAPES],
        "ca_bundle": cloud.ca_pem,
    }
    values.update(overrides)
    return ProxmoxClass.model_validate(values)


@contextlib.contextmanager
def harness() -> Iterator[ProviderHarness]:
    with ProxmoxStandin(boot_delay_s=0.1, delete_delay_s=0.1, task_delay_s=0.02) as cloud:
        provider = ProxmoxProvider(block(cloud), cloud.credential)

        def user_data_of(iid: str) -> str:
            vm = cloud.peek(split_instance_id(iid)[2].rpartition("/")[2])
            assert vm is not None, f"{iid} does not exist"
            return str(vm["user_data"])

        yield ProviderHarness(
            provider=provider,
            region=cloud.cluster,
            instance_type=SHAPES[0][0],
            inject=lambda kind: cloud.inject_failure("create", kind),
            clear=cloud.clear_failures,
            user_data_of=user_data_of,
            created_count=lambda name: int(cloud.stats()["created_by_name"].get(name, 0)),
            credential=cloud.credential,
        )
