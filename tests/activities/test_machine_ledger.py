"""A bare-metal machine that passes to another namespace is wiped first (issue #55): the
worker's ledger of machines (ConfigMap cloudburst-machines in its namespace, written as the
worker's ServiceAccount with the shipped RBAC, on the session's control plane) and the
operator's wipe image, against sushy-tools' Redfish emulator.

What the emulator shows: the returned machine is powered off, the wipe image inserted as
virtual CD with a one-time boot from it, powered on; the worker sees it run and then power
off. What it cannot show: a real wipe (its fake systems have no disks; `WipeImage` plays the
image, powering the machine off after a second) nor a BMC's own secure erase (no
`Drive.SecureErase` in sushy-tools)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from activities.machine_ledger import tenant_provider
from activities.providers.base import CapacityError, InstanceSpec, Provider
from activities.providers.redfish import RedfishProvider
from api.nodeclass import RedfishClass
from cluster.tenancy import Tenancy
from sim.clouds.redfish import RedfishBridge, SeedServer, WipeImage, inventory
from tests.providers.harness_redfish import block, logins

SHAPE = "metal-16c64g"


@pytest.fixture
def bridge() -> Iterator[RedfishBridge]:
    """One machine, a fresh emulator per test (what one test leaves in the ledger, a machine
    released to its namespace, is no other test's start)."""
    with RedfishBridge(machines=inventory((("shared", 1, 16, 64),)), poll_s=0.1) as b:
        b.seed.write("images", "wipe.iso", b"a wipe image")
        yield b


def wipe_url(bridge: RedfishBridge) -> str:
    return f"{bridge.seed.url}/images/wipe.iso"


def provider_for(
    namespace: str,
    bridge: RedfishBridge,
    tenancy: Tenancy,
    worker: client.ApiClient,
    inventory: RedfishClass | None = None,
    credential: str | None = None,
) -> Provider:
    """What the worker's activities build for a claim of `namespace` (its NodeClass's
    `inventory`, the bridge's by default): its ledger read and written as the worker."""
    core = client.CoreV1Api(worker)
    return tenant_provider(
        RedfishProvider,
        inventory or block(bridge),
        credential or logins(bridge),
        namespace,
        tenancy,
        core,
        core,
    )


def claim(name: str, namespace: str, cluster_id: str) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        cluster_id=cluster_id,
        node_pool="metal",
        region="on-prem",
        instance_type=SHAPE,
        user_data="#!/bin/sh\n",
        namespace=namespace,
        claim_uid=f"uid-{namespace}-{name}",
    )


def free(provider: Provider) -> int:
    return sum(t.available or 0 for t in provider.instance_types() if t.name == SHAPE)


def returned(provider: Provider, instance_id: str, during: list[object]) -> None:
    """Delete as `delete_instance` does (ask, then look until gone, asking again now and
    then), calling `during` each look."""
    provider.delete(instance_id)
    asked = time.monotonic()
    while provider.get(instance_id) is not None:
        for check in during:
            assert callable(check)
            check()
        if time.monotonic() - asked > 30:
            provider.delete(instance_id)
            asked = time.monotonic()
        time.sleep(0.3)


def test_a_machine_changing_namespace_is_wiped_first(
    bridge: RedfishBridge, worker_api_client: client.ApiClient, unique: str
) -> None:
    """team-a's claim holds the one machine, then returns it; team-b's claim wants it. With a
    wipe image configured the machine boots it once and team-b gets nothing until the wipe
    image has run and powered it off; then team-b's create takes it. Fails without the fix:
    team-b took the machine as soon as it was off, with team-a's disks as they were."""
    team_a, team_b = f"team-a-{unique}", f"team-b-{unique}"
    tenancy = Tenancy(
        namespaces=frozenset({team_a, team_b}),
        allowed_endpoints={"redfish": (bridge.url, bridge.seed.url)},
        machine_wipe_image_url=wipe_url(bridge),
    )
    a = provider_for(team_a, bridge, tenancy, worker_api_client)
    b = provider_for(team_b, bridge, tenancy, worker_api_client)
    cluster_id = f"c-{unique}"
    held = a.create(claim("nc", team_a, cluster_id))
    assert free(b) == 0

    refused_while_wiping: list[str] = []

    def team_b_gets_nothing() -> None:
        assert free(b) == 0
        with pytest.raises(CapacityError) as refused:
            b.create(claim("nc", team_b, cluster_id))
        refused_while_wiping.append(str(refused.value))

    with WipeImage(bridge, wipe_url(bridge)) as wipe:
        returned(a, held.id, [team_b_gets_nothing])
        assert wipe.wiped == {"shared-01": 1}, wipe.wiped
    assert refused_while_wiping, "the wipe was never seen under way"
    # The wipe image is ejected; team-b's claim takes the clean machine.
    assert free(b) == 1
    taken = b.create(claim("nc", team_b, cluster_id))
    assert taken.id.endswith("/shared-01")
    with WipeImage(bridge, wipe_url(bridge)) as wipe:
        returned(b, taken.id, [])  # wiped again on its way back
        assert wipe.wiped == {"shared-01": 1}, wipe.wiped


