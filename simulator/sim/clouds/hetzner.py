"""A local stand-in of the Hetzner Cloud API (the subset `activities/providers/hetzner.py` uses).

Served under `/v1` as the real API is (`hcloud.Client(api_endpoint=f"{url}/v1")`):

    POST   /v1/servers                  name unique per project (409 uniqueness_error),
                                        user_data ≤ 32 KiB, labels; answers server + action
    GET    /v1/servers?name=&label_selector=&page=&per_page=      (Hetzner paging meta)
    GET    /v1/servers/{id}             DELETE /v1/servers/{id}   (answers an action)
    GET    /v1/server_types?page=&per_page=     (cores, memory GB, architecture, prices)
    GET    /v1/actions/{id}

Bearer-token auth; errors as `{"error": {"code", "message", "details"}}` with Hetzner's codes.
Failure injection per op (`create`, `get`, `list`, `delete`, `catalog`), in-process:
`unavailable` 503 unavailable, `capacity` 412 resource_unavailable, `quota` 403
resource_limit_exceeded, `throttle` 429 rate_limit_exceeded (with RateLimit-* headers),
`auth` 401 unauthorized. A server is `initializing` for `boot_delay_s`, then `running`;
deleted ones are `deleting` for `delete_delay_s`, then gone.
"""

from __future__ import annotations

import itertools
import re
import secrets
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Unpack

from sim.clouds.base import (
    CloudStandin,
    Request,
    Response,
    StandinOptions,
    lifecycle_state,
    private_ip,
    rfc3339,
)

PROVIDER = "hetzner"
OPS = ("create", "get", "list", "delete", "catalog")
USER_DATA_LIMIT = 32 * 1024
LOCATIONS: dict[str, tuple[int, str, str, str]] = {
    # name -> (id, description, city, network zone)
    "fsn1": (1, "Falkenstein DC Park 1", "Falkenstein", "eu-central"),
    "nbg1": (2, "Nuremberg DC Park 1", "Nuremberg", "eu-central"),
    "hel1": (3, "Helsinki DC Park 1", "Helsinki", "eu-central"),
    "ash": (4, "Ashburn, VA", "Ashburn, VA", "us-east"),
}


@dataclass(frozen=True)
class ServerType:
    id: int
    name: str
    cores: int
    memory_gb: float
    architecture: str  # "x86" | "arm"
    disk_gb: int
    price_hourly_net: float
    cpu_type: str = "shared"


SERVER_TYPES: tuple[ServerType, ...] = (
    ServerType(1, "cx22", 2, 4, "x86", 40, 0.006),
    ServerType(2, "cx32", 4, 8, "x86", 80, 0.0109),
    ServerType(3, "cx42", 8, 16, "x86", 160, 0.0263),
    ServerType(4, "cx52", 16, 32, "x86", 320, 0.0519),
    ServerType(5, "cpx11", 2, 2, "x86", 40, 0.007),
    ServerType(6, "cpx21", 3, 4, "x86", 80, 0.0121),
    ServerType(7, "cpx31", 4, 8, "x86", 160, 0.0218),
    ServerType(8, "cpx41", 8, 16, "x86", 240, 0.0403),
    ServerType(9, "cpx51", 16, 32, "x86", 360, 0.088),
    ServerType(10, "cax11", 2, 4, "arm", 40, 0.006),
    ServerType(11, "cax21", 4, 8, "arm", 80, 0.0104),
    ServerType(12, "cax31", 8, 16, "arm", 160, 0.02),
    ServerType(13, "cax41", 16, 32, "arm", 320, 0.0392),
    ServerType(14, "ccx13", 2, 8, "x86", 80, 0.02, "dedicated"),
    ServerType(15, "ccx23", 4, 16, "x86", 160, 0.0392, "dedicated"),
    ServerType(16, "ccx33", 8, 32, "x86", 240, 0.0777, "dedicated"),
    # The 2025-10 types that replace cx22-cx52 and cpx11-cpx51 (kept above for older tests).
    ServerType(108, "cx23", 2, 4, "x86", 40, 0.006),
    ServerType(109, "cx33", 4, 8, "x86", 80, 0.011),
    ServerType(116, "cx43", 8, 16, "x86", 160, 0.021),
    ServerType(117, "cx53", 16, 32, "x86", 320, 0.036),
    ServerType(110, "cpx22", 2, 4, "x86", 80, 0.008),
    ServerType(111, "cpx32", 4, 8, "x86", 160, 0.016),
)
IMAGES = {"ubuntu-24.04": 161547269, "ubuntu-22.04": 67794396, "debian-12": 114690387}

