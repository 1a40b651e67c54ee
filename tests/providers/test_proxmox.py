"""What only Proxmox VE has: the node whitelist, the VM id range, room on the hosts, the
`available` count, the seed ISO and SMBIOS serial, and a create resumed from its description."""

from __future__ import annotations

import hashlib
import io
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pycdlib
import pytest

from activities.providers.base import (
    CapacityError,
    FatalError,
    InstanceSpec,
    ProviderError,
    split_instance_id,
)
from activities.providers.proxmox import ProxmoxProvider, _verify
from api import labels as L
from sim.clouds.proxmox import GIB, SHAPES, TEMPLATE_VMID, ProxmoxStandin
from tests.providers.harness_proxmox import VMID_RANGE, block

SMALL = SHAPES[0][0]  # 2 cpu, 4 GiB


@pytest.fixture
def cloud() -> Iterator[ProxmoxStandin]:
    nodes = (("pve1", 16, 64), ("pve2", 16, 64), ("pve3", 16, 64))
    with ProxmoxStandin(
        nodes=nodes, boot_delay_s=0.05, delete_delay_s=0.05, task_delay_s=0.01
    ) as c:
        yield c


def spec(name: str, shape: str = SMALL, user_data: str = "#!/bin/sh\necho hi\n") -> InstanceSpec:
    return InstanceSpec(
        name=name,
        cluster_id="c1",
        node_pool="burst",
        region="pve",
        instance_type=shape,
        user_data=user_data,
        labels=L.ownership_labels(name, node_pool="burst", cluster_id="c1"),
    )


def provider(cloud: ProxmoxStandin, **overrides: object) -> ProxmoxProvider:
    return ProxmoxProvider(block(cloud, **overrides), cloud.credential)


def vmid_of(iid: str) -> str:
    """The VM id, the instance id's last segment (`proxmox/<cluster>/<claim>/<vmid>`)."""
    return split_instance_id(iid)[2].rpartition("/")[2]


def wait_for(fn: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := fn()):
        assert time.monotonic() < deadline, f"timed out waiting; last value {value!r}"
        time.sleep(0.02)
    return value


def vm(cloud: ProxmoxStandin, iid: str) -> dict[str, object]:
    found = cloud.peek(vmid_of(iid))
    assert found is not None
    return found


def test_vms_go_to_whitelisted_nodes_and_ids_in_range(cloud: ProxmoxStandin) -> None:
    p = provider(cloud, nodes=["pve2", "pve3"])
    made = [p.create(spec(f"nc-{i}")) for i in range(4)]
    for inst in made:
        detail = vm(cloud, inst.id)
        assert detail["node"] in ("pve2", "pve3")
        assert VMID_RANGE[0] <= int(vmid_of(inst.id)) <= VMID_RANGE[1]
    # Spread: the emptiest node is chosen each time.
    assert {vm(cloud, i.id)["node"] for i in made} == {"pve2", "pve3"}


def test_a_claims_vm_is_tagged_sized_seeded_and_serialled(cloud: ProxmoxStandin) -> None:
    p = provider(cloud)
    inst = p.create(spec("nc-seed", shape="vm-4c8g", user_data="#!/bin/bash\necho ünï\n"))
    vmid = int(vmid_of(inst.id))
    detail = vm(cloud, inst.id)
    assert detail["cores"] == 4 and detail["memory_mib"] == 8 * 1024
    assert detail["serial"] == str(vmid)  # what the first-boot script reads for --provider-id
    config = detail["config"]
    assert isinstance(config, dict)
    tags = set(str(config["tags"]).split(";"))
    assert {
        "cloudburst",
        "cb-cluster.c1",
        "cb-nodeclaim.nc-seed",
        "cb-instance-type.vm-4c8g",
    } <= tags
    # The template's cloud-init drive is replaced by the claim's seed (and kept as unused).
    assert config["ide2"] == f"local:iso/cloudburst-seed-{vmid}.iso,media=cdrom"
    assert "vm-9000-cloudinit" in str(config.get("unused0"))
    assert "cloudburst.io/nodeclaim=nc-seed" in str(config["description"])
    node = str(detail["node"])
    seed = cloud.storage[(node, "local")][f"iso/cloudburst-seed-{vmid}.iso"]
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(seed))
    assert iso.pvd.volume_identifier.strip() == b"cidata"
    out = io.BytesIO()
    iso.get_file_from_iso_fp(out, rr_path="/meta-data")
    assert b"local-hostname: nc-seed" in out.getvalue()
    iso.close()
    assert detail["user_data"] == "#!/bin/bash\necho ünï\n"
    # Deleting the VM deletes its seed (it holds a join token).
    p.delete(inst.id)
    assert p.get(inst.id) is None
    assert cloud.storage_files(node) == []


