"""Scaleway traps: user data before power-on, block-volume cleanup, paging, non-JSON 503."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.utils import parse_quantity
from scaleway.instance.v1 import ServerAction

from activities.providers.base import (
    CapacityError,
    FatalError,
    InstanceSpec,
    InstanceState,
    RetryableError,
    split_instance_id,
)
from activities.providers.scaleway import ScalewayProvider
from api import labels as L
from cluster.node_identity import is_claims_node
from sim.clouds.scaleway import ZONES, ScalewayStandin, new_secret_key
from sim.controlplane.cluster import KubernetesControlPlane
from tests.providers.harness_scaleway import block
from tests.providers.joining import JOIN_S, join_user_data, joining_machines, read_node, wait_for

SECRET = new_secret_key()


@pytest.fixture
def cloud() -> Iterator[ScalewayStandin]:
    with ScalewayStandin(secret_key=SECRET, boot_delay_s=0.05, delete_delay_s=0.05) as c:
        yield c


@pytest.fixture
def provider(cloud: ScalewayStandin) -> ScalewayProvider:
    return ScalewayProvider(block(cloud), SECRET)


def spec(name: str = "nc-scw-a", **kw: Any) -> InstanceSpec:
    values: dict[str, Any] = {
        "name": name,
        "cluster_id": "c1",
        "node_pool": "burst",
        "region": "fr-par",
        "instance_type": "PLAY2-NANO",
        "user_data": "#!/bin/sh\necho 'cloud-init ran' \"here\"\n",
        "labels": {"team": "a"},
    }
    values.update(kw)
    return InstanceSpec.model_validate(values)


def native(iid: str) -> str:
    return split_instance_id(iid)[2]


def test_user_data_is_set_before_power_on(
    cloud: ScalewayStandin, provider: ScalewayProvider
) -> None:
    s = spec()
    inst = provider.create(s)
    assert inst.id.startswith("scaleway/fr-par-1/") and inst.region == "fr-par"
    assert inst.state is InstanceState.PENDING  # starting
    vm = cloud.peek(native(inst.id))
    assert vm is not None and vm["user_data"] == s.user_data  # cloud-init read it at boot
    assert cloud.stats()["booted_without_user_data"] == []
    assert vm["labels"] == {
        "team": "a",
        L.MANAGED: "true",
        L.CLUSTER: "c1",
        L.NODEPOOL: "burst",
        L.NODECLAIM: "nc-scw-a",
    }
    wait_for(lambda: (provider.get(inst.id) or inst).state is InstanceState.RUNNING)


def test_failed_user_data_step_leaves_the_server_off_and_a_retry_resumes_it(
    cloud: ScalewayStandin, provider: ScalewayProvider
) -> None:
    cloud.inject_failure("user_data", "throttle")
    with pytest.raises(RetryableError) as caught:
        provider.create(spec())
    assert caught.value.retry_after_s == 1.0
    (server_id,) = cloud.instance_states()
    assert cloud.instance_states()[server_id] == "pending"  # created, never powered on
    assert cloud.stats()["states"] == {"stopped": 1}

    inst = provider.create(spec())  # the activity's retry
    assert native(inst.id) == server_id
    assert cloud.stats()["created_by_name"] == {"nc-scw-a": 1}
    vm = cloud.peek(server_id)
    assert vm is not None and vm["user_data"] == spec().user_data
    assert cloud.stats()["booted_without_user_data"] == []


def test_delete_removes_detached_block_volumes(
    cloud: ScalewayStandin, provider: ScalewayProvider
) -> None:
    inst = provider.create(spec())
    (vol,) = cloud.volumes()
    assert vol["volume_type"] == "sbs_volume" and vol["server_id"] == native(inst.id)
    provider.delete(inst.id)
    assert provider.get(inst.id) is None
    assert cloud.volumes() == []
    provider.delete(inst.id)  # gone: fine

    local = provider.create(spec("nc-scw-local", instance_type="DEV1-S"))
    assert [v["volume_type"] for v in cloud.volumes()] == ["l_ssd"]
    provider.delete(local.id)
    assert cloud.volumes() == []


def test_terminate_alone_leaks_the_block_volume(
    cloud: ScalewayStandin, provider: ScalewayProvider
) -> None:
    """What the stand-in models (and why delete does more than terminate)."""
    inst = provider.create(spec())
    provider.instance.server_action(
        server_id=native(inst.id), zone="fr-par-1", action=ServerAction.TERMINATE
    )
    wait_for(lambda: provider.get(inst.id) is None)
    (vol,) = cloud.volumes()
    assert vol["volume_type"] == "sbs_volume" and vol["server_id"] is None


def test_power_on_out_of_stock_tears_the_server_down(
    cloud: ScalewayStandin, provider: ScalewayProvider
) -> None:
    cloud.inject_failure("poweron", "capacity")
    with pytest.raises(CapacityError):
        provider.create(spec())
    assert cloud.instance_states() == {}
    assert cloud.volumes() == []


def test_non_json_503_is_an_outage(cloud: ScalewayStandin, provider: ScalewayProvider) -> None:
    cloud.inject_failure("create", "unavailable")
    with pytest.raises(CapacityError) as caught:
        provider.create(spec())
    assert "undecodable" in str(caught.value)
    inst = provider.create(spec())
    cloud.inject_failure("get", "unavailable")
    with pytest.raises(RetryableError):
        provider.get(inst.id)  # outside create: retry, do not fail over


def test_list_owned_pages_until_an_empty_page(
    cloud: ScalewayStandin, provider: ScalewayProvider
) -> None:
    for i in range(57):
        cloud.create_server(
            "fr-par-1",
            {
                "commercial_type": "DEV1-S",
                "name": f"p{i}",
                "image": "ubuntu_jammy",
                "tags": [f"{L.MANAGED}=true", f"{L.CLUSTER}=c1", f"{L.NODECLAIM}=p{i}"],
            },
        )
    cloud.create_server(
        "fr-par-1",
        {
            "commercial_type": "DEV1-S",
            "name": "x",
            "image": "ubuntu_jammy",
            "tags": [f"{L.MANAGED}=true", f"{L.CLUSTER}=c2"],
        },
    )
    owned = provider.list_owned("c1")
    assert len(owned) == 57 and {i.labels[L.CLUSTER] for i in owned} == {"c1"}
    assert {i.state for i in owned} == {InstanceState.TERMINATED}  # never powered on


def test_credentials(cloud: ScalewayStandin) -> None:
    as_json = json.dumps({"access_key": "SCW0123456789ABCDEFG", "secret_key": SECRET})
    ScalewayProvider(block(cloud), as_json).create(spec("nc-scw-json"))
    wrong = new_secret_key()
    with pytest.raises(FatalError) as caught:
        ScalewayProvider(block(cloud), wrong).create(spec("nc-scw-wrong"))
    assert wrong not in str(caught.value) and "apiKeySecretRef" in caught.value.fix
    with pytest.raises(FatalError) as malformed:
        ScalewayProvider(block(cloud), "not-a-uuid")
    assert "not-a-uuid" not in str(malformed.value)
    bad_project = block(cloud).model_copy(update={"project_id": "my-project"})
    with pytest.raises(FatalError) as project:
        ScalewayProvider(bad_project, SECRET)
    assert "projectID" in project.value.fix


def test_zone_comes_from_the_offering(cloud: ScalewayStandin, provider: ScalewayProvider) -> None:
    inst = provider.create(spec("nc-scw-ams", region="nl-ams"))
    assert inst.id.startswith("scaleway/nl-ams-1/") and inst.region == "nl-ams"
    inst2 = provider.create(spec("nc-scw-par2", region="fr-par", zone="fr-par-2"))
    assert inst2.id.startswith("scaleway/fr-par-2/")
    assert provider.get(inst2.id) is not None


def test_catalog(provider: ScalewayProvider) -> None:
    types = {t.name: t for t in provider.instance_types()}
    t = types["COPARM1-2C-8G"]
    assert (t.vcpu, t.memory_gib, t.arch, t.regions) == (2, 8, "arm64", ["fr-par"])
    assert types["PLAY2-NANO"].price_eur_per_hour == 0.027


def test_kubelets_boot_a_scaleway_vm_with_its_zone(
    cloud: ScalewayStandin,
    provider: ScalewayProvider,
    kube_control_plane: KubernetesControlPlane,
    tmp_path: Path,
) -> None:
    with joining_machines(
        kube_control_plane, [cloud], tmp_path / "machines", ["nc-scw-node"], ready_delay_s=0.1
    ) as (core, kubelets):
        inst = provider.create(spec("nc-scw-node", user_data=join_user_data(core, "nc-scw-node")))
        n = wait_for(lambda: read_node(core, "nc-scw-node"), JOIN_S)
        # The zone, as the first-boot script reads it (location.zone_id) and the provider
        # records the VM's id: the node is the VM's by its whole providerID.
        assert n["spec"]["providerID"] == f"scaleway:///fr-par-1/{native(inst.id)}"
        assert is_claims_node(n["spec"]["providerID"], inst.id)
        labels = n["metadata"]["labels"]
        assert labels["topology.kubernetes.io/zone"] == "fr-par-1"
        assert labels["topology.kubernetes.io/region"] == "fr-par"
        assert parse_quantity(n["status"]["capacity"]["cpu"]) == 2
        time.sleep(0.1)
        assert kubelets.join_failures == {}


def test_servers_in_every_zone_are_listed_and_deleted(
    cloud: ScalewayStandin, provider: ScalewayProvider
) -> None:
    """The NodeClass zone is fr-par-1, but an offering may land in another zone of the region
    or in another region: garbage collection and delete-by-label must still see the server."""
    assert set(ZONES) <= set(provider.zones())  # every zone the stand-in creates in
    default = provider.create(spec("nc-scw-par1"))
    other_zone = provider.create(spec("nc-scw-par2", region="fr-par", zone="fr-par-2"))
    other_region = provider.create(spec("nc-scw-waw", region="pl-waw"))
    assert split_instance_id(other_zone.id)[1] == "fr-par-2"
    assert split_instance_id(other_region.id)[1] == "pl-waw-1"

    owned = {i.labels[L.NODECLAIM]: i for i in provider.list_owned("c1")}
    assert {n: i.id for n, i in owned.items()} == {
        "nc-scw-par1": default.id,
        "nc-scw-par2": other_zone.id,
        "nc-scw-waw": other_region.id,
    }
    assert provider.list_owned("c2") == []

    for inst in (other_zone, other_region):
        got = provider.get(inst.id)
        assert got is not None and got.id == inst.id
        provider.delete(inst.id)  # waits until the server is gone, then its block volume
        assert provider.get(inst.id) is None
        assert cloud.peek(native(inst.id)) is None
    assert [i.id for i in provider.list_owned("c1")] == [default.id]
    assert [v["server_id"] for v in cloud.volumes()] == [native(default.id)]


def test_a_zone_list_owned_would_not_see_is_refused(
    cloud: ScalewayStandin, provider: ScalewayProvider
) -> None:
    with pytest.raises(FatalError) as caught:
        provider.create(spec("nc-scw-mil", region="it-mil"))
    assert "it-mil-1" in str(caught.value) and "ZONES_BY_REGION" in caught.value.fix
    assert cloud.stats()["creates_attempted"] == 0


def test_a_failing_zone_fails_the_listing(
    cloud: ScalewayStandin, provider: ScalewayProvider
) -> None:
    """A partial list would make a delete by claim label take a live server for gone."""
    provider.create(spec("nc-scw-par2", zone="fr-par-2"))
    cloud.inject_failure("list", "unavailable")
    with pytest.raises(RetryableError):
        provider.list_owned("c1")
    assert [i.name for i in provider.list_owned("c1")] == ["nc-scw-par2"]