def test_without_a_wipe_only_the_namespace_that_held_a_machine_takes_it_again(
    bridge: RedfishBridge, worker_api_client: client.ApiClient, unique: str
) -> None:
    """No wipe image configured: team-a's returned machine is never offered to team-b (its
    refusal names no other tenant), and team-a's next claim takes it. Fails without the fix:
    team-b was offered it and took it."""
    team_a, team_b = f"team-a-{unique}", f"team-b-{unique}"
    tenancy = Tenancy(
        namespaces=frozenset({team_a, team_b}),
        allowed_endpoints={"redfish": (bridge.url, bridge.seed.url)},
    )
    a = provider_for(team_a, bridge, tenancy, worker_api_client)
    b = provider_for(team_b, bridge, tenancy, worker_api_client)
    cluster_id = f"c-{unique}"
    first = a.create(claim("first", team_a, cluster_id))
    returned(a, first.id, [])
    while bridge.power_state("shared-01") != "Off":
        time.sleep(0.3)
    assert free(b) == 0
    with pytest.raises(CapacityError) as refused:
        b.create(claim("nc", team_b, cluster_id))
    assert team_a not in str(refused.value)
    assert free(a) == 1
    again = a.create(claim("again", team_a, cluster_id))
    returned(a, again.id, [])


def test_a_claim_whose_record_lost_the_machine_in_the_ledger_never_powers_it_off(
    bridge: RedfishBridge, worker_api_client: client.ApiClient, unique: str
) -> None:
    """Two namespaces reach the one machine through two seed servers. team-a's claim holds
    it; team-b's create wrote its record on its own seed server and stopped there (a crash,
    or the ledger refused it). team-b's claim is deleted: its record goes, team-a's machine
    keeps running, and team-b's look finds nothing of its own. Fails without the fix: team-b's
    delete powered off team-a's node, since its seed server said the machine was team-b's."""
    team_a, team_b = f"team-a-{unique}", f"team-b-{unique}"
    tenancy = Tenancy(
        namespaces=frozenset({team_a, team_b}),
        allowed_endpoints={"redfish": (bridge.url, bridge.seed.url)},
    )
    cluster_id = f"c-{unique}"
    a = provider_for(team_a, bridge, tenancy, worker_api_client)
    held = a.create(claim("nc", team_a, cluster_id))
    while bridge.power_state("shared-01") != "On":
        time.sleep(0.3)

    other_seeds = SeedServer()
    other_seeds.start()
    try:
        b_claim = claim("nc", team_b, cluster_id)
        labels = b_claim.holder_labels()
        other_seeds.write(
            "shared-01",
            "meta-data",
            "".join(
                f'{k}: "{v}"\n' for k, v in {**labels, "cloudburst-machine": "shared-01"}.items()
            ).encode(),
        )
        b = provider_for(
            team_b, bridge, tenancy, worker_api_client, block(bridge, seedUrl=other_seeds.url)
        )
        [found] = b.list_owned(cluster_id)  # the delete of a claim without its id finds this
        assert b.get(found.id) is None
        b.delete(found.id)
        assert other_seeds.read("shared-01", "meta-data") is None
        time.sleep(2)  # the fake driver would land a power-off within 1-11 s of a read
        assert bridge.power_state("shared-01") == "On"
        assert a.get(held.id) is not None
    finally:
        other_seeds.stop()
    returned(a, held.id, [])


def test_a_machine_named_otherwise_is_still_the_machine_another_namespace_left(
    bridge: RedfishBridge, worker_api_client: client.ApiClient, unique: str
) -> None:
    """team-a returns the machine unwiped; team-b's NodeClass lists the same BMC under another
    name and without its systemId (the BMC's only system). Fails without the fix: the ledger
    knew the machine by the NodeClass's systemId, so team-b's words made it another machine
    and team-b took team-a's disks."""
    team_a, team_b = f"team-a-{unique}", f"team-b-{unique}"
    tenancy = Tenancy(
        namespaces=frozenset({team_a, team_b}),
        allowed_endpoints={"redfish": (bridge.url, bridge.seed.url)},
    )
    cluster_id = f"c-{unique}"
    a = provider_for(team_a, bridge, tenancy, worker_api_client)
    first = a.create(claim("first", team_a, cluster_id))
    returned(a, first.id, [])
    while bridge.power_state("shared-01") != "Off":
        time.sleep(0.3)

    alias = block(bridge)
    [machine] = alias.machines
    alias = alias.model_copy(
        update={"machines": [machine.model_copy(update={"name": "rack9-42", "system_id": None})]}
    )
    b = provider_for(
        team_b,
        bridge,
        tenancy,
        worker_api_client,
        alias,
        json.dumps({"rack9-42": bridge.credential}),
    )
    assert free(b) == 0
    with pytest.raises(CapacityError):
        b.create(claim("nc", team_b, cluster_id))