def test_no_room_on_the_hosts_is_capacity(cloud: ProxmoxStandin) -> None:
    p = provider(cloud, nodes=["pve1"])
    # 64 GiB, the host using 57: room for one 4 GiB VM (+256 MiB), not two.
    cloud.set_host_used("pve1", 57 * GIB)
    p.create(spec("nc-first"))
    with pytest.raises(CapacityError, match="no whitelisted node has room"):
        p.create(spec("nc-second"))
    assert cloud.stats()["created_by_name"].get("nc-second") is None


def test_an_unreachable_node_offers_no_room(cloud: ProxmoxStandin) -> None:
    p = provider(cloud, nodes=["pve1", "pve2"])
    cloud.set_online("pve1", False)
    inst = p.create(spec("nc-online"))
    assert vm(cloud, inst.id)["node"] == "pve2"
    cloud.set_online("pve2", False)
    with pytest.raises(CapacityError, match="no node answered"):
        p.create(spec("nc-offline"))


def test_an_exhausted_vmid_range_is_capacity(cloud: ProxmoxStandin) -> None:
    p = provider(cloud, vmid_range={"lower": 1200, "upper": 1202})
    cloud.add_guest(1201, "pve3", running=False)  # someone else's VM in the range
    p.create(spec("nc-a"))
    p.create(spec("nc-b"))
    with pytest.raises(CapacityError, match="no free VM id"):
        p.create(spec("nc-c"))


def test_available_counts_what_still_fits(cloud: ProxmoxStandin) -> None:
    p = provider(cloud, nodes=["pve1"])
    # 16 cpu, 64 GiB of which the host uses 2: the 2-cpu shape is bounded by cpu (8), the
    # 8-cpu one by cpu (2); each VM of ours also holds 256 MiB of overhead.
    before = {t.name: t.available for t in p.instance_types()}
    assert before == {"vm-2c4g": 8, "vm-4c8g": 4, "vm-8c16g": 2}
    p.create(spec("nc-avail", shape="vm-8c16g"))
    after = {t.name: t.available for t in p.instance_types()}
    assert after == {"vm-2c4g": 4, "vm-4c8g": 2, "vm-8c16g": 1}
    # Others' running VMs hold room too; the free VM ids bound the count.
    cloud.add_guest(500, "pve1", cores=8, memory_mib=1024)
    assert {t.name: t.available for t in p.instance_types()}["vm-2c4g"] == 0
    small_range = provider(cloud, nodes=["pve2"], vmid_range={"lower": 1200, "upper": 1201})
    assert {t.name: t.available for t in small_range.instance_types()}["vm-2c4g"] == 1
    types = small_range.instance_types()
    assert all(t.regions == ["pve"] and t.price_eur_per_hour == 0.0 for t in types)


