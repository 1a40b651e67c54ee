"""A local stand-in of the Scaleway Instance and Block Storage APIs (what our module calls).

`scaleway.Client(api_url=<url>)` reaches it; auth is the `X-Auth-Token` header (secret key).

    POST   /instance/v1/zones/{zone}/servers                create, always STOPPED
    GET    /instance/v1/zones/{zone}/servers?tags=&name=&project=&page=&per_page=
           (honours `page`: past the end answers an empty page, which ends the SDK's paging)
    GET    /instance/v1/zones/{zone}/servers/{id}
    PATCH  /instance/v1/zones/{zone}/servers/{id}/user_data/{key}    (text/plain body)
    GET    /instance/v1/zones/{zone}/servers/{id}/user_data[/{key}]
    POST   /instance/v1/zones/{zone}/servers/{id}/action    poweron | poweroff | terminate
    DELETE /instance/v1/zones/{zone}/servers/{id}           (stopped servers only)
    GET    /instance/v1/zones/{zone}/products/servers       the catalog (hourly_price EUR)
    GET    /block/v1/zones/{zone}/volumes[/{id}]            DELETE /block/v1/zones/{zone}/volumes/{id}

As at Scaleway: a server is created stopped; cloud-init reads user data key `cloud-init` when
the server powers on (`peek` shows what it read then — a server powered on before its user
data was set boots without it); `terminate` deletes `l_ssd` volumes but only DETACHES
`sbs_volume` block volumes, which stay (and are billed) until deleted through the Block API.
Root volumes are `l_ssd` for DEV1/GP1 types and `sbs_volume` for the others.

Failure injection per op (`create`, `get`, `list`, `user_data`, `poweron`, `terminate`,
`volume_delete`, `catalog`): `unavailable` → 503 with a NON-JSON body (as Scaleway's edge
answers), `capacity` → 412 out_of_stock, `quota` → 403 quotas_exceeded, `throttle` → 429
too_many_requests with Retry-After, `auth` → 401 denied_authentication.
"""

from __future__ import annotations

import re
import secrets
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Unpack

from sim.clouds.base import (
    CloudStandin,
    Request,
    Response,
    StandinOptions,
    private_ip,
    rfc3339,
)

PROVIDER = "scaleway"
OPS = ("create", "get", "list", "user_data", "poweron", "terminate", "volume_delete", "catalog")
ZONES = ("fr-par-1", "fr-par-2", "nl-ams-1", "pl-waw-1")
ORGANIZATION = "6a6ef1c8-1e0e-4bd6-a0ab-6b1d0c0f6f31"
DEFAULT_PROJECT = "3f1b7b3c-2d5e-4b8a-9a61-0c3b2e8d9f10"
_ZONE = re.compile(r"^[a-z]{2}-[a-z]{3}-[1-9]$")


@dataclass(frozen=True)
class ServerType:
    name: str
    ncpus: int
    ram_gib: int
    arch: str  # "x86_64" | "arm64"
    hourly_price: float

    @property
    def root_volume_type(self) -> str:
        return "l_ssd" if self.name.startswith(("DEV1", "GP1")) else "sbs_volume"


SERVER_TYPES: tuple[ServerType, ...] = (
    ServerType("DEV1-S", 2, 2, "x86_64", 0.0088),
    ServerType("DEV1-M", 3, 4, "x86_64", 0.0198),
    ServerType("DEV1-L", 4, 8, "x86_64", 0.042),
    ServerType("DEV1-XL", 4, 12, "x86_64", 0.0638),
    ServerType("PLAY2-PICO", 1, 2, "x86_64", 0.014),
    ServerType("PLAY2-NANO", 2, 4, "x86_64", 0.027),
    ServerType("PLAY2-MICRO", 4, 8, "x86_64", 0.054),
    ServerType("PRO2-XXS", 2, 8, "x86_64", 0.055),
    ServerType("PRO2-XS", 4, 16, "x86_64", 0.11),
    ServerType("PRO2-S", 8, 32, "x86_64", 0.219),
    ServerType("PRO2-M", 16, 64, "x86_64", 0.438),
    ServerType("GP1-XS", 4, 16, "x86_64", 0.091),
    ServerType("GP1-S", 8, 32, "x86_64", 0.187),
    ServerType("COPARM1-2C-8G", 2, 8, "arm64", 0.0426),
    ServerType("COPARM1-4C-16G", 4, 16, "arm64", 0.0857),
    ServerType("COPARM1-8C-32G", 8, 32, "arm64", 0.1724),
)

