"""A local stand-in of a Proxmox VE cluster's API (the subset `activities/providers/proxmox.py`
uses), served over HTTPS under `/api2/json` as pveproxy serves it, with a CA of its own
(`ca_pem`, what a NodeClass's `caBundle` trusts).

    GET    /cluster/resources?type=vm|node      guests (vmid, node, name, status, tags, lock,
                                                maxmem, maxcpu, mem, template) and nodes
    GET    /cluster/nextid?vmid=                400 when the id is taken
    GET    /nodes/{node}/status                 memory {total, used, free}, cpuinfo {cpus}
    POST   /nodes/{node}/qemu                   create a VM (a task)
    POST   /nodes/{node}/qemu/{vmid}/clone      newid, name, description, full, target, pool
    GET    /nodes/{node}/qemu/{vmid}/config     PUT (synchronous) and POST (a task) set it
    GET    /nodes/{node}/qemu/{vmid}/status/current
    POST   /nodes/{node}/qemu/{vmid}/status/start|stop
    DELETE /nodes/{node}/qemu/{vmid}            purge, destroy-unreferenced-disks (a task)
    GET    /nodes/{node}/tasks/{upid}/status    status running|stopped, exitstatus OK|error
    GET    /nodes/{node}/storage/{storage}/content?content=iso
    POST   /nodes/{node}/storage/{storage}/upload   multipart: content=iso, filename=<file>
    DELETE /nodes/{node}/storage/{storage}/content/{volume}

Every answer is `{"data": ...}`; an error is its HTTP status with the message in the status
line's reason (as pveproxy answers), a 400 with `{"errors": {param: message}}` too. Requests
carry `Authorization: PVEAPIToken=user@realm!tokenid=secret`; bodies are form-encoded (a
multipart form for uploads). Async calls answer a UPID whose task ends `task_delay_s` later;
its effect (the clone's config unlocked, the VM running, stopped or gone) lands then.

The nodes have finite memory and CPUs: a VM starts only where its memory fits beside the
running VMs and the host's own use (`Cannot allocate memory` otherwise). Failure injection
per op (`create`: the clone or create call, `start`, `get`, `list`, `delete`, `catalog`: a
node's status, `upload`): `unavailable` 595 (pveproxy cannot reach the node), `throttle` 500
(a lock timeout), `auth` 401; `capacity` and `quota` make the next start fail for lack of
memory. The kubelets boot a VM that runs with a cloud-init seed attached, from the seed's
`user-data`, read with pycdlib (the provider writes it with its own code); a VM that started
with its seed stays a machine once the seed is detached and deleted (cloud-init keeps its
copy), while a start fails when a drive names a volume that no longer exists.
"""

from __future__ import annotations

import datetime
import email.parser
import email.policy
import io
import ipaddress
import itertools
import re
import secrets
import shutil
import ssl
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Unpack
from urllib.parse import parse_qs, unquote

import pycdlib
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sim.clouds.base import CloudStandin, Request, Response, StandinOptions, private_ip

PROVIDER = "proxmox"
OPS = ("create", "start", "get", "list", "delete", "catalog", "upload")
GIB = 1024**3
MIB = 1024**2
CLUSTER = "pve"
TEMPLATE_VMID = 9000
TOKEN_USER = "cloudburst@pve"
TOKEN_ID = "burst"
# The sizes the sample NodeClass offers (name, cores, GiB).
SHAPES = (("vm-2c4g", 2, 4), ("vm-4c8g", 4, 8), ("vm-8c16g", 8, 16))
_TAG = re.compile(r"^[a-z0-9_][a-z0-9_+.-]*$", re.I)
_NAME = re.compile(r"^(?=.{1,63}$)[a-z0-9]([a-z0-9-]*[a-z0-9])?$", re.I)
_DRIVE = re.compile(r"^(ide|sata|scsi|virtio)[0-9]+$")


