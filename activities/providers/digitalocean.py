"""DigitalOcean droplets through `python-digitalocean` (the package the project names).

Why python-digitalocean rather than the official generated `pydo`: pydo (0.44) has typed
errors with status codes and a clean `endpoint=` override, but pulls in azure-core,
azure-identity, msrest and isodate (3.4 MB of generated code) for the five calls we make,
and the issue names python-digitalocean. Its traps are contained in this module instead:

- **Endpoint.** The SDK takes `end_point=` per object and otherwise reads the process env
  `DIGITALOCEAN_END_POINT` (and `DIGITALOCEAN_ACCESS_TOKEN`). Setting env vars from an
  activity is not thread-safe, so every SDK object is built here, by `_droplet()` and
  `_api()`, with `token=` and `end_point=` (NodeClass `spec.digitalocean.endpoint`, default
  the public API). The calls that build objects without it are avoided:
  `Manager.get_droplet` (we use `Droplet(token, id, end_point).load()`), `get_all_droplets`
  and `get_all_sizes` (their droplets/sizes carry the env endpoint). The SDK also follows
  `links.pages.next` verbatim — an absolute URL chosen by the server — so lists are paged
  here with an explicit `page` parameter, which makes the SDK stop following links.
- **Timeouts.** The SDK sets none unless `PYTHON_DIGITALOCEAN_REQUEST_TIMEOUT_SEC` is set;
  our subclasses answer `get_timeout()` with `TIMEOUT_S`.
- **Errors.** Every non-404 error becomes `DataReadError(message)` with the HTTP status thrown
  away, so errors are classified by DigitalOcean's messages (`_classify`): "rate limit" →
  retry, "not available"/"droplet limit"/503 "unavailable" → capacity, "Unable to
  authenticate" → fatal (fix the token Secret), other 5xx messages → retry, anything else (a
  422 about image/region/size) → fatal. `NotFoundError` (404) → gone.
- **Idempotency.** The API has none: the VM carries a unique tag for its claim, and `create`
  looks it up by that tag before creating.

Ownership tags (DigitalOcean tags allow `[A-Za-z0-9:_-]`, 255 chars): each canonical label
`cloudburst.io/<key>=<value>` becomes the tag `cloudburst-<key>:<value>`, with every value
character outside `[A-Za-z0-9-]` written as `_` + two hex digits per UTF-8 byte (so `.` is
`_2e`); `Instance.labels` maps them back. Labels outside `cloudburst.io/` are not tagged. The
convention lives in `api/label_tags.py`, which the DigitalOcean stand-in reads back too.

Credential: the API token (read+write scope) in the Secret named by
`spec.digitalocean.apiTokenSecretRef`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar, NoReturn, TypeVar

import digitalocean
import requests
from digitalocean.baseapi import DataReadError, JSONReadError, NotFoundError, TokenError

from activities.providers.base import (
    CapacityError,
    FatalError,
    Instance,
    InstanceSpec,
    InstanceState,
    InstanceType,
    Provider,
    ProviderError,
    RetryableError,
    instance_id,
    split_instance_id,
)
from api import labels as L
from api.label_tags import label_tag, labels_from_tags, tags_for
from api.nodeclass import DigitalOceanClass

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_ENDPOINT = "https://api.digitalocean.com/v2/"
TIMEOUT_S = 30.0
PER_PAGE = 200
# The built-in catalog's documented rate (planner/catalog/catalog.json).
USD_TO_EUR = 0.92
_TAG_MAX = 255

_TOKEN_FIX = "check the API token in the Secret named by spec.digitalocean.apiTokenSecretRef"
_ENDPOINT_FIX = "check NodeClass spec.digitalocean.endpoint (the API base URL, ending in /v2/)"
_STATES = {
    "new": InstanceState.PENDING,
    "active": InstanceState.RUNNING,
    "off": InstanceState.STOPPING,
    "archive": InstanceState.TERMINATED,
}

# Message fragments, lower case (DataReadError keeps only DigitalOcean's message).
_THROTTLED = ("rate limit", "too many requests")
_UNAUTHENTICATED = ("unable to authenticate", "unauthorized", "invalid token", "token is invalid")
_FORBIDDEN = ("do not have access", "forbidden", "not authorized", "permission")
_CAPACITY = (
    "not available",
    "unavailable",
    "droplet limit",
    "exceed",
    "quota",
    "capacity",
    "sold out",
    "out of stock",
)
_TRANSIENT = (
    "server was unable",
    "server error",
    "internal error",
    "bad gateway",
    "gateway timeout",
    "timed out",
    "timeout",
    "try again",
)


# ---- SDK objects that never read the process env at call time ------------------------------


class _Timeout:
    def get_timeout(self) -> float:
        return TIMEOUT_S


class _Droplet(_Timeout, digitalocean.Droplet):
    pass


class _Api(_Timeout, digitalocean.baseapi.BaseAPI):
    pass


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class DigitalOceanProvider(Provider):
    """Droplets in one account. `credential` is the API token."""

    name: ClassVar[str] = "digitalocean"
    block: DigitalOceanClass

    def __init__(
        self, block: DigitalOceanClass, credential: str | None, namespace: str | None = None
    ) -> None:
        super().__init__(block, credential, namespace)
        self.token = (credential or "").strip()
        if not self.token:
            raise FatalError(self.name, "no API token", _TOKEN_FIX)
        end_point = block.endpoint or DEFAULT_ENDPOINT
        self.end_point = end_point if end_point.endswith("/") else f"{end_point}/"

    # ---- SDK plumbing --------------------------------------------------------------------

    def _droplet(self, **attrs: Any) -> Any:
        return _Droplet(token=self.token, end_point=self.end_point, **attrs)

    def _api(self) -> Any:
        return _Api(token=self.token, end_point=self.end_point)

    def _scrub(self, text: str) -> str:
        return text.replace(self.token, "***") if self.token else text

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one SDK call; classify its errors. `NotFoundError` passes through."""
        try:
            return fn()
        except NotFoundError:
            raise
        except DataReadError as exc:
            self._classify(what, str(exc))
        except JSONReadError as exc:
            raise RetryableError(
                self.name, f"{what}: the API answered something that is not JSON"
            ) from exc
        except TokenError as exc:
            raise FatalError(self.name, f"{what}: no API token", _TOKEN_FIX) from exc
        except requests.Timeout as exc:
            raise RetryableError(self.name, f"{what}: timed out after {TIMEOUT_S:g}s") from exc
        except requests.RequestException as exc:
            raise RetryableError(
                self.name,
                self._scrub(f"{what}: cannot reach {self.end_point} ({type(exc).__name__})"),
            ) from exc
        except (IndexError, KeyError, TypeError) as exc:
            # The SDK indexes the error body and answers blindly; a malformed answer lands here.
            raise RetryableError(
                self.name, f"{what}: unexpected answer from the API ({type(exc).__name__})"
            ) from exc

    def _classify(self, what: str, message: str) -> NoReturn:
        detail = self._scrub(f"{what}: {message}")
        text = message.lower()
        if any(s in text for s in _THROTTLED):
            raise RetryableError(self.name, detail)
        if any(s in text for s in _UNAUTHENTICATED):
            raise FatalError(self.name, detail, _TOKEN_FIX)
        if any(s in text for s in _FORBIDDEN):
            raise FatalError(
                self.name, detail, f"the token needs read and write scope: {_TOKEN_FIX}"
            )
        if any(s in text for s in _CAPACITY):
            raise CapacityError(self.name, detail)
        if any(s in text for s in _TRANSIENT):
            raise RetryableError(self.name, detail)
        raise FatalError(
            self.name,
            detail,
            "the request was refused as invalid: check spec.digitalocean.image/vpcUUID/"
            "sshKeyIDs and the offering's region and size",
        )

    def _pages(self, path: str, key: str, params: dict[str, Any], what: str) -> list[Any]:
        """Every item of a paged list, fetched page by page on the configured endpoint."""
        api = self._api()
        out: list[Any] = []
        page = 1
        while True:
            query = {**params, "page": page, "per_page": PER_PAGE}
            try:
                data = self._call(what, lambda q=query: api.get_data(path, params=q))  # type: ignore[misc]
            except NotFoundError:
                raise FatalError(self.name, f"{what}: HTTP 404", _ENDPOINT_FIX) from None
            out.extend(data.get(key) or [])
            if not ((data.get("links") or {}).get("pages") or {}).get("next"):
                return out
            page += 1

    # ---- mapping ---------------------------------------------------------------------------

    def _instance(self, raw: dict[str, Any]) -> Instance:
        region_raw = raw.get("region")
        region = str(region_raw.get("slug") if isinstance(region_raw, dict) else region_raw or "")
        private_ip = public_ip = None
        for net in (raw.get("networks") or {}).get("v4") or []:
            if net.get("type") == "private":
                private_ip = net.get("ip_address")
            elif net.get("type") == "public":
                public_ip = net.get("ip_address")
        tags = [str(t) for t in raw.get("tags") or []]
        labels = labels_from_tags(tags)
        return Instance(
            id=instance_id(self.name, region, str(raw["id"])),
            name=str(raw.get("name") or ""),
            provider=self.name,
            region=region,
            instance_type=str(raw.get("size_slug") or (raw.get("size") or {}).get("slug") or ""),
            state=_STATES.get(str(raw.get("status")), InstanceState.PENDING),
            labels=labels,
            created_at=_parse_time(raw.get("created_at")),
            private_ip=private_ip,
            public_ip=public_ip,
        )

    @staticmethod
    def _raw(droplet: Any) -> dict[str, Any]:
        fields = ("id", "name", "region", "size_slug", "status", "tags", "created_at", "networks")
        return {f: getattr(droplet, f, None) for f in fields}

    def _native_id(self, value: str) -> int:
        try:
            provider, _region, native = split_instance_id(value)
            if provider != self.name:
                raise ValueError(provider)
            return int(native)
        except ValueError as exc:
            raise FatalError(self.name, f"{value!r} is not a {self.name} droplet id") from exc

    def _by_tag(self, tag: str, what: str) -> list[dict[str, Any]]:
        return self._pages("droplets/", "droplets", {"tag_name": tag}, what)

    # ---- Provider --------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> Instance:
        region = spec.region or self.block.region
        labels = spec.vm_labels()
        tags = tags_for(labels)
        if too_long := [t for t in tags if len(t) > _TAG_MAX]:
            raise FatalError(
                self.name,
                f"tag {too_long[0][:40]}… is longer than {_TAG_MAX} characters",
                "shorten the cluster id, pool or claim name",
            )
        what = f"create droplet {spec.name!r} ({spec.instance_type} in {region})"
        # No idempotency key in the API: an earlier attempt's droplet carries the claim's tag.
        for raw in self._by_tag(label_tag(L.NODECLAIM, spec.name), f"{what}: look-up"):
            instance = self._instance(raw)
            if instance.labels.get(L.CLUSTER) != spec.cluster_id:
                continue
            if instance.state in (InstanceState.STOPPING, InstanceState.TERMINATED):
                raise RetryableError(
                    self.name,
                    f"{what}: an earlier droplet for this claim is {instance.state.value}; "
                    "retry once it is gone",
                )
            log.info("droplet for %s already exists as %s", spec.name, instance.id)
            return instance
        droplet = self._droplet(
            name=spec.name,
            region=region,
            size_slug=spec.instance_type,
            image=spec.image or self.block.image,
            user_data=spec.user_data,
            tags=tags,
            ssh_keys=list(self.block.ssh_key_ids),
            vpc_uuid=self.block.vpc_uuid,
            monitoring=self.block.monitoring,
            ipv6=False,
            backups=False,
        )
        try:
            self._call(what, droplet.create)
        except NotFoundError:
            raise FatalError(self.name, f"{what}: HTTP 404", _ENDPOINT_FIX) from None
        native = droplet.id
        log.info("created droplet %s for %s", native, spec.name)
        # The create answer is not kept by the SDK; read the droplet back (a failure here is
        # retried and the retry finds the droplet by its tag).
        got = self.get(instance_id(self.name, region, str(native)))
        if got is None:
            raise RetryableError(self.name, f"{what}: droplet {native} not visible yet")
        return got

    def get(self, instance_id: str) -> Instance | None:
        native = self._native_id(instance_id)
        droplet = self._droplet(id=native)
        try:
            self._call(f"get droplet {native}", droplet.load)
        except NotFoundError:
            return None
        return self._instance(self._raw(droplet))

    def list_owned(self, cluster_id: str) -> list[Instance]:
        raws = self._by_tag(
            label_tag(L.CLUSTER, cluster_id), f"list droplets of cluster {cluster_id!r}"
        )
        out = [self._instance(raw) for raw in raws]
        return [
            i
            for i in out
            if i.labels.get(L.MANAGED) == "true" and i.labels.get(L.CLUSTER) == cluster_id
        ]

    def delete(self, instance_id: str) -> None:
        native = self._native_id(instance_id)
        try:
            self._call(f"delete droplet {native}", self._droplet(id=native).destroy)
        except NotFoundError:
            log.info("droplet %s already gone", native)

    def instance_types(self) -> list[InstanceType]:
        sizes = self._pages("sizes/", "sizes", {}, "list sizes")
        out: list[InstanceType] = []
        for raw in sizes:
            if raw.get("available") is False:
                continue
            price = raw.get("price_hourly")
            out.append(
                InstanceType(
                    provider=self.name,
                    name=str(raw["slug"]),
                    vcpu=float(raw["vcpus"]),
                    memory_gib=float(raw["memory"]) / 1024,
                    arch="x86_64",
                    regions=[str(r) for r in raw.get("regions") or []],
                    price_eur_per_hour=(
                        round(float(price) * USD_TO_EUR, 5) if price is not None else None
                    ),
                )
            )
        return out


__all__ = ["DigitalOceanProvider", "ProviderError"]