def test_an_interrupted_create_is_resumed_not_repeated(cloud: ProxmoxStandin) -> None:
    p = provider(cloud)
    name = "nc-resume"
    # An earlier attempt cloned the VM (name and description) and died before its tags.
    with cloud._lock:
        cloud._clone(
            "pve1",
            TEMPLATE_VMID,
            {
                "newid": "1250",
                "name": name,
                "description": "cloudburst.io/cluster=c1\ncloudburst.io/nodeclaim=nc-resume",
                "target": "pve2",
            },
        )
    inst = p.create(spec(name))
    assert inst.id == "proxmox/pve/nc-resume/1250"
    assert cloud.stats()["created_by_name"][name] == 1
    assert vm(cloud, inst.id)["serial"] == "1250"
    got = p.get(inst.id)
    assert got is not None and got.labels[L.NODECLAIM] == name


def test_a_vm_of_the_same_name_that_is_not_the_claims_is_left_alone(
    cloud: ProxmoxStandin,
) -> None:
    p = provider(cloud)
    with cloud._lock:
        cloud._clone("pve1", TEMPLATE_VMID, {"newid": "1260", "name": "nc-stranger"})
    inst = p.create(spec("nc-stranger"))
    assert vmid_of(inst.id) != "1260"
    assert p.get("proxmox/pve/1260") is None  # not ours: never reported, never deleted


def test_credential_problems_are_fatal_and_name_the_field(cloud: ProxmoxStandin) -> None:
    with pytest.raises(FatalError, match="user@realm!tokenid=secret") as caught:
        ProxmoxProvider(block(cloud), "just-a-secret")
    assert "just-a-secret" not in str(caught.value)
    wrong = ProxmoxProvider(block(cloud), "cloudburst@pve!burst=wrong-secret")
    with pytest.raises(FatalError, match="apiTokenSecretRef") as caught:
        wrong.create(spec("nc-auth"))
    assert "wrong-secret" not in str(caught.value)


def test_an_untrusted_certificate_is_fatal_and_says_cabundle(cloud: ProxmoxStandin) -> None:
    p = provider(cloud, ca_bundle=None)
    with pytest.raises(FatalError, match="caBundle"):
        p.instance_types()
    insecure = provider(cloud, ca_bundle=None, verify_tls=False)
    assert insecure.instance_types()


def test_the_ca_bundle_trusted_is_the_blocks_not_a_file_planted_beside_it(
    cloud: ProxmoxStandin,
) -> None:
    # Another user of the host writes, ahead of us, a CA of theirs where a shared temporary
    # directory would keep this block's bundle: it must not become the CA we trust.
    digest = hashlib.sha256(cloud.ca_pem.encode()).hexdigest()[:16]
    planted = Path(tempfile.gettempdir()) / f"cloudburst-proxmox-ca-{digest}.pem"
    planted.write_text("-----BEGIN CERTIFICATE-----\nnot the block's\n")
    try:
        trusted = _verify(block(cloud))
        assert isinstance(trusted, str)
        assert Path(trusted).read_text() == cloud.ca_pem
        assert Path(trusted).parent.stat().st_mode & 0o077 == 0  # no one else's to write
        assert provider(cloud).instance_types()
    finally:
        planted.unlink()


def test_netboot_makes_a_vm_that_boots_from_the_network(cloud: ProxmoxStandin) -> None:
    p = provider(cloud, template=None, netboot=True, bridge="vmbr1")
    inst = p.create(spec("nc-netboot"))
    config = vm(cloud, inst.id)["config"]
    assert isinstance(config, dict)
    assert config["boot"] == "order=net0" and config["net0"] == "virtio,bridge=vmbr1"
    assert str(config["ide2"]).endswith(",media=cdrom")
    assert vm(cloud, inst.id)["user_data"] == "#!/bin/sh\necho hi\n"


def test_a_failed_start_removes_the_vm(cloud: ProxmoxStandin) -> None:
    p = provider(cloud)
    cloud.inject_failure("start", "capacity")
    with pytest.raises(CapacityError, match="Cannot allocate memory"):
        p.create(spec("nc-nomem"))
    assert not any((cloud.peek(v) or {}).get("name") == "nc-nomem" for v in cloud.instance_states())
    with pytest.raises(ProviderError):
        p.create(spec("nc-bad-shape", shape="vm-64c"))


