"""What a VM's first boot read outside the VM goes once its node has joined: the claim's
`label_node` (the call that makes it Ready) has a Proxmox seed ISO, which holds the join
script, detached and deleted — on Kubernetes' own API server and the Proxmox stand-in."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from activities.kube import KubeActivities
from activities.providers.base import InstanceSpec, split_instance_id
from activities.providers.proxmox import ProxmoxProvider
from api import labels
from api.messages import LabelNodeInput
from api.nodeclaim import Offering
from cluster.tenancy import Tenancy
from sim.clouds.proxmox import SHAPES, ProxmoxStandin
from tests.activities.claims import AuthorisedClaim, authorise_claim
from tests.providers.harness_proxmox import block

SHAPE = SHAPES[0][0]


@pytest.fixture
def cloud() -> Iterator[ProxmoxStandin]:
    with ProxmoxStandin(
        nodes=(("pve1", 16, 64),), boot_delay_s=0.05, delete_delay_s=0.05, task_delay_s=0.01
    ) as c:
        yield c


def proxmox_claim(
    api: client.ApiClient, cloud: ProxmoxStandin, namespace: str, name: str
) -> AuthorisedClaim:
    """NodeClaim `name` of a NodeClass with the stand-in's `proxmox` block, its API token in
    the namespace's Secret `pve` (as the block names it)."""
    client.CoreV1Api(api).create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="pve"), string_data={"token": cloud.credential}
        ),
    )
    proxmox = block(cloud).model_dump(mode="json", by_alias=True, exclude_none=True)
    return authorise_claim(
        api,
        namespace,
        name,
        offerings=[Offering(provider="proxmox", region=cloud.cluster, instance_type=SHAPE)],
        node_class={"proxmox": proxmox, "join": {"hostApiServer": "https://127.0.0.1:6443"}},
    )


def test_the_seed_iso_goes_once_the_node_is_ready(
    kube_api_client: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    unique: str,
    made_nodes: list[str],
    cloud: ProxmoxStandin,
) -> None:
    """Issue #54: the seed ISO held the join script on the storage until the VM was deleted.
    Fails without the release in `label_node`: the ISO is still on `seedStorage`, attached as
    the VM's CD-ROM."""
    name = f"burst-pve-{unique}"
    vmid, ready = launched(kube_api_client, cloud, namespace, name, made_nodes)
    assert cloud.storage_files("pve1") == [f"iso/cloudburst-seed-{vmid}.iso"]
    ready()

    assert core.read_node(name).metadata.labels[labels.PROVIDER] == "proxmox"
    assert cloud.storage_files("pve1") == []
    config = (cloud.peek(vmid) or {})["config"]
    assert config["ide2"] == "none,media=cdrom"
    # The release leaves the VM on (its start, landing when the stand-in is next read under
    # load, reads as booting: "pending"), neither stopping nor off.
    assert cloud.instance_states()[vmid] in ("pending", "running")
    ready()  # a retried call: nothing left to release


def test_a_proxmox_that_refuses_does_not_hold_the_node_back(
    kube_api_client: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    unique: str,
    made_nodes: list[str],
    cloud: ProxmoxStandin,
) -> None:
    """Best effort: the node is labelled (and its claim goes Ready) while the Proxmox API
    refuses; the seed stays until the VM is deleted, which removes it too, and a Warning Event
    on the NodeClaim says so. Fails if the release's error is raised: the 401 fails
    `label_node`, and the claim with it."""
    name = f"burst-pve-{unique}"
    vmid, ready = launched(kube_api_client, cloud, namespace, name, made_nodes)
    cloud.inject_failure("list", "auth", times=None)
    ready()
    assert core.read_node(name).metadata.labels[labels.PROVIDER] == "proxmox"
    assert cloud.storage_files("pve1") == [f"iso/cloudburst-seed-{vmid}.iso"]
    # Said where the NodeClaim's owner looks, with what to fix.
    said = [
        e
        for e in core.list_namespaced_event(namespace).items
        if e.reason == "FirstBootMaterialKept" and e.involved_object.name == name
    ]
    assert [(e.type, e.involved_object.kind) for e in said] == [("Warning", "NodeClaim")]
    message = str(said[0].message)
    assert "stays until the VM is deleted" in message and "apiTokenSecretRef" in message


def launched(
    api: client.ApiClient,
    cloud: ProxmoxStandin,
    namespace: str,
    name: str,
    made_nodes: list[str],
) -> tuple[str, Callable[[], None]]:
    """Claim `name`'s VM made on the stand-in and its Node registered: the VM id, and the
    claim's `label_node` call (what makes it Ready)."""
    claim = proxmox_claim(api, cloud, namespace, name)
    spec = InstanceSpec(
        name=name,
        cluster_id="c1",
        node_pool=claim.pool,
        region=cloud.cluster,
        instance_type=SHAPE,
        user_data="#!/bin/sh\necho join\n",
        labels=labels.ownership_labels(name, node_pool=claim.pool, cluster_id="c1"),
        namespace=namespace,
        claim_uid=claim.uid,
    )
    vm = ProxmoxProvider(block(cloud), cloud.credential, namespace).create(spec)
    vmid = split_instance_id(vm.id)[2].rpartition("/")[2]
    # The VM's kubelet registers its Node (the providerID its first-boot script gives).
    made_nodes.append(name)
    client.CoreV1Api(api).create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1NodeSpec(provider_id=f"proxmox:///{cloud.cluster}/{vmid}"),
        )
    )
    acts = KubeActivities(api, Tenancy(allowed_endpoints={"proxmox": (cloud.endpoint,)}))
    asked = LabelNodeInput(
        node_name=name,
        instance_id=vm.id,
        labels={labels.PROVIDER: "proxmox", labels.INSTANCE_TYPE: SHAPE},
        namespace=namespace,
        claim_uid=claim.uid,
    )
    return vmid, lambda: claim.env().run(acts.label_node, asked)
