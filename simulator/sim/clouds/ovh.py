"""A stand-in for the OVHcloud API (`/1.0`, Public Cloud) — the subset
`activities/providers/ovh.py` calls, spoken the way the `ovh` SDK expects it.

    GET    /1.0/auth/time                                  (unsigned; the SDK's clock sync)
    GET    /1.0/cloud/project/{id}/flavor[?region=R]
    GET    /1.0/cloud/project/{id}/image[?region=R]
    GET    /1.0/cloud/project/{id}/instance[?region=R]
    POST   /1.0/cloud/project/{id}/instance               {name, flavorId, imageId, region, userData, ...}
    GET    /1.0/cloud/project/{id}/instance/{instanceId}
    DELETE /1.0/cloud/project/{id}/instance/{instanceId}

Every other call is signed like the real API: `X-Ovh-Application`, `X-Ovh-Consumer`,
`X-Ovh-Timestamp` and `X-Ovh-Signature = "$1$" + sha1(secret+consumer+METHOD+url+body+ts)`;
a bad key or signature is answered with OVH's 403 `INVALID_KEY`/`INVALID_CREDENTIAL`.
OVH has no tags: the provider encodes ownership in the instance name; `peek` reads that
convention back (`cb_<cluster>_<pool>_<claim>`) for the kubelets.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import secrets
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, Unpack
from urllib.parse import urlencode

from api import labels
from sim.clouds.base import (
    FAILURE_KINDS,
    CloudStandin,
    Request,
    Response,
    StandinOptions,
    lifecycle_state,
    private_ip,
    rfc3339,
)

PROVIDER = "ovh"
OPS = ("create", "get", "list", "delete", "catalog")
KINDS = (*FAILURE_KINDS, "server_error")
NAME_PREFIX = "cb_"

# kind -> (status, body) as OVHcloud answers.
_FAILURES: dict[str, tuple[int, dict[str, Any]]] = {
    "unavailable": (503, {"class": "Server::ServiceUnavailable", "message": "Service Unavailable"}),
    "capacity": (
        500,
        {
            "class": "Server::InternalServerError",
            "message": "Instance creation failed: no valid host was found, "
            "there are not enough hosts available",
        },
    ),
    "quota": (
        400,
        {
            "class": "Client::BadRequest",
            "message": "Quota exceeded: not enough instances quota in this region",
        },
    ),
    "throttle": (429, {"class": "Client::TooManyRequests", "message": "Too many requests"}),
    "auth": (
        403,
        {
            "errorCode": "INVALID_CREDENTIAL",
            "httpCode": "403 Forbidden",
            "message": "This credential is not valid",
        },
    ),
    "server_error": (500, {"class": "Server::InternalServerError", "message": "Internal error"}),
}


@dataclass(frozen=True)
class Flavor:
    name: str
    vcpus: int
    ram_mb: int
    available: bool = True


DEFAULT_FLAVORS: tuple[Flavor, ...] = (
    Flavor("d2-2", 1, 2000),
    Flavor("d2-4", 2, 4000),
    Flavor("d2-8", 4, 8000),
    Flavor("b3-8", 2, 8000),
    Flavor("b3-16", 4, 16000),
    Flavor("c3-4", 2, 4000),
    Flavor("c3-8", 4, 8000),
    Flavor("r3-16", 2, 16000),
)
DEFAULT_REGIONS = ("GRA11", "SBG5", "DE1", "WAW1")
DEFAULT_IMAGES = ("Ubuntu 24.04", "Ubuntu 22.04", "Debian 12")
_STATUS = {
    "pending": "BUILD",
    "running": "ACTIVE",
    "stopping": "DELETING",
    "terminated": "ERROR",
}


def _uuid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "ovh-standin:" + ":".join(parts)))


def labels_of_name(name: str) -> dict[str, str]:
    """The provider's naming convention read back (for `peek` only)."""
    if not name.startswith(NAME_PREFIX):
        return {}
    parts = name.removeprefix(NAME_PREFIX).rsplit("_", 2)
    if len(parts) != 3 or not all(parts):
        return {}
    cluster, pool, claim = parts
    return labels.ownership_labels(claim, node_pool=pool, cluster_id=cluster)


