"""Google Compute Engine through google-cloud-compute (REST transport).

- Every client is built with `client_options={"api_endpoint": block.endpoint}` when set, and
  long-running operations are polled by us with `ZoneOperationsClient.wait` on the same
  endpoint: `insert()`/`delete()` return an `ExtendedOperation` whose poller is a separately
  built client that ignores `client_options` (it would call the real API), so we use
  `insert_unary`/`delete_unary` (a GCP SDK trap).
- Idempotent create: the instance name is the claim name (names are unique per zone) and
  `request_id` is a UUID5 of the claim and the offering (zone, machine type) — a retry of the
  same offering gets the same operation back; a different offering after a capacity failure
  is a new request (a failed request id would replay its failure). A 409 on the name is
  resolved by reading the instance and checking it carries this claim's label.
- Labels: GCE label keys/values allow only `[a-z0-9_-]` (≤63), so `cloudburst.io/nodeclaim`
  is stored as `cloudburst-io_nodeclaim` (`.` → `-`, `/` → `_`) and values are lowercased with
  other characters replaced by `-`. Labels are for filtering; the exact canonical labels are
  also kept in the metadata item `cloudburst-labels` (JSON) and read back from there.
- User data: metadata item `user-data` (what cloud-init on GCE Ubuntu images reads).
- Credentials: the Secret value is a service-account key JSON (scoped to compute). With no
  Secret, the worker's own identity: Application Default Credentials (GKE Workload Identity
  or the metadata server, `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's ADC file); none found is
  a `NoIdentityError` saying what to configure. The one exception is a plain-`http://`
  endpoint override (allowed by the operator: a local stand-in), which gets anonymous
  requests: a bearer token of the worker's identity never travels in clear text.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
import uuid
from datetime import datetime
from typing import Any, ClassVar, NoReturn

import google.auth
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import compute_v1
from google.oauth2 import service_account

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
from api.nodeclass import GcpClass

log = logging.getLogger(__name__)

SCOPES = ("https://www.googleapis.com/auth/compute",)
CALL_TIMEOUT_S = 30.0
OPERATION_TIMEOUT_S = 600.0
LABELS_METADATA_KEY = "cloudburst-labels"
USER_DATA_METADATA_KEY = "user-data"
# Stable namespace for request ids (uuid5 of the claim and offering).
_REQUEST_NS = uuid.UUID("6f0c7a52-3f4e-5c1b-9a57-0c1a0d6b7e21")

_CREDENTIAL_FIX = (
    "check the Secret referenced by NodeClass spec.gcp.credentialsSecretRef (a service-account "
    "key JSON) and that the account has roles/compute.instanceAdmin.v1 on spec.gcp.project"
)
_AMBIENT_FIX = (
    "set NodeClass spec.gcp.credentialsSecretRef, or give the worker a Google identity: GKE "
    "Workload Identity (annotate ServiceAccount cloudburst-system/cloudburst-worker with "
    "iam.gke.io/gcp-service-account, see deploy/README.md) or GOOGLE_APPLICATION_CREDENTIALS"
)
_CONFIG_FIX = (
    "check NodeClass spec.gcp (project, zone/zones, image, network, subnetwork, serviceAccount)"
)
# Operation error codes that mean "this offering cannot be had now": try the next one.
_CAPACITY_OP_CODES = (
    "ZONE_RESOURCE_POOL_EXHAUSTED",  # also ..._WITH_DETAILS
    "QUOTA_EXCEEDED",
    "RESOURCE_POOL_EXHAUSTED",
    "STOCKOUT",
    "UNSUPPORTED_OPERATION",
)
_QUOTA_REASONS = frozenset(
    {"quotaExceeded", "QUOTA_EXCEEDED", "limitExceeded", "resourceExhausted", "RESOURCE_EXHAUSTED"}
)
_RATE_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"})

_STATES = {
    "PROVISIONING": InstanceState.PENDING,
    "STAGING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "REPAIRING": InstanceState.PENDING,
    "STOPPING": InstanceState.STOPPING,
    "SUSPENDING": InstanceState.STOPPING,
    "STOPPED": InstanceState.TERMINATED,
    "SUSPENDED": InstanceState.TERMINATED,
    "TERMINATED": InstanceState.TERMINATED,  # GCE's "stopped"
}

# Arm machine families (Tau T2A, Axion C4A, ...).
_ARM_FAMILIES = ("t2a", "c4a", "n4a")

# ---- label mapping (documented in the module doc) -------------------------------------------

_LABEL_BAD = re.compile(r"[^a-z0-9_-]")


def label_key(key: str) -> str:
    """`cloudburst.io/nodeclaim` → `cloudburst-io_nodeclaim` (GCE label key rules)."""
    return _LABEL_BAD.sub("-", key.lower().replace("/", "_").replace(".", "-"))[:63]


def label_value(value: str) -> str:
    return _LABEL_BAD.sub("-", value.lower())[:63]


def canonical_key(key: str) -> str:
    """Inverse of `label_key` for our own keys (`cloudburst-io_x` → `cloudburst.io/x`)."""
    prefix = label_key(f"{L.GROUP}/")
    if key.startswith(prefix):
        return f"{L.GROUP}/{key[len(prefix) :]}"
    return key


_NAME_BAD = re.compile(r"[^a-z0-9-]")


def instance_name(claim: str) -> str:
    """A valid GCE instance name (`[a-z]([-a-z0-9]{0,61}[a-z0-9])?`) for a claim name."""
    name = _NAME_BAD.sub("-", claim.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"cb-{name}".rstrip("-")
    if len(name) > 63:
        digest = hashlib.sha256(claim.encode()).hexdigest()[:8]
        name = f"{name[:54].rstrip('-')}-{digest}"
    return name


def request_id(claim: str, zone: str, machine_type: str) -> str:
    """The idempotency key of one create attempt: the same claim and offering, the same id."""
    return str(uuid.uuid5(_REQUEST_NS, f"{claim}/{zone}/{machine_type}"))


def is_arm_machine_type(machine_type: str) -> bool:
    return machine_type.split("-", 1)[0] in _ARM_FAMILIES


def region_of_zone(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def parse_credential(credential: str | None, *, endpoint: str | None = None) -> Credentials:
    """Service-account credentials from the Secret value; without one, the worker's own
    (Application Default Credentials), or anonymous for a plain-HTTP endpoint."""
    if not credential or not credential.strip():
        if endpoint is not None and endpoint.lower().startswith("http://"):
            # Only a local stand-in serves plain HTTP (and the operator allowed it): it takes
            # anonymous requests, and the worker's own token must never cross in clear text.
            return AnonymousCredentials()
        return ambient_credentials()
    try:
        info = json.loads(credential)
    except ValueError:
        info = None
    if not isinstance(info, dict) or info.get("type", "service_account") != "service_account":
        raise FatalError(
            "gcp", "the credential Secret value is not a service-account key JSON", _CREDENTIAL_FIX
        )
    try:
        creds: Credentials = service_account.Credentials.from_service_account_info(
            info, scopes=list(SCOPES)
        )
    except (ValueError, KeyError) as exc:
        # The message names a missing field at most; never the key material.
        raise FatalError(
            "gcp",
            f"the service-account key JSON is unusable ({type(exc).__name__})",
            _CREDENTIAL_FIX,
        ) from None
    return creds


def ambient_credentials() -> Credentials:
    """The worker's own Google identity (ADC), scoped to compute."""
    try:
        creds, _project = google.auth.default(scopes=list(SCOPES))
    except auth_exc.DefaultCredentialsError:
        raise NoIdentityError(
            "gcp", "no credentialsSecretRef and no Application Default Credentials", _AMBIENT_FIX
        ) from None
    return creds