class PveError(Exception):
    def __init__(self, status: int, message: str, errors: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} {message}")
        self.status, self.message, self.errors = status, message, errors

    def response(self) -> Response:
        body: dict[str, Any] = {"data": None}
        if self.errors:
            body["errors"] = self.errors
        return Response(self.status, body, reason=self.message)


_FAILURES: dict[str, tuple[int, str]] = {
    "unavailable": (595, "Connection timed out"),
    "throttle": (500, "can't lock file '/var/lock/qemu-server/lock.conf' - got timeout"),
    "auth": (401, "authentication failure"),
}


@dataclass
class _Node:
    name: str
    cpus: int
    memory_total: int
    host_used: int
    online: bool = True


@dataclass
class _Guest:
    vmid: int
    node: str
    config: dict[str, str]
    created_mono: float
    kind: str = "qemu"
    status: str = "stopped"
    running_since: float | None = None
    fail_start: bool = False
    delete_requested_mono: float | None = None
    # The cloud-init seed its first boot read (cloud-init keeps a copy on the VM's disk): the
    # machine stays one after the ISO is detached and deleted.
    first_boot_seed: bytes | None = None

    @property
    def memory(self) -> int:
        return int(self.config.get("memory") or 512) * MIB

    @property
    def cores(self) -> int:
        return int(self.config.get("cores") or 1) * int(self.config.get("sockets") or 1)

    @property
    def template(self) -> bool:
        return self.config.get("template") == "1"


@dataclass
class _Task:
    upid: str
    node: str
    due: float
    effect: Callable[[], str | None] | None = None  # runs when due; an error string fails it
    exitstatus: str | None = None

    def json(self, now: float) -> dict[str, Any]:
        parts = self.upid.split(":")
        out: dict[str, Any] = {
            "upid": self.upid,
            "node": self.node,
            "pid": int(parts[2], 16),
            "pstart": int(parts[3], 16),
            "starttime": int(parts[4], 16),
            "type": parts[5],
            "id": parts[6],
            "user": parts[7],
            "status": "stopped" if self.exitstatus is not None else "running",
        }
        if self.exitstatus is not None:
            out["exitstatus"] = self.exitstatus
        return out


@dataclass
class _Tls:
    ca_pem: str
    context: ssl.SSLContext
    directory: Path = field(repr=False)


