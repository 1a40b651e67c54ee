"""A stand-in for the DigitalOcean API v2 — the subset `activities/providers/digitalocean.py`
calls, spoken the way `python-digitalocean` expects it.

    POST   /v2/droplets                 {name, region, size, image, tags, user_data, ...} → 202
    GET    /v2/droplets?tag_name=T&page=P&per_page=N   (links.pages.next when more)
    GET    /v2/droplets/{id}
    DELETE /v2/droplets/{id}            → 204
    GET    /v2/sizes?page=P&per_page=N

Bearer-token auth; errors are `{"id": ..., "message": ...}` as DigitalOcean sends them
(python-digitalocean keeps only the message). Tags follow DigitalOcean's rules, read here
with this module's own code, never the product's: a name of letters, digits, colons, dashes
and underscores, at most 255 characters, case-stable (the capitalization a tag was first
created with stays the tag's, and a droplet tagged in another case gets it). `peek` reads
Cloudburst's ownership tags back into labels by the convention the provider documents, on its
own too, so a fault in the product's codec shows in the provider's tests instead of being
mirrored here. Every request is recorded (`requests_seen()`) so tests can prove that nothing
went anywhere else. `next_link_base` makes pagination links point at another host (a real API
answers with absolute `https://api.digitalocean.com/...` links): a client that follows them
leaves the configured endpoint, which a test can see.
"""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass
from typing import Any, Unpack
from urllib.parse import urlencode

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

PROVIDER = "digitalocean"
OPS = ("create", "get", "list", "delete", "catalog")
# The contract's kinds plus a plain 500, to tell 5xx from 429 by message.
KINDS = (*FAILURE_KINDS, "server_error")

# kind -> (status, id, message) as DigitalOcean answers (messages from its API docs).
_FAILURES: dict[str, tuple[int, str, str]] = {
    "unavailable": (503, "service_unavailable", "Service is temporarily unavailable."),
    "capacity": (422, "unprocessable_entity", "Size is not available in this region."),
    "quota": (
        422,
        "unprocessable_entity",
        "creating this/these droplet(s) will exceed your droplet limit",
    ),
    "throttle": (429, "too_many_requests", "API Rate limit exceeded."),
    "auth": (401, "unauthorized", "Unable to authenticate you."),
    "server_error": (500, "server_error", "Server was unable to give you a response."),
}


@dataclass(frozen=True)
class Size:
    slug: str
    vcpus: int
    memory_mb: int
    price_hourly: float  # USD


DEFAULT_SIZES: tuple[Size, ...] = (
    Size("s-1vcpu-1gb", 1, 1024, 0.00893),
    Size("s-1vcpu-2gb", 1, 2048, 0.01786),
    Size("s-2vcpu-2gb", 2, 2048, 0.02679),
    Size("s-2vcpu-4gb", 2, 4096, 0.03571),
    Size("s-4vcpu-8gb", 4, 8192, 0.07143),
    Size("s-8vcpu-16gb", 8, 16384, 0.14286),
    Size("c-2", 2, 4096, 0.0625),
    Size("c-4", 4, 8192, 0.125),
    Size("g-2vcpu-8gb", 2, 8192, 0.09375),
    Size("m-2vcpu-16gb", 2, 16384, 0.125),
)
DEFAULT_REGIONS = ("nyc3", "sfo3", "ams3", "fra1")
_STATUS = {"pending": "new", "running": "active", "stopping": "off", "terminated": "archive"}

# DigitalOcean's tag names (API reference, "Tags"): "Tags may contain letters, numbers,
# colons, dashes, and underscores. There is a limit of 255 characters per tag."
_TAG_NAME = re.compile(r"[A-Za-z0-9:_-]{1,255}")
# Cloudburst's ownership tags: `cloudburst-<key>:<value>` for the label
# `cloudburst.io/<key>=<value>`, each value byte outside [A-Za-z0-9-] as `_` and two hex digits.
_OWNERSHIP_TAG = re.compile(r"cloudburst-([a-z0-9-]+):((?:[A-Za-z0-9-]|_[0-9a-fA-F]{2})*)")
_VALUE_PART = re.compile(r"_([0-9a-fA-F]{2})|([A-Za-z0-9-])")