@dataclass
class _Instance:
    id: str
    name: str
    region: str
    flavor: str
    flavor_id: str
    image_id: str
    user_data: str
    created: str
    created_mono: float
    private_ip: str
    delete_requested_mono: float | None = None


class OvhStandin(CloudStandin):
    """Stateful OVHcloud Public Cloud API fake with failure injection; a `BootableCloud`."""

    provider = PROVIDER
    region = "GRA11"
    instance_type = "d2-4"

    def __init__(
        self,
        *,
        project_id: str = "0123456789abcdef0123456789abcdef",
        regions: tuple[str, ...] = DEFAULT_REGIONS,
        flavors: tuple[Flavor, ...] = DEFAULT_FLAVORS,
        images: tuple[str, ...] = DEFAULT_IMAGES,
        clock_skew_s: int = 0,
        **options: Unpack[StandinOptions],
    ) -> None:
        self.project_id = project_id
        self.application_key = secrets.token_hex(8)
        self.application_secret = secrets.token_hex(16)
        self.consumer_key = secrets.token_hex(16)
        self.credential = json.dumps(
            {
                "application_key": self.application_key,
                "application_secret": self.application_secret,
                "consumer_key": self.consumer_key,
            }
        )
        self.regions = list(regions)
        self.flavors = {f.name: f for f in flavors}
        self.images = list(images)
        # The server's clock runs this far ahead of the client's: the SDK must sync by
        # /auth/time or its signatures fall outside the accepted window.
        self.clock_skew_s = clock_skew_s
        self._instances: dict[str, _Instance] = {}
        self._n = itertools.count(1)
        self._requests: list[tuple[str, str]] = []
        super().__init__(ops=OPS, kinds=KINDS, name="ovh-standin", **options)

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """What goes into NodeClass `spec.ovh.endpoint`."""
        return f"{self._http.url}/1.0"

    def nodeclass_block(self, secret_name: str, secret_key: str) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "projectID": self.project_id,
            "region": self.region,
            "credentialsSecretRef": {"name": secret_name, "key": secret_key},
        }

    # ---- test controls ---------------------------------------------------------------------

    def requests_seen(self) -> list[tuple[str, str]]:
        """(method, path with query) of every request, in order."""
        with self._lock:
            return list(self._requests)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            self._purge(time.monotonic())
            by_claim: Counter[str] = Counter()
            for name, n in self._created_by_name.items():
                by_claim[labels_of_name(name).get(labels.NODECLAIM, name)] += n
            return {
                # By claim name (decoded from the provider's naming convention), like every
                # other cloud's; the raw instance names are beside it.
                "created_by_name": dict(by_claim),
                "created_by_vm_name": dict(self._created_by_name),
                "instances_created": sum(self._created_by_name.values()),
                "live_instances": len(self._instances),
                "deleted_instances": self._deleted,
                "requests": len(self._requests),
                "failures": self.failures.pending(),
            }

    # ---- BootableCloud ---------------------------------------------------------------------

    def _state(self, inst: _Instance, now: float) -> str:
        return lifecycle_state(
            now,
            inst.created_mono,
            self.boot_delay_s,
            delete_requested_mono=inst.delete_requested_mono,
        )

    def _purge(self, now: float) -> None:
        self._purge_deleted(self._instances, now)

    def instance_states(self) -> dict[str, str]:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            return {i: self._state(inst, now) for i, inst in self._instances.items()}

    def peek(self, native_id: str) -> dict[str, Any] | None:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            inst = self._instances.get(native_id)
            if inst is None:
                return None
            return {
                "id": inst.id,
                "name": inst.name,
                "region": inst.region,
                "instance_type": inst.flavor,
                "user_data": inst.user_data,
                "private_ip": inst.private_ip,
                "labels": labels_of_name(inst.name),
                "state": self._state(inst, now),
            }

    def instance_shape(self, instance_type: str) -> tuple[float, float, str] | None:
        f = self.flavors.get(instance_type)
        return None if f is None else (float(f.vcpus), f.ram_mb / 1000, "x86_64")

    # ---- HTTP ------------------------------------------------------------------------------

    def _failure_response(self, kind: str) -> Response:
        status, body = _FAILURES[kind]
        headers = {"Retry-After": "1"} if kind == "throttle" else {}
        return Response(status, dict(body), headers=headers)

    @staticmethod
    def _not_found(message: str) -> Response:
        return Response(404, {"class": "Client::NotFound", "message": message})

    def _check_signature(self, req: Request) -> Response | None:
        h = req.headers
        if h.get("x-ovh-application") != self.application_key:
            return Response(
                403,
                {"errorCode": "INVALID_KEY", "httpCode": "403 Forbidden", "message": "Invalid key"},
            )
        query = urlencode([(k, v) for k, vs in req.query.items() for v in vs])
        url = f"{self.url}{req.path}{'?' + query if query else ''}"
        ts = h.get("x-ovh-timestamp", "")
        payload = "+".join(
            [
                self.application_secret,
                self.consumer_key,
                req.method.upper(),
                url,
                req.body.decode(),
                ts,
            ]
        )
        expected = "$1$" + hashlib.sha1(payload.encode()).hexdigest()
        fresh = ts.isdigit() and abs(int(ts) - (int(time.time()) + self.clock_skew_s)) <= 60
        if h.get("x-ovh-consumer") != self.consumer_key or h.get("x-ovh-signature") != expected:
            return Response(403, dict(_FAILURES["auth"][1]))
        if not fresh:
            return Response(
                400, {"class": "Client::BadRequest", "message": "Invalid signature timestamp"}
            )
        return None

    def _route(self, req: Request) -> Response:
        query = urlencode([(k, v) for k, vs in req.query.items() for v in vs])
        with self._lock:
            self._requests.append((req.method, req.path + (f"?{query}" if query else "")))
        parts = req.parts
        if parts[:1] != ["1.0"]:
            return self._not_found(f"no route {req.path}")
        parts = parts[1:]
        if req.method == "GET" and parts == ["auth", "time"]:
            return Response(200, int(time.time()) + self.clock_skew_s)
        if denied := self._check_signature(req):
            return denied
        match req.method, parts:
            case _, ["cloud", "project", pid, *_] if pid != self.project_id:
                return self._not_found(f"The requested object (serviceName = {pid}) does not exist")
            case "GET", ["cloud", "project", _, "flavor"]:
                return self._fail("catalog") or self._flavors(req.q("region"))
            case "GET", ["cloud", "project", _, "image"]:
                return self._images(req.q("region"))
            case "GET", ["cloud", "project", _, "instance"]:
                return self._fail("list") or self._list(req.q("region"))
            case "POST", ["cloud", "project", _, "instance"]:
                return self._fail("create") or self._create(req.json())
            case "GET", ["cloud", "project", _, "instance", iid]:
                return self._fail("get") or self._get(iid)
            case "DELETE", ["cloud", "project", _, "instance", iid]:
                return self._fail("delete") or self._delete(iid)
        return self._not_found(f"no route {req.method} {req.path}")

    def _flavor_json(self, f: Flavor, region: str) -> dict[str, Any]:
        return {
            "id": _uuid("flavor", region, f.name),
            "name": f.name,
            "region": region,
            "vcpus": f.vcpus,
            "ram": f.ram_mb,
            "disk": 50,
            "type": "ovh.ssd.eg",
            "osType": "linux",
            "available": f.available,
            "inboundBandwidth": 250,
            "outboundBandwidth": 250,
            "planCodes": {"hourly": f"{f.name}.consumption", "monthly": f"{f.name}.monthly"},
        }

    def _flavors(self, region: str | None) -> Response:
        regions = [region] if region else self.regions
        return Response(
            200,
            [
                self._flavor_json(f, r)
                for r in regions
                if r in self.regions
                for f in self.flavors.values()
            ],
        )

    def _images(self, region: str | None) -> Response:
        regions = [region] if region else self.regions
        return Response(
            200,
            [
                {
                    "id": _uuid("image", r, name),
                    "name": name,
                    "region": r,
                    "type": "linux",
                    "status": "active",
                    "visibility": "public",
                }
                for r in regions
                if r in self.regions
                for name in self.images
            ],
        )

    def _json(self, inst: _Instance, now: float) -> dict[str, Any]:
        return {
            "id": inst.id,
            "name": inst.name,
            "ipAddresses": [
                {"ip": inst.private_ip, "type": "private", "version": 4, "networkId": "priv"}
            ],
            "flavorId": inst.flavor_id,
            "imageId": inst.image_id,
            "sshKeyId": None,
            "created": inst.created,
            "region": inst.region,
            "monthlyBilling": None,
            "status": _STATUS[self._state(inst, now)],
            "planCode": f"{inst.flavor}.consumption",
            "operationIds": [],
            "currentMonthOutgoingTraffic": None,
        }

    def _create(self, body: dict[str, Any]) -> Response:
        name = str(body.get("name") or "")
        region = str(body.get("region") or "")
        flavor_id = str(body.get("flavorId") or "")
        image_id = str(body.get("imageId") or "")
        user_data = body.get("userData")
        bad = "Client::BadRequest"
        if not name:
            return Response(400, {"class": bad, "message": "Invalid parameter: name is required"})
        if region not in self.regions:
            return Response(400, {"class": bad, "message": f"Invalid region {region}"})
        flavor = next(
            (f for f in self.flavors.values() if _uuid("flavor", region, f.name) == flavor_id),
            None,
        )
        if flavor is None:
            return Response(400, {"class": bad, "message": f"Invalid flavorId {flavor_id}"})
        if not flavor.available:
            return Response(
                500,
                {"class": "Server::InternalServerError", "message": "Flavor is out of stock"},
            )
        if not any(_uuid("image", region, i) == image_id for i in self.images):
            return Response(400, {"class": bad, "message": f"Invalid imageId {image_id}"})
        if user_data is not None and not isinstance(user_data, str):
            return Response(400, {"class": bad, "message": "userData must be a string"})
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            n = next(self._n)
            inst = _Instance(
                id=_uuid("instance", str(n), secrets.token_hex(4)),
                name=name,
                region=region,
                flavor=flavor.name,
                flavor_id=flavor_id,
                image_id=image_id,
                user_data=user_data or "",
                created=rfc3339().replace("+00:00", "Z"),
                created_mono=now,
                private_ip=private_ip(n, prefix=10),
            )
            self._instances[inst.id] = inst
            self._created_by_name[name] += 1
            return Response(200, self._json(inst, now))

    def _list(self, region: str | None) -> Response:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            return Response(
                200,
                [
                    self._json(i, now)
                    for i in self._instances.values()
                    if region is None or i.region == region
                ],
            )

    def _get(self, iid: str) -> Response:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            inst = self._instances.get(iid)
            if inst is None:
                return self._not_found(f"Instance {iid} not found")
            return Response(200, self._json(inst, now))

    def _delete(self, iid: str) -> Response:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            inst = self._instances.get(iid)
            if inst is None:
                return self._not_found(f"Instance {iid} not found")
            if inst.delete_requested_mono is None:
                inst.delete_requested_mono = now
        return Response(200, b"null")  # the API answers JSON null


def standin(*, boot_delay_s: float = 1.0, host: str = "127.0.0.1") -> OvhStandin:
    """The factory `sim.cluster` and `cloudburst dev` use (not yet started)."""
    return OvhStandin(boot_delay_s=boot_delay_s, host=host)
