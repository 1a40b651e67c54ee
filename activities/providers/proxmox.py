"""Proxmox VE through `proxmoxer` (its HTTPS backend, with an API token).

- Ownership lives on the VM itself: its tags carry the NodeClass's managed `tag` and the
  claim's ownership labels (`cb-<key>.<value>`, the value escaped as in api/label_tags.py:
  Proxmox tags allow `[a-z0-9_+.-]` only), so that one `GET /cluster/resources?type=vm`
  lists every VM with its owner; the description repeats them as `key=value` lines, written
  by the clone itself, so that a create interrupted before its tags were set is still
  recognised (a VM named like the claim whose description names the claim and cluster).
  The tags and the description carry the claim's namespace and uid: VM ids are reused at
  once, so an instance id is `proxmox/<cluster>/<claim uid>/<vmid>` and a get or delete acts
  only on a VM that still carries that uid (a reused id's new VM survives an old claim's
  retried delete). An id of an earlier release, `proxmox/<cluster>/<vmid>`, is judged by
  the managed tag alone, as it was.
- Create is idempotent: that VM is resumed (configured, started) and returned, never made
  twice. Otherwise a whitelisted node with room is picked (`/nodes/{node}/status` less what
  the running VMs and ours hold, see `_room`) and a free VM id of `vmidRange` (`/cluster/
  resources`, confirmed by `/cluster/nextid?vmid=`); a concurrent create that took the id
  first makes the clone fail and the next id is tried.
- The first-boot script reaches the VM as a cloud-init NoCloud seed ISO (volume label
  `cidata`, files `user-data` and `meta-data`): the API can upload `iso`, `vztmpl` and
  `import` content only, no snippet for `cicustom`, so the seed is uploaded to
  `seedStorage` (`POST /nodes/{node}/storage/{storage}/upload`) and attached as the VM's
  CD-ROM, in place of the template's own cloud-init drive. Once the node has joined, the
  claim's `label_node` has it detached and deleted (`release_first_boot`): it holds the join
  script; `delete` removes the seed of a VM that never got that far.
- The VM's SMBIOS serial is its VM id (`smbios1: serial=<vmid>`): the first-boot script
  reads it from /sys/class/dmi/id/product_serial for the kubelet's --provider-id, since a
  Proxmox VM has no metadata service and the id is chosen after the script is rendered.
- Async calls answer a task id (UPID); the provider waits for clone, start, stop and destroy
  on `/nodes/{node}/tasks/{upid}/status`.
- Errors: 401 → fatal (the token's Secret), 403 → fatal (a missing privilege), 400 →
  fatal, 429 and other 5xx (lock timeouts) → retryable; a node the API cannot reach (595,
  596, 503) or an unreachable API → capacity when creating, retryable otherwise; no node
  with room or no free VM id → capacity; a start that fails (most often out of memory) →
  the VM is destroyed and it is capacity.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import re
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar, NoReturn
from urllib.parse import quote, urlsplit

import pycdlib
import requests
from proxmoxer import ProxmoxAPI, ResourceException

from activities.providers.base import (
    CapacityError,
    FatalError,
    Instance,
    InstanceSpec,
    InstanceState,
    InstanceType,
    Provider,
    RetryableError,
    instance_id,
    split_instance_id,
)
from api import labels as L
from api.label_tags import escape_tag_value, unescape_tag_value
from api.nodeclass import ProxmoxClass, ProxmoxShape

log = logging.getLogger(__name__)

TIMEOUT_S = 15
# A full clone copies the template's disks: minutes for a large one, inside the create
# activity's ten minutes (it heartbeats all along).
CLONE_TIMEOUT_S = 480.0
TASK_TIMEOUT_S = 120.0
TASK_POLL_S = 0.25
# Times a create tries another VM id after a concurrent create took the one it chose.
VMID_ATTEMPTS = 5
GIB = 1024**3
MIB = 1024**2
_AUTH_FIX = "check the API token in the Secret named by NodeClass spec.proxmox.apiTokenSecretRef"
_PRIVILEGE_FIX = (
    "the token lacks a privilege (VM.Allocate, VM.Clone, VM.Config.*, VM.PowerMgmt, "
    "Datastore.AllocateSpace, Datastore.AllocateTemplate, Sys.Audit; docs/providers.md): "
    + _AUTH_FIX
)
_CONFIG_FIX = "check NodeClass spec.proxmox"
# Answers of pveproxy when the node a call is for cannot be reached.
_UNREACHABLE = {503, 595, 596}
LABEL_TAG_PREFIX = "cb-"
# The label keys a VM's tags carry besides the managed tag (the claim's ownership labels)
# and the shape it was made as.
_TAGGED_KEYS = (
    L.CLUSTER,
    L.NODEPOOL,
    L.NODECLAIM,
    L.INSTANCE_TYPE,
    L.NODEPOOL_NAMESPACE,
    L.NODECLAIM_UID,
)
_STATES = {"running": InstanceState.RUNNING, "paused": InstanceState.RUNNING}
# A VM's drive slots (`ide2`, `sata5`, `scsi0`, ...), and a CD-ROM drive with no medium.
_DRIVE = re.compile(r"^(ide|sata|scsi|virtio)[0-9]+$")
_EMPTY_CDROM = "none,media=cdrom"


class ProxmoxProvider(Provider):
    """`credential` is the whole API token, `user@realm!tokenid=secret`."""

    name: ClassVar[str] = "proxmox"
    keeps_first_boot: ClassVar[bool] = True
    block: ProxmoxClass

    def __init__(
        self, block: ProxmoxClass, credential: str | None, namespace: str | None = None
    ) -> None:
        super().__init__(block, credential, namespace)
        user, token_name, token_value = _token_parts(credential)
        endpoint = urlsplit(block.endpoint)
        if endpoint.scheme != "https" or not endpoint.hostname:
            raise FatalError(self.name, "the endpoint is not an https:// URL", _CONFIG_FIX)
        prefix = endpoint.path.rstrip("/").removesuffix("/api2/json").strip("/")
        host = endpoint.hostname
        self.endpoint = block.endpoint.rstrip("/")
        self.api = ProxmoxAPI(
            f"[{host}]" if ":" in host else host,
            port=endpoint.port or 8006,
            path_prefix=prefix or None,
            user=user,
            token_name=token_name,
            token_value=token_value,
            verify_ssl=_verify(block),
            timeout=TIMEOUT_S,
        )
        self.shapes = {s.name: s for s in block.shapes}

    # ---- errors ----------------------------------------------------------------------------

    def _raise(self, exc: Exception, what: str, *, creating: bool = False) -> NoReturn:
        """Map a proxmoxer / requests error to the typed errors (never with the token)."""
        if isinstance(exc, requests.exceptions.SSLError):
            raise FatalError(
                self.name,
                f"{what}: TLS verification of {self.endpoint} failed",
                "put the cluster's CA in NodeClass spec.proxmox.caBundle (or set verifyTls: false)",
            ) from None
        if isinstance(exc, requests.exceptions.Timeout):
            raise RetryableError(self.name, f"{what}: timed out after {TIMEOUT_S}s") from None
        if isinstance(exc, requests.exceptions.ConnectionError):
            detail = f"{what}: cannot reach {self.endpoint}"
            if creating:
                raise CapacityError(self.name, detail) from None
            raise RetryableError(self.name, detail) from None
        if not isinstance(exc, ResourceException):
            raise exc
        status = int(exc.status_code)
        detail = f"{what}: HTTP {status} {exc.content}".strip()
        if exc.errors:
            detail += f" ({_errors_text(exc.errors)})"
        if status == 401:
            raise FatalError(self.name, detail, _AUTH_FIX) from None
        if status == 403:
            raise FatalError(self.name, detail, _PRIVILEGE_FIX) from None
        if status == 400:
            raise FatalError(self.name, detail, f"the request was refused: {_CONFIG_FIX}") from None
        if status in _UNREACHABLE and creating:
            raise CapacityError(self.name, detail) from None
        if status == 429 or status >= 500:
            raise RetryableError(self.name, detail) from None
        raise FatalError(self.name, detail, f"{_CONFIG_FIX} (endpoint {self.endpoint})") from None

    def _call(self, what: str, fn: Any, *args: Any, creating: bool = False, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except (ResourceException, requests.exceptions.RequestException) as exc:
            self._raise(exc, what, creating=creating)

    # ---- reading the cluster ---------------------------------------------------------------

    def _resources(self, what: str) -> list[dict[str, Any]]:
        """Every guest of the cluster (VMs and containers: both take VM ids)."""
        found = self._call(what, self.api.cluster.resources.get, type="vm")
        return [r for r in found or [] if isinstance(r, dict)]

    def _config(self, node: str, vmid: int, what: str) -> dict[str, Any]:
        found = self._call(what, self.api.nodes(node).qemu(vmid).config.get)
        return dict(found or {})

    def _is_ours(self, raw: dict[str, Any]) -> bool:
        return self.block.tag in _tags(raw.get("tags"))

    def _owner(self, raw: dict[str, Any]) -> dict[str, str]:
        """The ownership labels a VM's tags carry (empty when it is not ours)."""
        tags = _tags(raw.get("tags"))
        if self.block.tag not in tags:
            return {}
        labels = {L.MANAGED: "true"}
        for tag in tags:
            key, sep, value = tag.removeprefix(LABEL_TAG_PREFIX).partition(".")
            if tag.startswith(LABEL_TAG_PREFIX) and sep:
                labels[f"{L.GROUP}/{key}"] = unescape_tag_value(value)
        return labels

    def _instance(self, raw: dict[str, Any], status: dict[str, Any] | None = None) -> Instance:
        labels = self._owner(raw)
        shape = labels.pop(L.INSTANCE_TYPE, "")
        live = status or raw
        state = _STATES.get(str(live.get("status")), InstanceState.TERMINATED)
        if live.get("lock") in ("clone", "create") or (
            state is InstanceState.TERMINATED and raw.get("lock")
        ):
            state = InstanceState.PENDING
        holder = labels.get(L.NODECLAIM_UID) or labels.get(L.NODECLAIM)
        native = f"{holder}/{raw['vmid']}" if holder else str(raw["vmid"])
        return Instance(
            id=instance_id(self.name, self.block.cluster, native),
            name=str(raw.get("name") or ""),
            provider=self.name,
            region=self.block.cluster,
            instance_type=shape,
            state=state,
            labels=labels,
        )

    def _vmid(self, value: str) -> tuple[str | None, int]:
        """The claim an instance id names (its uid, or its name for a VM tagged before VMs
        carried uids; None in an id of an earlier release) and the VM id."""
        try:
            provider, _region, native = split_instance_id(value)
            if provider != self.name:
                raise ValueError(provider)
            holder, _, vmid = native.rpartition("/")
            return holder or None, int(vmid)
        except ValueError as exc:
            raise FatalError(self.name, f"{value!r} is not a proxmox instance id") from exc

    def _find(self, vmid: int, what: str, holder: str | None = None) -> dict[str, Any] | None:
        """VM `vmid` when it is ours and, for an id naming a claim, still that claim's; None
        when it is gone, or the id is someone else's now (VM ids are reused at once)."""
        for raw in self._resources(what):
            if raw.get("type") == "qemu" and int(raw.get("vmid") or 0) == vmid:
                if not self._is_ours(raw):
                    return None
                return raw if holder is None or _is_holder(self._owner(raw), holder) else None
        return None

    # ---- Provider --------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> Instance:
        shape = self.shapes.get(spec.instance_type)
        what = f"create VM {spec.name!r} ({spec.instance_type} on {self.block.cluster})"
        if shape is None:
            raise FatalError(
                self.name,
                f"{what}: no shape {spec.instance_type!r}",
                f"offer it in NodeClass spec.proxmox.shapes (now: {', '.join(self.shapes)})",
            )
        if spec.region and spec.region != self.block.cluster:
            raise FatalError(
                self.name,
                f"{what}: the offering's region {spec.region!r} is not this cluster",
                "the region of a proxmox offering is NodeClass spec.proxmox.cluster",
            )
        vms = self._resources(f"{what}: list VMs")
        existing = self._claims_vm(spec, vms, what)
        if existing is not None:
            return self._resume(spec, shape, existing, what)
        node = self._pick_node(shape, vms, what)
        used = {int(r.get("vmid") or 0) for r in vms}
        for _ in range(VMID_ATTEMPTS):
            vmid = self._free_vmid(used, what)
            used.add(vmid)
            if self._make_vm(spec, shape, node, vmid, vms, what):
                break
        else:
            raise RetryableError(self.name, f"{what}: every VM id tried was taken meanwhile")
        self._start(node, vmid, what)
        log.info("created %s as VM %s on %s", spec.name, vmid, node)
        return self._current(node, vmid, what)

    def _claims_vm(
        self, spec: InstanceSpec, vms: list[dict[str, Any]], what: str
    ) -> dict[str, Any] | None:
        """The VM an earlier attempt made for this claim: by its tags, or (tags not written
        yet) by its name and the ownership lines of its description."""
        for raw in vms:
            owner = self._owner(raw)
            if _claims(owner, spec):
                return raw
        lower, upper = self.block.vmid_range.lower, self.block.vmid_range.upper
        for raw in vms:
            vmid = int(raw.get("vmid") or 0)
            if raw.get("type") != "qemu" or raw.get("name") != spec.name:
                continue
            if not lower <= vmid <= upper:
                continue
            config = self._config(str(raw["node"]), vmid, f"{what}: read VM {vmid}")
            recorded = _description_labels(str(config.get("description") or ""))
            if _claims(recorded, spec):
                return raw
        return None

    def _resume(
        self, spec: InstanceSpec, shape: ProxmoxShape, raw: dict[str, Any], what: str
    ) -> Instance:
        """Finish what an earlier attempt started: wait out its clone, configure, start."""
        node, vmid = str(raw["node"]), int(raw["vmid"])
        config = self._wait_unlocked(node, vmid, what)
        if not self._is_ours(raw) or _tags(config.get("tags")) != set(self._vm_tags(spec)):
            self._configure(node, vmid, spec, shape, config, what)
        status = self._call(
            f"{what}: VM {vmid} status", self.api.nodes(node).qemu(vmid).status.current.get
        )
        if str((status or {}).get("status")) != "running":
            self._start(node, vmid, what)
        log.info("VM %s of %s already exists; resumed", vmid, spec.name)
        return self._current(node, vmid, what)

    def _make_vm(
        self,
        spec: InstanceSpec,
        shape: ProxmoxShape,
        node: str,
        vmid: int,
        vms: list[dict[str, Any]],
        what: str,
    ) -> bool:
        """Clone the template (or create the netboot VM) as `vmid`, its seed attached. False
        when a concurrent create took `vmid` first."""
        seed = self._upload_seed(node, vmid, spec, what)
        description = _description(spec)
        common: dict[str, Any] = {"name": spec.name, "description": description}
        if self.block.pool:
            common["pool"] = self.block.pool
        try:
            if self.block.template is not None:
                template_node = self._template_node(vms, what)
                extra: dict[str, Any] = {"full": 1}
                if template_node != node:
                    extra["target"] = node
                if self.block.storage:
                    extra["storage"] = self.block.storage
                upid = (
                    self.api.nodes(template_node)
                    .qemu(self.block.template)
                    .clone.post(newid=vmid, **common, **extra)
                )
            else:
                upid = self.api.nodes(node).qemu.post(
                    vmid=vmid,
                    **common,
                    **self._settings(spec, shape, vmid, seed),
                    net0=f"virtio,bridge={self.block.bridge}",
                    boot="order=net0",
                    ostype="l26",
                )
        except ResourceException as exc:
            if exc.status_code == 500 and "already exists" in str(exc):
                log.info("VM id %s was taken meanwhile; trying another", vmid)
                return False
            self._raise(exc, f"{what}: make VM {vmid} on {node}", creating=True)
        except requests.exceptions.RequestException as exc:
            self._raise(exc, f"{what}: make VM {vmid} on {node}", creating=True)
        timeout = CLONE_TIMEOUT_S if self.block.template is not None else TASK_TIMEOUT_S
        failure = self._wait(upid, f"{what}: make VM {vmid}", timeout)
        if failure is not None:
            raise FatalError(
                self.name,
                f"{what}: making VM {vmid} on {node} failed: {failure}",
                "check NodeClass spec.proxmox (template, storage, seedStorage, nodes: a "
                "template on local storage clones to its own node only)",
            )
        if self.block.template is not None:
            config = self._config(node, vmid, f"{what}: read VM {vmid}")
            self._configure(node, vmid, spec, shape, config, what, seed=seed)
        return True

    def _settings(
        self, spec: InstanceSpec, shape: ProxmoxShape, vmid: int, seed: str, slot: str = "ide2"
    ) -> dict[str, Any]:
        """Size, ownership tags, SMBIOS serial and seed CD-ROM of a claim's VM."""
        return {
            "cores": shape.cpu,
            "memory": shape.memory_gib * 1024,
            "tags": ";".join(self._vm_tags(spec)),
            "smbios1": f"uuid={uuid.uuid4()},serial={vmid}",
            slot: f"{seed},media=cdrom",
        }

    def _configure(
        self,
        node: str,
        vmid: int,
        spec: InstanceSpec,
        shape: ProxmoxShape,
        config: dict[str, Any],
        what: str,
        *,
        seed: str | None = None,
    ) -> None:
        """Set a cloned VM's size, tags, serial and seed (in the slot of the template's own
        cloud-init drive, else the first free of ide2, ide3, sata5)."""
        if seed is None:
            seed = self._upload_seed(node, vmid, spec, what)
        slot = next(
            (
                key
                for key, value in config.items()
                if key[:3] in ("ide", "sat", "scs") and "cloudinit" in str(value)
            ),
            None,
        ) or next(
            (
                key
                for key in ("ide2", "ide3", "sata5")
                if key not in config or seed in str(config[key])
            ),
            "sata5",
        )
        settings = self._settings(spec, shape, vmid, seed, slot)
        self._call(
            f"{what}: configure VM {vmid}",
            self.api.nodes(node).qemu(vmid).config.put,
            **settings,
            creating=True,
        )

    def _vm_tags(self, spec: InstanceSpec) -> list[str]:
        labels = {**spec.holder_labels(), L.INSTANCE_TYPE: spec.instance_type}
        return [self.block.tag] + [
            f"{LABEL_TAG_PREFIX}{key.removeprefix(f'{L.GROUP}/')}.{escape_tag_value(labels[key])}"
            for key in _TAGGED_KEYS
            if key in labels
        ]

    def _upload_seed(self, node: str, vmid: int, spec: InstanceSpec, what: str) -> str:
        """Upload the VM's cloud-init seed ISO (replacing one left by an earlier attempt);
        its volume id."""
        storage = self.block.seed_storage
        filename = _seed_name(vmid)
        volid = self._seed_volid(vmid)
        content = self.api.nodes(node).storage(storage).content
        present = self._call(f"{what}: list {storage} on {node}", content.get, content="iso")
        if any(isinstance(v, dict) and v.get("volid") == volid for v in present or []):
            self._call(
                f"{what}: delete old seed {volid}", content(_segment(volid)).delete, creating=True
            )
        data = _NamedBytes(seed_iso(spec.user_data, _meta_data(spec, vmid)), filename)
        upid = self._call(
            f"{what}: upload seed to {storage} on {node}",
            self.api.nodes(node).storage(storage).upload.post,
            content="iso",
            filename=data,
            creating=True,
        )
        failure = self._wait(upid, f"{what}: upload seed", TASK_TIMEOUT_S)
        if failure is not None:
            raise FatalError(
                self.name,
                f"{what}: uploading the seed to {storage} on {node} failed: {failure}",
                "NodeClass spec.proxmox.seedStorage must be a storage with the iso content "
                "type on every whitelisted node",
            )
        return volid

    def _start(self, node: str, vmid: int, what: str) -> None:
        upid = self._call(
            f"{what}: start VM {vmid}",
            self.api.nodes(node).qemu(vmid).status.start.post,
            creating=True,
        )
        failure = self._wait(upid, f"{what}: start VM {vmid}", TASK_TIMEOUT_S)
        if failure is None:
            return
        # Most often the host is out of memory: the VM goes, the claim tries its next offering.
        try:
            self._destroy(node, vmid, what)
        except (RetryableError, FatalError) as exc:
            log.warning("could not remove VM %s after its failed start: %s", vmid, exc)
        raise CapacityError(self.name, f"{what}: VM {vmid} did not start on {node}: {failure}")

    def _current(self, node: str, vmid: int, what: str) -> Instance:
        status = self._call(
            f"{what}: VM {vmid} status", self.api.nodes(node).qemu(vmid).status.current.get
        )
        config = self._config(node, vmid, f"{what}: read VM {vmid}")
        raw = {"vmid": vmid, "node": node, "name": config.get("name"), "tags": config.get("tags")}
        return self._instance(raw, dict(status or {}))

    def get(self, instance_id: str) -> Instance | None:
        holder, vmid = self._vmid(instance_id)
        what = f"get VM {instance_id}"
        raw = self._find(vmid, what, holder)
        if raw is None:
            return None
        node = str(raw["node"])
        try:
            status = self.api.nodes(node).qemu(vmid).status.current.get()
        except ResourceException as exc:
            if exc.status_code == 500 and "does not exist" in str(exc):
                return None  # destroyed since the cluster's list was made
            self._raise(exc, what)
        except requests.exceptions.RequestException as exc:
            self._raise(exc, what)
        return self._instance(raw, dict(status or {}))

    def list_owned(self, cluster_id: str) -> list[Instance]:
        return [
            self._instance(raw)
            for raw in self._resources(f"list VMs of cluster {cluster_id!r}")
            if raw.get("type") == "qemu" and self._owner(raw).get(L.CLUSTER) == cluster_id
        ]

    def delete(self, instance_id: str) -> None:
        holder, vmid = self._vmid(instance_id)
        what = f"delete VM {instance_id}"
        raw = self._find(vmid, what, holder)
        if raw is None:
            log.info("VM %s already gone", instance_id)
            if not any(int(r.get("vmid") or 0) == vmid for r in self._resources(what)):
                # Its seed is removed only while no VM has the id: a reused id's seed is
                # the later VM's.
                self._remove_seed(list(self.block.nodes), vmid, what)
            return
        node = str(raw["node"])
        self._destroy(node, vmid, what)
        self._remove_seed([node], vmid, what)

    def _destroy(self, node: str, vmid: int, what: str) -> None:
        """Stop the VM (at once: it is being deleted), then destroy it with its disks."""
        vm = self.api.nodes(node).qemu(vmid)
        status = self._call(f"{what}: status", vm.status.current.get)
        if str((status or {}).get("status")) != "stopped":
            upid = self._call(f"{what}: stop", vm.status.stop.post)
            self._wait(upid, f"{what}: stop", TASK_TIMEOUT_S)
        # The template's cloud-init drive, replaced by the seed, is an unused disk: it goes too.
        cleanup = {"purge": 1, "destroy-unreferenced-disks": 1}
        upid = self._call(f"{what}: destroy", lambda: vm.delete(**cleanup))
        failure = self._wait(upid, f"{what}: destroy", TASK_TIMEOUT_S)
        if failure is not None:
            raise RetryableError(self.name, f"{what}: destroying VM {vmid} failed: {failure}")

    def release_first_boot(self, instance_id: str) -> None:
        """Detach the VM's seed ISO (its CD-ROM drive left empty), then delete it from
        `seedStorage`: cloud-init read it at the first boot and keeps its own copy, while the
        ISO holds the join script. Detached first: Proxmox does not start a VM whose drive
        names a volume that no longer exists, so a VM restarted later would fail to."""
        holder, vmid = self._vmid(instance_id)
        what = f"release the seed of VM {instance_id}"
        raw = self._find(vmid, what, holder)
        if raw is None:
            log.info("VM %s is gone or not the claim's: its seed is left to its delete", vmid)
            return
        node = str(raw["node"])
        volid = self._seed_volid(vmid)
        config = self._config(node, vmid, f"{what}: read VM {vmid}")
        drives = {
            slot: _EMPTY_CDROM
            for slot, value in config.items()
            if _DRIVE.match(slot) and str(value).split(",")[0] == volid
        }
        if drives:
            config_api = self.api.nodes(node).qemu(vmid).config
            self._call(
                f"{what}: detach {volid} ({', '.join(sorted(drives))})",
                lambda: config_api.put(**drives),
            )
        self._remove_seed([node], vmid, what)
        log.info("seed %s of VM %s detached and deleted", volid, vmid)

    def _seed_volid(self, vmid: int) -> str:
        return f"{self.block.seed_storage}:iso/{_seed_name(vmid)}"

    def _remove_seed(self, nodes: list[str], vmid: int, what: str) -> None:
        """Delete the VM's seed ISO (it holds a join token) wherever it was uploaded."""
        storage = self.block.seed_storage
        volid = self._seed_volid(vmid)
        for node in nodes:
            content = self.api.nodes(node).storage(storage).content
            try:
                present = content.get(content="iso") or []
                if any(isinstance(v, dict) and v.get("volid") == volid for v in present):
                    content(_segment(volid)).delete()
            except ResourceException as exc:
                if exc.status_code in _UNREACHABLE:
                    continue  # an offline node's storage: nothing of ours can be used there
                self._raise(exc, f"{what}: delete seed {volid} on {node}")
            except requests.exceptions.RequestException as exc:
                self._raise(exc, f"{what}: delete seed {volid} on {node}")

    def instance_types(self) -> list[InstanceType]:
        vms = self._resources("list VMs")
        rooms = self._rooms(vms, "list instance types")
        free_ids = self._free_vmid_count({int(r.get("vmid") or 0) for r in vms})
        return [
            InstanceType(
                provider=self.name,
                name=shape.name,
                vcpu=float(shape.cpu),
                memory_gib=float(shape.memory_gib),
                arch="x86_64",
                regions=[self.block.cluster],
                price_eur_per_hour=self.block.price_eur_per_hour,
                available=min(free_ids, sum(room.fits(shape) for room in rooms.values())),
            )
            for shape in self.block.shapes
        ]

    # ---- placement -------------------------------------------------------------------------

    def _rooms(
        self, vms: list[dict[str, Any]], what: str, *, creating: bool = False
    ) -> dict[str, _Room]:
        """The room left on every whitelisted node that answers."""
        rooms: dict[str, _Room] = {}
        for node in self.block.nodes:
            try:
                status = self.api.nodes(node).status.get()
            except ResourceException as exc:
                if exc.status_code in _UNREACHABLE:
                    log.info("node %s does not answer (%s): no room there", node, exc.status_code)
                    continue
                self._raise(exc, f"{what}: status of node {node}")
            except requests.exceptions.RequestException as exc:
                self._raise(exc, f"{what}: status of node {node}", creating=creating)
            rooms[node] = _room(
                dict(status or {}),
                [v for v in vms if v.get("node") == node],
                self._is_ours,
                self.block.memory_overhead_mib * MIB,
            )
        return rooms

    def _pick_node(self, shape: ProxmoxShape, vms: list[dict[str, Any]], what: str) -> str:
        rooms = self._rooms(vms, what, creating=True)
        fitting = [(room.free_memory, node) for node, room in rooms.items() if room.fits(shape)]
        if not fitting:
            where = ", ".join(
                f"{node}: {room.free_cpu} cpu, {room.free_memory // MIB} MiB free"
                for node, room in rooms.items()
            )
            raise CapacityError(
                self.name,
                f"{what}: no whitelisted node has room for {shape.cpu} cpu and "
                f"{shape.memory_gib} GiB (+{self.block.memory_overhead_mib} MiB overhead) "
                f"({where or 'no node answered'})",
            )
        # The emptiest node: VMs spread over the hosts.
        return max(fitting)[1]

    def _free_vmid(self, used: set[int], what: str) -> int:
        lower, upper = self.block.vmid_range.lower, self.block.vmid_range.upper
        for vmid in range(lower, upper + 1):
            if vmid in used:
                continue
            try:
                self.api.cluster.nextid.get(vmid=vmid)
            except ResourceException as exc:
                if exc.status_code == 400:
                    used.add(vmid)  # taken since the list was made
                    continue
                self._raise(exc, f"{what}: check VM id {vmid}", creating=True)
            except requests.exceptions.RequestException as exc:
                self._raise(exc, f"{what}: check VM id {vmid}", creating=True)
            return vmid
        raise CapacityError(
            self.name,
            f"{what}: no free VM id in NodeClass spec.proxmox.vmidRange ({lower}-{upper})",
        )

    def _free_vmid_count(self, used: set[int]) -> int:
        lower, upper = self.block.vmid_range.lower, self.block.vmid_range.upper
        return (upper - lower + 1) - sum(1 for vmid in used if lower <= vmid <= upper)

    def _template_node(self, vms: list[dict[str, Any]], what: str) -> str:
        for raw in vms:
            if int(raw.get("vmid") or 0) == self.block.template and raw.get("type") == "qemu":
                return str(raw["node"])
        raise FatalError(
            self.name,
            f"{what}: template VM {self.block.template} not found",
            "set NodeClass spec.proxmox.template to the id of a VM template the token may "
            "clone (VM.Clone)",
        )

    # ---- tasks -----------------------------------------------------------------------------

    def _wait(self, upid: Any, what: str, timeout_s: float) -> str | None:
        """Wait for a task: None when it ended OK, else its exit status. A task that outlasts
        `timeout_s` is retryable: the retry finds what it made."""
        if not isinstance(upid, str) or not upid.startswith("UPID:"):
            return None  # a synchronous answer
        node = upid.split(":")[1]
        deadline = time.monotonic() + timeout_s
        while True:
            status = self._call(f"{what}: task status", self.api.nodes(node).tasks(upid).status.get)
            if str((status or {}).get("status")) == "stopped":
                exit_status = str((status or {}).get("exitstatus") or "")
                return None if exit_status == "OK" else exit_status or "failed"
            if time.monotonic() > deadline:
                raise RetryableError(
                    self.name, f"{what}: task still running after {timeout_s:g}s; retry"
                )
            time.sleep(TASK_POLL_S)

    def _wait_unlocked(self, node: str, vmid: int, what: str) -> dict[str, Any]:
        """The VM's config once no clone or create holds its lock."""
        deadline = time.monotonic() + CLONE_TIMEOUT_S
        while True:
            config = self._config(node, vmid, f"{what}: read VM {vmid}")
            if config.get("lock") not in ("clone", "create"):
                return config
            if time.monotonic() > deadline:
                raise RetryableError(self.name, f"{what}: VM {vmid} is still being made; retry")
            time.sleep(TASK_POLL_S)