def valid_tag(tag: str) -> bool:
    """Whether DigitalOcean accepts `tag` as a tag name."""
    return _TAG_NAME.fullmatch(tag) is not None


def ownership_labels(tags: list[str]) -> dict[str, str]:
    """The `cloudburst.io/` labels a droplet's tags carry; a tag that does not follow the
    convention exactly (a stray `_`, bytes that are no UTF-8) carries none."""
    out: dict[str, str] = {}
    for tag in tags:
        match = _OWNERSHIP_TAG.fullmatch(tag)
        if match is None:
            continue
        key, encoded = match.groups()
        raw = bytearray()
        for part in _VALUE_PART.finditer(encoded):
            escaped, plain = part.groups()
            raw.extend(bytes.fromhex(escaped) if escaped else plain.encode())
        try:
            out[f"cloudburst.io/{key}"] = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return out


@dataclass
class _Droplet:
    id: int
    name: str
    region: str
    size: str
    image: str
    user_data: str
    tags: list[str]
    vpc_uuid: str | None
    created_at: str
    created_mono: float
    private_ip: str
    delete_requested_mono: float | None = None


def _error(kind_or_status: int, ident: str, message: str, **headers: str) -> Response:
    return Response(kind_or_status, {"id": ident, "message": message}, headers=dict(headers))