class GcpProvider(Provider):
    """Compute Engine instances in `spec.gcp.project`."""

    name: ClassVar[str] = "gcp"
    supports_spot: ClassVar[bool] = True
    block: GcpClass

    def __init__(
        self,
        block: GcpClass,
        credential: str | None,
        namespace: str | None = None,
        *,
        poll_interval_s: float = 2.0,
    ) -> None:
        super().__init__(block, credential, namespace)
        self._credentials = parse_credential(credential, endpoint=block.endpoint)
        self.poll_interval_s = poll_interval_s
        self._lock = threading.Lock()
        self._instances: compute_v1.InstancesClient | None = None
        self._operations: compute_v1.ZoneOperationsClient | None = None
        self._machine_types: compute_v1.MachineTypesClient | None = None

    # ---- plumbing ------------------------------------------------------------------------

    def _client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"credentials": self._credentials, "transport": "rest"}
        options: dict[str, str] = {}
        if self.block.endpoint:
            options["api_endpoint"] = self.block.endpoint.rstrip("/")
        # The client's universe must match the credential's (sovereign clouds, stand-ins).
        universe = getattr(self._credentials, "universe_domain", None)
        if isinstance(universe, str) and universe and universe != "googleapis.com":
            options["universe_domain"] = universe
        if options:
            kwargs["client_options"] = options
        return kwargs

    def _clients(
        self,
    ) -> tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient]:
        with self._lock:
            if self._instances is None or self._operations is None:
                self._instances = compute_v1.InstancesClient(**self._client_kwargs())
                # Same endpoint, same credentials: operation polling never leaves the endpoint.
                self._operations = compute_v1.ZoneOperationsClient(**self._client_kwargs())
            return self._instances, self._operations

    def _zone(self, spec: InstanceSpec) -> str:
        if spec.zone:
            return spec.zone
        region = spec.region or region_of_zone(self.block.zone)
        if region_of_zone(self.block.zone) == region:
            return self.block.zone
        return self.block.zones.get(region) or f"{region}-b"

    def _native(self, value: str) -> tuple[str, str]:
        try:
            provider, zone, native = split_instance_id(value)
        except ValueError as exc:
            raise FatalError(self.name, f"malformed instance id {value!r}") from exc
        if provider != self.name:
            raise FatalError(self.name, f"instance id {value!r} is not a {self.name} instance")
        return zone, native

    def _raise(self, exc: Exception, what: str, *, creating: bool = False) -> NoReturn:
        """Map an SDK error to the typed errors; messages never carry a credential."""
        if isinstance(exc, auth_exc.GoogleAuthError):
            # A token exchange failed: the body may echo request details; keep only the class.
            raise FatalError(
                self.name, f"{what}: authentication failed ({type(exc).__name__})", _CREDENTIAL_FIX
            ) from None
        if not isinstance(exc, gexc.GoogleAPICallError):
            if isinstance(exc, gexc.RetryError | TimeoutError | ConnectionError):
                raise RetryableError(self.name, f"{what}: {type(exc).__name__}: {exc}") from exc
            raise RetryableError(self.name, f"{what}: {type(exc).__name__}") from exc
        reasons = {str(e.get("reason") or "") for e in exc.errors if isinstance(e, dict)}
        if exc.reason:
            reasons.add(str(exc.reason))
        detail = (
            f"{what}: HTTP {exc.code} {', '.join(sorted(r for r in reasons if r))}: {exc.message}"
        )
        if isinstance(exc, gexc.TooManyRequests) or reasons & _RATE_REASONS:
            raise RetryableError(self.name, detail, retry_after_s=_retry_after(exc)) from exc
        if reasons & _QUOTA_REASONS or any(r.startswith(_CAPACITY_OP_CODES) for r in reasons if r):
            raise CapacityError(self.name, detail) from exc
        if isinstance(exc, gexc.ServiceUnavailable):
            if creating:
                raise CapacityError(self.name, detail) from exc
            raise RetryableError(self.name, detail) from exc
        if isinstance(exc, gexc.Unauthenticated | gexc.Unauthorized):
            raise FatalError(self.name, detail, _CREDENTIAL_FIX) from exc
        if isinstance(exc, gexc.Forbidden | gexc.PermissionDenied):
            raise FatalError(self.name, detail, _CREDENTIAL_FIX) from exc
        if isinstance(exc, gexc.BadRequest | gexc.NotFound):
            raise FatalError(self.name, detail, _CONFIG_FIX) from exc
        if isinstance(exc, gexc.ServerError | gexc.DeadlineExceeded):
            raise RetryableError(self.name, detail) from exc
        raise FatalError(self.name, detail, _CONFIG_FIX) from exc

    def _wait(self, operation: compute_v1.Operation, zone: str, what: str) -> compute_v1.Operation:
        """Poll a zone operation on our endpoint until DONE (the `wait` call blocks server-side)."""
        _, operations = self._clients()
        deadline = time.monotonic() + OPERATION_TIMEOUT_S
        op = operation
        while op.status != compute_v1.Operation.Status.DONE:
            if time.monotonic() > deadline:
                raise RetryableError(
                    self.name,
                    f"{what}: operation {op.name} not done after {OPERATION_TIMEOUT_S:g}s; "
                    "a retry resumes it (same request id)",
                )
            try:
                op = operations.wait(
                    project=self.block.project,
                    zone=zone,
                    operation=op.name,
                    retry=None,
                    timeout=CALL_TIMEOUT_S + 120,
                )
            except Exception as exc:
                self._raise(exc, f"{what}: poll operation {op.name}")
            if op.status != compute_v1.Operation.Status.DONE and self.poll_interval_s:
                time.sleep(self.poll_interval_s)
        return op

    def _raise_operation_error(self, op: compute_v1.Operation, what: str) -> None:
        errors = list(op.error.errors) if op.error else []
        if not errors:
            return
        codes = [str(e.code) for e in errors]
        message = "; ".join(f"{e.code}: {e.message}" for e in errors)
        detail = f"{what}: operation {op.name} failed: {message}"
        status = int(op.http_error_status_code or 0)
        if any(c.startswith(_CAPACITY_OP_CODES) for c in codes) or status == 503:
            raise CapacityError(self.name, detail)
        if any("RATE_LIMIT" in c for c in codes) or status == 429:
            raise RetryableError(self.name, detail)
        if any(c in ("PERMISSIONS_ERROR", "UNAUTHORIZED") for c in codes) or status in (401, 403):
            raise FatalError(self.name, detail, _CREDENTIAL_FIX)
        if status >= 500:
            raise RetryableError(self.name, detail)
        raise FatalError(self.name, detail, _CONFIG_FIX)

    def _instance(self, raw: compute_v1.Instance, zone: str) -> Instance:
        metadata = {i.key: i.value for i in raw.metadata.items} if raw.metadata else {}
        labels: dict[str, str] = {}
        try:
            stored = json.loads(metadata.get(LABELS_METADATA_KEY) or "{}")
            if isinstance(stored, dict):
                labels = {str(k): str(v) for k, v in stored.items()}
        except ValueError:
            labels = {}
        if not labels:
            labels = {
                canonical_key(k): v
                for k, v in dict(raw.labels).items()
                if canonical_key(k).startswith(f"{L.GROUP}/")
            }
        nic = raw.network_interfaces[0] if raw.network_interfaces else None
        public_ip = None
        if nic is not None and nic.access_configs:
            public_ip = nic.access_configs[0].nat_i_p or None
        created_at = None
        if raw.creation_timestamp:
            try:
                created_at = datetime.fromisoformat(raw.creation_timestamp.replace("Z", "+00:00"))
            except ValueError:
                created_at = None
        return Instance(
            id=instance_id(self.name, zone, raw.name),
            name=labels.get(L.NODECLAIM) or raw.name,
            provider=self.name,
            region=region_of_zone(zone),
            instance_type=raw.machine_type.rsplit("/", 1)[-1],
            state=_STATES.get(raw.status, InstanceState.PENDING),
            labels=labels,
            created_at=created_at,
            private_ip=(nic.network_i_p or None) if nic is not None else None,
            public_ip=public_ip,
            capacity_type=(
                "spot"
                if raw.scheduling and raw.scheduling.provisioning_model == "SPOT"
                else "on-demand"
            ),
        )

    def _get_raw(self, zone: str, name: str, what: str) -> compute_v1.Instance | None:
        instances, _ = self._clients()
        try:
            return instances.get(
                project=self.block.project,
                zone=zone,
                instance=name,
                retry=None,
                timeout=CALL_TIMEOUT_S,
            )
        except gexc.NotFound:
            return None
        except Exception as exc:
            self._raise(exc, what)

    def _image(self, spec: InstanceSpec) -> str:
        if is_arm_machine_type(spec.instance_type) and self.block.image_arm64:
            return self.block.image_arm64
        image = spec.image or self.block.image
        if not image:
            raise FatalError(self.name, "no image configured", "set NodeClass spec.gcp.image")
        return image

    def _body(self, spec: InstanceSpec, zone: str, name: str) -> compute_v1.Instance:
        canonical = spec.vm_labels()
        interface = compute_v1.NetworkInterface()
        if self.block.network:
            interface.network = self.block.network
        if self.block.subnetwork:
            interface.subnetwork = self.block.subnetwork
        if self.block.external_ip:
            interface.access_configs = [
                compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")
            ]
        body = compute_v1.Instance(
            name=name,
            machine_type=f"zones/{zone}/machineTypes/{spec.instance_type}",
            labels={label_key(k): label_value(v) for k, v in canonical.items()},
            metadata=compute_v1.Metadata(
                items=[
                    compute_v1.Items(key=USER_DATA_METADATA_KEY, value=spec.user_data),
                    compute_v1.Items(
                        key=LABELS_METADATA_KEY, value=json.dumps(canonical, sort_keys=True)
                    ),
                ]
            ),
            disks=[
                compute_v1.AttachedDisk(
                    boot=True,
                    auto_delete=True,
                    initialize_params=compute_v1.AttachedDiskInitializeParams(
                        source_image=self._image(spec),
                        disk_size_gb=self.block.disk_size_gb,
                        disk_type=f"zones/{zone}/diskTypes/{self.block.disk_type}",
                        labels={label_key(k): label_value(v) for k, v in canonical.items()},
                    ),
                )
            ],
            network_interfaces=[interface],
        )
        if spec.capacity_type == "spot":
            # Deleted (not stopped) on preemption: the claim replaces it. Spot VMs cannot
            # restart automatically or live-migrate.
            body.scheduling = compute_v1.Scheduling(
                provisioning_model="SPOT",
                instance_termination_action="DELETE",
                automatic_restart=False,
                on_host_maintenance="TERMINATE",
            )
        if self.block.service_account:
            body.service_accounts = [
                compute_v1.ServiceAccount(
                    email=self.block.service_account,
                    scopes=["https://www.googleapis.com/auth/cloud-platform"],
                )
            ]
        return body

    # ---- Provider ------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> Instance:
        zone = self._zone(spec)
        name = instance_name(spec.name)
        what = f"create instance {name!r} ({spec.instance_type} in {zone})"
        instances, _ = self._clients()
        rid = request_id(spec.name, zone, spec.instance_type)
        body = self._body(spec, zone, name)
        for attempt in range(2):
            request = compute_v1.InsertInstanceRequest(
                project=self.block.project, zone=zone, instance_resource=body, request_id=rid
            )
            try:
                op = instances.insert_unary(request=request, retry=None, timeout=CALL_TIMEOUT_S)
            except gexc.Conflict:
                return self._existing(spec, zone, name, what)
            except Exception as exc:
                self._raise(exc, what, creating=True)
            replayed_failure = op.status == compute_v1.Operation.Status.DONE and bool(
                op.error and op.error.errors
            )
            if not (replayed_failure and attempt == 0):
                break
            # GCE answers a known request id with its original operation: an earlier attempt
            # of this claim and offering failed. A new id derived from that one keeps the
            # retry idempotent (the instance name is unique per zone anyway).
            log.info("create %s: request %s failed before (%s); new request", name, rid, op.name)
            rid = str(uuid.uuid5(_REQUEST_NS, f"{rid}/{op.name}"))
        op = self._wait(op, zone, what)
        errors = list(op.error.errors) if op.error else []
        if any(str(e.code) == "RESOURCE_ALREADY_EXISTS" for e in errors):
            return self._existing(spec, zone, name, what)
        self._raise_operation_error(op, what)
        raw = self._get_raw(zone, name, f"{what}: read back")
        if raw is None:
            raise RetryableError(self.name, f"{what}: operation done but the instance is gone")
        instance = self._instance(raw, zone)
        log.info("created %s as %s", spec.name, instance.id)
        return instance

    def _existing(self, spec: InstanceSpec, zone: str, name: str, what: str) -> Instance:
        """The name is taken: ours from an earlier attempt, or someone else's."""
        raw = self._get_raw(zone, name, f"{what}: read existing")
        if raw is None:
            raise RetryableError(self.name, f"{what}: name conflict on an instance now gone")
        instance = self._instance(raw, zone)
        if (
            instance.labels.get(L.NODECLAIM) != spec.name
            or instance.labels.get(L.CLUSTER) != spec.cluster_id
        ):
            raise FatalError(
                self.name,
                f"{what}: the name is taken by an instance that is not this claim's",
                "delete or rename the conflicting instance in the project",
            )
        if instance.state is InstanceState.STOPPING:
            raise RetryableError(
                self.name, f"{what}: an earlier instance of this claim is stopping"
            )
        log.info("instance of %s already exists as %s", spec.name, instance.id)
        return instance

    def get(self, instance_id: str) -> Instance | None:
        zone, name = self._native(instance_id)
        raw = self._get_raw(zone, name, f"get instance {instance_id}")
        return None if raw is None else self._instance(raw, zone)

    def list_owned(self, cluster_id: str) -> list[Instance]:
        instances, _ = self._clients()
        flt = (
            f'(labels.{label_key(L.MANAGED)} = "true") AND '
            f'(labels.{label_key(L.CLUSTER)} = "{label_value(cluster_id)}")'
        )
        out: list[Instance] = []
        try:
            pages = instances.aggregated_list(
                request=compute_v1.AggregatedListInstancesRequest(
                    project=self.block.project, filter=flt, max_results=500
                ),
                retry=None,
                timeout=CALL_TIMEOUT_S,
            )
            for scope, scoped in pages:
                zone = scope.rsplit("/", 1)[-1]
                for raw in scoped.instances:
                    instance = self._instance(raw, zone)
                    # Sanitised label values may collide: the exact labels decide.
                    if instance.labels.get(L.CLUSTER) == cluster_id:
                        out.append(instance)
        except Exception as exc:
            self._raise(exc, f"list instances of cluster {cluster_id!r}")
        return out

    def delete(self, instance_id: str) -> None:
        zone, name = self._native(instance_id)
        instances, _ = self._clients()
        what = f"delete instance {instance_id}"
        try:
            op = instances.delete_unary(
                request=compute_v1.DeleteInstanceRequest(
                    project=self.block.project,
                    zone=zone,
                    instance=name,
                    request_id=str(uuid.uuid4()),
                ),
                retry=None,
                timeout=CALL_TIMEOUT_S,
            )
        except gexc.NotFound:
            log.info("instance %s already gone", instance_id)
            return
        except Exception as exc:
            self._raise(exc, what)
        # Deletion runs on; callers confirm with get(). Surface an immediate failure only.
        if op.status == compute_v1.Operation.Status.DONE:
            errors = list(op.error.errors) if op.error else []
            if any(str(e.code) == "RESOURCE_NOT_FOUND" for e in errors):
                return
            self._raise_operation_error(op, what)

    def instance_types(self) -> list[InstanceType]:
        with self._lock:
            if self._machine_types is None:
                self._machine_types = compute_v1.MachineTypesClient(**self._client_kwargs())
            client = self._machine_types
        zone = self.block.zone
        out: list[InstanceType] = []
        try:
            for raw in client.list(
                project=self.block.project, zone=zone, retry=None, timeout=CALL_TIMEOUT_S
            ):
                out.append(
                    InstanceType(
                        provider=self.name,
                        name=raw.name,
                        vcpu=float(raw.guest_cpus),
                        memory_gib=float(raw.memory_mb) / 1024,
                        arch="arm64" if is_arm_machine_type(raw.name) else "x86_64",
                        regions=[region_of_zone(zone)],
                        # No prices in the Compute API (Cloud Billing Catalog API).
                        price_eur_per_hour=None,
                    )
                )
        except Exception as exc:
            self._raise(exc, "list machine types")
        return out


def _retry_after(exc: gexc.GoogleAPICallError) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