_FAILURES: dict[str, tuple[int, str, str]] = {
    "capacity": (412, "out_of_stock", "server type is out of stock in this zone (injected)"),
    "quota": (403, "quotas_exceeded", "Quotas exceeded for this resource (injected)"),
    "auth": (401, "denied_authentication", "authentication is denied (injected)"),
    "throttle": (429, "too_many_requests", "rate limit exceeded (injected)"),
}


class ScalewayError(Exception):
    def __init__(
        self,
        status: int,
        type_: str,
        message: str,
        *,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        raw: str | None = None,
    ) -> None:
        super().__init__(f"{status} {type_}: {message}")
        self.status, self.type, self.message = status, type_, message
        self.extra = extra or {}
        self.headers = headers or {}
        self.raw = raw  # a non-JSON body (the 503 of an overloaded edge)

    def response(self) -> Response:
        if self.raw is not None:
            return Response(self.status, self.raw, self.headers, content_type="text/html")
        return Response(
            self.status, {"type": self.type, "message": self.message, **self.extra}, self.headers
        )


def _invalid(field_name: str, reason: str) -> ScalewayError:
    return ScalewayError(
        400,
        "invalid_arguments",
        "invalid argument(s)",
        extra={
            "details": [
                {"argument_name": field_name, "reason": "constraint", "help_message": reason}
            ]
        },
    )


def _not_found(resource: str, rid: str) -> ScalewayError:
    return ScalewayError(
        404,
        "not_found",
        f'"{resource}" not found',
        extra={"resource": resource, "resource_id": rid},
    )


@dataclass
class _Volume:
    id: str
    name: str
    volume_type: str  # l_ssd | sbs_volume
    size: int
    zone: str
    project: str
    server_id: str | None
    created: datetime


@dataclass
class _Server:
    id: str
    name: str
    zone: str
    project: str
    server_type: ServerType
    image: str
    tags: list[str]
    created: datetime
    private_ip: str
    root_volume: str
    user_data: dict[str, bytes] = field(default_factory=dict)
    state: str = "stopped"  # stopped | starting | running | stopping
    state_detail: str = ""
    powered_on_mono: float | None = None
    terminate_mono: float | None = None
    boot_user_data: str | None = None  # what cloud-init read at power-on