class DigitalOceanStandin(CloudStandin):
    """Stateful DigitalOcean API fake with failure injection; a `BootableCloud`."""

    provider = PROVIDER
    region = "fra1"
    instance_type = "s-2vcpu-4gb"

    def __init__(
        self,
        *,
        token: str = "dop_v1_standin-token",
        regions: tuple[str, ...] = DEFAULT_REGIONS,
        sizes: tuple[Size, ...] = DEFAULT_SIZES,
        page_size_cap: int = 200,
        **options: Unpack[StandinOptions],
    ) -> None:
        self.token = token
        self.credential = token
        self.regions = list(regions)
        self.sizes = {s.slug: s for s in sizes}
        self.page_size_cap = page_size_cap
        # Where pagination links point; None: this stand-in's own URL.
        self.next_link_base: str | None = None
        self._droplets: dict[int, _Droplet] = {}
        # The account's tags: lower case -> the capitalization it was first created with.
        self._tags: dict[str, str] = {}
        self._ids = itertools.count(301_000_001)
        self._actions = itertools.count(1)
        self._requests: list[tuple[str, str, str]] = []
        super().__init__(ops=OPS, kinds=KINDS, name="do-standin", **options)

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """What goes into NodeClass `spec.digitalocean.endpoint`."""
        return f"{self._http.url}/v2/"

    def nodeclass_block(self, secret_name: str, secret_key: str) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "region": self.region,
            "apiTokenSecretRef": {"name": secret_name, "key": secret_key},
        }

    # ---- test controls ---------------------------------------------------------------------

    def requests_seen(self) -> list[tuple[str, str, str]]:
        """(method, path with query, Host header) of every request, in order."""
        with self._lock:
            return list(self._requests)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            self._purge(time.monotonic())
            return {
                **self._vm_counts(len(self._droplets)),
                "requests": len(self._requests),
                "failures": self.failures.pending(),
            }

    # ---- BootableCloud ---------------------------------------------------------------------

    def _state(self, d: _Droplet, now: float) -> str:
        return lifecycle_state(
            now, d.created_mono, self.boot_delay_s, delete_requested_mono=d.delete_requested_mono
        )

    def _purge(self, now: float) -> None:
        self._purge_deleted(self._droplets, now)

    def instance_states(self) -> dict[str, str]:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            return {str(i): self._state(d, now) for i, d in self._droplets.items()}

    def peek(self, native_id: str) -> dict[str, Any] | None:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            d = self._droplets.get(int(native_id)) if native_id.isdigit() else None
            if d is None:
                return None
            return {
                "id": str(d.id),
                "name": d.name,
                "region": d.region,
                "instance_type": d.size,
                "user_data": d.user_data,
                "private_ip": d.private_ip,
                "labels": ownership_labels(d.tags),
                "tags": list(d.tags),
                "state": self._state(d, now),
            }

    def instance_shape(self, instance_type: str) -> tuple[float, float, str] | None:
        s = self.sizes.get(instance_type)
        return None if s is None else (float(s.vcpus), s.memory_mb / 1024, "x86_64")

    # ---- HTTP ------------------------------------------------------------------------------

    def _failure_response(self, kind: str) -> Response:
        status, ident, message = _FAILURES[kind]
        headers = {"Retry-After": "1", "ratelimit-remaining": "0"} if kind == "throttle" else {}
        return _error(status, ident, message, **headers)

    def _route(self, req: Request) -> Response:
        query = urlencode([(k, v) for k, vs in req.query.items() for v in vs])
        with self._lock:
            self._requests.append(
                (req.method, req.path + (f"?{query}" if query else ""), req.headers.get("host", ""))
            )
        if req.parts[:1] != ["v2"]:
            return _error(404, "not_found", "The resource you were accessing could not be found.")
        if req.headers.get("authorization") != f"Bearer {self.token}":
            return _error(*_FAILURES["auth"][:3])
        match req.method, req.parts[1:]:
            case "POST", ["droplets"]:
                return self._fail("create") or self._create(req.json())
            case "GET", ["droplets"]:
                return self._fail("list") or self._list(req)
            case "GET", ["droplets", ident]:
                return self._fail("get") or self._get(ident)
            case "DELETE", ["droplets", ident]:
                return self._fail("delete") or self._delete(ident)
            case "GET", ["sizes"]:
                return self._fail("catalog") or self._sizes(req)
        return _error(404, "not_found", "The resource you were accessing could not be found.")

    def _json(self, d: _Droplet, now: float) -> dict[str, Any]:
        size = self.sizes[d.size]
        return {
            "id": d.id,
            "name": d.name,
            "memory": size.memory_mb,
            "vcpus": size.vcpus,
            "disk": 25,
            "locked": False,
            "status": _STATUS[self._state(d, now)],
            "created_at": d.created_at,
            "features": [],
            "backup_ids": [],
            "snapshot_ids": [],
            "volume_ids": [],
            "image": {"slug": d.image, "distribution": "Ubuntu"},
            "size_slug": d.size,
            "size": {"slug": d.size, "vcpus": size.vcpus, "memory": size.memory_mb},
            "networks": {
                "v4": [{"ip_address": d.private_ip, "netmask": "255.255.0.0", "type": "private"}],
                "v6": [],
            },
            "region": {"slug": d.region, "name": d.region.upper(), "available": True},
            "tags": list(d.tags),
            "vpc_uuid": d.vpc_uuid,
        }

    def _create(self, body: dict[str, Any]) -> Response:
        name = str(body.get("name") or "")
        region = str(body.get("region") or "")
        size = str(body.get("size") or "")
        image = body.get("image")
        tags = body.get("tags") or []
        user_data = body.get("user_data")
        if not name:
            return _error(422, "unprocessable_entity", "Name is required.")
        if region not in self.regions:
            return _error(422, "unprocessable_entity", "You specified an invalid region.")
        if size not in self.sizes:
            return _error(422, "unprocessable_entity", "You specified an invalid size.")
        if not isinstance(image, str | int) or not image:
            return _error(422, "unprocessable_entity", "You specified an invalid image.")
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            return _error(422, "unprocessable_entity", "Tags must be a list of strings.")
        for tag in tags:
            if not valid_tag(tag):
                return _error(
                    422,
                    "unprocessable_entity",
                    f"invalid tag name {tag!r}: tags may contain letters, numbers, colons, "
                    "dashes, and underscores, up to 255 characters",
                )
        if user_data is not None and not isinstance(user_data, str):
            return _error(422, "unprocessable_entity", "user_data must be a string.")
        if user_data and len(user_data.encode()) > 64 * 1024:
            return _error(422, "unprocessable_entity", "user_data is too large (64 KiB max).")
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            n = next(self._ids)
            d = _Droplet(
                id=n,
                name=name,
                region=region,
                size=size,
                image=str(image),
                user_data=user_data or "",
                tags=list(dict.fromkeys(self._tags.setdefault(t.lower(), t) for t in tags)),
                vpc_uuid=body.get("vpc_uuid"),
                created_at=rfc3339().replace("+00:00", "Z"),
                created_mono=now,
                private_ip=private_ip(n - 301_000_000, prefix=10),
            )
            self._droplets[n] = d
            self._created_by_name[name] += 1
            out = self._json(d, now)
            action = next(self._actions)
        return Response(
            202,
            {
                "droplet": out,
                "links": {"actions": [{"id": action, "rel": "create", "href": "/v2/actions"}]},
            },
        )

    def _page(self, req: Request, key: str, items: list[dict[str, Any]]) -> Response:
        per_page = max(1, min(int(req.q("per_page", "20") or 20), self.page_size_cap))
        page = max(1, int(req.q("page", "1") or 1))
        start = (page - 1) * per_page
        chunk = items[start : start + per_page]
        pages: dict[str, str] = {}
        if start + per_page < len(items):
            params = {k: v[-1] for k, v in req.query.items()}
            params.update({"page": str(page + 1), "per_page": str(per_page)})
            base = (self.next_link_base or self._http.url).rstrip("/")
            pages["next"] = f"{base}{req.path}?{urlencode(params)}"
        return Response(200, {key: chunk, "links": {"pages": pages}, "meta": {"total": len(items)}})

    def _list(self, req: Request) -> Response:
        tag = req.q("tag_name")
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            items = [
                self._json(d, now) for d in self._droplets.values() if tag is None or tag in d.tags
            ]
        return self._page(req, "droplets", items)

    def _find(self, ident: str) -> _Droplet | None:
        return self._droplets.get(int(ident)) if ident.isdigit() else None

    def _get(self, ident: str) -> Response:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            d = self._find(ident)
            if d is None:
                return _error(
                    404, "not_found", "The resource you were accessing could not be found."
                )
            return Response(200, {"droplet": self._json(d, now)})

    def _delete(self, ident: str) -> Response:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            d = self._find(ident)
            if d is None:
                return _error(
                    404, "not_found", "The resource you were accessing could not be found."
                )
            if d.delete_requested_mono is None:
                d.delete_requested_mono = now
        return Response(204)

    def _sizes(self, req: Request) -> Response:
        items = [
            {
                "slug": s.slug,
                "memory": s.memory_mb,
                "vcpus": s.vcpus,
                "disk": 25,
                "transfer": 1.0,
                "price_monthly": round(s.price_hourly * 672, 2),
                "price_hourly": s.price_hourly,
                "regions": list(self.regions),
                "available": True,
                "description": "Basic",
            }
            for s in self.sizes.values()
        ]
        return self._page(req, "sizes", items)


def standin(
    *, boot_delay_s: float = 1.0, host: str = "127.0.0.1", token: str | None = None
) -> DigitalOceanStandin:
    """The factory `sim.cluster` and `cloudburst dev` use (not yet started)."""
    import secrets

    return DigitalOceanStandin(
        token=token or f"dop_v1_{secrets.token_hex(32)}", boot_delay_s=boot_delay_s, host=host
    )