_FAILURES: dict[str, tuple[int, str, str]] = {
    "unavailable": (503, "unavailable", "service temporarily unavailable (injected)"),
    "capacity": (412, "resource_unavailable", "server type unavailable in location (injected)"),
    "quota": (403, "resource_limit_exceeded", "server limit exceeded (injected)"),
    "auth": (401, "unauthorized", "unable to authenticate (injected)"),
    "throttle": (429, "rate_limit_exceeded", "limit of 3600 requests per hour reached (injected)"),
}
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"
)


class HetznerError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.details = details or {}
        self.headers = headers or {}

    def response(self) -> Response:
        body = {"error": {"code": self.code, "message": self.message, "details": self.details}}
        return Response(self.status, body, self.headers)


def _invalid(field: str, message: str) -> HetznerError:
    return HetznerError(
        400,
        "invalid_input",
        f"invalid input in field '{field}'",
        {"fields": [{"name": field, "messages": [message]}]},
    )


@dataclass
class _Server:
    id: int
    name: str
    server_type: ServerType
    location: str
    image: str
    user_data: str
    labels: dict[str, str]
    created: datetime
    created_mono: float
    private_ip: str
    public_ip: str
    delete_requested_mono: float | None = None
    off: bool = False


def parse_label_selector(value: str) -> list[tuple[str, str, str | None]]:
    """Hetzner's label selector terms: `k=v`, `k==v`, `k!=v`, `k`, `!k` (comma-separated)."""
    terms: list[tuple[str, str, str | None]] = []
    for raw in value.split(","):
        term = raw.strip()
        if not term:
            continue
        if "!=" in term:
            k, v = term.split("!=", 1)
            terms.append(("!=", k.strip(), v.strip()))
        elif "=" in term:
            k, v = term.split("=", 1)
            terms.append(("=", k.strip(), v.strip().lstrip("=").strip()))
        elif term.startswith("!"):
            terms.append(("absent", term[1:].strip(), None))
        else:
            terms.append(("present", term, None))
    return terms


def _matches(labels: dict[str, str], terms: list[tuple[str, str, str | None]]) -> bool:
    for op, key, value in terms:
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
        if op == "present" and key not in labels:
            return False
        if op == "absent" and key in labels:
            return False
    return True