class ProxmoxStandin(CloudStandin):
    """State + HTTPS face of the Proxmox VE stand-in; also a `BootableCloud`."""

    provider = PROVIDER

    def __init__(
        self,
        *,
        token_secret: str | None = None,
        nodes: tuple[tuple[str, int, int], ...] = (("pve1", 16, 64), ("pve2", 16, 64)),
        task_delay_s: float = 0.05,
        **options: Unpack[StandinOptions],
    ) -> None:
        self.token_secret = token_secret or str(uuid.uuid4())
        self.cluster = CLUSTER
        self.region = CLUSTER
        self.instance_type = SHAPES[0][0]
        self.task_delay_s = task_delay_s
        self.nodes: dict[str, _Node] = {
            name: _Node(name, cpus, gib * GIB, 2 * GIB) for name, cpus, gib in nodes
        }
        now = time.monotonic()
        first = next(iter(self.nodes))
        self.guests: dict[int, _Guest] = {
            TEMPLATE_VMID: _Guest(
                TEMPLATE_VMID,
                first,
                {
                    "name": "ubuntu-2404-cloudinit",
                    "template": "1",
                    "cores": "2",
                    "memory": "2048",
                    "scsi0": "local-lvm:base-9000-disk-0,size=10G",
                    "ide2": "local-lvm:vm-9000-cloudinit,media=cdrom",
                    "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
                    "boot": "order=scsi0",
                    "ostype": "l26",
                },
                now,
            )
        }
        # (node, storage) -> volume name ("iso/x.iso") -> bytes; "local" is per node.
        self.storage: dict[tuple[str, str], dict[str, bytes]] = {}
        self.tasks: dict[str, _Task] = {}
        self._pids = itertools.count(0x1000)
        self._vm_numbers = itertools.count(1)
        self._numbers: dict[int, int] = {}
        self._creates_attempted = 0
        self._tls = _make_tls()
        super().__init__(ops=OPS, name="proxmox-standin", tls=self._tls.context, **options)

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return self._http.url

    @property
    def ca_pem(self) -> str:
        return self._tls.ca_pem

    @property
    def credential(self) -> str:
        return f"{TOKEN_USER}!{TOKEN_ID}={self.token_secret}"

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self._tls.directory, ignore_errors=True)

    def nodeclass_block(self, secret_name: str, secret_key: str) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "apiTokenSecretRef": {"name": secret_name, "key": secret_key},
            "cluster": self.cluster,
            "nodes": list(self.nodes),
            "vmidRange": {"lower": 1200, "upper": 1299},
            "template": TEMPLATE_VMID,
            "memoryOverheadMiB": 256,
            "shapes": [{"name": n, "cpu": c, "memoryGiB": g} for n, c, g in SHAPES],
            "caBundle": self.ca_pem,
        }

    # ---- test controls ---------------------------------------------------------------------

    def set_online(self, node: str, online: bool) -> None:
        with self._lock:
            self.nodes[node].online = online

    def set_host_used(self, node: str, used_bytes: int) -> None:
        """What the host itself uses (its OS, other services): less room for VMs."""
        with self._lock:
            self.nodes[node].host_used = used_bytes

    def add_guest(
        self, vmid: int, node: str, *, cores: int = 1, memory_mib: int = 512, running: bool = True
    ) -> None:
        """A VM that is not Cloudburst's (someone else's, in the range or on the hosts)."""
        with self._lock:
            guest = _Guest(
                vmid,
                node,
                {"name": f"other-{vmid}", "cores": str(cores), "memory": str(memory_mib)},
                time.monotonic(),
            )
            if running:
                guest.status, guest.running_since = "running", time.monotonic()
            self.guests[vmid] = guest

    def remove_guest(self, vmid: int) -> None:
        with self._lock:
            self.guests.pop(vmid, None)

    def _failure_response(self, kind: str) -> Response:
        status, message = _FAILURES.get(kind, (500, "Cannot allocate memory"))
        return PveError(status, message).response()

    # ---- tasks -----------------------------------------------------------------------------

    def _task(
        self, node: str, kind: str, vmid: int | str, effect: Callable[[], str | None] | None
    ) -> str:
        now = time.time()
        upid = (
            f"UPID:{node}:{next(self._pids):08X}:{int(now * 100) & 0xFFFFFFFF:08X}:"
            f"{int(now):08X}:{kind}:{vmid}:{TOKEN_USER}!{TOKEN_ID}:"
        )
        self.tasks[upid] = _Task(upid, node, time.monotonic() + self.task_delay_s, effect)
        return upid

    def _advance(self, now: float) -> None:
        """Finish the tasks that are due, in order (with the lock held)."""
        for task in sorted(self.tasks.values(), key=lambda t: t.due):
            if task.exitstatus is None and task.due <= now:
                error = task.effect() if task.effect else None
                task.exitstatus = error or "OK"
        self._purge_deleted(self.guests, now)

    # ---- state -----------------------------------------------------------------------------

    def _node(self, name: str) -> _Node:
        node = self.nodes.get(name)
        if node is None:
            raise PveError(500, f"hostname lookup '{name}' failed - failed to get address info")
        if not node.online:
            raise PveError(595, "Connection timed out")
        return node

    def _guest(self, node: str, vmid: int) -> _Guest:
        guest = self.guests.get(vmid)
        if guest is None or guest.node != node or guest.delete_requested_mono is not None:
            raise PveError(
                500, f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
            )
        return guest

    def _free_memory(self, node: _Node) -> int:
        running = sum(
            g.memory for g in self.guests.values() if g.node == node.name and g.status == "running"
        )
        return node.memory_total - node.host_used - running

    def _resource(self, g: _Guest) -> dict[str, Any]:
        running = g.status == "running"
        out: dict[str, Any] = {
            "id": f"{g.kind}/{g.vmid}",
            "type": g.kind,
            "vmid": g.vmid,
            "node": g.node,
            "name": g.config.get("name", ""),
            "status": g.status,
            "maxmem": g.memory,
            "maxcpu": g.cores,
            "mem": g.memory // 2 if running else 0,
            "cpu": 0.05 if running else 0,
            "uptime": int(time.monotonic() - g.running_since) if g.running_since else 0,
            "template": 1 if g.template else 0,
            "maxdisk": 10 * GIB,
            "disk": 0,
        }
        if g.config.get("tags"):
            out["tags"] = g.config["tags"]
        if g.config.get("lock"):
            out["lock"] = g.config["lock"]
        return out

    def _node_resource(self, n: _Node) -> dict[str, Any]:
        used = n.memory_total - self._free_memory(n)
        return {
            "id": f"node/{n.name}",
            "type": "node",
            "node": n.name,
            "status": "online" if n.online else "offline",
            "maxmem": n.memory_total,
            "mem": used,
            "maxcpu": n.cpus,
            "cpu": 0.1,
        }

    # ---- API operations (called with the lock held) ----------------------------------------

    def _resources(self, kind: str | None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        if kind in (None, "vm"):
            found += [
                self._resource(g)
                for g in sorted(self.guests.values(), key=lambda g: g.vmid)
                if g.delete_requested_mono is None
            ]
        if kind in (None, "node"):
            found += [self._node_resource(n) for n in self.nodes.values()]
        return found

    def _check_vmid(self, value: str | None) -> int:
        try:
            vmid = int(value or "")
        except ValueError:
            raise PveError(
                400, "Parameter verification failed.", {"vmid": "type check failed"}
            ) from None
        if not 100 <= vmid <= 999_999_999:
            raise PveError(400, "Parameter verification failed.", {"vmid": "value out of range"})
        return vmid

    def _set_config(self, guest: _Guest, form: dict[str, str]) -> None:
        errors: dict[str, str] = {}
        for key, value in form.items():
            if key == "tags":
                if not all(_TAG.match(t) for t in value.split(";") if t):
                    errors[key] = "invalid format - value does not match the regex"
            elif key == "name" and not _NAME.match(value):
                errors[key] = "invalid format - value does not look like a valid DNS name"
            elif key in ("cores", "memory", "sockets") and not value.isdigit():
                errors[key] = "type check failed - got non-numeric value"
        if errors:
            raise PveError(400, "Parameter verification failed.", errors)
        for key in form.get("delete", "").split(","):
            guest.config.pop(key.strip(), None)
        for key, value in form.items():
            if key in ("delete", "digest", "node", "vmid"):
                continue
            replaced = guest.config.get(key, "").split(",")[0]
            if (
                _DRIVE.match(key)
                and replaced not in ("", "none", "cdrom")
                and ":iso/" not in replaced
                and guest.config[key] != value
            ):
                # The VM's own volume it replaces (a disk, the cloud-init drive) stays as an
                # unused disk, as Proxmox keeps it; a CD-ROM's ISO is just swapped out.
                unused = sum(1 for k in guest.config if k.startswith("unused"))
                guest.config[f"unused{unused}"] = replaced
            guest.config[key] = value

    def _new_guest(self, node: str, vmid: int, form: dict[str, str], lock: str) -> _Guest:
        kind = self.failures.take("create")
        if kind in _FAILURES:
            raise PveError(*_FAILURES[kind])
        if vmid in self.guests:
            raise PveError(500, f"unable to create VM {vmid} - VM {vmid} already exists")
        guest = _Guest(vmid, node, {}, time.monotonic())
        self._set_config(guest, form)
        guest.config["lock"] = lock
        # Injected capacity: the host turns out to be short of memory when the VM starts.
        guest.fail_start = kind in ("capacity", "quota")
        self.guests[vmid] = guest
        self._numbers[vmid] = next(self._vm_numbers)
        self._created_by_name[guest.config.get("name", "")] += 1
        return guest

    def _create_vm(self, node: str, form: dict[str, str]) -> str:
        self._creates_attempted += 1
        self._node(node)
        vmid = self._check_vmid(form.pop("vmid", None))
        for key in ("pool", "start"):
            form.pop(key, None)
        guest = self._new_guest(node, vmid, form, "create")

        def done() -> None:
            guest.config.pop("lock", None)

        return self._task(node, "qmcreate", vmid, lambda: done())

    def _clone(self, node: str, vmid: int, form: dict[str, str]) -> str:
        self._creates_attempted += 1
        source = self._guest(node, vmid)
        newid = self._check_vmid(form.get("newid"))
        target = form.get("target") or node
        self._node(target)
        if form.get("full") not in ("1", None) and not source.template:
            raise PveError(400, "Parameter verification failed.", {"full": "must be 1"})
        config = {
            k: v for k, v in source.config.items() if k not in ("template", "name", "description")
        }
        config["name"] = form.get("name") or f"Copy-of-VM-{source.config.get('name', vmid)}"
        if form.get("description"):
            config["description"] = form["description"]
        config["smbios1"] = f"uuid={uuid.uuid4()}"
        guest = self._new_guest(target, newid, config, "clone")

        def done() -> None:
            guest.config.pop("lock", None)

        return self._task(node, "qmclone", vmid, lambda: done())

    def _start(self, guest: _Guest) -> str:
        if guest.config.get("lock"):
            raise PveError(500, f"VM is locked ({guest.config['lock']})")

        def done() -> str | None:
            node = self.nodes[guest.node]
            missing = self._missing_volume(guest)
            if missing is not None:
                return f"start failed: volume '{missing}' does not exist"
            if guest.fail_start or self._free_memory(node) < guest.memory:
                guest.fail_start = False
                return "start failed: QEMU exited with code 1 (kvm: cannot set up guest memory 'pc.ram': Cannot allocate memory)"
            guest.status, guest.running_since = "running", time.monotonic()
            if guest.first_boot_seed is None:
                guest.first_boot_seed = self._seed(guest)
            return None

        if kind := self.failures.take("start"):
            if kind in ("capacity", "quota"):
                guest.fail_start = True
            else:
                raise PveError(*_FAILURES[kind])
        return self._task(guest.node, "qmstart", guest.vmid, done)

    def _stop(self, guest: _Guest) -> str:
        def done() -> None:
            guest.status, guest.running_since = "stopped", None

        return self._task(guest.node, "qmstop", guest.vmid, lambda: done())

    def _destroy(self, guest: _Guest) -> str:
        if kind := self.failures.take("delete"):
            raise PveError(*_FAILURES.get(kind, (500, "Cannot allocate memory")))
        if guest.status == "running":
            raise PveError(500, f"VM {guest.vmid} is running - destroy failed")
        if guest.config.get("lock"):
            raise PveError(500, f"VM is locked ({guest.config['lock']})")

        def done() -> None:
            if guest.delete_requested_mono is None:
                guest.delete_requested_mono = time.monotonic() - self.delete_delay_s

        return self._task(guest.node, "qmdestroy", guest.vmid, lambda: done())

    def _store(self, node: str, storage: str) -> dict[str, bytes]:
        self._node(node)
        if storage not in ("local",):
            raise PveError(500, f"storage '{storage}' does not exist")
        return self.storage.setdefault((node, storage), {})

    def _upload(self, node: str, storage: str, request: Request) -> str:
        if kind := self.failures.take("upload"):
            raise PveError(*_FAILURES.get(kind, (500, "Cannot allocate memory")))
        fields = _multipart(request)
        content = fields.get("content", (None, b""))[1].decode()
        if content not in ("iso", "vztmpl", "import"):
            raise PveError(400, "Parameter verification failed.", {"content": "invalid value"})
        filename, data = fields.get("filename", (None, b""))
        if not filename or not filename.endswith(".iso"):
            raise PveError(
                400, "Parameter verification failed.", {"filename": "wrong file extension"}
            )
        store = self._store(node, storage)
        volname = f"{content}/{filename}"
        if volname in store:
            raise PveError(500, f"refusing to override existing file '{volname}'")
        store[volname] = data
        return self._task(node, "imgcopy", "", None)

    # ---- HTTP ------------------------------------------------------------------------------

    def _route(self, request: Request) -> Response:
        if request.parts[:2] != ["api2", "json"]:
            return PveError(
                501, f"Method '{request.method} {request.path}' not implemented"
            ).response()
        expected = f"PVEAPIToken={self.credential}"
        if request.headers.get("authorization") != expected:
            return PveError(401, "No ticket").response()
        try:
            with self._lock:
                self._advance(time.monotonic())
                data = self._api(request, [unquote(p) for p in request.parts[2:]])
            return Response(200, {"data": data})
        except PveError as err:
            return err.response()

    def _api(self, request: Request, parts: list[str]) -> Any:
        form = _form(request)
        match request.method, parts:
            case "GET", ["cluster", "resources"]:
                if response := self._fail("list"):
                    raise PveError(response.status, response.reason or "")
                return self._resources(request.q("type"))
            case "GET", ["cluster", "nextid"]:
                if request.q("vmid") is not None:
                    vmid = self._check_vmid(request.q("vmid"))
                    if vmid in self.guests:
                        raise PveError(400, f"VM {vmid} already exists")
                    return str(vmid)
                return str(next(v for v in itertools.count(100) if v not in self.guests))
            case "GET", ["nodes"]:
                return [self._node_resource(n) for n in self.nodes.values()]
            case "GET", ["nodes", node, "status"]:
                if response := self._fail("catalog"):
                    raise PveError(response.status, response.reason or "")
                n = self._node(node)
                # What the host's kernel sees in use: its own and what each running VM touched.
                used = n.host_used + sum(
                    g.memory // 2
                    for g in self.guests.values()
                    if g.node == n.name and g.status == "running"
                )
                return {
                    "memory": {
                        "total": n.memory_total,
                        "used": used,
                        "free": n.memory_total - used,
                    },
                    "cpuinfo": {"cpus": n.cpus, "cores": n.cpus // 2, "sockets": 1},
                    "cpu": 0.1,
                    "uptime": 86400,
                    "pveversion": "pve-manager/8.4.1",
                }
            case "POST", ["nodes", node, "qemu"]:
                return self._create_vm(node, form)
            case "POST", ["nodes", node, "qemu", vmid, "clone"]:
                return self._clone(node, int(vmid), form)
            case "GET", ["nodes", node, "qemu", vmid, "config"]:
                if response := self._fail("get"):
                    raise PveError(response.status, response.reason or "")
                self._node(node)
                guest = self._guest(node, int(vmid))
                return {**guest.config, "digest": secrets.token_hex(20)}
            case ("PUT" | "POST") as method, ["nodes", node, "qemu", vmid, "config"]:
                self._node(node)
                guest = self._guest(node, int(vmid))
                if guest.config.get("lock"):
                    raise PveError(500, f"VM is locked ({guest.config['lock']})")
                self._set_config(guest, form)
                return self._task(node, "qmconfig", vmid, None) if method == "POST" else None
            case "GET", ["nodes", node, "qemu", vmid, "status", "current"]:
                if response := self._fail("get"):
                    raise PveError(response.status, response.reason or "")
                self._node(node)
                guest = self._guest(node, int(vmid))
                out = {
                    "vmid": guest.vmid,
                    "name": guest.config.get("name", ""),
                    "status": guest.status,
                    "qmpstatus": guest.status,
                    "cpus": guest.cores,
                    "maxmem": guest.memory,
                    "uptime": int(time.monotonic() - guest.running_since)
                    if guest.running_since
                    else 0,
                }
                for key in ("tags", "lock"):
                    if guest.config.get(key):
                        out[key] = guest.config[key]
                return out
            case "POST", ["nodes", node, "qemu", vmid, "status", "start"]:
                self._node(node)
                return self._start(self._guest(node, int(vmid)))
            case "POST", ["nodes", node, "qemu", vmid, "status", "stop"]:
                self._node(node)
                return self._stop(self._guest(node, int(vmid)))
            case "DELETE", ["nodes", node, "qemu", vmid]:
                self._node(node)
                return self._destroy(self._guest(node, int(vmid)))
            case "GET", ["nodes", node, "tasks", upid, "status"]:
                task = self.tasks.get(upid)
                if task is None or task.node != node:
                    raise PveError(500, f"no such task '{upid}'")
                return task.json(time.monotonic())
            case "GET", ["nodes", node, "storage", storage, "content"]:
                wanted = request.q("content")
                return [
                    {
                        "volid": f"{storage}:{volname}",
                        "content": volname.split("/")[0],
                        "format": volname.rsplit(".", 1)[-1],
                        "size": len(data),
                    }
                    for volname, data in sorted(self._store(node, storage).items())
                    if wanted in (None, volname.split("/")[0])
                ]
            case "POST", ["nodes", node, "storage", storage, "upload"]:
                return self._upload(node, storage, request)
            case "DELETE", ["nodes", node, "storage", storage, "content", volume]:
                store = self._store(node, storage)
                volname = volume.removeprefix(f"{storage}:")
                if store.pop(volname, None) is None:
                    raise PveError(500, f"volume '{volume}' does not exist")
                return self._task(node, "imgdel", "", None)
        raise PveError(501, f"Method '{request.method} {request.path}' not implemented")

    # ---- BootableCloud and test helpers ----------------------------------------------------

    def _seed(self, guest: _Guest) -> bytes | None:
        """The ISO attached as the guest's CD-ROM, from its node's storage."""
        for key, value in guest.config.items():
            if not _DRIVE.match(key) or "media=cdrom" not in value:
                continue
            volid = value.split(",")[0]
            storage, _, volname = volid.partition(":")
            data = self.storage.get((guest.node, storage), {}).get(volname)
            if data is not None:
                return data
        return None

    def _missing_volume(self, guest: _Guest) -> str | None:
        """A volume of a storage this stand-in keeps that a drive of the guest names and that
        does not exist (Proxmox starts no VM with one: a seed deleted but still attached)."""
        for key, value in guest.config.items():
            volid = value.split(",")[0]
            storage, sep, volname = volid.partition(":")
            if not _DRIVE.match(key) or not sep or (guest.node, storage) not in self.storage:
                continue
            if volname not in self.storage[(guest.node, storage)]:
                return volid
        return None

    def instance_states(self) -> dict[str, str]:
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            states: dict[str, str] = {}
            for g in self.guests.values():
                if g.template or (self._seed(g) or g.first_boot_seed) is None:
                    continue
                if g.delete_requested_mono is not None:
                    states[str(g.vmid)] = "stopping"
                elif g.status == "running":
                    since = g.running_since or now
                    states[str(g.vmid)] = (
                        "running" if now - since >= self.boot_delay_s else "pending"
                    )
                else:
                    states[str(g.vmid)] = "pending" if g.config.get("lock") else "terminated"
            return states

    def peek(self, native_id: str) -> dict[str, Any] | None:
        with self._lock:
            self._advance(time.monotonic())
            try:
                guest = self.guests.get(int(native_id))
            except ValueError:
                return None
            if guest is None:
                return None
            seed = self._seed(guest) or guest.first_boot_seed
            tags = guest.config.get("tags", "")
            return {
                "id": str(guest.vmid),
                "name": guest.config.get("name", ""),
                "region": self.cluster,
                "instance_type": _tag_value(tags, "instance-type") or "",
                "user_data": _iso_file(seed, "user-data") if seed else "",
                "private_ip": private_ip(self._numbers.get(guest.vmid, 0)),
                "labels": {"tags": tags},
                "serial": _smbios_serial(guest.config.get("smbios1", "")),
                "cores": guest.cores,
                "memory_mib": guest.memory // MIB,
                "node": guest.node,
                "config": dict(guest.config),
            }

    def instance_shape(self, instance_type: str) -> tuple[float, float, str] | None:
        """The size of the VMs tagged with that shape, else of the sample NodeClass's shape."""
        with self._lock:
            for g in self.guests.values():
                if _tag_value(g.config.get("tags", ""), "instance-type") == instance_type:
                    return float(g.cores), g.memory / GIB, "x86_64"
        for name, cores, gib in SHAPES:
            if name == instance_type:
                return float(cores), float(gib), "x86_64"
        return None

    def storage_files(self, node: str, storage: str = "local") -> list[str]:
        with self._lock:
            return sorted(self.storage.get((node, storage), {}))

    def stats(self) -> dict[str, Any]:
        with self._lock:
            self._advance(time.monotonic())
            ours = [g for g in self.guests.values() if not g.template]
            return {
                "creates_attempted": self._creates_attempted,
                **self._vm_counts(len(ours)),
                "states": dict(Counter(g.status for g in ours)),
                "failures": self.failures.pending(),
            }


def _form(request: Request) -> dict[str, str]:
    if request.headers.get("content-type", "").startswith("multipart/"):
        return {}
    return {k: v[-1] for k, v in parse_qs(request.body.decode(), keep_blank_values=True).items()}


def _multipart(request: Request) -> dict[str, tuple[str | None, bytes]]:
    """A multipart/form-data body: field name -> (file name, bytes)."""
    head = f"Content-Type: {request.headers.get('content-type', '')}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + request.body)
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = (part.get_filename(), payload)
    return fields


def _iso_file(data: bytes, name: str) -> str:
    """A file of a cloud-init seed ISO, by its Rock Ridge name ('' when absent)."""
    iso = pycdlib.PyCdlib()
    try:
        iso.open_fp(io.BytesIO(data))
        out = io.BytesIO()
        iso.get_file_from_iso_fp(out, rr_path=f"/{name}")
        return out.getvalue().decode()
    except pycdlib.pycdlibexception.PyCdlibException:
        return ""
    finally:
        iso.close()


def _tag_value(tags: str, key: str) -> str | None:
    """The value of a `cb-<key>.<value>` tag, `_xx` escapes undone."""
    for tag in tags.split(";"):
        if tag.startswith(f"cb-{key}."):
            raw = tag.removeprefix(f"cb-{key}.")
            return re.sub(r"_([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), raw)
    return None


def _smbios_serial(value: str) -> str | None:
    for item in value.split(","):
        key, _, val = item.partition("=")
        if key == "serial":
            return val
    return None


def _make_tls() -> _Tls:
    """A CA of the stand-in's own and a server certificate for 127.0.0.1 and localhost."""
    now = datetime.datetime.now(datetime.UTC)

    def build(subject: str, issuer: str, key: Any, sign_key: Any) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        build(
            "Proxmox Virtual Environment (stand-in)",
            "Proxmox Virtual Environment (stand-in)",
            ca_key,
            ca_key,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        build("pve1", "Proxmox Virtual Environment (stand-in)", key, ca_key)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory = Path(tempfile.mkdtemp(prefix="proxmox-standin-"))
    cert_path, key_path = directory / "pveproxy-ssl.pem", directory / "pveproxy-ssl.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM).decode()
    return _Tls(ca_pem, context, directory)


def standin(*, boot_delay_s: float = 1.0, host: str = "127.0.0.1") -> ProxmoxStandin:
    """The factory `sim.cluster.SimulatedCluster(clouds=[...])` and `cloudburst dev` use."""
    return ProxmoxStandin(boot_delay_s=boot_delay_s, host=host)
