"""Compute Engine stand-in: the REST subset `activities/providers/gcp.py` calls, stateful.

    POST   /compute/v1/projects/{p}/zones/{z}/instances?requestId=U      insert → Operation
    GET    /compute/v1/projects/{p}/zones/{z}/instances/{name}
    GET    /compute/v1/projects/{p}/zones/{z}/instances?filter=...&maxResults=&pageToken=
    GET    /compute/v1/projects/{p}/aggregated/instances?filter=...
    DELETE /compute/v1/projects/{p}/zones/{z}/instances/{name}?requestId=U → Operation
    GET    /compute/v1/projects/{p}/zones/{z}/operations/{op}
    POST   /compute/v1/projects/{p}/zones/{z}/operations/{op}/wait   (blocks until done, ≤ 2 s)
    GET    /compute/v1/projects/{p}/zones/{z}/machineTypes
    POST   /token    an OAuth token endpoint for service-account keys whose `token_uri` points here

Operations are asynchronous (`op_delay_s`): an insert answers `RUNNING` and the instance
appears when the operation is done, so a provider must poll — every poll is recorded
(`polls()`), which is how the tests prove that polling stays on this endpoint. `requestId`s
are honoured like GCE: a repeated id returns the original operation. Filters support
`labels.K = "V"` and `name = "N"` terms joined by AND / parentheses.

Injected failures (`inject_failure(op, kind)`): `capacity` makes the insert's operation end
with `ZONE_RESOURCE_POOL_EXHAUSTED` (as GCE reports stockouts); `quota` answers 403
`quotaExceeded`; `unavailable` 503; `throttle` 429 `rateLimitExceeded` with Retry-After;
`auth` 401.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import secrets
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Unpack
from urllib.parse import parse_qs

from sim.clouds.base import (
    CloudStandin,
    Request,
    Response,
    SpotNotice,
    StandinOptions,
    lifecycle_state,
    private_ip,
    rfc3339,
)

PROVIDER = "gcp"
OPS = ("create", "get", "list", "delete", "operation", "catalog")
DEFAULT_ZONES = ("europe-west4-a", "europe-west4-b", "us-central1-a", "us-central1-b")
WAIT_MAX_S = 2.0


@dataclass(frozen=True)
class MachineType:
    name: str
    cpus: int
    memory_mb: int
    arch: str = "x86_64"


DEFAULT_MACHINE_TYPES: tuple[MachineType, ...] = (
    # The machine types of the shipped catalog (planner/catalog), so that any
    # offering the planner picks exists here.
    MachineType("e2-small", 2, 2048),
    MachineType("e2-medium", 2, 4096),
    MachineType("e2-standard-2", 2, 8192),
    MachineType("e2-standard-4", 4, 16384),
    MachineType("e2-standard-8", 8, 32768),
    MachineType("e2-standard-16", 16, 65536),
    MachineType("e2-highcpu-4", 4, 4096),
    MachineType("e2-highcpu-8", 8, 8192),
    MachineType("e2-highcpu-16", 16, 16384),
    MachineType("e2-highmem-2", 2, 16384),
    MachineType("e2-highmem-4", 4, 32768),
    MachineType("n2-standard-2", 2, 8192),
    MachineType("n2-standard-4", 4, 16384),
    MachineType("n2-standard-8", 8, 32768),
    MachineType("n2-standard-16", 16, 65536),
    MachineType("n2-highcpu-8", 8, 8192),
    MachineType("n2-highmem-4", 4, 32768),
    MachineType("t2a-standard-1", 1, 4096, "arm64"),
    MachineType("t2a-standard-2", 2, 8192, "arm64"),
    MachineType("t2a-standard-4", 4, 16384, "arm64"),
    MachineType("t2a-standard-8", 8, 32768, "arm64"),
    MachineType("t2a-standard-16", 16, 65536, "arm64"),
    MachineType("t2d-standard-2", 2, 8192),
    MachineType("t2d-standard-4", 4, 16384),
    MachineType("t2d-standard-8", 8, 32768),
)

# kind -> (status, reason, message) for failures answered on the request itself.
_FAILURES: dict[str, tuple[int, str, str]] = {
    "unavailable": (503, "backendError", "The service is currently unavailable (injected)."),
    "quota": (
        403,
        "quotaExceeded",
        "Quota 'CPUS' exceeded. Limit: 8.0 in region europe-west4 (injected).",
    ),
    "throttle": (429, "rateLimitExceeded", "Rate Limit Exceeded (injected)."),
    "auth": (401, "authError", "Request had invalid authentication credentials (injected)."),
}
_STATUS_TEXT = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}
_TERM = re.compile(r'\(?\s*(labels\.[a-z0-9_-]+|name)\s*(=|eq)\s*"?([^")]*)"?\s*\)?', re.I)


def _refused_scheduling(scheduling: Any) -> str | None:
    """Compute Engine's refusals of a malformed `scheduling` block, or None."""
    if not scheduling:
        return None
    model = scheduling.get("provisioningModel", "STANDARD")
    if model not in ("STANDARD", "SPOT"):
        return f"Invalid value for field 'resource.scheduling.provisioningModel': '{model}'."
    action = scheduling.get("instanceTerminationAction")
    if action is not None and action not in ("STOP", "DELETE"):
        return (
            f"Invalid value for field 'resource.scheduling.instanceTerminationAction': '{action}'."
        )
    if model == "SPOT":
        if scheduling.get("automaticRestart") is True:
            return (
                "Invalid value for field 'resource.scheduling.automaticRestart': 'true'. "
                "Spot VMs cannot be restarted automatically."
            )
        if scheduling.get("onHostMaintenance", "TERMINATE") != "TERMINATE":
            return (
                "Invalid value for field 'resource.scheduling.onHostMaintenance': "
                f"'{scheduling['onHostMaintenance']}'. Spot VMs must terminate on maintenance."
            )
    elif action is not None:
        return "instanceTerminationAction is only allowed with provisioningModel SPOT."
    return None


