"""Hetzner-specific behaviour: the uniqueness path, limits, paging, classification, booting."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.utils import parse_quantity

from activities.providers.base import (
    FatalError,
    InstanceSpec,
    InstanceState,
    RetryableError,
    split_instance_id,
)
from activities.providers.hetzner import HetznerProvider
from api import labels as L
from sim.cloud import FakeCloud
from sim.clouds.base import BootableCloud
from sim.clouds.hetzner import HetznerStandin
from sim.controlplane.cluster import MANAGED_LABEL, KubernetesControlPlane
from tests.providers.harness_hetzner import block
from tests.providers.joining import (
    JOIN_S,
    join_user_data,
    joining_machines,
    raw,
    read_node,
    wait_for,
)

TOKEN = secrets.token_hex(32)


@pytest.fixture
def cloud() -> Iterator[HetznerStandin]:
    with HetznerStandin(token=TOKEN, boot_delay_s=0.05, delete_delay_s=0.05) as c:
        yield c


@pytest.fixture
def provider(cloud: HetznerStandin) -> HetznerProvider:
    return HetznerProvider(block(cloud), TOKEN)


def spec(name: str = "nc-hz-a", **kw: Any) -> InstanceSpec:
    values: dict[str, Any] = {
        "name": name,
        "cluster_id": "c1",
        "node_pool": "burst",
        "region": "nbg1",
        "instance_type": "cx22",
        "user_data": "#!/bin/sh\necho hi\n",
        "labels": {"team": "a"},
    }
    values.update(kw)
    return InstanceSpec.model_validate(values)


def ours(name: str, cluster: str = "c1") -> dict[str, str]:
    return {L.MANAGED: "true", L.CLUSTER: cluster, L.NODEPOOL: "burst", L.NODECLAIM: name}


def make_directly(cloud: HetznerStandin, name: str, labels: dict[str, str]) -> str:
    """A server made without our provider (or by an attempt whose answer was lost)."""
    out = cloud.create_server(
        {
            "name": name,
            "server_type": "cx22",
            "image": "ubuntu-24.04",
            "location": "nbg1",
            "labels": labels,
        }
    )
    return str(out["server"]["id"])


def test_create_sends_what_hetzner_needs(cloud: HetznerStandin, provider: HetznerProvider) -> None:
    inst = provider.create(spec())
    _, region, native = split_instance_id(inst.id)
    assert inst.id == f"hetzner/nbg1/{native}" and region == "nbg1"
    assert inst.state is InstanceState.PENDING and inst.public_ip and inst.created_at
    vm = cloud.peek(native)
    assert vm is not None and vm["region"] == "nbg1" and vm["instance_type"] == "cx22"
    assert vm["labels"] == {"team": "a", **ours("nc-hz-a")}
    assert vm["image"] == "ubuntu-24.04"
    got = provider.get(inst.id)
    assert got is not None
    assert got.state is InstanceState.PENDING or got.state is InstanceState.RUNNING


def test_uniqueness_error_returns_our_earlier_server(
    cloud: HetznerStandin, provider: HetznerProvider
) -> None:
    sid = make_directly(cloud, "nc-hz-lost", ours("nc-hz-lost"))
    inst = provider.create(spec("nc-hz-lost"))
    assert split_instance_id(inst.id)[2] == sid
    assert cloud.stats()["created_by_name"] == {"nc-hz-lost": 1}
    assert cloud.stats()["creates_attempted"] == 2  # ours was refused, then looked up


def test_uniqueness_error_on_a_foreign_server_is_fatal(
    cloud: HetznerStandin, provider: HetznerProvider
) -> None:
    make_directly(cloud, "nc-hz-taken", {"owner": "someone-else"})
    with pytest.raises(FatalError) as caught:
        provider.create(spec("nc-hz-taken"))
    assert "not this claim's" in str(caught.value) and caught.value.fix
    make_directly(cloud, "nc-hz-other", ours("nc-hz-other", cluster="c2"))
    with pytest.raises(FatalError):
        provider.create(spec("nc-hz-other"))


def test_uniqueness_error_on_a_server_being_deleted_is_retryable(
    cloud: HetznerStandin, provider: HetznerProvider
) -> None:
    cloud.delete_delay_s = 30
    sid = make_directly(cloud, "nc-hz-going", ours("nc-hz-going"))
    cloud.delete_server(int(sid))
    with pytest.raises(RetryableError):
        provider.create(spec("nc-hz-going"))


def test_user_data_over_32_kib_is_refused_before_calling(
    cloud: HetznerStandin, provider: HetznerProvider
) -> None:
    with pytest.raises(FatalError) as caught:
        provider.create(spec(user_data="x" * (32 * 1024 + 1)))
    assert "32768" in str(caught.value)
    assert cloud.stats()["creates_attempted"] == 0
    provider.create(spec(user_data="ü" * (16 * 1024)))  # exactly 32 KiB of UTF-8: accepted


def test_list_owned_pages_and_filters(cloud: HetznerStandin, provider: HetznerProvider) -> None:
    for i in range(57):
        make_directly(cloud, f"nc-hz-p{i}", ours(f"nc-hz-p{i}"))
    make_directly(cloud, "nc-hz-x", ours("nc-hz-x", cluster="c2"))
    make_directly(cloud, "unrelated", {})
    owned = provider.list_owned("c1")
    assert len(owned) == 57 and len({i.id for i in owned}) == 57
    assert all(i.labels[L.CLUSTER] == "c1" for i in owned)
    assert [i.name for i in provider.list_owned("c2")] == ["nc-hz-x"]


def test_delete_is_idempotent_and_get_says_gone(
    cloud: HetznerStandin, provider: HetznerProvider
) -> None:
    inst = provider.create(spec())
    provider.delete(inst.id)
    got = provider.get(inst.id)
    assert got is None or got.state is InstanceState.STOPPING
    wait_for(lambda: provider.get(inst.id) is None)
    provider.delete(inst.id)
    assert provider.get("hetzner/nbg1/999999") is None


def test_outage_outside_create_is_retryable_not_capacity(
    cloud: HetznerStandin, provider: HetznerProvider
) -> None:
    inst = provider.create(spec())
    cloud.inject_failure("get", "unavailable")
    with pytest.raises(RetryableError):
        provider.get(inst.id)
    cloud.inject_failure("delete", "capacity")
    with pytest.raises(RetryableError):
        provider.delete(inst.id)


def test_wrong_token_is_fatal_and_never_echoed(cloud: HetznerStandin) -> None:
    wrong = "wrong-" + secrets.token_hex(8)
    with pytest.raises(FatalError) as caught:
        HetznerProvider(block(cloud), wrong).create(spec())
    assert wrong not in str(caught.value) and "apiTokenSecretRef" in caught.value.fix
    with pytest.raises(FatalError):
        HetznerProvider(block(cloud), None)


def test_catalog_has_prices_and_arch(provider: HetznerProvider) -> None:
    types = {t.name: t for t in provider.instance_types()}
    assert len(types) >= 16
    cax = types["cax11"]
    assert (cax.vcpu, cax.memory_gib, cax.arch) == (2, 4, "arm64")
    assert types["cx22"].arch == "x86_64" and types["cx22"].price_eur_per_hour == 0.006
    assert "fsn1" in types["cx22"].regions


# ---- a Hetzner VM joins Kubernetes' own control plane ---------------------------------------


def test_kubelets_boot_a_vm_from_the_hetzner_standin(
    cloud: HetznerStandin,
    provider: HetznerProvider,
    kube_control_plane: KubernetesControlPlane,
    tmp_path: Path,
) -> None:
    clouds: list[FakeCloud | BootableCloud] = [FakeCloud(boot_delay_s=0.05), cloud]
    with joining_machines(kube_control_plane, clouds, tmp_path / "machines", ["nc-hz-node"]) as (
        core,
        kubelets,
    ):
        data = join_user_data(core, "nc-hz-node")
        inst = provider.create(spec("nc-hz-node", instance_type="cax21", user_data=data))
        native = split_instance_id(inst.id)[2]
        n = wait_for(lambda: read_node(core, "nc-hz-node"), JOIN_S)
        assert n["spec"]["providerID"] == f"hetzner:///nbg1/{native}"
        assert parse_quantity(n["status"]["capacity"]["cpu"]) == 4
        assert parse_quantity(n["status"]["capacity"]["memory"]) == 8 * 1024**3
        labels = n["metadata"]["labels"]
        assert labels["kubernetes.io/arch"] == "arm64"
        assert labels["node.kubernetes.io/instance-type"] == "cax21"
        assert labels["topology.kubernetes.io/region"] == "nbg1"
        # The machine is known by its cloud and native id (the fake cloud's VMs by the id
        # alone); the join is recorded just after the Node is created: look until it is.
        assert wait_for(lambda: kubelets.node_for(f"hetzner/{native}")) == "nc-hz-node"

        def ready() -> bool:
            conds = (read_node(core, "nc-hz-node") or {}).get("status", {}).get("conditions")
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conds or [])

        wait_for(ready, JOIN_S)
        # The VM goes away at Hetzner: the machine is lost, and KWOK no longer keeps its Node
        # (whose Lease then lapses: Ready=Unknown is the node lifecycle controller's, ~20 s on).
        provider.delete(inst.id)
        wait_for(
            lambda: MANAGED_LABEL not in raw(core.read_node, "nc-hz-node")["metadata"]["labels"]
        )
        assert kubelets.join_failures == {}
