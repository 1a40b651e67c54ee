"""Azure Resource Manager stand-in: the Compute/Network subset `activities/providers/azure.py` calls.

    PUT    /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces/{n}
    GET|DELETE  (same)
    PUT    /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{vm}
    GET    .../virtualMachines/{vm}[?$expand=instanceView]      DELETE .../virtualMachines/{vm}
    GET    /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines
    GET    /subscriptions/{s}/providers/Microsoft.Compute/skus?$filter=location eq 'L'
    GET    /subscriptions/{s}/providers/Microsoft.{Compute,Network}/locations/{l}/operations/{id}

PUTs and DELETEs are long-running the ARM way: 201/202 with `Azure-AsyncOperation` (and
`Location` on deletes), the operation answering `InProgress` until `op_delay_s` has passed,
then `Succeeded` or `Failed` with an ARM error. Every poll is recorded (`polls()`). PUT by
name is idempotent (an existing VM is updated in place); the NIC's subnet must exist (one
VNet/subnet is pre-made: `subnet_id`); deleting a VM deletes its NIC and OS disk when their
`deleteOption` is `Delete`; a NIC still attached to a VM refuses deletion (`NicInUse`).

Operation answers carry `retry-after-ms` (which the SDK honours over its polling interval).
Bearer auth with the stand-in's static token (`credential` is the JSON the provider reads:
`{"access_token": ...}`). Injected failures: `capacity` → the VM's create operation fails
with `AllocationFailed` (the VM is left `Failed`, as Azure does); `quota` → 409
`OperationNotAllowed`; `unavailable` → 503; `throttle` → 429 with Retry-After; `auth` → 401;
and two 409s told apart only by their code: `sku_unavailable` (`SkuNotAvailable`) and
`conflict` (`PropertyChangeNotAllowed`).
"""

from __future__ import annotations

import base64
import itertools
import json
import secrets
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, Unpack
from urllib.parse import quote

from sim.clouds.base import (
    FAILURE_KINDS,
    CloudStandin,
    Request,
    Response,
    SpotNotice,
    StandinOptions,
    lifecycle_state,
    private_ip,
    rfc3339,
)

PROVIDER = "azure"
OPS = ("create", "nic", "get", "list", "delete", "operation", "catalog")
# Beyond the shared kinds: two 409s that only the error code tells apart.
KINDS = (*FAILURE_KINDS, "sku_unavailable", "conflict")
DEFAULT_LOCATIONS = ("westeurope", "eastus")


@dataclass(frozen=True)
class VmSize:
    name: str
    vcpus: int
    memory_gb: float
    arch: str = "x64"  # Azure's CpuArchitectureType: x64 | Arm64
    family: str = "standardDSv5Family"


DEFAULT_SIZES: tuple[VmSize, ...] = (
    # The sizes of the shipped catalog (planner/catalog).
    VmSize("Standard_B1ms", 1, 2, family="standardBSFamily"),
    VmSize("Standard_B2s", 2, 4, family="standardBSFamily"),
    VmSize("Standard_B2ms", 2, 8, family="standardBSFamily"),
    VmSize("Standard_B4ms", 4, 16, family="standardBSFamily"),
    VmSize("Standard_B8ms", 8, 32, family="standardBSFamily"),
    VmSize("Standard_D2s_v5", 2, 8),
    VmSize("Standard_D4s_v5", 4, 16),
    VmSize("Standard_D8s_v5", 8, 32),
    VmSize("Standard_D16s_v5", 16, 64),
    VmSize("Standard_D2as_v5", 2, 8),
    VmSize("Standard_D4as_v5", 4, 16),
    VmSize("Standard_D8as_v5", 8, 32),
    VmSize("Standard_F2s_v2", 2, 4, family="standardFSv2Family"),
    VmSize("Standard_F4s_v2", 4, 8, family="standardFSv2Family"),
    VmSize("Standard_F8s_v2", 8, 16, family="standardFSv2Family"),
    VmSize("Standard_E2s_v5", 2, 16, family="standardESv5Family"),
    VmSize("Standard_E4s_v5", 4, 32, family="standardESv5Family"),
    VmSize("Standard_D2ps_v5", 2, 8, "Arm64", "standardDPSv5Family"),
    VmSize("Standard_D4ps_v5", 4, 16, "Arm64", "standardDPSv5Family"),
    VmSize("Standard_D8ps_v5", 8, 32, "Arm64", "standardDPSv5Family"),
)