class ScalewayStandin(CloudStandin):
    """State + HTTP face of the Scaleway stand-in; also a `BootableCloud`."""

    provider = PROVIDER

    def __init__(
        self,
        *,
        secret_key: str | None = None,
        project_id: str = DEFAULT_PROJECT,
        **options: Unpack[StandinOptions],
    ) -> None:
        self.secret_key = secret_key or str(uuid.uuid4())
        self.project_id = project_id
        self.types = {t.name: t for t in SERVER_TYPES}
        self.region = "fr-par"
        self.zone = "fr-par-1"
        self.instance_type = "PLAY2-NANO"
        self._servers: dict[str, _Server] = {}
        self._volumes: dict[str, _Volume] = {}
        self._n = 0
        self._creates_attempted = 0
        self._booted_without_user_data: list[str] = []
        super().__init__(ops=OPS, name="scaleway-standin", **options)

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def credential(self) -> str:
        return self.secret_key

    def nodeclass_block(self, secret_name: str, secret_key: str) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "zone": self.zone,
            "projectID": self.project_id,
            "apiKeySecretRef": {"name": secret_name, "key": secret_key},
        }

    # ---- failure injection -----------------------------------------------------------------

    def _maybe_fail(self, op: str) -> None:
        kind = self.failures.take(op)
        if kind is None:
            return
        if kind == "unavailable":
            raise ScalewayError(
                503,
                "service_unavailable",
                "",
                raw="<html><body><h1>503 Service Unavailable</h1>No server is available "
                "to handle this request.</body></html>",
            )
        status, type_, message = _FAILURES[kind]
        headers = {"Retry-After": "1"} if kind == "throttle" else {}
        extra: dict[str, Any] = {}
        if kind == "quota":
            extra = {"details": [{"resource": "instances_server", "quota": 10, "current": 10}]}
        if kind == "auth":
            extra = {"method": "api_key", "reason": "invalid_argument"}
        raise ScalewayError(status, type_, message, extra=extra, headers=headers)

    # ---- state -----------------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        """Move servers along (starting → running, terminating → gone)."""
        for s in list(self._servers.values()):
            booted = s.powered_on_mono is not None and now - s.powered_on_mono >= self.boot_delay_s
            if s.state == "starting" and booted:
                s.state = "running"
            if s.terminate_mono is not None and now - s.terminate_mono >= self.delete_delay_s:
                self._remove(s)

    def _remove(self, s: _Server) -> None:
        del self._servers[s.id]
        self._deleted += 1
        for v in list(self._volumes.values()):
            if v.server_id != s.id:
                continue
            if v.volume_type == "l_ssd":
                del self._volumes[v.id]
            else:  # sbs_volume: only detached
                v.server_id = None

    def _find(self, zone: str, sid: str) -> _Server:
        s = self._servers.get(sid)
        if s is None or s.zone != zone:
            raise _not_found("instance_server", sid)
        return s

    def _volume_json(self, v: _Volume, *, block: bool = False) -> dict[str, Any]:
        server = self._servers.get(v.server_id) if v.server_id else None
        if block:
            status = "in_use" if server else "available"
            return {
                "id": v.id,
                "name": v.name,
                "type": "sbs_5k",
                "size": v.size,
                "project_id": v.project,
                "zone": v.zone,
                "created_at": rfc3339(v.created),
                "updated_at": rfc3339(v.created),
                "references": (
                    [
                        {
                            "id": str(uuid.uuid5(uuid.NAMESPACE_URL, v.id)),
                            "product_resource_type": "instance_server",
                            "product_resource_id": server.id,
                            "created_at": rfc3339(v.created),
                            "type": "exclusive",
                            "status": "attached",
                        }
                    ]
                    if server
                    else []
                ),
                "parent_snapshot_id": None,
                "status": status,
                "tags": [],
                "specs": {"perf_iops": 5000, "class": "sbs"},
                "last_detached_at": None if server else rfc3339(),
            }
        return {
            "id": v.id,
            "name": v.name,
            "volume_type": v.volume_type,
            "size": v.size,
            "boot": True,
            "zone": v.zone,
            "state": "in_use" if server else "available",
            "server": {"id": server.id, "name": server.name} if server else None,
        }

    def _server_json(self, s: _Server) -> dict[str, Any]:
        actions = {
            "stopped": ["poweron", "backup", "terminate"],
            "starting": [],
            "running": ["poweroff", "reboot", "stop_in_place", "backup", "terminate"],
            "stopping": [],
        }[s.state]
        volumes = {
            "0": self._volume_json(self._volumes[s.root_volume])
            if s.root_volume in self._volumes
            else None
        }
        return {
            "id": s.id,
            "name": s.name,
            "organization": ORGANIZATION,
            "project": s.project,
            "allowed_actions": actions,
            "tags": list(s.tags),
            "commercial_type": s.server_type.name,
            "creation_date": rfc3339(s.created),
            "dynamic_ip_required": True,
            "routed_ip_enabled": True,
            "enable_ipv6": False,
            "hostname": s.name,
            "image": None,
            "protected": False,
            "private_ip": s.private_ip,
            "public_ip": None,
            "public_ips": [],
            "mac_address": "de:00:00:00:00:01",
            "modification_date": rfc3339(),
            "state": s.state,
            "location": None,
            "ipv6": None,
            "boot_type": "local",
            "volumes": {k: v for k, v in volumes.items() if v is not None},
            "security_group": {
                "id": str(uuid.uuid5(uuid.NAMESPACE_DNS, s.zone)),
                "name": "default",
            },
            "maintenances": [],
            "state_detail": s.state_detail,
            "arch": s.server_type.arch,
            "placement_group": None,
            "private_nics": [],
            "zone": s.zone,
            "filesystems": [],
            "end_of_service": False,
        }

    # ---- API operations --------------------------------------------------------------------

    def create_server(self, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._creates_attempted += 1
            self._maybe_fail("create")
            if zone not in ZONES:
                raise _invalid("zone", f"unknown zone {zone!r}")
            stype = self.types.get(str(body.get("commercial_type") or ""))
            if stype is None:
                raise _invalid("commercial_type", f"unknown type {body.get('commercial_type')!r}")
            name = str(body.get("name") or "")
            if not name:
                raise _invalid("name", "name is required")
            image = str(body.get("image") or "")
            if not image:
                raise _invalid("image", "image is required")
            project = str(body.get("project") or self.project_id)
            if project != self.project_id:
                raise ScalewayError(403, "permissions_denied", "insufficient permissions")
            tags = body.get("tags") or []
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                raise _invalid("tags", "must be a list of strings")
            now = datetime.now(UTC)
            self._n += 1
            sid = str(uuid.uuid4())
            vol = _Volume(
                id=str(uuid.uuid4()),
                name=f"{image} root",
                volume_type=stype.root_volume_type,
                size=20_000_000_000,
                zone=zone,
                project=project,
                server_id=sid,
                created=now,
            )
            self._volumes[vol.id] = vol
            server = _Server(
                id=sid,
                name=name,
                zone=zone,
                project=project,
                server_type=stype,
                image=image,
                tags=list(tags),
                created=now,
                private_ip=private_ip(self._n),
                root_volume=vol.id,
            )
            self._servers[sid] = server
            self._created_by_name[name] += 1
            return {"server": self._server_json(server)}

    def list_servers(self, zone: str, request: Request) -> tuple[dict[str, Any], int]:
        with self._lock:
            self._maybe_fail("list")
            self._advance(time.monotonic())
            want_tags = [t for t in (request.q("tags") or "").split(",") if t]
            name = request.q("name")
            project = request.q("project")
            items = [
                self._server_json(s)
                for s in sorted(self._servers.values(), key=lambda s: (s.created, s.id))
                if s.zone == zone
                and all(t in s.tags for t in want_tags)
                and (name is None or name in s.name)
                and (project is None or s.project == project)
            ]
        per_page = max(1, min(int(request.q("per_page") or "50"), 100))
        page = max(1, int(request.q("page") or "1"))
        start = (page - 1) * per_page
        return {"servers": items[start : start + per_page]}, len(items)

    def get_server(self, zone: str, sid: str) -> dict[str, Any]:
        with self._lock:
            self._maybe_fail("get")
            self._advance(time.monotonic())
            return {"server": self._server_json(self._find(zone, sid))}

    def set_user_data(self, zone: str, sid: str, key: str, content: bytes) -> None:
        with self._lock:
            self._maybe_fail("user_data")
            self._advance(time.monotonic())
            server = self._find(zone, sid)
            if len(content) > 1024 * 1024:
                raise _invalid("content", "user data is limited to 1 MB")
            server.user_data[key] = content

    def user_data_keys(self, zone: str, sid: str) -> dict[str, Any]:
        with self._lock:
            self._maybe_fail("get")
            return {"user_data": sorted(self._find(zone, sid).user_data)}

    def get_user_data(self, zone: str, sid: str, key: str) -> bytes:
        with self._lock:
            self._maybe_fail("get")
            data = self._find(zone, sid).user_data.get(key)
            if data is None:
                raise _not_found("user_data", key)
            return data

    def action(self, zone: str, sid: str, action: str) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            server = self._find(zone, sid)
            if action == "poweron":
                self._maybe_fail("poweron")
                if server.state != "stopped":
                    raise ScalewayError(400, "invalid_request_error", "server should be stopped")
                server.state = "starting"
                server.state_detail = "provisioning node"
                server.powered_on_mono = now
                raw = server.user_data.get("cloud-init")
                server.boot_user_data = raw.decode() if raw is not None else None
                if raw is None:
                    self._booted_without_user_data.append(server.id)
            elif action == "terminate":
                self._maybe_fail("terminate")
                if server.terminate_mono is not None:
                    raise ScalewayError(
                        400, "invalid_request_error", "server is already being terminated"
                    )
                server.state = "stopping"
                server.state_detail = "terminating"
                server.terminate_mono = now
            elif action == "poweroff":
                if server.state not in ("running", "starting"):
                    raise ScalewayError(400, "invalid_request_error", "server should be running")
                server.state = "stopped"
                server.state_detail = ""
                server.powered_on_mono = None
            else:
                raise _invalid("action", f"unsupported action {action!r} in this stand-in")
            return {
                "task": {
                    "id": str(uuid.uuid4()),
                    "description": f"server_{action}",
                    "progress": 0,
                    "status": "pending",
                    "href_from": f"/servers/{sid}/action",
                    "href_result": f"/servers/{sid}",
                    "started_at": rfc3339(),
                    "terminated_at": None,
                    "zone": zone,
                }
            }

    def delete_server(self, zone: str, sid: str) -> None:
        with self._lock:
            self._maybe_fail("terminate")
            server = self._find(zone, sid)
            if server.state != "stopped":
                raise ScalewayError(400, "invalid_request_error", "server must be stopped")
            # Deleting a server detaches all its volumes (l_ssd ones too): they remain.
            for v in self._volumes.values():
                if v.server_id == sid:
                    v.server_id = None
            del self._servers[sid]
            self._deleted += 1

    def block_volume(self, zone: str, vid: str) -> dict[str, Any]:
        with self._lock:
            self._maybe_fail("get")
            self._advance(time.monotonic())
            v = self._volumes.get(vid)
            if v is None or v.zone != zone or v.volume_type != "sbs_volume":
                raise _not_found("volume", vid)
            return self._volume_json(v, block=True)

    def block_volumes(self, zone: str, request: Request) -> tuple[dict[str, Any], int]:
        with self._lock:
            self._maybe_fail("list")
            self._advance(time.monotonic())
            resource = request.q("product_resource_id")
            items = [
                self._volume_json(v, block=True)
                for v in self._volumes.values()
                if v.zone == zone
                and v.volume_type == "sbs_volume"
                and (resource is None or v.server_id == resource)
            ]
        size = max(1, min(int(request.q("page_size") or "50"), 100))
        page = max(1, int(request.q("page") or "1"))
        chunk = items[(page - 1) * size : page * size]
        return {"volumes": chunk, "total_count": len(items)}, len(items)

    def delete_block_volume(self, zone: str, vid: str) -> None:
        with self._lock:
            self._maybe_fail("volume_delete")
            self._advance(time.monotonic())
            v = self._volumes.get(vid)
            if v is None or v.zone != zone or v.volume_type != "sbs_volume":
                raise _not_found("volume", vid)
            if v.server_id is not None and v.server_id in self._servers:
                raise ScalewayError(
                    412, "precondition_failed", "volume is in use", extra={"resource": "volume"}
                )
            del self._volumes[vid]

    def products(self, request: Request) -> dict[str, Any]:
        with self._lock:
            self._maybe_fail("catalog")
        if int(request.q("page") or "1") > 1:
            return {"servers": {}}
        return {
            "servers": {
                t.name: {
                    "monthly_price": round(t.hourly_price * 730, 2),
                    "hourly_price": t.hourly_price,
                    "alt_names": [],
                    "ncpus": t.ncpus,
                    "ram": t.ram_gib * 1024**3,
                    "arch": t.arch,
                    "gpu": 0,
                    "end_of_service": False,
                    "per_volume_constraint": None,
                    "volumes_constraint": None,
                    "network": None,
                    "capabilities": None,
                    "scratch_storage_max_size": None,
                    "block_bandwidth": None,
                    "gpu_info": None,
                }
                for t in self.types.values()
            }
        }

    # ---- HTTP ------------------------------------------------------------------------------

    def _route(self, request: Request) -> Response:
        try:
            if request.headers.get("x-auth-token") != self.secret_key:
                raise ScalewayError(
                    401,
                    "denied_authentication",
                    "authentication is denied",
                    extra={"method": "api_key", "reason": "invalid_argument"},
                )
            return self._api(request)
        except ScalewayError as err:
            return err.response()
        except ValueError as exc:
            return _invalid("body", str(exc)).response()

    def _api(self, request: Request) -> Response:
        p = request.parts
        m = request.method
        if len(p) >= 4 and p[:3] == ["instance", "v1", "zones"] and _ZONE.match(p[3]):
            zone, rest = p[3], p[4:]
            match m, rest:
                case "POST", ["servers"]:
                    return Response(201, self.create_server(zone, request.json()))
                case "GET", ["servers"]:
                    body, total = self.list_servers(zone, request)
                    return Response(200, body, {"X-Total-Count": str(total)})
                case "GET", ["servers", sid]:
                    return Response(200, self.get_server(zone, sid))
                case "DELETE", ["servers", sid]:
                    self.delete_server(zone, sid)
                    return Response(204)
                case "PATCH", ["servers", sid, "user_data", key]:
                    self.set_user_data(zone, sid, key, request.body)
                    return Response(204)
                case "GET", ["servers", sid, "user_data"]:
                    return Response(200, self.user_data_keys(zone, sid))
                case "GET", ["servers", sid, "user_data", key]:
                    data = self.get_user_data(zone, sid, key)
                    return Response(200, data, content_type="text/plain")
                case "POST", ["servers", sid, "action"]:
                    body = request.json()
                    return Response(202, self.action(zone, sid, str(body.get("action") or "")))
                case "GET", ["products", "servers"]:
                    return Response(200, self.products(request))
        if len(p) >= 4 and p[:3] == ["block", "v1", "zones"] and _ZONE.match(p[3]):
            zone, rest = p[3], p[4:]
            match m, rest:
                case "GET", ["volumes"]:
                    body, total = self.block_volumes(zone, request)
                    return Response(200, body)
                case "GET", ["volumes", vid]:
                    return Response(200, self.block_volume(zone, vid))
                case "DELETE", ["volumes", vid]:
                    self.delete_block_volume(zone, vid)
                    return Response(204)
        raise ScalewayError(404, "not_found", f"no route for {m} {request.path}")

    # ---- BootableCloud and test helpers ----------------------------------------------------

    def _boot_state(self, s: _Server) -> str:
        if s.terminate_mono is not None or s.state == "stopping":
            return "stopping"
        if s.state == "running":
            return "running"
        if s.state == "stopped" and s.powered_on_mono is None and s.boot_user_data is not None:
            return "terminated"  # powered off after having run
        return "pending"

    def instance_states(self) -> dict[str, str]:
        with self._lock:
            self._advance(time.monotonic())
            return {s.id: self._boot_state(s) for s in self._servers.values()}

    def peek(self, native_id: str) -> dict[str, Any] | None:
        with self._lock:
            self._advance(time.monotonic())
            s = self._servers.get(native_id)
            if s is None:
                return None
            return {
                "id": s.id,
                "name": s.name,
                "region": s.zone.rsplit("-", 1)[0],
                "zone": s.zone,
                "instance_type": s.server_type.name,
                "image": s.image,
                # What cloud-init read when the server powered on: nothing if it was not set.
                "user_data": s.boot_user_data or "",
                "private_ip": s.private_ip,
                "labels": dict(t.split("=", 1) for t in s.tags if "=" in t),
                "tags": list(s.tags),
                "state": self._boot_state(s),
            }

    def instance_shape(self, instance_type: str) -> tuple[float, float, str] | None:
        t = self.types.get(instance_type)
        return None if t is None else (float(t.ncpus), float(t.ram_gib), t.arch)

    def volumes(self) -> list[dict[str, Any]]:
        """Every volume the cloud still has (both kinds), with whether it is attached."""
        with self._lock:
            self._advance(time.monotonic())
            return [
                {
                    "id": v.id,
                    "volume_type": v.volume_type,
                    "zone": v.zone,
                    "server_id": v.server_id if v.server_id in self._servers else None,
                }
                for v in self._volumes.values()
            ]

    def delete_behind_our_back(self, native_id: str) -> bool:
        with self._lock:
            s = self._servers.get(native_id)
            if s is None:
                return False
            self._remove(s)
            return True

    def stats(self) -> dict[str, Any]:
        with self._lock:
            self._advance(time.monotonic())
            return {
                "creates_attempted": self._creates_attempted,
                "created_by_name": dict(self._created_by_name),
                "instances_created": sum(self._created_by_name.values()),
                "live_instances": len(self._servers),
                "states": dict(Counter(s.state for s in self._servers.values())),
                "deleted_instances": self._deleted,
                "volumes": len(self._volumes),
                "booted_without_user_data": list(self._booted_without_user_data),
                "failures": self.failures.pending(),
            }


def new_secret_key() -> str:
    return str(uuid.UUID(bytes=secrets.token_bytes(16), version=4))


def standin(*, boot_delay_s: float = 1.0, host: str = "127.0.0.1") -> ScalewayStandin:
    """The factory `sim.cluster.SimulatedCluster(clouds=[...])` and `cloudburst dev` use."""
    return ScalewayStandin(secret_key=new_secret_key(), boot_delay_s=boot_delay_s, host=host)