class _Room:
    """What a node can still take: vCPUs and bytes of memory."""

    def __init__(self, free_cpu: int, free_memory: int, overhead: int) -> None:
        self.free_cpu = free_cpu
        self.free_memory = free_memory
        self.overhead = overhead

    def fits(self, shape: ProxmoxShape) -> int:
        """How many VMs of `shape` fit."""
        need = shape.memory_gib * GIB + self.overhead
        return max(0, min(self.free_cpu // shape.cpu, self.free_memory // need))


def _room(
    status: dict[str, Any],
    vms: list[dict[str, Any]],
    is_ours: Any,
    overhead: int,
) -> _Room:
    """A node's room: its memory less the host's own use and what the VMs hold (each running
    VM's configured maximum, each of ours from its clone on, plus `overhead` per VM of
    ours); its CPUs less the running VMs' and ours (vCPUs are not overcommitted)."""
    memory = dict(status.get("memory") or {})
    total = int(memory.get("total") or 0)
    used = int(memory.get("used") or 0)
    cpus = int(dict(status.get("cpuinfo") or {}).get("cpus") or 0)
    running = [v for v in vms if v.get("status") == "running"]
    held = [v for v in vms if v.get("status") == "running" or is_ours(v)]
    ours = sum(1 for v in vms if is_ours(v))
    host_use = max(0, used - sum(int(v.get("mem") or 0) for v in running))
    committed = sum(int(v.get("maxmem") or 0) for v in held) + ours * overhead
    free_cpu = cpus - sum(int(v.get("maxcpu") or 0) for v in held)
    return _Room(max(0, free_cpu), max(0, total - host_use - committed), overhead)


def seed_iso(user_data: str, meta_data: str) -> bytes:
    """A cloud-init NoCloud seed: an ISO 9660 volume labelled `cidata` with `user-data` and
    `meta-data` (Rock Ridge and Joliet names, as cloud-localds and genisoimage write it)."""
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident="cidata")
    for iso_path, name, text in (
        ("/USERDATA.;1", "user-data", user_data),
        ("/METADATA.;1", "meta-data", meta_data),
    ):
        data = text.encode()
        iso.add_fp(io.BytesIO(data), len(data), iso_path, rr_name=name, joliet_path=f"/{name}")
    out = io.BytesIO()
    iso.write_fp(out)
    iso.close()
    return out.getvalue()


def _meta_data(spec: InstanceSpec, vmid: int) -> str:
    # A new instance-id per VM: cloud-init runs the user data once per instance.
    return f"instance-id: cloudburst-{vmid}-{spec.name}\nlocal-hostname: {spec.name}\n"


class _NamedBytes(io.BytesIO):
    """Bytes with a file name: the multipart upload sends it as the file's name."""

    def __init__(self, data: bytes, name: str) -> None:
        super().__init__(data)
        self.name = name


def _segment(volid: str) -> str:
    """A volume id (`local:iso/x.iso`) as one path segment of the API's URL."""
    return quote(volid, safe="")


def _seed_name(vmid: int) -> str:
    return f"cloudburst-seed-{vmid}.iso"


def _description(spec: InstanceSpec) -> str:
    lines = [f"{key}={value}" for key, value in sorted(spec.holder_labels().items())]
    return "Cloudburst node (its tags say whose: do not edit them)\n\n" + "\n".join(lines)


def _claims(owner: dict[str, str], spec: InstanceSpec) -> bool:
    """Whether a VM's ownership labels are this claim's: cluster and name, and uid where the
    VM has one (a same-named claim made later is another claim)."""
    if owner.get(L.NODECLAIM) != spec.name or owner.get(L.CLUSTER) != spec.cluster_id:
        return False
    return not spec.claim_uid or owner.get(L.NODECLAIM_UID, spec.claim_uid) == spec.claim_uid


def _is_holder(owner: dict[str, str], holder: str) -> bool:
    """Whether the claim an instance id names (uid, or name) is still the VM's owner."""
    if L.NODECLAIM_UID in owner:
        return owner[L.NODECLAIM_UID] == holder
    return owner.get(L.NODECLAIM) == holder


def _description_labels(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.startswith(f"{L.GROUP}/"):
            found[key] = value
    return found


def _tags(value: Any) -> set[str]:
    """Proxmox's tag list (`a;b`; the API also takes `,` and spaces)."""
    return {t for t in str(value or "").replace(",", ";").replace(" ", ";").split(";") if t}


def _errors_text(errors: Any) -> str:
    if isinstance(errors, dict):
        return "; ".join(f"{k}: {v}" for k, v in errors.items())
    return str(errors)


@functools.cache
def _ca_directory() -> Path:
    return Path(tempfile.mkdtemp(prefix="cloudburst-proxmox-"))  # mode 0700


def _token_parts(credential: str | None) -> tuple[str, str, str]:
    """`user@realm!tokenid=secret` → (user@realm, tokenid, secret)."""
    user, _, rest = (credential or "").strip().partition("!")
    token_name, _, token_value = rest.partition("=")
    if not (user and "@" in user and token_name and token_value):
        raise FatalError(
            ProxmoxProvider.name,
            "the API token is not of the form user@realm!tokenid=secret",
            _AUTH_FIX,
        )
    return user, token_name, token_value


def _verify(block: ProxmoxClass) -> bool | str:
    """requests' `verify`: off, the system's CAs, or a file holding `caBundle`, in a
    directory of this process's own (a shared one would let whoever wrote a file there
    first choose the CA we trust)."""
    if not block.verify_tls:
        return False
    if not block.ca_bundle:
        return True
    digest = hashlib.sha256(block.ca_bundle.encode()).hexdigest()[:16]
    path = _ca_directory() / f"ca-{digest}.pem"
    if not path.exists():
        partial = path.with_suffix(f".{uuid.uuid4().hex}.tmp")
        partial.write_text(block.ca_bundle)
        partial.replace(path)
    return str(path)