# kind -> (status, code, message) for failures answered on the request itself.
_FAILURES: dict[str, tuple[int, str, str]] = {
    "unavailable": (
        503,
        "ServiceUnavailable",
        "The service is temporarily unavailable (injected).",
    ),
    "quota": (
        409,
        "OperationNotAllowed",
        "Operation could not be completed as it results in exceeding approved "
        "standardDSv5Family Cores quota (injected).",
    ),
    "throttle": (429, "TooManyRequests", "The request is being throttled (injected)."),
    "auth": (
        401,
        "InvalidAuthenticationToken",
        "The access token is invalid (injected).",
    ),
    "sku_unavailable": (
        409,
        "SkuNotAvailable",
        "The requested VM size is currently not available in this location (injected).",
    ),
    "conflict": (
        409,
        "PropertyChangeNotAllowed",
        "Changing property 'customData' is not allowed (injected).",
    ),
}


def _refused_priority(props: dict[str, Any]) -> str | None:
    """ARM's refusals of malformed Spot settings (priority, evictionPolicy, maxPrice)."""
    priority = props.get("priority", "Regular")
    if priority not in ("Regular", "Low", "Spot"):
        return f"The value '{priority}' of parameter 'priority' is not allowed."
    policy = props.get("evictionPolicy")
    max_price = (props.get("billingProfile") or {}).get("maxPrice")
    if priority == "Regular" and (policy is not None or max_price is not None):
        return "Eviction policy and max price can be set only on Azure Spot Virtual Machines."
    if policy is not None and policy not in ("Deallocate", "Delete"):
        return f"The value '{policy}' of parameter 'evictionPolicy' is not allowed."
    if max_price is not None and not (
        isinstance(max_price, int | float) and (max_price == -1 or max_price > 0)
    ):
        return f"The value '{max_price}' of parameter 'billingProfile.maxPrice' is not allowed."
    return None


def _error(status: int, code: str, message: str, **headers: str) -> Response:
    return Response(status, {"error": {"code": code, "message": message}}, headers=dict(headers))


@dataclass
class _Op:
    id: str
    namespace: str  # "Compute" | "Network"
    location: str
    started_mono: float
    delay_s: float
    error: dict[str, Any] | None = None
    on_done: Any = None
    done: bool = False


@dataclass
class _Nic:
    name: str
    id: str
    location: str
    subnet_id: str
    tags: dict[str, str]
    private_ip: str
    vm_id: str | None = None