class HetznerStandin(CloudStandin):
    """State + HTTP face of the Hetzner stand-in; also a `BootableCloud`."""

    provider = PROVIDER

    def __init__(
        self,
        *,
        token: str | None = None,
        **options: Unpack[StandinOptions],
    ) -> None:
        self.token = token if token is not None else secrets.token_hex(32)
        self.types = {t.name: t for t in SERVER_TYPES}
        self.region = "fsn1"
        self.instance_type = "cx23"
        self._servers: dict[int, _Server] = {}
        self._ids = itertools.count(4711001)
        self._actions = itertools.count(90001)
        self._creates_attempted = 0
        super().__init__(ops=OPS, name="hetzner-standin", **options)

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """What `hcloud.Client(api_endpoint=...)` and NodeClass `spec.hetzner.endpoint` take."""
        return f"{self._http.url}/v1"

    @property
    def credential(self) -> str:
        return self.token

    def nodeclass_block(self, secret_name: str, secret_key: str) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "location": self.region,
            "apiTokenSecretRef": {"name": secret_name, "key": secret_key},
        }

    # ---- failure injection -----------------------------------------------------------------

    def _maybe_fail(self, op: str) -> None:
        kind = self.failures.take(op)
        if kind is None:
            return
        status, code, message = _FAILURES[kind]
        headers: dict[str, str] = {}
        if kind == "throttle":
            headers = {
                "RateLimit-Limit": "3600",
                "RateLimit-Remaining": "0",
                "RateLimit-Reset": str(int(time.time()) + 1),
            }
        raise HetznerError(status, code, message, headers=headers)

    # ---- state -----------------------------------------------------------------------------

    def _state(self, s: _Server, now: float) -> str:
        return lifecycle_state(
            now,
            s.created_mono,
            self.boot_delay_s,
            delete_requested_mono=s.delete_requested_mono,
            terminated=s.off,
        )

    def _status(self, s: _Server, now: float) -> str:
        """The Hetzner `status` of a server."""
        return {
            "pending": "initializing",
            "running": "running",
            "stopping": "deleting",
            "terminated": "off",
        }[self._state(s, now)]

    def _purge(self, now: float) -> None:
        self._purge_deleted(self._servers, now)

    def _server_type_json(self, t: ServerType) -> dict[str, Any]:
        return {
            "id": t.id,
            "name": t.name,
            "description": t.name.upper(),
            "category": "shared_vcpu" if t.cpu_type == "shared" else "dedicated_vcpu",
            "cores": t.cores,
            "memory": t.memory_gb,
            "disk": t.disk_gb,
            "storage_type": "local",
            "cpu_type": t.cpu_type,
            "architecture": t.architecture,
            "included_traffic": 21990232555520,
            "prices": [
                {
                    "location": loc,
                    "price_hourly": {
                        "net": f"{t.price_hourly_net:.4f}",
                        "gross": f"{t.price_hourly_net * 1.19:.4f}",
                    },
                    "price_monthly": {
                        "net": f"{t.price_hourly_net * 730:.4f}",
                        "gross": f"{t.price_hourly_net * 730 * 1.19:.4f}",
                    },
                    "included_traffic": 21990232555520,
                    "price_per_tb_traffic": {"net": "1.0000", "gross": "1.1900"},
                }
                for loc in LOCATIONS
            ],
            "locations": [
                {
                    "id": LOCATIONS[loc][0],
                    "name": loc,
                    "deprecation": None,
                    "available": True,
                    "recommended": True,
                }
                for loc in LOCATIONS
            ],
        }

    def _location_json(self, name: str) -> dict[str, Any]:
        lid, description, city, zone = LOCATIONS[name]
        return {
            "id": lid,
            "name": name,
            "description": description,
            "country": "US" if zone.startswith("us") else "DE" if name != "hel1" else "FI",
            "city": city,
            "latitude": 50.47612,
            "longitude": 12.370071,
            "network_zone": zone,
        }

    def _server_json(self, s: _Server, now: float) -> dict[str, Any]:
        image_id = IMAGES.get(s.image, 1)
        return {
            "id": s.id,
            "name": s.name,
            "status": self._status(s, now),
            "created": rfc3339(s.created),
            "public_net": {
                "ipv4": {"id": s.id + 1000, "ip": s.public_ip, "blocked": False, "dns_ptr": ""},
                "ipv6": None,
                "floating_ips": [],
                "firewalls": [],
            },
            "private_net": [],
            "server_type": self._server_type_json(s.server_type),
            "location": self._location_json(s.location),
            "image": {
                "id": image_id,
                "type": "system",
                "status": "available",
                "name": s.image,
                "description": s.image,
                "os_flavor": s.image.split("-")[0],
                "os_version": s.image.split("-")[-1],
                "architecture": s.server_type.architecture,
                "rapid_deploy": True,
            },
            "iso": None,
            "rescue_enabled": False,
            "locked": False,
            "backup_window": None,
            "outgoing_traffic": 0,
            "ingoing_traffic": 0,
            "included_traffic": 21990232555520,
            "protection": {"delete": False, "rebuild": False},
            "labels": dict(s.labels),
            "volumes": [],
            "load_balancers": [],
            "primary_disk_size": s.server_type.disk_gb,
            "placement_group": None,
        }

    def _action_json(self, command: str, server_id: int) -> dict[str, Any]:
        now = rfc3339()
        return {
            "id": next(self._actions),
            "command": command,
            "status": "running",
            "progress": 0,
            "started": now,
            "finished": None,
            "resources": [{"id": server_id, "type": "server"}],
            "error": None,
        }

    # ---- API operations (called by the HTTP layer with the lock NOT held) -------------------

    def create_server(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._creates_attempted += 1
            self._maybe_fail("create")
            name = str(body.get("name") or "")
            if not _HOSTNAME.match(name):
                raise _invalid("name", "must be a valid hostname (RFC 1123)")
            stype = self.types.get(str(body.get("server_type") or ""))
            if stype is None:
                raise _invalid("server_type", f"unknown server type {body.get('server_type')!r}")
            location = str(body.get("location") or "fsn1")
            if location not in LOCATIONS:
                raise _invalid("location", f"unknown location {location!r}")
            image = str(body.get("image") or "")
            if not image:
                raise _invalid("image", "image is required")
            user_data = body.get("user_data")
            if user_data is not None and not isinstance(user_data, str):
                raise _invalid("user_data", "must be a string")
            if user_data is not None and len(user_data.encode()) > USER_DATA_LIMIT:
                raise _invalid("user_data", f"must be at most {USER_DATA_LIMIT} bytes")
            labels = body.get("labels") or {}
            if not isinstance(labels, dict):
                raise _invalid("labels", "must be an object")
            now = time.monotonic()
            self._purge(now)
            if any(s.name == name for s in self._servers.values()):
                raise HetznerError(409, "uniqueness_error", "server name is already used")
            sid = next(self._ids)
            n = sid - 4711000
            server = _Server(
                id=sid,
                name=name,
                server_type=stype,
                location=location,
                image=image,
                user_data=user_data or "",
                labels={str(k): str(v) for k, v in labels.items()},
                created=datetime.now(UTC),
                created_mono=now,
                private_ip=private_ip(n),
                public_ip=f"203.0.{(n >> 8) & 0xFF}.{n & 0xFF}",
            )
            self._servers[sid] = server
            self._created_by_name[name] += 1
            return {
                "server": self._server_json(server, now),
                "action": self._action_json("create_server", sid),
                "next_actions": [self._action_json("start_server", sid)],
                "root_password": None,
            }

    def get_server(self, sid: int) -> dict[str, Any]:
        with self._lock:
            self._maybe_fail("get")
            now = time.monotonic()
            self._purge(now)
            server = self._servers.get(sid)
            if server is None:
                raise HetznerError(404, "not_found", f"server with ID '{sid}' not found")
            return {"server": self._server_json(server, now)}

    def list_servers(self, request: Request) -> dict[str, Any]:
        with self._lock:
            self._maybe_fail("list")
            now = time.monotonic()
            self._purge(now)
            name = request.q("name")
            terms = parse_label_selector(request.q("label_selector") or "")
            items = [
                self._server_json(s, now)
                for s in sorted(self._servers.values(), key=lambda s: s.id)
                if (name is None or s.name == name) and _matches(s.labels, terms)
            ]
        return _paged("servers", items, request)

    def delete_server(self, sid: int) -> dict[str, Any]:
        with self._lock:
            self._maybe_fail("delete")
            now = time.monotonic()
            self._purge(now)
            server = self._servers.get(sid)
            if server is None:
                raise HetznerError(404, "not_found", f"server with ID '{sid}' not found")
            if server.delete_requested_mono is None:
                server.delete_requested_mono = now
            return {"action": self._action_json("delete_server", sid)}

    def server_types(self, request: Request) -> dict[str, Any]:
        with self._lock:
            self._maybe_fail("catalog")
            items = [self._server_type_json(t) for t in self.types.values()]
        return _paged("server_types", items, request)

    # ---- HTTP ------------------------------------------------------------------------------

    def _route(self, request: Request) -> Response:
        try:
            if request.parts[:1] != ["v1"]:
                raise HetznerError(404, "not_found", f"no route for {request.path}")
            if request.headers.get("authorization") != f"Bearer {self.token}":
                raise HetznerError(401, "unauthorized", "unable to authenticate")
            return self._api(request, request.parts[1:])
        except HetznerError as err:
            return err.response()
        except ValueError as exc:  # bad JSON, bad ids
            return HetznerError(400, "json_error", str(exc)).response()

    def _api(self, request: Request, parts: list[str]) -> Response:
        match request.method, parts:
            case "POST", ["servers"]:
                body = request.json()
                if not isinstance(body, dict):
                    raise HetznerError(400, "json_error", "body must be a JSON object")
                return Response(201, self.create_server(body))
            case "GET", ["servers"]:
                return Response(200, self.list_servers(request))
            case "GET", ["servers", sid]:
                return Response(200, self.get_server(int(sid)))
            case "DELETE", ["servers", sid]:
                return Response(200, self.delete_server(int(sid)))
            case "GET", ["server_types"]:
                return Response(200, self.server_types(request))
            case "GET", ["actions", aid]:
                action = self._action_json("unknown", 0) | {
                    "id": int(aid),
                    "status": "success",
                    "progress": 100,
                    "finished": rfc3339(),
                }
                return Response(200, {"action": action})
        raise HetznerError(404, "not_found", f"no route for {request.method} {request.path}")

    # ---- BootableCloud and test helpers ----------------------------------------------------

    def instance_states(self) -> dict[str, str]:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            return {str(s.id): self._state(s, now) for s in self._servers.values()}

    def peek(self, native_id: str) -> dict[str, Any] | None:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            try:
                server = self._servers.get(int(native_id))
            except ValueError:
                return None
            if server is None:
                return None
            return {
                "id": str(server.id),
                "name": server.name,
                "region": server.location,
                "instance_type": server.server_type.name,
                "image": server.image,
                "user_data": server.user_data,
                "private_ip": server.private_ip,
                "labels": dict(server.labels),
                "state": self._state(server, now),
            }

    def instance_shape(self, instance_type: str) -> tuple[float, float, str] | None:
        t = self.types.get(instance_type)
        if t is None:
            return None
        return (
            float(t.cores),
            float(t.memory_gb),
            "arm64" if t.architecture == "arm" else "x86_64",
        )

    def delete_behind_our_back(self, native_id: str) -> bool:
        with self._lock:
            if self._servers.pop(int(native_id), None) is None:
                return False
            self._deleted += 1
            return True

    def power_off(self, native_id: str) -> bool:
        """The server stops (status `off`) but stays listed."""
        with self._lock:
            server = self._servers.get(int(native_id))
            if server is None:
                return False
            server.off = True
            return True

    def stats(self) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            return {
                "creates_attempted": self._creates_attempted,
                "created_by_name": dict(self._created_by_name),
                "instances_created": sum(self._created_by_name.values()),
                "live_instances": len(self._servers),
                "states": dict(Counter(self._state(s, now) for s in self._servers.values())),
                "deleted_instances": self._deleted,
                "failures": self.failures.pending(),
            }


def _paged(key: str, items: list[dict[str, Any]], request: Request) -> dict[str, Any]:
    per_page = max(1, min(int(request.q("per_page") or "25"), 50))
    page = max(1, int(request.q("page") or "1"))
    total = len(items)
    last_page = max(1, (total + per_page - 1) // per_page)
    start = (page - 1) * per_page
    return {
        key: items[start : start + per_page],
        "meta": {
            "pagination": {
                "page": page,
                "per_page": per_page,
                "previous_page": page - 1 if page > 1 else None,
                "next_page": page + 1 if page < last_page else None,
                "last_page": last_page,
                "total_entries": total,
            }
        },
    }


def standin(*, boot_delay_s: float = 1.0, host: str = "127.0.0.1") -> HetznerStandin:
    """The factory `sim.cluster.SimulatedCluster(clouds=[...])` and `cloudburst dev` use."""
    return HetznerStandin(boot_delay_s=boot_delay_s, host=host)
