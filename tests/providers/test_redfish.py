"""The Redfish inventory against sushy-tools' emulator: a machine is claimed, held by one claim
only, returned, counted in `available`; an earlier claim's delete never touches a later one's."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import yaml

from activities.providers.base import (
    CapacityError,
    FatalError,
    InstanceSpec,
    ProviderError,
    split_instance_id,
)
from activities.providers.redfish import RedfishProvider
from api import labels as L
from api.nodeclass import RedfishClass
from sim.clouds.redfish import RedfishBridge, inventory
from tests.providers.harness_redfish import block, logins

SMALL = "metal-16c64g"
BIG = "metal-32c128g"


@pytest.fixture(scope="module")
def bridge() -> Iterator[RedfishBridge]:
    machines = inventory((("metal", 6, 16, 64), ("big", 1, 32, 128)))
    with RedfishBridge(machines=machines, boot_delay_s=0.1, poll_s=0.1) as b:
        yield b


@pytest.fixture
def provider(bridge: RedfishBridge) -> Iterator[RedfishProvider]:
    p = RedfishProvider(block(bridge), logins(bridge))
    yield p
    for inst in p.list_owned("c1"):
        p.delete(inst.id)
    p.close()


def spec(name: str, shape: str = SMALL) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        cluster_id="c1",
        node_pool="burst",
        region="on-prem",
        instance_type=shape,
        user_data=f"#!/bin/sh\necho {name}\n",
        labels=L.ownership_labels(name, node_pool="burst", cluster_id="c1"),
    )


def machine_of(iid: str) -> str:
    return split_instance_id(iid)[2].rsplit("/", 1)[-1]


def available(p: RedfishProvider) -> dict[str, int | None]:
    return {t.name: t.available for t in p.instance_types()}


def test_a_claim_takes_a_free_machine_of_its_shape_and_records_itself(
    bridge: RedfishBridge, provider: RedfishProvider
) -> None:
    before = available(provider)
    inst = provider.create(spec("nc-big", shape=BIG))
    machine = machine_of(inst.id)
    assert machine == "big-01" and inst.id == "redfish/on-prem/nc-big/big-01"
    meta = yaml.safe_load(bridge.seed.read(machine, "meta-data") or b"")
    assert meta["cloudburst-machine"] == machine  # what the first-boot script's provider ID reads
    assert meta["local-hostname"] == "nc-big" and meta["cloudburst.io/cluster"] == "c1"
    after = available(provider)
    assert (before[BIG], after[BIG]) == (1, 0) and after[SMALL] == before[SMALL]
    with pytest.raises(CapacityError, match=f"no free machine of shape {BIG}"):
        provider.create(spec("nc-big-2", shape=BIG))
    # The emulator took the power-on request: the machine is on, or about to be.
    assert bridge.power_state(machine) in ("On", "Off")
    provider.delete(inst.id)
    assert provider.get(inst.id) is None
    assert not bridge.seed.seeded(machine)
    assert bridge.seed.read(machine, "meta-data") is None


def test_two_claims_at_once_never_share_a_machine(
    bridge: RedfishBridge, provider: RedfishProvider
) -> None:
    results: dict[str, str] = {}
    errors: list[ProviderError] = []

    def create(name: str) -> None:
        p = RedfishProvider(block(bridge), logins(bridge))
        try:
            results[name] = machine_of(p.create(spec(name)).id)
        except ProviderError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(f"nc-race-{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(results.values())) == 3
    assert all(bridge.stats()["created_by_name"][name] == 1 for name in results)


def test_a_late_delete_of_an_earlier_claim_leaves_the_later_one_alone(
    bridge: RedfishBridge, provider: RedfishProvider
) -> None:
    inst = provider.create(spec("nc-later"))
    machine = machine_of(inst.id)
    stale = f"redfish/on-prem/nc-earlier/{machine}"
    assert provider.get(stale) is None
    provider.delete(stale)
    assert provider.get(inst.id) is not None
    assert bridge.seed.seeded(machine)


def test_create_again_resumes_the_holding(bridge: RedfishBridge, provider: RedfishProvider) -> None:
    first = provider.create(spec("nc-again"))
    again = provider.create(spec("nc-again"))
    assert again.id == first.id
    assert bridge.stats()["created_by_name"]["nc-again"] == 1
    owned = [i.id for i in provider.list_owned("c1") if i.labels[L.NODECLAIM] == "nc-again"]
    assert owned == [first.id]
    assert provider.list_owned("another-cluster") == []


def test_virtual_media_boot_inserts_the_image(bridge: RedfishBridge) -> None:
    bridge.seed.write("images", "live.iso", b"an iso image")
    p = RedfishProvider(
        block(bridge, boot="Cd", imageUrl=f"{bridge.seed.url}/images/live.iso"), logins(bridge)
    )
    inst = p.create(spec("nc-cd"))
    machine = bridge.by_name[machine_of(inst.id)]
    media = httpx.get(
        f"{bridge.endpoint}/Systems/{machine.uuid}/VirtualMedia/Cd",
        auth=("cloudburst", bridge.password),
    ).json()
    assert media["Image"].endswith("live.iso") and media["Inserted"] is True
    p.delete(inst.id)
    p.close()


def test_a_machine_without_a_login_is_a_fatal_error_naming_its_secret(
    bridge: RedfishBridge,
) -> None:
    partial = json.loads(logins(bridge))
    partial.pop(bridge.machines[2].name)
    with pytest.raises(FatalError, match=r"spec\.redfish\.machines\[2\]\.credentialsSecretRef"):
        RedfishProvider(block(bridge), json.dumps(partial))


def wait_power(bridge: RedfishBridge, machine: str, state: str) -> None:
    """Until the machine's power is `state` (the fake driver lands a change when read)."""
    while bridge.power_state(machine) != state:
        time.sleep(0.5)


