"""Azure virtual machines through azure-mgmt-compute and azure-mgmt-network.

- A VM needs a NIC: `create` PUTs `<vm>-nic` in the NodeClass subnet (which must exist), then
  PUTs the VM with `begin_create_or_update` and waits for the long-running operation. Both
  are PUT by name, hence idempotent; a VM of this claim that already exists is returned
  without a second PUT (ARM refuses changing `customData`).
- NIC and OS disk carry `deleteOption: Delete`, so deleting the VM deletes them; `delete`
  removes the VM, waits for it, then the NIC (a NIC left by a failed create too).
- Tags `cloudburst.io/*` on VM and NIC (ARM allows `/` and `.` in tag names); `list_owned`
  lists the resource group's VMs and filters on the tags.
- User data: `osProfile.customData`, base64 (what cloud-init on Azure reads).
- Errors are classified on the ARM error code (`e.error.code`), not on the exception class:
  quota and `SkuNotAvailable` arrive as `ResourceExistsError` (any 409), allocation failures
  inside the operation as a plain `HttpResponseError` (an Azure SDK trap). SDK retries
  are off (`retry_total=0`): throttling surfaces as `RetryableError` with Retry-After, and the
  activity retry policy owns backoff.
- Credentials: the Secret value is JSON `{"tenant_id", "client_id", "client_secret"[,
  "authority_host"]}` (a service principal → `ClientSecretCredential`), or `{"access_token"[,
  "expires_on"]}` (a token obtained elsewhere, used as is). Without a Secret,
  `DefaultAzureCredential` (managed identity, workload identity, environment).
- A plain-http `endpoint` (a local stand-in) is the user's explicit choice: bearer tokens are
  then sent over it (azure-core refuses that by default) through our own authentication
  policy, passed as the client's `authentication_policy` option.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from datetime import datetime
from functools import lru_cache
from typing import Any, ClassVar, NoReturn

from azure.core.credentials import AccessToken, TokenCredential
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.models import VirtualMachine
from azure.mgmt.core.policies import ARMChallengeAuthenticationPolicy
from azure.mgmt.network import NetworkManagementClient
from azure.mgmt.network.models import NetworkInterface

from activities.providers.base import (
    CapacityError,
    FatalError,
    Instance,
    InstanceSpec,
    InstanceState,
    InstanceType,
    NoIdentityError,
    Provider,
    RetryableError,
    instance_id,
    split_instance_id,
)
from api import labels as L
from api.nodeclass import AzureClass

log = logging.getLogger(__name__)

# azure-core logs every request and response (headers redacted) at INFO: one line per poll.
# Keep it to warnings unless the operator configured that logger explicitly.
_HTTP_LOG = logging.getLogger("azure.core.pipeline.policies.http_logging_policy")
if _HTTP_LOG.level == logging.NOTSET:
    _HTTP_LOG.setLevel(logging.WARNING)

ARM_SCOPE = "https://management.azure.com/.default"
OPERATION_TIMEOUT_S = 900.0
DELETE_WAIT_S = 600.0

_CREDENTIAL_FIX = (
    "check the Secret referenced by NodeClass spec.azure.credentialsSecretRef (JSON with "
    "tenant_id, client_id, client_secret) and that the principal has the Virtual Machine "
    "Contributor and Network Contributor roles on spec.azure.resourceGroup"
)
_AMBIENT_FIX = (
    "set NodeClass spec.azure.credentialsSecretRef, or give the worker an Azure identity: AKS "
    "Workload Identity (label the worker's pods azure.workload.identity/use=true and annotate "
    "ServiceAccount cloudburst-system/cloudburst-worker with azure.workload.identity/client-id, "
    "see deploy/README.md) or a managed identity"
)
_CONFIG_FIX = (
    "check NodeClass spec.azure (subscriptionId, resourceGroup, location, subnetId, image)"
)

# ARM error codes: out of capacity or quota in this offering → try the next one.
_CAPACITY_CODES = frozenset(
    {
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
        "SkuNotAvailable",
        "OperationNotAllowed",  # "... results in exceeding approved ... Cores quota"
        "QuotaExceeded",
        "ResourceQuotaExceeded",
        "SubscriptionQuotaExceeded",
        "SkuNotAvailableInZone",
    }
)
_OUTAGE_CODES = frozenset({"ServiceUnavailable", "ServerBusy"})
_THROTTLE_CODES = frozenset({"TooManyRequests", "SubscriptionRequestsThrottled", "Throttled"})
_AUTH_CODES = frozenset(
    {
        "AuthenticationFailed",
        "AuthorizationFailed",
        "InvalidAuthenticationToken",
        "InvalidAuthenticationTokenTenant",
        "ExpiredAuthenticationToken",
        "LinkedAuthorizationFailed",
    }
)
# Transient conflicts: the same call succeeds once the other operation has finished.
_BUSY_CODES = frozenset({"NicInUse", "AnotherOperationInProgress", "RetryableError", "Conflict"})
_CONFIG_CODES = {
    "ResourceGroupNotFound": "check NodeClass spec.azure.resourceGroup (it must exist)",
    "SubscriptionNotFound": "check NodeClass spec.azure.subscriptionId",
    "InvalidResourceReference": "check NodeClass spec.azure.subnetId (the subnet must exist)",
    "InvalidSubnetId": "check NodeClass spec.azure.subnetId",
    "PlatformImageNotFound": "check NodeClass spec.azure.image / imageArm64 (publisher:offer:sku:version)",
    "ImageNotFound": "check NodeClass spec.azure.image / imageArm64",
    "InvalidParameter": _CONFIG_FIX,
    "LocationNotAvailableForResourceType": "check NodeClass spec.azure.location",
}


class StaticTokenCredential:
    """A `TokenCredential` for a token obtained elsewhere (`az account get-access-token`)."""

    def __init__(self, token: str, expires_on: int | None = None) -> None:
        self._token = token
        self._expires_on = expires_on or int(time.time()) + 3600

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self._token, self._expires_on)

    def __repr__(self) -> str:  # never show the token
        return "StaticTokenCredential(<redacted>)"


class _PlainHttpBearerPolicy(ARMChallengeAuthenticationPolicy):
    """ARM's bearer policy, allowed over plain http (for an explicitly configured http endpoint)."""

    def on_request(self, request: Any) -> None:
        request.context.options["enforce_https"] = False
        super().on_request(request)