def test_a_reused_vmids_new_vm_survives_an_old_claims_retried_delete(
    cloud: ProxmoxStandin,
) -> None:
    """Issue #55: a VM is known by its claim's uid, not by its VM id alone. Fails without it:
    the old claim's id was `proxmox/pve/1200`, and its retried delete destroyed the new
    claim's VM, which had been given the same id at once."""
    p = provider(cloud, vmid_range={"lower": 1200, "upper": 1200})
    old = p.create(spec("nc-old").model_copy(update={"namespace": "team-a", "claim_uid": "u-old"}))
    p.delete(old.id)
    new = p.create(spec("nc-new").model_copy(update={"namespace": "team-b", "claim_uid": "u-new"}))
    assert vmid_of(new.id) == vmid_of(old.id) == "1200"
    assert p.get(old.id) is None
    p.delete(old.id)  # the old claim's delete, retried
    kept = p.get(new.id)
    assert kept is not None and kept.labels[L.NODEPOOL_NAMESPACE] == "team-b"
    assert kept.labels[L.NODECLAIM_UID] == "u-new"
    config = vm(cloud, new.id)["config"]
    assert isinstance(config, dict)
    assert any("cloudburst-seed-1200" in str(v) for v in config.values())


def restart(p: ProxmoxProvider, node: str, vmid: str) -> str:
    """Stop the VM and start it again (as an operator or a host's reboot would): the start
    task's exit status."""
    vm_api = p.api.nodes(node).qemu(vmid)
    exit_status = ""
    for action in (vm_api.status.stop, vm_api.status.start):
        upid = action.post()
        task = p.api.nodes(node).tasks(upid).status

        def stopped(task: Any = task) -> dict[str, Any] | None:
            status = task.get()
            return status if status.get("status") == "stopped" else None

        exit_status = str(wait_for(stopped)["exitstatus"])
    return exit_status


def test_a_released_seed_is_detached_and_deleted_and_the_vm_restarts(
    cloud: ProxmoxStandin,
) -> None:
    """Issue #54: once the node has joined, the seed ISO (the join script) leaves the storage.
    Fails without `release_first_boot` (the base class's, a no-op: the ISO stays until the
    VM is deleted), and without the detach (the ISO deleted while attached: the VM's next
    start fails, `volume ... does not exist`)."""
    p = provider(cloud)
    inst = p.create(spec("nc-release"))
    vmid = vmid_of(inst.id)
    node = str(vm(cloud, inst.id)["node"])
    assert cloud.storage_files(node) == [f"iso/cloudburst-seed-{vmid}.iso"]

    p.release_first_boot(inst.id)
    assert cloud.storage_files(node) == []
    config = vm(cloud, inst.id)["config"]
    assert isinstance(config, dict)
    assert config["ide2"] == "none,media=cdrom"
    assert not any("cloudburst-seed" in str(v) for v in config.values())
    p.release_first_boot(inst.id)  # again: nothing left to do, no error
    got = p.get(inst.id)
    assert got is not None and got.state.value == "running"
    assert restart(p, node, vmid) == "OK"
    p.delete(inst.id)
    assert p.get(inst.id) is None


def test_a_seed_is_released_for_its_own_claims_id_only(cloud: ProxmoxStandin) -> None:
    """An id naming another claim with the VM's id (VM ids are reused at once) releases
    nothing: the seed is the VM's present claim's."""
    p = provider(cloud)
    inst = p.create(spec("nc-kept"))
    vmid = vmid_of(inst.id)
    node = str(vm(cloud, inst.id)["node"])
    p.release_first_boot(f"proxmox/pve/nc-earlier/{vmid}")
    assert cloud.storage_files(node) == [f"iso/cloudburst-seed-{vmid}.iso"]
    config = vm(cloud, inst.id)["config"]
    assert isinstance(config, dict)
    assert config["ide2"] == f"local:iso/cloudburst-seed-{vmid}.iso,media=cdrom"