def claim(name: str, namespace: str, uid: str, token: str) -> InstanceSpec:
    """A claim as `create_instance` makes it: namespace and uid from the NodeClaim, a first-boot
    script carrying its join token."""
    made = spec(name)
    return made.model_copy(
        update={
            "namespace": namespace,
            "claim_uid": uid,
            "user_data": f"#!/bin/sh\nkubeadm join --token {token}\n",
        }
    )


def test_no_read_of_the_seed_server_without_the_claims_key_returns_its_join_token(
    bridge: RedfishBridge, provider: RedfishProvider
) -> None:
    """Issue #54: the seed is served once, at the claim's unguessable address, and nowhere
    else, before, during and after the claim. Fails without the one-time seed: a plain
    `GET <seedUrl>/<machine>/user-data` answered the script with its token."""
    token = "abcdef.0123456789abcdef"
    free = [m.name for m in bridge.machines]
    probes = ["user-data", "meta-data", "", "seed", f"{'0' * 64}/user-data", "user-data/"]

    def leaked() -> list[str]:
        found = []
        with httpx.Client() as http:
            for machine in free:
                for probe in probes:
                    if token in http.get(f"{bridge.seed.url}/{machine}/{probe}").text:
                        found.append(f"{machine}/{probe}")
        return found

    assert leaked() == []  # before
    inst = provider.create(claim("nc-seed", "team-a", "uid-a", token))
    machine = machine_of(inst.id)
    assert leaked() == []  # during, before the machine's first boot
    address = bridge.seed.boot_address(machine)
    assert address is not None
    first = httpx.get(f"{address}/user-data")  # the machine's cloud-init
    assert first.status_code == 200 and token in first.text
    again = httpx.get(f"{address}/user-data")
    assert again.status_code == 404 and token not in again.text  # once
    assert leaked() == []  # during, after
    provider.delete(inst.id)
    assert not bridge.seed.seeded(machine)
    assert leaked() == []  # after


def test_a_same_named_claims_late_delete_leaves_the_later_holding_alone() -> None:
    """Issue #55: a holding is the claim's by uid. Fails without uids in records and ids:
    the id named the claim by name, so team-a's retried delete of its `nc-twin` powered
    off and returned team-b's `nc-twin` holding the same machine (the only one)."""
    with RedfishBridge(machines=inventory((("solo", 1, 16, 64),)), poll_s=0.1) as solo:
        p = RedfishProvider(block(solo), logins(solo))
        try:
            first = p.create(claim("nc-twin", "team-a", "uid-a", "aaaaaa.aaaaaaaaaaaaaaaa"))
            wait_power(solo, "solo-01", "On")  # its power-on landed: the claim ran
            p.delete(first.id)
            wait_power(solo, "solo-01", "Off")
            later = p.create(claim("nc-twin", "team-b", "uid-b", "bbbbbb.bbbbbbbbbbbbbbbb"))
            assert p.get(first.id) is None
            p.delete(first.id)  # team-a's delete, retried late
            assert p.get(later.id) is not None and solo.seed.seeded("solo-01")
            meta = yaml.safe_load(solo.seed.read("solo-01", "meta-data") or b"")
            assert (meta[L.NODEPOOL_NAMESPACE], meta[L.NODECLAIM_UID]) == ("team-b", "uid-b")
        finally:
            p.close()


def test_a_bmc_that_does_not_answer_leaves_its_machine_listed(
    bridge: RedfishBridge, provider: RedfishProvider
) -> None:
    """Issue #55: one failing BMC neither fails the listing of the others nor drops its own
    machine (the orphan GC would take a dropped one for returned). Fails without it: the
    whole `list_owned` raised RetryableError."""
    held = provider.create(spec("nc-listed"))
    other = provider.create(spec("nc-dark"))
    dark = machine_of(other.id)
    values = bridge.nodeclass_block("bmc-login", "login")
    for entry in values["machines"]:
        if entry["name"] == dark:
            entry["bmc"] = "http://127.0.0.1:9/redfish/v1"  # nothing listens on port 9
    blind = RedfishProvider(RedfishClass.model_validate(values), logins(bridge))
    try:
        listed = {i.id: i.state for i in blind.list_owned("c1")}
    finally:
        blind.close()
    assert held.id in listed and other.id in listed


def test_a_holding_recorded_before_uids_is_resumed_under_its_name(
    bridge: RedfishBridge, provider: RedfishProvider
) -> None:
    """A create retried across the upgrade finds its claim's record without a uid: it resumes
    it, and the id it returns still finds the holding. Fails without it: the id named the
    uid the record lacks, so `get` took the machine for returned."""
    machine = next(
        m.name
        for m in bridge.machines
        if bridge.seed.read(m.name, "meta-data") is None and bridge.power_state(m.name) == "Off"
    )
    bridge.seed.write(
        machine,
        "meta-data",
        b'cloudburst.io/cluster: "c1"\ncloudburst.io/nodeclaim: "nc-old"\n'
        b'cloudburst.io/instance-type: "metal-16c64g"\n',
    )
    inst = provider.create(claim("nc-old", "team-a", "uid-old", "cccccc.cccccccccccccccc"))
    assert inst.id == f"redfish/on-prem/nc-old/{machine}"
    assert provider.get(inst.id) is not None
    assert provider.list_owned("c1") and bridge.seed.seeded(machine)
