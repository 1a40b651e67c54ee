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


# Each shares the claim's VM id as its last segment — what the check compared until it read
# the whole providerID (issue #54): every one of these was adopted as the claim's node.
SHARES_ONLY_THE_SUFFIX = [
    ("fake/sim-1/42", "fake:///other-region/42"),
    ("fake/sim-1/42", "fake:///x/sim-1/42"),  # more segments, ending the same
    ("fake/sim-1/42", "fake://attacker/sim-1/42"),
    ("aws/eu-west-1/i-0abc", "aws:///us-east-1/i-0abc"),
    ("aws/eu-west-1/i-0abc", "aws:///us-east-1a/i-0abc"),  # a zone of another region
    ("aws/eu-west-1/i-0abc", "aws:///eu-west-1/extra/i-0abc"),
    ("gcp/europe-west1-b/web-x7k2p", "gce://my-project/us-central1-a/web-x7k2p"),
    ("gcp/europe-west1-b/web-x7k2p", "gce://my-project/x/europe-west1-b/web-x7k2p"),
    ("hetzner/fsn1/42001337", "hetzner:///nbg1/42001337"),
    ("hetzner/fsn1/42001337", "hcloud://x/42001337"),
    ("scaleway/fr-par-1/1f2e", "scaleway://instance/nl-ams-1/1f2e"),
    ("scaleway/fr-par-1/1f2e", "scaleway://baremetal/fr-par-1/1f2e"),
    ("digitalocean/fra1/2756294", "digitalocean://droplets/2756294"),
    ("ovh/GRA11/9a8b", "openstack://SBG5/9a8b"),
    ("proxmox/pve/1251", "proxmox:///other-cluster/1251"),
    ("proxmox/pve/1251", "proxmox://cluster/templates/1251"),
    ("redfish/on-prem/burst-x7k2p/rack1-07", "redfish:///other-site/rack1-07"),
    ("plugin/lab-1/mini-01.3", "plugin:///lab-2/mini-01.3"),
    (
        "azure/westeurope/web-x7k2p",
        "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/"
        "virtualMachines/web-x7k2p",
    ),
    (
        "azure/westeurope/web-x7k2p",
        "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/"
        "virtualMachines/WEB-X7K2P",
    ),
]


@pytest.mark.parametrize(("instance", "provider_id"), SHARES_ONLY_THE_SUFFIX)
def test_a_node_sharing_only_the_vms_id_is_a_stranger(instance: str, provider_id: str) -> None:
    """The whole providerID is compared for each form a provider's nodes carry: a machine that
    registers with another region's, another zone's, another resource's or a longer path ending
    in the claim's VM id is not the claim's VM (fails on the last-segment comparison)."""
    assert not is_claims_node(provider_id, instance)


def test_scheme_and_azures_fixed_words_are_read_without_case() -> None:
    assert is_claims_node("FAKE:///sim-1/42", "fake/sim-1/42")
    assert is_claims_node(
        "azure:///subscriptions/S/resourcegroups/RG/providers/microsoft.compute/"
        "virtualmachines/web-x7k2p",
        "azure/westeurope/web-x7k2p",
    )


def test_a_stranger_is_named_with_both_ids() -> None:
    said = stranger_message("web-x7k2p", "fake:///sim-1/9", "fake/sim-1/42")
    assert "fake:///sim-1/9" in said and "fake/sim-1/42" in said and "web-x7k2p" in said
    assert "no providerID" in stranger_message("web-x7k2p", None, "fake/sim-1/42")
