"""A Node is a claim's only if its providerID names the claim's VM."""

from __future__ import annotations

import pytest

from cluster.node_identity import is_claims_node, stranger_message

# (our instance id, the providerID its node carries): ours, and each cloud's CCM's form.
ITS_OWN = [
    ("fake/sim-1/42", "fake:///sim-1/42"),
    ("aws/eu-west-1/i-0abc", "aws:///eu-west-1/i-0abc"),
    ("aws/eu-west-1/i-0abc", "aws:///eu-west-1a/i-0abc"),
    ("gcp/europe-west1-b/web-x7k2p", "gce://my-project/europe-west1-b/web-x7k2p"),
    ("gcp/europe-west1-b/web-x7k2p", "gcp:///europe-west1-b/web-x7k2p"),
    ("hetzner/fsn1/42001337", "hcloud://42001337"),
    ("hetzner/fsn1/42001337", "hetzner:///fsn1/42001337"),
    ("scaleway/fr-par-1/1f2e", "scaleway://instance/fr-par-1/1f2e"),
    ("digitalocean/fra1/2756294", "digitalocean://2756294"),
    ("ovh/GRA11/9a8b", "openstack:///9a8b"),
    ("proxmox/pve/1251", "proxmox:///pve/1251"),
    ("proxmox/pve/1251", "proxmox://cluster/vms/1251"),  # KubeNodeSmith's form
    ("redfish/on-prem/burst-x7k2p/rack1-07", "redfish:///on-prem/rack1-07"),
    (
        "azure/westeurope/web-x7k2p",
        "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/"
        "virtualMachines/web-x7k2p",
    ),
]


@pytest.mark.parametrize(("instance", "provider_id"), ITS_OWN)
def test_the_claims_vm_is_its_node(instance: str, provider_id: str) -> None:
    assert is_claims_node(provider_id, instance)


@pytest.mark.parametrize(
    ("instance", "provider_id"),
    [
        ("fake/sim-1/42", "fake:///sim-1/43"),  # another VM
        ("fake/sim-1/42", "fake:///sim-1/142"),  # a longer id ending the same
        ("proxmox/pve/1251", "proxmox:///pve/12510"),
        ("redfish/on-prem/burst-x7k2p/rack1-07", "redfish:///on-prem/rack1-08"),
        ("aws/eu-west-1/i-0abc", "gce://p/z/i-0abc"),  # another cloud, the same name
        ("fake/sim-1/42", ""),  # nobody set it: proves nothing
        ("fake/sim-1/42", None),
        (None, "fake:///sim-1/42"),  # no VM yet: no node can be the claim's
        ("fake/sim-1/42", "fake-sim-1-42"),  # not a providerID
        ("fake/sim-1/42", "fake://"),
    ],
)
def test_any_other_node_is_a_stranger(instance: str | None, provider_id: str | None) -> None:
    assert not is_claims_node(provider_id, instance)


def test_a_stranger_is_named_with_both_ids() -> None:
    said = stranger_message("web-x7k2p", "fake:///sim-1/9", "fake/sim-1/42")
    assert "fake:///sim-1/9" in said and "fake/sim-1/42" in said and "web-x7k2p" in said
    assert "no providerID" in stranger_message("web-x7k2p", None, "fake/sim-1/42")