def _error(status: int, reason: str, message: str, **headers: str) -> Response:
    body = {
        "error": {
            "code": status,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
            "status": _STATUS_TEXT.get(status, "UNKNOWN"),
        }
    }
    return Response(status, body, headers=dict(headers))


def parse_filter(value: str) -> dict[str, str]:
    """`(labels.a = "x") AND (labels.b = "y")` / `name = "n"` → {"labels.a": "x", ...}."""
    out: dict[str, str] = {}
    rest = value.strip()
    if not rest:
        return out
    for part in re.split(r"\)\s*(?:AND\s*)?\(|\s+AND\s+", rest):
        m = _TERM.fullmatch(part.strip()) or _TERM.search(part)
        if not m:
            raise ValueError(f"unsupported filter term {part!r}")
        out[m.group(1)] = m.group(3)
    return out


@dataclass
class _Vm:
    id: int
    name: str
    zone: str
    machine_type: str
    labels: dict[str, str]
    metadata: dict[str, str]
    created_mono: float
    created_at: str
    private_ip: str
    raw: dict[str, Any]
    delete_requested_mono: float | None = None
    stopped: bool = False  # preempted with instanceTerminationAction STOP: TERMINATED, kept


@dataclass
class _Operation:
    name: str
    zone: str
    kind: str  # "insert" | "delete"
    target: str
    request_id: str | None
    started_mono: float
    delay_s: float
    error: dict[str, Any] | None = None
    http_error: int | None = None
    # What to do when it completes (create the VM / mark it deleting).
    on_done: Any = None
    done: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _b64url(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


class GcpStandin(CloudStandin):
    """Stateful Compute Engine fake with failure injection; a `BootableCloud`."""

    provider = PROVIDER
    region = "europe-west4"
    zone = "europe-west4-a"
    instance_type = "e2-standard-2"

    def __init__(
        self,
        *,
        project: str = "cb-standin",
        op_delay_s: float = 0.2,
        zones: tuple[str, ...] = DEFAULT_ZONES,
        machine_types: tuple[MachineType, ...] = DEFAULT_MACHINE_TYPES,
        require_auth: bool = True,
        page_size_cap: int = 500,
        tls: ssl.SSLContext | None = None,
        **options: Unpack[StandinOptions],
    ) -> None:
        self.project = project
        self.op_delay_s = op_delay_s
        self.zones = list(zones)
        self.machine_types = {m.name: m for m in machine_types}
        self.require_auth = require_auth
        self.page_size_cap = page_size_cap
        self.access_token = f"ya29.standin-{secrets.token_urlsafe(24)}"
        self._private_key_pem = self._private_key()
        self._client_email = f"cloudburst@{project}.iam.gserviceaccount.com"
        self.universe_domain = "standin.invalid"
        self._vms: dict[tuple[str, str], _Vm] = {}  # (zone, name)
        self._ops: dict[str, _Operation] = {}
        self._by_request_id: dict[str, str] = {}
        self._ids = itertools.count(4_711_000_001)
        self._op_ids = itertools.count(1)
        self._requests: list[tuple[str, str, str]] = []
        self._polls: list[tuple[str, str, str]] = []
        self._tokens_issued = 0
        self._notices: dict[str, SpotNotice] = {}  # VM name -> its preemption
        # `tls`: serve HTTPS (the provider sends the worker's own identity to https only).
        super().__init__(ops=OPS, name="gcp-standin", tls=tls, **options)

    def nodeclass_block(self, secret_name: str, secret_key: str) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "project": self.project,
            "zone": self.zone,
            "zones": {"us-central1": "us-central1-a"},
            "credentialsSecretRef": {"name": secret_name, "key": secret_key},
        }

    @staticmethod
    def _private_key() -> str:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()

    @property
    def credential(self) -> str:
        """A service-account key JSON (a real RSA key) whose `token_uri` is this stand-in."""
        return json.dumps(self.service_account_info())

    @property
    def private_key_pem(self) -> str:
        return self._private_key_pem

    def service_account_info(self) -> dict[str, str]:
        return {
            "type": "service_account",
            "project_id": self.project,
            "private_key_id": "standin-key-1",
            "private_key": self._private_key_pem,
            "client_email": self._client_email,
            "client_id": "100000000000000000001",
            "token_uri": f"{self.url}/token",
            # Not Google's universe: google-auth then signs its own JWTs and skips the
            # regional-access-boundary lookup that would otherwise go to iamcredentials.
            "universe_domain": self.universe_domain,
        }

    # ---- test controls ---------------------------------------------------------------------

    def requests_seen(self) -> list[tuple[str, str, str]]:
        """(method, path, Host header) of every request, in order."""
        with self._lock:
            return list(self._requests)

    def polls(self) -> list[tuple[str, str, str]]:
        """(zone, operation, "get"|"wait") of every operation poll, in order."""
        with self._lock:
            return list(self._polls)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            self._advance(time.monotonic())
            return {
                **self._vm_counts(len(self._vms)),
                "operations": len(self._ops),
                "polls": len(self._polls),
                "tokens_issued": self._tokens_issued,
                "requests": len(self._requests),
                "failures": self.failures.pending(),
            }

    # ---- state -----------------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        """Called with the lock held: finish due operations, forget deleted VMs."""
        for op in self._ops.values():
            if not op.done and now - op.started_mono >= op.delay_s:
                op.done = True
                if op.on_done is not None and op.error is None:
                    op.on_done(now)
        for notice in self._notices.values():
            if not notice.done and now >= notice.due_mono:
                notice.done = True
                self._preempt(notice.native_id, now)
        gone = [
            k
            for k, vm in self._vms.items()
            if vm.delete_requested_mono is not None
            and now - vm.delete_requested_mono >= self.delete_delay_s
        ]
        for k in gone:
            del self._vms[k]
            self._deleted += 1

    def _preempt(self, name: str, now: float) -> None:
        """Called with the lock held: Compute Engine reclaims the VM per its
        instanceTerminationAction (DELETE: deleted; STOP: TERMINATED, disks kept)."""
        vm = self._vm_by_name(name)
        if vm is None:
            return
        action = (vm.raw.get("scheduling") or {}).get("instanceTerminationAction") or "STOP"
        if action == "DELETE":
            if vm.delete_requested_mono is None:
                vm.delete_requested_mono = now
        else:
            vm.stopped = True

    def interrupt(self, name: str, *, notice_s: float = 2.0) -> SpotNotice:
        """Preempt a Spot VM as Compute Engine does: the metadata server's `instance/preempted`
        turns TRUE (ACPI G2 soft-off; 30 s on GCE, `notice_s` here), then the VM is stopped
        or deleted per `scheduling.instanceTerminationAction`. A standard VM cannot be
        preempted (ValueError)."""
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            vm = self._vm_by_name(name)
            if vm is None:
                raise KeyError(name)
            if (vm.raw.get("scheduling") or {}).get("provisioningModel") != "SPOT":
                raise ValueError(f"{name} is not a Spot VM")
            if vm.delete_requested_mono is not None or vm.stopped:
                raise ValueError(f"{name} is already going")
            notice = SpotNotice(
                native_id=name,
                region=vm.zone,
                detail={"preempted": "TRUE"},
                taint_value="preempted",
                noticed_mono=now,
                due_mono=now + notice_s,
            )
            self._notices[name] = notice
            return notice

    def metadata_preempted(self, name: str) -> str:
        """What `computeMetadata/v1/instance/preempted` answers inside the VM."""
        with self._lock:
            self._advance(time.monotonic())
            return "TRUE" if name in self._notices else "FALSE"

    def interruption_notice(self, native_id: str) -> str | None:
        """The in-VM agent's view (the kubelets'): the notice's taint value, or None."""
        with self._lock:
            notice = self._notices.get(native_id)
            return notice.taint_value if notice is not None else None

    def _vm_state(self, vm: _Vm, now: float) -> str:
        if vm.stopped:
            return "terminated"
        return lifecycle_state(
            now, vm.created_mono, self.boot_delay_s, delete_requested_mono=vm.delete_requested_mono
        )

    def _vm_json(self, vm: _Vm, now: float) -> dict[str, Any]:
        status = {
            "pending": "STAGING",
            "running": "RUNNING",
            "stopping": "STOPPING",
            "terminated": "TERMINATED",
        }[self._vm_state(vm, now)]
        base = f"{self.url}/compute/v1/projects/{self.project}/zones/{vm.zone}"
        return {
            **vm.raw,
            "kind": "compute#instance",
            "id": str(vm.id),
            "name": vm.name,
            "zone": base,
            "machineType": f"{base}/machineTypes/{vm.machine_type}",
            "status": status,
            "labels": dict(vm.labels),
            "metadata": {
                "fingerprint": "c3RhbmRpbg==",
                "items": [{"key": k, "value": v} for k, v in vm.metadata.items()],
            },
            "networkInterfaces": [
                {
                    "name": "nic0",
                    "networkIP": vm.private_ip,
                    "network": f"{self.url}/compute/v1/projects/{self.project}/global/networks/default",
                }
            ],
            "creationTimestamp": vm.created_at,
            "selfLink": f"{base}/instances/{vm.name}",
        }

    def _op_json(self, op: _Operation) -> dict[str, Any]:
        base = f"{self.url}/compute/v1/projects/{self.project}/zones/{op.zone}"
        out: dict[str, Any] = {
            "kind": "compute#operation",
            "id": str(op.extra.get("id", 0)),
            "name": op.name,
            "zone": base,
            "operationType": op.kind,
            "targetLink": f"{base}/instances/{op.target}",
            "status": "DONE" if op.done else "RUNNING",
            "progress": 100 if op.done else 0,
            "selfLink": f"{base}/operations/{op.name}",
        }
        if op.request_id:
            out["clientOperationId"] = op.request_id
        if op.done and op.error is not None:
            out["error"] = op.error
            out["httpErrorStatusCode"] = op.http_error or 400
            out["httpErrorMessage"] = (
                "SERVICE UNAVAILABLE" if op.http_error == 503 else "BAD REQUEST"
            )
        return out

    # ---- BootableCloud ---------------------------------------------------------------------

    def instance_states(self) -> dict[str, str]:
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            return {vm.name: self._vm_state(vm, now) for vm in self._vms.values()}

    def _vm_by_name(self, name: str) -> _Vm | None:
        return next((vm for vm in self._vms.values() if vm.name == name), None)

    def peek(self, native_id: str) -> dict[str, Any] | None:
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            vm = self._vm_by_name(native_id)
            if vm is None:
                return None
            try:
                labels = json.loads(vm.metadata.get("cloudburst-labels") or "{}")
            except ValueError:
                labels = {}
            return {
                "id": vm.name,
                "name": vm.name,
                "region": vm.zone.rsplit("-", 1)[0],
                "zone": vm.zone,
                "instance_type": vm.machine_type,
                "user_data": vm.metadata.get("user-data", ""),
                "private_ip": vm.private_ip,
                "labels": labels if isinstance(labels, dict) else {},
                "gce_labels": dict(vm.labels),
                "scheduling": vm.raw.get("scheduling"),
                "state": self._vm_state(vm, now),
            }

    def instance_shape(self, instance_type: str) -> tuple[float, float, str] | None:
        m = self.machine_types.get(instance_type)
        return None if m is None else (float(m.cpus), m.memory_mb / 1024, m.arch)

    # ---- HTTP ------------------------------------------------------------------------------

    @staticmethod
    def _failure_response(kind: str) -> Response:
        # `capacity` belongs in an insert's operation; elsewhere it is an outage.
        status, reason, message = _FAILURES["unavailable" if kind == "capacity" else kind]
        headers = {"Retry-After": "1"} if kind == "throttle" else {}
        return _error(status, reason, message, **headers)

    def _route(self, req: Request) -> Response:
        with self._lock:
            self._requests.append((req.method, req.path, req.headers.get("host", "")))
        if req.method == "POST" and req.parts == ["token"]:
            return self._token(req)
        if req.parts[:4] != ["compute", "v1", "projects", self.project]:
            return _error(404, "notFound", f"The resource '{req.path}' was not found")
        if self.require_auth and not self._authorized(req.headers.get("authorization", "")):
            return _error(401, "authError", "Request had invalid authentication credentials.")
        rest = req.parts[4:]
        match req.method, rest:
            case "POST", ["zones", zone, "instances"]:
                kind = self.failures.take("create")
                if kind is not None and kind != "capacity":
                    return self._failure_response(kind)
                return self._insert(req, zone, capacity_failure=kind == "capacity")
            case "GET", ["zones", zone, "instances"]:
                return self._fail("list") or self._list(req, [zone])
            case "GET", ["aggregated", "instances"]:
                return self._fail("list") or self._aggregated(req)
            case "GET", ["zones", zone, "instances", name]:
                return self._fail("get") or self._get(zone, name)
            case "DELETE", ["zones", zone, "instances", name]:
                return self._fail("delete") or self._delete(req, zone, name)
            case "GET", ["zones", zone, "operations", name]:
                return self._fail("operation") or self._poll(zone, name, "get")
            case "POST", ["zones", zone, "operations", name, "wait"]:
                return self._fail("operation") or self._poll(zone, name, "wait")
            case "GET", ["zones", zone, "machineTypes"]:
                return self._fail("catalog") or self._machine_types(zone)
        return _error(404, "notFound", f"The resource '{req.path}' was not found")

    def _authorized(self, header: str) -> bool:
        """A token from /token, or a self-signed JWT of the service account (what google-auth
        sends when it skips the token exchange), signed by the account's key."""
        scheme, _, token = header.partition(" ")
        if scheme != "Bearer" or not token:
            return False
        if token == self.access_token:
            return True
        claims = self._verified_jwt(token)
        return claims is not None and claims.get("iss") == self._client_email

    def _verified_jwt(self, token: str) -> dict[str, Any] | None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa

        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            signature = _b64url(parts[2])
            claims = json.loads(_b64url(parts[1]))
            key = serialization.load_pem_private_key(self._private_key_pem.encode(), None)
            assert isinstance(key, rsa.RSAPrivateKey)
            key.public_key().verify(
                signature, f"{parts[0]}.{parts[1]}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
        except (ValueError, InvalidSignature):
            return None
        if not isinstance(claims, dict) or float(claims.get("exp", 0)) < time.time():
            return None
        return claims

    def _token(self, req: Request) -> Response:
        """OAuth2 JWT-bearer grant: accept an assertion signed by the service-account key."""
        form = parse_qs(req.body.decode("utf-8", "replace"))
        claims = self._verified_jwt((form.get("assertion") or [""])[-1])
        if claims is None:
            return Response(400, {"error": "invalid_grant", "error_description": "bad assertion"})
        if claims.get("iss") != self._client_email:
            return Response(400, {"error": "invalid_grant", "error_description": "unknown account"})
        with self._lock:
            self._tokens_issued += 1
        return Response(
            200, {"access_token": self.access_token, "expires_in": 3600, "token_type": "Bearer"}
        )

    def _new_op(self, zone: str, kind: str, target: str, request_id: str | None) -> _Operation:
        op = _Operation(
            name=f"operation-{int(time.time() * 1000)}-{next(self._op_ids):06d}",
            zone=zone,
            kind=kind,
            target=target,
            request_id=request_id,
            started_mono=time.monotonic(),
            delay_s=self.op_delay_s,
        )
        op.extra["id"] = 7_000_000_000 + len(self._ops)
        self._ops[op.name] = op
        if request_id:
            self._by_request_id[request_id] = op.name
        return op

    def _insert(self, req: Request, zone: str, *, capacity_failure: bool = False) -> Response:
        body = req.json()
        request_id = req.q("requestId")
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            if request_id and request_id in self._by_request_id:
                return Response(200, self._op_json(self._ops[self._by_request_id[request_id]]))
            if zone not in self.zones:
                return _error(400, "invalid", f"Invalid value for field 'zone': '{zone}'.")
            name = str(body.get("name") or "")
            if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name):
                return _error(400, "invalid", f"Invalid value for field 'resource.name': '{name}'.")
            machine_type = str(body.get("machineType") or "").rsplit("/", 1)[-1]
            if machine_type not in self.machine_types:
                return _error(
                    400,
                    "invalid",
                    f"Invalid value for field 'resource.machineType': '{machine_type}'.",
                )
            labels = body.get("labels") or {}
            for k, v in labels.items():
                if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", k) or not re.fullmatch(
                    r"[a-z0-9_-]{0,63}", str(v)
                ):
                    return _error(
                        400, "invalid", f"Invalid value for field 'resource.labels': '{k}'."
                    )
            refused = _refused_scheduling(body.get("scheduling"))
            if refused is not None:
                return _error(400, "invalid", refused)
            if (zone, name) in self._vms:
                return _error(
                    409,
                    "alreadyExists",
                    f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' "
                    "already exists",
                )
            metadata = {
                str(i["key"]): str(i.get("value") or "")
                for i in (body.get("metadata") or {}).get("items") or []
            }
            op = self._new_op(zone, "insert", name, request_id)
            if capacity_failure:
                op.error = {
                    "errors": [
                        {
                            "code": "ZONE_RESOURCE_POOL_EXHAUSTED",
                            "message": f"The zone 'projects/{self.project}/zones/{zone}' does "
                            "not have enough resources available to fulfill the request "
                            "(injected).",
                        }
                    ]
                }
                op.http_error = 503
            else:

                def materialise(done_mono: float) -> None:
                    if (zone, name) in self._vms:
                        return
                    n = next(self._ids)
                    self._vms[(zone, name)] = _Vm(
                        id=n,
                        name=name,
                        zone=zone,
                        machine_type=machine_type,
                        labels={str(k): str(v) for k, v in labels.items()},
                        metadata=metadata,
                        created_mono=done_mono,
                        created_at=rfc3339(),
                        private_ip=private_ip(n % 2**24),
                        raw={
                            k: body[k]
                            for k in ("disks", "serviceAccounts", "scheduling")
                            if k in body
                        },
                    )
                    self._created_by_name[name] += 1

                op.on_done = materialise
            return Response(200, self._op_json(op))

    def _get(self, zone: str, name: str) -> Response:
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            vm = self._vms.get((zone, name))
            if vm is None:
                return _error(
                    404,
                    "notFound",
                    f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' "
                    "was not found",
                )
            return Response(200, self._vm_json(vm, now))

    def _matching(self, flt: dict[str, str], zones: list[str], now: float) -> list[_Vm]:
        out = []
        for vm in self._vms.values():
            if vm.zone not in zones:
                continue
            ok = True
            for key, want in flt.items():
                have = vm.name if key == "name" else vm.labels.get(key.split(".", 1)[1])
                if have != want:
                    ok = False
            if ok:
                out.append(vm)
        return sorted(out, key=lambda v: v.id)

    def _page(self, req: Request, items: list[Any]) -> tuple[list[Any], str | None]:
        size = min(int(req.q("maxResults") or self.page_size_cap), self.page_size_cap)
        start = int(req.q("pageToken") or 0)
        chunk = items[start : start + size]
        return chunk, (str(start + size) if start + size < len(items) else None)

    def _list(self, req: Request, zones: list[str]) -> Response:
        try:
            flt = parse_filter(req.q("filter") or "")
        except ValueError as exc:
            return _error(400, "invalid", str(exc))
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            vms = self._matching(flt, zones, now)
            chunk, token = self._page(req, vms)
            out: dict[str, Any] = {
                "kind": "compute#instanceList",
                "items": [self._vm_json(vm, now) for vm in chunk],
            }
        if token:
            out["nextPageToken"] = token
        return Response(200, out)

    def _aggregated(self, req: Request) -> Response:
        try:
            flt = parse_filter(req.q("filter") or "")
        except ValueError as exc:
            return _error(400, "invalid", str(exc))
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            vms = self._matching(flt, self.zones, now)
            chunk, token = self._page(req, vms)
            items: dict[str, Any] = {}
            for zone in self.zones:
                in_zone = [self._vm_json(vm, now) for vm in chunk if vm.zone == zone]
                items[f"zones/{zone}"] = (
                    {"instances": in_zone}
                    if in_zone
                    else {"warning": {"code": "NO_RESULTS_ON_PAGE", "message": "none"}}
                )
        out: dict[str, Any] = {"kind": "compute#instanceAggregatedList", "items": items}
        if token:
            out["nextPageToken"] = token
        return Response(200, out)

    def _delete(self, req: Request, zone: str, name: str) -> Response:
        request_id = req.q("requestId")
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            if request_id and request_id in self._by_request_id:
                return Response(200, self._op_json(self._ops[self._by_request_id[request_id]]))
            vm = self._vms.get((zone, name))
            if vm is None:
                return _error(
                    404,
                    "notFound",
                    f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' "
                    "was not found",
                )
            op = self._new_op(zone, "delete", name, request_id)

            def mark(done_mono: float) -> None:
                if vm.delete_requested_mono is None:
                    vm.delete_requested_mono = done_mono

            op.on_done = mark
            return Response(200, self._op_json(op))

    def _poll(self, zone: str, name: str, how: str) -> Response:
        with self._lock:
            self._polls.append((zone, name, how))
        deadline = time.monotonic() + (WAIT_MAX_S if how == "wait" else 0)
        while True:
            with self._lock:
                self._advance(time.monotonic())
                op = self._ops.get(name)
                if op is None or op.zone != zone:
                    return _error(
                        404, "notFound", f"The resource 'operations/{name}' was not found"
                    )
                if op.done or time.monotonic() >= deadline:
                    return Response(200, self._op_json(op))
            time.sleep(0.02)

    def _machine_types(self, zone: str) -> Response:
        if zone not in self.zones:
            return _error(400, "invalid", f"Invalid value for field 'zone': '{zone}'.")
        items = [
            {
                "kind": "compute#machineType",
                "name": m.name,
                "guestCpus": m.cpus,
                "memoryMb": m.memory_mb,
                "zone": zone,
                "isSharedCpu": m.name.startswith("e2-") and m.name in ("e2-small", "e2-medium"),
            }
            for m in self.machine_types.values()
        ]
        return Response(200, {"kind": "compute#machineTypeList", "items": items})


def standin(*, boot_delay_s: float = 1.0, host: str = "127.0.0.1") -> GcpStandin:
    """The factory `sim.cluster` and `cloudburst dev` use (not yet started)."""
    return GcpStandin(boot_delay_s=boot_delay_s, host=host)