def parse_credential(credential: str | None) -> TokenCredential:
    if not credential or not credential.strip():
        from azure.identity import DefaultAzureCredential

        return DefaultAzureCredential()
    try:
        data = json.loads(credential)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise FatalError(
            "azure", "the credential Secret value is not a JSON object", _CREDENTIAL_FIX
        )
    if isinstance(data.get("access_token"), str) and data["access_token"]:
        expires = data.get("expires_on")
        return StaticTokenCredential(
            data["access_token"], int(expires) if isinstance(expires, int | float) else None
        )
    fields = [data.get(k) for k in ("tenant_id", "client_id", "client_secret")]
    if not all(isinstance(f, str) and f for f in fields):
        raise FatalError(
            "azure",
            "the credential JSON lacks tenant_id, client_id or client_secret",
            _CREDENTIAL_FIX,
        )
    from azure.identity import ClientSecretCredential

    kwargs: dict[str, Any] = {}
    if isinstance(data.get("authority_host"), str):
        kwargs["authority"] = data["authority_host"]
    return ClientSecretCredential(str(fields[0]), str(fields[1]), str(fields[2]), **kwargs)


@lru_cache(maxsize=1)
def _throwaway_ssh_key() -> str:
    """Azure wants an SSH key (or password) for Linux VMs; nodes never need one. A fresh key
    whose private half is discarded satisfies it without leaving a way in."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
        + " cloudburst-no-login"
    )


def _image_reference(image: str) -> dict[str, str]:
    if image.startswith("/"):
        return {"id": image}
    parts = image.split(":")
    if len(parts) != 4:
        raise FatalError(
            "azure",
            f"image {image!r} is neither publisher:offer:sku:version nor a resource id",
            "fix NodeClass spec.azure.image",
        )
    return dict(zip(("publisher", "offer", "sku", "version"), parts, strict=True))


def _as_dict(model: Any) -> dict[str, Any]:
    """The REST JSON of an SDK model (compute's are mappings, network's are msrest models)."""
    if model is None:
        return {}
    if hasattr(model, "serialize"):
        out = model.serialize(keep_readonly=True)
        return out if isinstance(out, dict) else {}
    try:
        return json.loads(json.dumps(dict(model), default=_as_dict))
    except TypeError:
        return {}


def _is_arm_size(size: str) -> bool:
    # Ampere/Cobalt sizes carry a "p" feature letter: D2ps_v5, E4pds_v6, B2pls_v2, ...
    core = size.removeprefix("Standard_").split("_", 1)[0].lower()
    letters = core.lstrip("abcdefghijklmnopqrstuvwxyz")
    features = letters.lstrip("0123456789")
    return "p" in features


class AzureProvider(Provider):
    """VMs in `spec.azure.resourceGroup` of `spec.azure.subscriptionId`."""

    name: ClassVar[str] = "azure"
    supports_spot: ClassVar[bool] = True
    block: AzureClass

    def __init__(
        self,
        block: AzureClass,
        credential: str | None,
        namespace: str | None = None,
        *,
        polling_interval_s: float = 5.0,
    ) -> None:
        super().__init__(block, credential, namespace)
        if not (credential and credential.strip()) and (block.endpoint or "").startswith("http://"):
            # The worker's own token never crosses in clear text (a plain-HTTP endpoint is a
            # local stand-in; give it a credential Secret).
            raise FatalError(
                self.name,
                "without credentialsSecretRef the worker's own identity would be sent to the "
                "plain-HTTP endpoint spec.azure.endpoint",
                "use an https endpoint, or set NodeClass spec.azure.credentialsSecretRef",
            )
        self._credential = parse_credential(credential)
        self.polling_interval_s = polling_interval_s
        self._lock = threading.Lock()
        self._compute: ComputeManagementClient | None = None
        self._network: NetworkManagementClient | None = None

    # ---- plumbing ------------------------------------------------------------------------

    def _client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "polling_interval": self.polling_interval_s,
            "retry_total": 0,
            "connection_timeout": 10,
            "read_timeout": 60,
        }
        if self.block.endpoint:
            kwargs["base_url"] = self.block.endpoint.rstrip("/")
            kwargs["credential_scopes"] = [ARM_SCOPE]
            if self.block.endpoint.startswith("http://"):
                kwargs["authentication_policy"] = _PlainHttpBearerPolicy(
                    self._credential, ARM_SCOPE
                )
        return kwargs

    def _clients(self) -> tuple[ComputeManagementClient, NetworkManagementClient]:
        with self._lock:
            if self._compute is None or self._network is None:
                self._compute = ComputeManagementClient(
                    self._credential, self.block.subscription_id, **self._client_kwargs()
                )
                self._network = NetworkManagementClient(
                    self._credential, self.block.subscription_id, **self._client_kwargs()
                )
            return self._compute, self._network

    def _raise(self, exc: Exception, what: str, *, creating: bool = False) -> NoReturn:
        """Classify on the ARM error code first, then the status; never the class alone."""
        ambient = not (self.credential and self.credential.strip())
        if ambient and isinstance(exc, ClientAuthenticationError) and exc.status_code is None:
            # No Secret, and DefaultAzureCredential got no token: no identity to use (or one
            # it could not use). Its message lists what it tried; the fix is ours to say.
            raise NoIdentityError(
                self.name,
                f"{what}: no credentialsSecretRef, and DefaultAzureCredential got no token",
                _AMBIENT_FIX,
            ) from None
        if isinstance(exc, ClientAuthenticationError) and exc.status_code is None:
            # The credential itself failed (token request): its message may quote the request.
            raise FatalError(
                self.name, f"{what}: could not get a token ({type(exc).__name__})", _CREDENTIAL_FIX
            ) from None
        if isinstance(exc, ServiceRequestError | ServiceResponseError):
            raise RetryableError(self.name, f"{what}: {type(exc).__name__}: {exc.message}") from exc
        if not isinstance(exc, HttpResponseError):
            raise RetryableError(self.name, f"{what}: {type(exc).__name__}") from exc
        code = str(getattr(exc.error, "code", None) or "")
        message = str(getattr(exc.error, "message", None) or exc.reason or "")
        status = int(exc.status_code or 0)
        detail = f"{what}: HTTP {status or '-'} {code}: {message}".rstrip(": ")
        if code in _THROTTLE_CODES or status == 429:
            raise RetryableError(self.name, detail, retry_after_s=_retry_after(exc)) from exc
        if code in _CAPACITY_CODES:
            raise CapacityError(self.name, detail) from exc
        if code in _OUTAGE_CODES or status == 503:
            if creating:
                raise CapacityError(self.name, detail) from exc
            raise RetryableError(self.name, detail) from exc
        if code in _BUSY_CODES:
            raise RetryableError(self.name, detail) from exc
        if (
            code in _AUTH_CODES
            or status in (401, 403)
            or isinstance(exc, ClientAuthenticationError)
        ):
            raise FatalError(self.name, detail, _CREDENTIAL_FIX) from exc
        if code in _CONFIG_CODES:
            raise FatalError(self.name, detail, _CONFIG_CODES[code]) from exc
        if status >= 500 or code in ("InternalServerError", "InternalExecutionError"):
            raise RetryableError(self.name, detail) from exc
        raise FatalError(self.name, detail, _CONFIG_FIX) from exc

    def _native(self, value: str) -> tuple[str, str]:
        try:
            provider, location, native = split_instance_id(value)
        except ValueError as exc:
            raise FatalError(self.name, f"malformed instance id {value!r}") from exc
        if provider != self.name:
            raise FatalError(self.name, f"instance id {value!r} is not an {self.name} instance")
        return location, native

    def _instance(self, raw: dict[str, Any], private_ip: str | None = None) -> Instance:
        props = raw.get("properties") or {}
        tags = {str(k): str(v) for k, v in (raw.get("tags") or {}).items()}
        location = str(raw.get("location") or self.block.location)
        provisioning = str(props.get("provisioningState") or "")
        state = {
            "Creating": InstanceState.PENDING,
            "Updating": InstanceState.PENDING,
            "Migrating": InstanceState.PENDING,
            "Succeeded": InstanceState.RUNNING,
            "Deleting": InstanceState.STOPPING,
            "Failed": InstanceState.TERMINATED,
            "Canceled": InstanceState.TERMINATED,
        }.get(provisioning, InstanceState.PENDING)
        for status in (props.get("instanceView") or {}).get("statuses") or []:
            power = str(status.get("code") or "")
            if not power.startswith("PowerState/") or state is not InstanceState.RUNNING:
                continue
            state = {
                "PowerState/starting": InstanceState.PENDING,
                "PowerState/running": InstanceState.RUNNING,
                "PowerState/stopping": InstanceState.STOPPING,
                "PowerState/deallocating": InstanceState.STOPPING,
                "PowerState/stopped": InstanceState.TERMINATED,
                "PowerState/deallocated": InstanceState.TERMINATED,
            }.get(power, state)
        created_at = None
        if props.get("timeCreated"):
            try:
                created_at = datetime.fromisoformat(
                    str(props["timeCreated"]).replace("Z", "+00:00")
                )
            except ValueError:
                created_at = None
        name = str(raw.get("name") or "")
        return Instance(
            id=instance_id(self.name, location, name),
            name=tags.get(L.NODECLAIM) or name,
            provider=self.name,
            region=location,
            instance_type=str((props.get("hardwareProfile") or {}).get("vmSize") or ""),
            state=state,
            labels={k: v for k, v in tags.items() if k.startswith(f"{L.GROUP}/")},
            created_at=created_at,
            private_ip=private_ip,
            capacity_type="spot" if props.get("priority") == "Spot" else "on-demand",
        )

    def _get_raw(self, name: str, what: str, *, instance_view: bool) -> dict[str, Any] | None:
        compute, _ = self._clients()
        try:
            vm = compute.virtual_machines.get(
                self.block.resource_group, name, expand="instanceView" if instance_view else None
            )
        except ResourceNotFoundError as exc:
            if str(getattr(exc.error, "code", "") or "") == "ResourceGroupNotFound":
                self._raise(exc, what)
            return None
        except Exception as exc:
            self._raise(exc, what)
        return _as_dict(vm)

    def _image(self, spec: InstanceSpec) -> str:
        if _is_arm_size(spec.instance_type) and self.block.image_arm64:
            return self.block.image_arm64
        image = spec.image or self.block.image
        if not image:
            raise FatalError(self.name, "no image configured", "set NodeClass spec.azure.image")
        return image

    def _wait(self, poller: Any, what: str, timeout: float) -> Any:
        poller.wait(timeout=timeout)
        if not poller.done():
            raise RetryableError(
                self.name, f"{what}: still running after {timeout:g}s; a retry resumes it"
            )
        return poller.result()

    def _delete_resources(self, name: str, what: str, *, timeout: float) -> None:
        """Delete the VM (its NIC and OS disk go with it), then the NIC if it is left."""
        compute, network = self._clients()
        try:
            poller = compute.virtual_machines.begin_delete(self.block.resource_group, name)
            self._wait(poller, f"{what}: delete VM", timeout)
        except ResourceNotFoundError:
            pass
        except RetryableError:
            raise
        except Exception as exc:
            self._raise(exc, f"{what}: delete VM")
        try:
            poller = network.network_interfaces.begin_delete(
                self.block.resource_group, f"{name}-nic"
            )
            self._wait(poller, f"{what}: delete NIC", timeout)
        except ResourceNotFoundError:
            pass
        except RetryableError:
            raise
        except Exception as exc:
            self._raise(exc, f"{what}: delete NIC")

    # ---- Provider ------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> Instance:
        location = spec.region or self.block.location
        name = spec.name
        what = f"create VM {name!r} ({spec.instance_type} in {location})"
        if not self.block.subnet_id:
            raise FatalError(
                self.name, f"{what}: no subnet configured", "set NodeClass spec.azure.subnetId"
            )
        existing = self._get_raw(name, f"{what}: look up", instance_view=False)
        if existing is not None:
            found = self._instance(existing)
            if (
                found.labels.get(L.NODECLAIM) != spec.name
                or found.labels.get(L.CLUSTER) != spec.cluster_id
            ):
                raise FatalError(
                    self.name,
                    f"{what}: a VM of that name exists that is not this claim's",
                    "delete or rename the conflicting VM in the resource group",
                )
            provisioning = str((existing.get("properties") or {}).get("provisioningState") or "")
            if provisioning in ("Failed", "Canceled") or found.region != location:
                # A failed earlier attempt (e.g. AllocationFailed), or another offering: clear it.
                log.info(
                    "VM %s left %s by an earlier attempt; deleting it first", name, provisioning
                )
                self._delete_resources(name, what, timeout=DELETE_WAIT_S)
            elif provisioning == "Deleting":
                raise RetryableError(self.name, f"{what}: an earlier VM of this claim is deleting")
            else:
                log.info("VM of %s already exists as %s", spec.name, found.id)
                return found
        compute, network = self._clients()
        tags = spec.vm_labels()
        nic_body: dict[str, Any] = {
            "location": location,
            "tags": tags,
            "properties": {
                "ipConfigurations": [
                    {
                        "name": "ipconfig1",
                        "properties": {
                            "subnet": {"id": self.block.subnet_id},
                            "privateIPAllocationMethod": "Dynamic",
                            "primary": True,
                        },
                    }
                ],
            },
        }
        if self.block.network_security_group_id:
            nic_body["properties"]["networkSecurityGroup"] = {
                "id": self.block.network_security_group_id
            }
        try:
            nic_poller = network.network_interfaces.begin_create_or_update(
                self.block.resource_group, f"{name}-nic", NetworkInterface(nic_body)
            )
            nic = _as_dict(self._wait(nic_poller, f"{what}: NIC", OPERATION_TIMEOUT_S))
        except RetryableError:
            raise
        except Exception as exc:
            self._raise(exc, f"{what}: NIC", creating=True)
        nic_id = str(nic.get("id") or "")
        configs = (nic.get("properties") or {}).get("ipConfigurations") or []
        private_ip = (
            (configs[0].get("properties") or {}).get("privateIPAddress") if configs else None
        )
        vm_body: dict[str, Any] = {
            "location": location,
            "tags": tags,
            "properties": {
                "hardwareProfile": {"vmSize": spec.instance_type},
                "storageProfile": {
                    "imageReference": _image_reference(self._image(spec)),
                    "osDisk": {
                        "createOption": "FromImage",
                        "deleteOption": "Delete",
                        "diskSizeGB": self.block.os_disk_size_gb,
                        "managedDisk": {"storageAccountType": self.block.os_disk_type},
                    },
                },
                "osProfile": {
                    "computerName": name[:64],
                    "adminUsername": "cloudburst",
                    "customData": base64.b64encode(spec.user_data.encode()).decode(),
                    "linuxConfiguration": {
                        "disablePasswordAuthentication": True,
                        "ssh": {
                            "publicKeys": [
                                {
                                    "path": "/home/cloudburst/.ssh/authorized_keys",
                                    "keyData": _throwaway_ssh_key(),
                                }
                            ]
                        },
                    },
                },
                "networkProfile": {
                    "networkInterfaces": [
                        {"id": nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}
                    ]
                },
            },
        }
        if spec.capacity_type == "spot":
            # Deleted on eviction (the claim replaces it); maxPrice -1: never evicted for
            # price, only for capacity, and billed at most the pay-as-you-go price.
            vm_body["properties"].update(
                {"priority": "Spot", "evictionPolicy": "Delete", "billingProfile": {"maxPrice": -1}}
            )
        if spec.zone:
            vm_body["zones"] = [spec.zone.rsplit("-", 1)[-1]]
        try:
            poller = compute.virtual_machines.begin_create_or_update(
                self.block.resource_group, name, VirtualMachine(vm_body)
            )
            vm = _as_dict(self._wait(poller, what, OPERATION_TIMEOUT_S))
        except RetryableError:
            raise
        except Exception as exc:
            try:
                self._raise(exc, what, creating=True)
            except CapacityError:
                # Azure leaves the VM `Failed` (and its NIC): clear them so that the claim's
                # next offering, or a retry, starts clean. Best effort: create clears it too.
                try:
                    self._delete_resources(name, what, timeout=DELETE_WAIT_S)
                except Exception:  # the capacity error is what matters
                    log.warning("could not clean up after failed create of %s", name)
                raise
        instance = self._instance(vm, private_ip=private_ip)
        log.info("created %s as %s", spec.name, instance.id)
        return instance

    def get(self, instance_id: str) -> Instance | None:
        _location, name = self._native(instance_id)
        raw = self._get_raw(name, f"get VM {instance_id}", instance_view=True)
        return None if raw is None else self._instance(raw)

    def list_owned(self, cluster_id: str) -> list[Instance]:
        compute, _ = self._clients()
        out: list[Instance] = []
        try:
            for vm in compute.virtual_machines.list(self.block.resource_group):
                instance = self._instance(_as_dict(vm))
                if (
                    instance.labels.get(L.MANAGED) == "true"
                    and instance.labels.get(L.CLUSTER) == cluster_id
                ):
                    out.append(instance)
        except Exception as exc:
            self._raise(exc, f"list VMs of cluster {cluster_id!r}")
        return out

    def delete(self, instance_id: str) -> None:
        _location, name = self._native(instance_id)
        self._delete_resources(name, f"delete VM {instance_id}", timeout=DELETE_WAIT_S)

    def instance_types(self) -> list[InstanceType]:
        compute, _ = self._clients()
        location = self.block.location
        out: list[InstanceType] = []
        try:
            for sku in compute.resource_skus.list(filter=f"location eq '{location}'"):
                raw = _as_dict(sku)
                if raw.get("resourceType") != "virtualMachines":
                    continue
                if any(
                    r.get("reasonCode") == "NotAvailableForSubscription"
                    and r.get("type") == "Location"
                    for r in raw.get("restrictions") or []
                ):
                    continue
                caps = {
                    str(c.get("name")): str(c.get("value")) for c in raw.get("capabilities") or []
                }
                try:
                    vcpu = float(caps.get("vCPUs", "0"))
                    memory = float(caps.get("MemoryGB", "0"))
                except ValueError:
                    continue
                out.append(
                    InstanceType(
                        provider=self.name,
                        name=str(raw.get("name")),
                        vcpu=vcpu,
                        memory_gib=memory,
                        arch="arm64" if caps.get("CpuArchitectureType") == "Arm64" else "x86_64",
                        regions=[location],
                        # Prices: the public Retail Prices API, not ARM.
                        price_eur_per_hour=None,
                    )
                )
        except Exception as exc:
            self._raise(exc, "list VM sizes")
        return out


def _retry_after(exc: HttpResponseError) -> float | None:
    response: Any = exc.response
    value = response.headers.get("Retry-After") if response is not None else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