@dataclass
class _Vm:
    name: str
    id: str
    vm_id: str
    location: str
    size: str
    tags: dict[str, str]
    custom_data: str  # base64, as sent
    nic_ids: list[str]
    nic_delete: dict[str, str]
    os_disk_delete: str
    body: dict[str, Any]
    created_mono: float
    created_at: str
    provisioning: str = "Creating"  # Creating | Succeeded | Failed | Deleting
    delete_requested_mono: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class AzureStandin(CloudStandin):
    """Stateful ARM fake (Compute + Network subset) with failure injection; a `BootableCloud`."""

    provider = PROVIDER
    region = "westeurope"
    instance_type = "Standard_D2s_v5"

    def __init__(
        self,
        *,
        subscription_id: str | None = None,
        resource_group: str = "cloudburst-rg",
        op_delay_s: float = 0.2,
        locations: tuple[str, ...] = DEFAULT_LOCATIONS,
        sizes: tuple[VmSize, ...] = DEFAULT_SIZES,
        page_size: int = 50,
        **options: Unpack[StandinOptions],
    ) -> None:
        self.subscription_id = subscription_id or str(uuid.uuid4())
        self.resource_group = resource_group
        self.op_delay_s = op_delay_s
        self.locations = list(locations)
        self.sizes = {s.name: s for s in sizes}
        self.page_size = page_size
        self.poll_after_ms = max(10, int(op_delay_s * 250))
        self.token = f"eyJ0eXAiOiJKV1Qi.standin.{secrets.token_urlsafe(32)}"
        self.credential = json.dumps({"access_token": self.token})
        self.subnet_id = (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{resource_group}/providers/"
            "Microsoft.Network/virtualNetworks/cloudburst-vnet/subnets/nodes"
        )
        self._nics: dict[str, _Nic] = {}
        self._vms: dict[str, _Vm] = {}
        self._ops: dict[str, _Op] = {}
        self._ips = itertools.count(10)
        self._requests: list[tuple[str, str, str]] = []
        self._polls: list[tuple[str, str]] = []
        self._notices: dict[str, SpotNotice] = {}  # VM name (lower case) -> its eviction
        self._incarnation = 0  # Scheduled Events' DocumentIncarnation
        super().__init__(ops=OPS, kinds=KINDS, name="azure-standin", **options)

    def nodeclass_block(self, secret_name: str, secret_key: str) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "subscriptionId": self.subscription_id,
            "resourceGroup": self.resource_group,
            "location": self.region,
            "subnetId": self.subnet_id,
            "credentialsSecretRef": {"name": secret_name, "key": secret_key},
        }

    # ---- test controls ---------------------------------------------------------------------

    def requests_seen(self) -> list[tuple[str, str, str]]:
        """(method, path, Host header) of every request, in order."""
        with self._lock:
            return list(self._requests)

    def polls(self) -> list[tuple[str, str]]:
        """(namespace, operation id) of every operation poll, in order."""
        with self._lock:
            return list(self._polls)

    def nic_names(self) -> list[str]:
        with self._lock:
            self._advance(time.monotonic())
            return sorted(self._nics)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            self._advance(time.monotonic())
            return {
                "created_by_name": dict(self._created_by_name),
                "instances_created": sum(self._created_by_name.values()),
                "live_instances": len(self._vms),
                "nics": len(self._nics),
                "deleted_instances": self._deleted,
                "polls": len(self._polls),
                "requests": len(self._requests),
                "failures": self.failures.pending(),
            }

    # ---- state -----------------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        """Called with the lock held: finish due operations, remove deleted VMs."""
        for op in self._ops.values():
            if not op.done and now - op.started_mono >= op.delay_s:
                op.done = True
                if op.on_done is not None:
                    op.on_done(now)
        for key, notice in self._notices.items():
            if not notice.done and now >= notice.due_mono:
                notice.done = True
                self._evict(key)
        for name, vm in list(self._vms.items()):
            if vm.extra.get("deleted"):
                self._remove_vm(name, vm)

    def _evict(self, key: str) -> None:
        """Called with the lock held: Azure evicts the Spot VM per its evictionPolicy
        (Delete: the VM goes, with what it was to delete; Deallocate: stopped, kept)."""
        vm = self._vms.get(key)
        if vm is None:
            return
        if (vm.body.get("properties") or {}).get("evictionPolicy", "Deallocate") == "Delete":
            vm.provisioning = "Deleting"
            vm.extra["deleted"] = True
            self._remove_vm(key, vm)
        else:
            vm.extra["deallocated"] = True

    def interrupt(self, name: str, *, notice_s: float = 2.0) -> SpotNotice:
        """Evict a Spot VM as Azure does: Scheduled Events lists a `Preempt` event for it
        (NotBefore 30 s ahead on Azure, `notice_s` here), then the VM is evicted per its
        evictionPolicy. A Regular-priority VM cannot be evicted (ValueError)."""
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            vm = self._vms.get(name.lower())
            if vm is None:
                raise KeyError(name)
            if (vm.body.get("properties") or {}).get("priority") != "Spot":
                raise ValueError(f"{name} is not an Azure Spot VM")
            if vm.delete_requested_mono is not None or vm.extra.get("deallocated"):
                raise ValueError(f"{name} is already going")
            self._incarnation += 1
            not_before = datetime.now(UTC) + timedelta(seconds=notice_s)
            notice = SpotNotice(
                native_id=vm.name,
                region=vm.location,
                detail={
                    "EventId": str(uuid.uuid4()).upper(),
                    "EventType": "Preempt",
                    "ResourceType": "VirtualMachine",
                    "EventStatus": "Scheduled",
                    "EventSource": "Platform",
                    "NotBefore": format_datetime(not_before, usegmt=True),
                },
                taint_value="preempt",
                noticed_mono=now,
                due_mono=now + notice_s,
            )
            self._notices[name.lower()] = notice
            return notice

    def scheduled_events(self, name: str) -> dict[str, Any]:
        """What the Scheduled Events endpoint (169.254.169.254/metadata/scheduledevents)
        answers inside the VM: the pending Preempt event, if any."""
        with self._lock:
            self._advance(time.monotonic())
            notice = self._notices.get(name.lower())
            events = (
                []
                if notice is None or notice.done
                else [{**notice.detail, "Resources": [notice.native_id], "DurationInSeconds": -1}]
            )
            return {"DocumentIncarnation": self._incarnation, "Events": events}

    def interruption_notice(self, native_id: str) -> str | None:
        """The in-VM agent's view (the kubelets'): the notice's taint value, or None."""
        with self._lock:
            notice = self._notices.get(native_id.lower())
            return notice.taint_value if notice is not None else None

    def _remove_vm(self, key: str, vm: _Vm) -> None:
        """Called with the lock held: the VM is gone, and the NICs it was to delete with it."""
        self._vms.pop(key, None)
        self._deleted += 1
        for nic_id in vm.nic_ids:
            nic = self._nic_by_id(nic_id)
            if nic is None:
                continue
            nic.vm_id = None
            if vm.nic_delete.get(nic_id.lower()) == "Delete":
                del self._nics[nic.name.lower()]

    def _nic_by_id(self, nic_id: str) -> _Nic | None:
        return next((n for n in self._nics.values() if n.id.lower() == nic_id.lower()), None)

    def _new_op(self, namespace: str, location: str) -> _Op:
        op = _Op(
            id=str(uuid.uuid4()),
            namespace=namespace,
            location=location,
            started_mono=time.monotonic(),
            delay_s=self.op_delay_s,
        )
        self._ops[op.id] = op
        return op

    def _op_headers(self, op: _Op, *, location: bool = False) -> dict[str, str]:
        url = (
            f"{self.url}/subscriptions/{self.subscription_id}/providers/Microsoft.{op.namespace}"
            f"/locations/{op.location}/operations/{op.id}?api-version=2024-07-01"
        )
        # ARM says when to poll again; the SDK honours it over its polling interval.
        headers = {"Azure-AsyncOperation": url, "retry-after-ms": str(self.poll_after_ms)}
        if location:
            headers["Location"] = url + "&monitor=true"
        return headers

    def _vm_state(self, vm: _Vm, now: float) -> str:
        if vm.provisioning == "Failed":
            return "terminated"
        if vm.provisioning == "Creating":
            return "pending"
        if vm.extra.get("deallocated"):
            return "terminated"
        return lifecycle_state(
            now, vm.created_mono, self.boot_delay_s, delete_requested_mono=vm.delete_requested_mono
        )

    def _vm_json(self, vm: _Vm, now: float, *, instance_view: bool = False) -> dict[str, Any]:
        body = json.loads(json.dumps(vm.body))
        props = body.setdefault("properties", {})
        props.get("osProfile", {}).pop("customData", None)  # write-only in ARM
        props.get("osProfile", {}).pop("adminPassword", None)
        props["provisioningState"] = vm.provisioning
        props["vmId"] = vm.vm_id
        props["timeCreated"] = vm.created_at
        if instance_view:
            power = {
                "pending": "PowerState/starting",
                "running": "PowerState/running",
                "stopping": "PowerState/deallocating",
                "terminated": "PowerState/stopped",
            }[self._vm_state(vm, now)]
            props["instanceView"] = {
                "statuses": [
                    {"code": f"ProvisioningState/{vm.provisioning.lower()}", "level": "Info"},
                    {"code": power, "level": "Info"},
                ]
            }
        return {
            **body,
            "id": vm.id,
            "name": vm.name,
            "type": "Microsoft.Compute/virtualMachines",
            "location": vm.location,
            "tags": dict(vm.tags),
        }

    def _nic_json(self, nic: _Nic) -> dict[str, Any]:
        props: dict[str, Any] = {
            "provisioningState": "Succeeded",
            "ipConfigurations": [
                {
                    "name": "ipconfig1",
                    "id": f"{nic.id}/ipConfigurations/ipconfig1",
                    "properties": {
                        "privateIPAddress": nic.private_ip,
                        "privateIPAllocationMethod": "Dynamic",
                        "subnet": {"id": nic.subnet_id},
                        "primary": True,
                    },
                }
            ],
        }
        if nic.vm_id:
            props["virtualMachine"] = {"id": nic.vm_id}
        return {
            "id": nic.id,
            "name": nic.name,
            "type": "Microsoft.Network/networkInterfaces",
            "location": nic.location,
            "tags": dict(nic.tags),
            "properties": props,
        }

    # ---- BootableCloud ---------------------------------------------------------------------

    def instance_states(self) -> dict[str, str]:
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            return {vm.name: self._vm_state(vm, now) for vm in self._vms.values()}

    def peek(self, native_id: str) -> dict[str, Any] | None:
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            vm = self._vms.get(native_id.lower())
            if vm is None:
                return None
            nic = self._nic_by_id(vm.nic_ids[0]) if vm.nic_ids else None
            return {
                "id": vm.name,
                "name": vm.name,
                "region": vm.location,
                "instance_type": vm.size,
                "user_data": base64.b64decode(vm.custom_data).decode() if vm.custom_data else "",
                "private_ip": nic.private_ip if nic else None,
                "labels": {k: v for k, v in vm.tags.items() if k.startswith("cloudburst.io/")},
                "tags": dict(vm.tags),
                "state": self._vm_state(vm, now),
                "provisioning_state": vm.provisioning,
                "spot_settings": {
                    k: v
                    for k, v in (vm.body.get("properties") or {}).items()
                    if k in ("priority", "evictionPolicy", "billingProfile")
                },
            }

    def instance_shape(self, instance_type: str) -> tuple[float, float, str] | None:
        s = self.sizes.get(instance_type)
        if s is None:
            return None
        return (float(s.vcpus), float(s.memory_gb), "arm64" if s.arch == "Arm64" else "x86_64")

    # ---- HTTP ------------------------------------------------------------------------------

    @staticmethod
    def _failure_response(kind: str) -> Response:
        status, code, message = _FAILURES["unavailable" if kind == "capacity" else kind]
        headers = {"Retry-After": "1"} if kind == "throttle" else {}
        return _error(status, code, message, **headers)

    def _route(self, req: Request) -> Response:
        with self._lock:
            self._requests.append((req.method, req.path, req.headers.get("host", "")))
        if req.headers.get("authorization") != f"Bearer {self.token}":
            return _error(
                401, "AuthenticationFailed", "Authentication failed. The bearer token is invalid."
            )
        p = req.parts
        if len(p) < 2 or p[0] != "subscriptions" or p[1] != self.subscription_id:
            return _error(
                404,
                "SubscriptionNotFound",
                f"The subscription '{p[1] if len(p) > 1 else ''}' could not be found.",
            )
        rest = p[2:]
        match req.method, rest:
            case "GET", ["providers", ns, "locations", _loc, "operations", op_id]:
                return self._fail("operation") or self._poll(ns, op_id)
            case "GET", ["providers", "Microsoft.Compute", "skus"]:
                return self._fail("catalog") or self._skus(req)
            case _, ["resourceGroups", rg, "providers", *resource]:
                if rg.lower() != self.resource_group.lower():
                    return _error(
                        404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found."
                    )
                return self._resource(req, resource)
        return _error(404, "NotFound", f"no route for {req.method} {req.path}")

    def _resource(self, req: Request, resource: list[str]) -> Response:
        match req.method, resource:
            case "PUT", ["Microsoft.Network", "networkInterfaces", name]:
                return self._fail("nic") or self._put_nic(req, name)
            case "GET", ["Microsoft.Network", "networkInterfaces", name]:
                return self._fail("get") or self._get_nic(name)
            case "DELETE", ["Microsoft.Network", "networkInterfaces", name]:
                return self._fail("delete") or self._delete_nic(name)
            case "PUT", ["Microsoft.Compute", "virtualMachines", name]:
                kind = self.failures.take("create")
                if kind is not None and kind != "capacity":
                    return self._failure_response(kind)
                return self._put_vm(req, name, allocation_failure=kind == "capacity")
            case "GET", ["Microsoft.Compute", "virtualMachines"]:
                return self._fail("list") or self._list_vms(req)
            case "GET", ["Microsoft.Compute", "virtualMachines", name]:
                return self._fail("get") or self._get_vm(req, name)
            case "DELETE", ["Microsoft.Compute", "virtualMachines", name]:
                return self._fail("delete") or self._delete_vm(name)
        return _error(404, "NotFound", f"no route for {req.method} {req.path}")

    def _rid(self, provider_type: str, name: str) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/{provider_type}/{name}"
        )

    def _put_nic(self, req: Request, name: str) -> Response:
        body = req.json()
        location = str(body.get("location") or "")
        if location not in self.locations:
            return _error(400, "LocationNotAvailableForResourceType", f"location {location!r}")
        configs = (body.get("properties") or {}).get("ipConfigurations") or []
        subnet = (
            ((configs[0].get("properties") or {}).get("subnet") or {}).get("id")
            if configs
            else None
        )
        if not subnet or str(subnet).lower() != self.subnet_id.lower():
            return _error(
                400,
                "InvalidResourceReference",
                f"Resource {subnet} referenced by resource {name} was not found.",
            )
        with self._lock:
            self._advance(time.monotonic())
            nic = self._nics.get(name.lower())
            created = nic is None
            if nic is None:
                nic = _Nic(
                    name=name,
                    id=self._rid("Microsoft.Network/networkInterfaces", name),
                    location=location,
                    subnet_id=str(subnet),
                    tags={str(k): str(v) for k, v in (body.get("tags") or {}).items()},
                    private_ip=private_ip(next(self._ips)),
                )
                self._nics[name.lower()] = nic
            else:
                nic.tags = {str(k): str(v) for k, v in (body.get("tags") or {}).items()}
            op = self._new_op("Network", location)
            return Response(201 if created else 200, self._nic_json(nic), self._op_headers(op))

    def _get_nic(self, name: str) -> Response:
        with self._lock:
            self._advance(time.monotonic())
            nic = self._nics.get(name.lower())
            if nic is None:
                return _error(
                    404,
                    "ResourceNotFound",
                    f"The Resource 'networkInterfaces/{name}' was not found.",
                )
            return Response(200, self._nic_json(nic))

    def _delete_nic(self, name: str) -> Response:
        with self._lock:
            self._advance(time.monotonic())
            nic = self._nics.get(name.lower())
            if nic is None:
                return Response(204)
            if nic.vm_id:
                return _error(
                    400,
                    "NicInUse",
                    f"Network Interface {nic.id} is used by existing resource {nic.vm_id}.",
                )
            op = self._new_op("Network", nic.location)
            key = name.lower()

            def remove(_now: float) -> None:
                self._nics.pop(key, None)

            op.on_done = remove
            return Response(202, None, self._op_headers(op, location=True))

    def _put_vm(self, req: Request, name: str, *, allocation_failure: bool) -> Response:
        body = req.json()
        location = str(body.get("location") or "")
        props = body.get("properties") or {}
        size = str((props.get("hardwareProfile") or {}).get("vmSize") or "")
        if location not in self.locations:
            return _error(400, "LocationNotAvailableForResourceType", f"location {location!r}")
        if size not in self.sizes:
            return _error(
                409,
                "SkuNotAvailable",
                f"The requested VM size {size} is not available in location '{location}'.",
            )
        refused = _refused_priority(props)
        if refused is not None:
            return _error(400, "InvalidParameter", refused)
        os_profile = props.get("osProfile") or {}
        nic_refs = (props.get("networkProfile") or {}).get("networkInterfaces") or []
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            nic_ids = [str(n.get("id") or "") for n in nic_refs]
            for nic_id in nic_ids:
                nic = self._nic_by_id(nic_id)
                if nic is None:
                    return _error(
                        400,
                        "InvalidResourceReference",
                        f"Resource {nic_id} referenced by resource {name} was not found.",
                    )
                if (
                    nic.vm_id
                    and nic.vm_id.lower()
                    != self._rid("Microsoft.Compute/virtualMachines", name).lower()
                ):
                    return _error(409, "NicInUse", f"Network interface {nic_id} is in use.")
            if not nic_ids:
                return _error(
                    400, "InvalidParameter", "networkProfile.networkInterfaces is required"
                )
            vm = self._vms.get(name.lower())
            if vm is not None:
                if vm.delete_requested_mono is not None:
                    return _error(
                        409, "OperationNotAllowed", f"VM {name} is being deleted; retry later."
                    )
                if vm.location != location:
                    return _error(
                        409, "InvalidResourceLocation", f"VM {name} exists in {vm.location}."
                    )
                vm.tags = {str(k): str(v) for k, v in (body.get("tags") or {}).items()}
                op = self._new_op("Compute", location)
                return Response(200, self._vm_json(vm, now), self._op_headers(op))
            custom_data = str(os_profile.get("customData") or "")
            try:
                base64.b64decode(custom_data, validate=True)
            except ValueError:
                return _error(400, "InvalidParameter", "customData must be base64")
            vm_rid = self._rid("Microsoft.Compute/virtualMachines", name)
            vm = _Vm(
                name=name,
                id=vm_rid,
                vm_id=str(uuid.uuid4()),
                location=location,
                size=size,
                tags={str(k): str(v) for k, v in (body.get("tags") or {}).items()},
                custom_data=custom_data,
                nic_ids=nic_ids,
                nic_delete={
                    str(n.get("id") or "").lower(): str(
                        (n.get("properties") or {}).get("deleteOption") or "Detach"
                    )
                    for n in nic_refs
                },
                os_disk_delete=str(
                    ((props.get("storageProfile") or {}).get("osDisk") or {}).get("deleteOption")
                    or "Detach"
                ),
                body=body,
                created_mono=now,
                created_at=rfc3339(),
            )
            self._vms[name.lower()] = vm
            self._created_by_name[name] += 1
            for nic_id in nic_ids:
                nic = self._nic_by_id(nic_id)
                if nic is not None:
                    nic.vm_id = vm_rid
            op = self._new_op("Compute", location)
            if allocation_failure:
                op.error = {
                    "code": "AllocationFailed",
                    "message": "Allocation failed. We do not have sufficient capacity for the "
                    "requested VM size in this region (injected).",
                }

            def finish(done_mono: float) -> None:
                if op.error is not None:
                    vm.provisioning = "Failed"
                else:
                    vm.provisioning = "Succeeded"
                    vm.created_mono = done_mono

            op.on_done = finish
            return Response(201, self._vm_json(vm, now), self._op_headers(op))

    def _get_vm(self, req: Request, name: str) -> Response:
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            vm = self._vms.get(name.lower())
            if vm is None:
                return _error(
                    404,
                    "ResourceNotFound",
                    f"The Resource 'Microsoft.Compute/virtualMachines/{name}' under resource "
                    f"group '{self.resource_group}' was not found.",
                )
            expand = (req.q("$expand") or "").lower() == "instanceview"
            return Response(200, self._vm_json(vm, now, instance_view=expand))

    def _list_vms(self, req: Request) -> Response:
        start = int(req.q("$skiptoken") or 0)
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            vms = sorted(self._vms.values(), key=lambda v: v.name)
            chunk = vms[start : start + self.page_size]
            out: dict[str, Any] = {"value": [self._vm_json(vm, now) for vm in chunk]}
        if start + self.page_size < len(vms):
            out["nextLink"] = (
                f"{self.url}{req.path}?api-version={quote(req.q('api-version') or '')}"
                f"&$skiptoken={start + self.page_size}"
            )
        return Response(200, out)

    def _delete_vm(self, name: str) -> Response:
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            vm = self._vms.get(name.lower())
            if vm is None:
                return Response(204)
            op = self._new_op("Compute", vm.location)
            op.delay_s = self.delete_delay_s
            if vm.delete_requested_mono is None:
                # Deleting until the operation succeeds; then gone (with its NIC and disk).
                vm.provisioning = "Deleting"
                vm.delete_requested_mono = now

                def mark(_done_mono: float) -> None:
                    vm.extra["deleted"] = True

                op.on_done = mark
            return Response(202, None, self._op_headers(op, location=True))

    def _poll(self, namespace: str, op_id: str) -> Response:
        with self._lock:
            self._polls.append((namespace, op_id))
            self._advance(time.monotonic())
            op = self._ops.get(op_id)
            if op is None:
                return _error(404, "NotFound", f"operation {op_id} not found")
            body: dict[str, Any] = {"name": op.id, "startTime": rfc3339()}
            if not op.done:
                body["status"] = "InProgress"
            elif op.error is not None:
                body["status"] = "Failed"
                body["error"] = op.error
            else:
                body["status"] = "Succeeded"
            return Response(200, body, {"retry-after-ms": str(self.poll_after_ms)})

    def _skus(self, req: Request) -> Response:
        flt = req.q("$filter") or ""
        location = None
        if "location eq" in flt:
            location = flt.split("location eq", 1)[1].strip().strip("'\"")
        locations = [location] if location else self.locations
        items = []
        for s in self.sizes.values():
            for loc in locations:
                if loc not in self.locations:
                    continue
                items.append(
                    {
                        "resourceType": "virtualMachines",
                        "name": s.name,
                        "tier": "Standard",
                        "size": s.name.removeprefix("Standard_"),
                        "family": s.family,
                        "locations": [loc],
                        "locationInfo": [{"location": loc, "zones": ["1", "2", "3"]}],
                        "capabilities": [
                            {"name": "vCPUs", "value": str(s.vcpus)},
                            {"name": "MemoryGB", "value": f"{s.memory_gb:g}"},
                            {"name": "CpuArchitectureType", "value": s.arch},
                        ],
                        "restrictions": [],
                    }
                )
        return Response(200, {"value": items})


def standin(*, boot_delay_s: float = 1.0, host: str = "127.0.0.1") -> AzureStandin:
    """The factory `sim.cluster` and `cloudburst dev` use (not yet started)."""
    return AzureStandin(boot_delay_s=boot_delay_s, host=host)
