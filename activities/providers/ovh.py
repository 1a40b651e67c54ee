"""OVHcloud Public Cloud instances through the `ovh` SDK (signed calls to the /1.0 API).

- **Endpoint.** `ovh.Client(endpoint=...)` in ovh 1.2 accepts only a name from the module's
  `ovh.client.ENDPOINTS` table (a URL raises `InvalidRegion`). Without an override we use the
  NodeClass `apiEndpoint` (`ovh-eu`, `ovh-ca`, `ovh-us`). A NodeClass `endpoint` URL is
  registered in that table under the name `cloudburst:<url>` — a name derived only from the
  URL, so registering it again (from any thread) writes the same value and no other client's
  endpoint changes; the table entries the SDK ships are never touched.
- **Clock.** The SDK signs each call with the server's time, fetched once per client from
  `GET /auth/time` (unsigned): every stand-in must answer it.
- **Ownership without tags.** OVH instances have no tags or labels, so ownership is in the
  name: `cb_<cluster>_<pool>_<claim>`. Claim and pool names are Kubernetes names, which
  never contain `_`, so the name splits unambiguously from the right even when the cluster
  id does. `list_owned` lists the project's instances and filters on that prefix client-side;
  `Instance.name` is the claim name and `Instance.labels` are the canonical labels rebuilt
  from the name. `create` looks the claim's instance up by name before creating (the API has
  no idempotency key).
- **Flavors and images** are named by the user and the catalog but addressed by per-region
  ids: `GET /cloud/project/{id}/flavor?region=R` (flavorId by name) and
  `.../image?region=R` (imageId by name; a UUID is used as it is).
- **Errors** (ovh.exceptions): `InvalidKey`, `InvalidCredential`, `NotCredential`,
  `NotGrantedCall`, `Forbidden` → fatal (fix the credentials Secret); `ResourceNotFoundError`
  → gone; `APIError` 429 → retry (Retry-After honoured); 5xx and quota/"not enough
  resources" messages → capacity (next offering) on the calls of a create, retry on every
  other call (get, list, delete, catalog: no other offering to move to); other 4xx → fatal;
  network failures and undecodable answers → retry.

Credential: ONE Secret value (`spec.ovh.credentialsSecretRef`) holding JSON
`{"application_key": ..., "application_secret": ..., "consumer_key": ...}`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar, NoReturn, TypeVar

import ovh
import ovh.client
from ovh.exceptions import (
    APIError,
    BadParametersError,
    Forbidden,
    HTTPError,
    InvalidCredential,
    InvalidKey,
    InvalidResponse,
    NotCredential,
    NotGrantedCall,
    ResourceNotFoundError,
)

from activities.providers.base import (
    CapacityError,
    FatalError,
    Instance,
    InstanceSpec,
    InstanceState,
    InstanceType,
    Provider,
    RetryableError,
    instance_id,
    split_instance_id,
)
from api import labels as L
from api.nodeclass import OvhClass

log = logging.getLogger(__name__)

T = TypeVar("T")

NAME_PREFIX = "cb_"
ENDPOINT_NAME_PREFIX = "cloudburst:"
TIMEOUT_S = (10.0, 60.0)  # connect, read (the SDK's default is 180 s each)
CREDENTIAL_KEYS = ("application_key", "application_secret", "consumer_key")

_CRED_FIX = (
    "check the Secret named by spec.ovh.credentialsSecretRef: JSON with application_key, "
    "application_secret and consumer_key (the consumer key needs GET/POST/DELETE on "
    "/cloud/project/*)"
)
_ENDPOINT_FIX = "check NodeClass spec.ovh.endpoint / apiEndpoint and spec.ovh.projectID"
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_CAPACITY_WORDS = (
    "quota",
    "not enough",
    "insufficient",
    "no valid host",
    "out of stock",
    "unavailable",
    "capacity",
)
_STATES = {
    "BUILD": InstanceState.PENDING,
    "BUILDING": InstanceState.PENDING,
    "REBOOT": InstanceState.PENDING,
    "HARD_REBOOT": InstanceState.PENDING,
    "ACTIVE": InstanceState.RUNNING,
    "DELETING": InstanceState.STOPPING,
    "SHUTOFF": InstanceState.STOPPING,
    "STOPPED": InstanceState.STOPPING,
    "SHELVED": InstanceState.STOPPING,
    "SHELVED_OFFLOADED": InstanceState.STOPPING,
    "DELETED": InstanceState.TERMINATED,
    "ERROR": InstanceState.TERMINATED,
}
_endpoint_lock = threading.Lock()


def endpoint_name(url: str) -> str:
    """Register `url` in the SDK's endpoint table under a name derived from it; return it."""
    name = f"{ENDPOINT_NAME_PREFIX}{url}"
    with _endpoint_lock:
        ovh.client.ENDPOINTS.setdefault(name, url)
    return name


def vm_name(cluster_id: str, pool: str, claim: str) -> str:
    return f"{NAME_PREFIX}{cluster_id}_{pool}_{claim}"


def parse_vm_name(name: str) -> tuple[str, str, str] | None:
    """(cluster, pool, claim) of an instance we named, else None."""
    if not name.startswith(NAME_PREFIX):
        return None
    parts = name.removeprefix(NAME_PREFIX).rsplit("_", 2)
    if len(parts) != 3 or not all(parts):
        return None
    return parts[0], parts[1], parts[2]


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _status(exc: APIError) -> int | None:
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return int(code) if isinstance(code, int) else None


def _retry_after(exc: APIError) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("Retry-After") if response is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class OvhProvider(Provider):
    """Instances of one Public Cloud project. `credential`: the JSON document above."""

    name: ClassVar[str] = "ovh"
    block: OvhClass

    def __init__(
        self, block: OvhClass, credential: str | None, namespace: str | None = None
    ) -> None:
        super().__init__(block, credential, namespace)
        self._keys = self._parse_credential(credential)
        self._endpoint = endpoint_name(block.endpoint) if block.endpoint else block.api_endpoint
        self._base = f"/cloud/project/{block.project_id}"
        self._lock = threading.Lock()
        self._sdk: ovh.Client | None = None
        self._flavor_names: dict[str, str] = {}  # flavorId -> name

    def _parse_credential(self, credential: str | None) -> dict[str, str]:
        try:
            data = json.loads(credential or "")
        except ValueError:
            raise FatalError(self.name, "the credential is not JSON", _CRED_FIX) from None
        if not isinstance(data, dict):
            raise FatalError(self.name, "the credential is not a JSON object", _CRED_FIX)
        missing = [k for k in CREDENTIAL_KEYS if not isinstance(data.get(k), str) or not data[k]]
        if missing:
            raise FatalError(self.name, f"the credential lacks {', '.join(missing)}", _CRED_FIX)
        return {k: str(data[k]) for k in CREDENTIAL_KEYS}

    # ---- SDK plumbing --------------------------------------------------------------------

    def _client(self) -> ovh.Client:
        with self._lock:
            if self._sdk is None:
                self._sdk = ovh.Client(
                    endpoint=self._endpoint,
                    application_key=self._keys["application_key"],
                    application_secret=self._keys["application_secret"],
                    consumer_key=self._keys["consumer_key"],
                    timeout=TIMEOUT_S,
                )
            return self._sdk

    def _scrub(self, text: str) -> str:
        for value in self._keys.values():
            text = text.replace(value, "***")
        return text

    def _call(self, what: str, fn: Callable[[ovh.Client], T], *, creating: bool = False) -> T:
        """One SDK call, errors classified. `ResourceNotFoundError` passes through.

        `creating`: the call is part of a create, where an outage or a lack of capacity
        means "try the next offering"; anywhere else the same answer is retried.
        """
        try:
            return fn(self._client())
        except ResourceNotFoundError:
            raise
        except APIError as exc:
            self._classify(what, exc, creating=creating)

    def _classify(self, what: str, exc: APIError, *, creating: bool) -> NoReturn:
        status = _status(exc)
        message = self._scrub(str(getattr(exc, "args", [""])[0] if exc.args else ""))
        detail = f"{what}: {f'HTTP {status} ' if status else ''}{type(exc).__name__}: {message}"
        if isinstance(exc, InvalidKey | InvalidCredential | NotCredential):
            raise FatalError(self.name, detail, _CRED_FIX) from exc
        if isinstance(exc, NotGrantedCall | Forbidden):
            raise FatalError(
                self.name, detail, f"the consumer key lacks rights: {_CRED_FIX}"
            ) from exc
        if isinstance(exc, HTTPError):
            raise RetryableError(
                self.name, f"{what}: cannot reach the OVH API ({message})"
            ) from exc
        if isinstance(exc, InvalidResponse):
            raise RetryableError(
                self.name, f"{what}: the API answered something that is not JSON"
            ) from exc
        if status == 429:
            raise RetryableError(self.name, detail, retry_after_s=_retry_after(exc)) from exc
        if (status is not None and status >= 500) or any(
            w in message.lower() for w in _CAPACITY_WORDS
        ):
            if creating:
                raise CapacityError(self.name, detail) from exc
            raise RetryableError(self.name, detail) from exc
        if isinstance(exc, BadParametersError):
            raise FatalError(
                self.name,
                detail,
                "the request was refused as invalid: check spec.ovh.image/sshKeyID/networkID "
                "and the offering's region and flavor",
            ) from exc
        raise FatalError(self.name, detail, _ENDPOINT_FIX) from exc

    # ---- lookups -------------------------------------------------------------------------

    def _flavors(self, region: str | None, *, creating: bool = False) -> list[dict[str, Any]]:
        what = f"list flavors{f' in {region}' if region else ''}"
        kwargs = {"region": region} if region else {}
        try:
            flavors: list[dict[str, Any]] = self._call(
                what, lambda c: c.get(f"{self._base}/flavor", **kwargs), creating=creating
            )
        except ResourceNotFoundError as exc:
            raise FatalError(self.name, f"{what}: project not found", _ENDPOINT_FIX) from exc
        with self._lock:
            self._flavor_names.update({str(f["id"]): str(f["name"]) for f in flavors})
        return flavors

    def _flavor_name(self, flavor_id: str) -> str:
        with self._lock:
            known = self._flavor_names.get(flavor_id)
        if known is None:
            self._flavors(None)
            with self._lock:
                known = self._flavor_names.get(flavor_id)
        return known or flavor_id

    def _flavor_id(self, region: str, flavor: str) -> str:
        flavors = self._flavors(region, creating=True)
        match = next((f for f in flavors if f.get("name") == flavor), None)
        if match is None:
            raise FatalError(
                self.name,
                f"flavor {flavor!r} does not exist in region {region}",
                "check the offering's instance type and region (the catalog's OVH entries)",
            )
        if match.get("available") is False:
            raise CapacityError(self.name, f"flavor {flavor!r} is out of stock in {region}")
        return str(match["id"])

    def _image_id(self, region: str, image: str) -> str:
        if _UUID.match(image):
            return image
        what = f"list images in {region}"
        try:
            images: list[dict[str, Any]] = self._call(
                what, lambda c: c.get(f"{self._base}/image", region=region), creating=True
            )
        except ResourceNotFoundError as exc:
            raise FatalError(self.name, f"{what}: project not found", _ENDPOINT_FIX) from exc
        match = next((i for i in images if i.get("name") == image), None)
        if match is None:
            raise FatalError(
                self.name,
                f"image {image!r} does not exist in region {region}",
                "set spec.ovh.image to an image name or id available in that region",
            )
        return str(match["id"])

    def _list(
        self, region: str | None, what: str, *, creating: bool = False
    ) -> list[dict[str, Any]]:
        kwargs = {"region": region} if region else {}
        try:
            result: list[dict[str, Any]] = self._call(
                what, lambda c: c.get(f"{self._base}/instance", **kwargs), creating=creating
            )
        except ResourceNotFoundError as exc:
            raise FatalError(self.name, f"{what}: project not found", _ENDPOINT_FIX) from exc
        return result

    # ---- mapping ---------------------------------------------------------------------------

    def _instance(self, raw: dict[str, Any]) -> Instance:
        region = str(raw.get("region") or "")
        native_name = str(raw.get("name") or "")
        parsed = parse_vm_name(native_name)
        labels: dict[str, str] = {}
        name = native_name
        if parsed is not None:
            cluster, pool, claim = parsed
            name = claim
            labels = L.ownership_labels(claim, node_pool=pool, cluster_id=cluster)
        private_ip = public_ip = None
        for addr in raw.get("ipAddresses") or []:
            if addr.get("version") not in (None, 4):
                continue
            if addr.get("type") == "private" and private_ip is None:
                private_ip = addr.get("ip")
            elif addr.get("type") == "public" and public_ip is None:
                public_ip = addr.get("ip")
        return Instance(
            id=instance_id(self.name, region, str(raw["id"])),
            name=name,
            provider=self.name,
            region=region,
            instance_type=self._flavor_name(str(raw.get("flavorId") or "")),
            state=_STATES.get(str(raw.get("status") or "").upper(), InstanceState.PENDING),
            labels=labels,
            created_at=_parse_time(raw.get("created")),
            private_ip=private_ip,
            public_ip=public_ip,
        )

    def _native_id(self, value: str) -> str:
        try:
            provider, _region, native = split_instance_id(value)
        except ValueError:
            provider, native = "", ""
        if provider != self.name or not native:
            raise FatalError(self.name, f"{value!r} is not an {self.name} instance id")
        return native

    # ---- Provider --------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> Instance:
        region = spec.region or self.block.region
        for part, value in (("pool", spec.node_pool), ("claim", spec.name)):
            if not value or "_" in value:
                raise FatalError(
                    self.name,
                    f"{part} name {value!r} cannot be encoded in an OVH instance name",
                    "pool and claim names are Kubernetes names (no '_')",
                )
        native_name = vm_name(spec.cluster_id, spec.node_pool, spec.name)
        what = f"create instance {spec.name!r} ({spec.instance_type} in {region})"
        # No idempotency key and no tags: an earlier attempt's instance has the same name.
        for raw in self._list(region, f"{what}: look-up", creating=True):
            if raw.get("name") != native_name:
                continue
            instance = self._instance(raw)
            if instance.state in (InstanceState.STOPPING, InstanceState.TERMINATED):
                raise RetryableError(
                    self.name,
                    f"{what}: an earlier instance for this claim is {instance.state.value}; "
                    "retry once it is gone",
                )
            log.info("instance for %s already exists as %s", spec.name, instance.id)
            return instance
        image = spec.image or self.block.image
        if not image:
            raise FatalError(self.name, f"{what}: no image", "set spec.ovh.image")
        body: dict[str, Any] = {
            "name": native_name,
            "region": region,
            "flavorId": self._flavor_id(region, spec.instance_type),
            "imageId": self._image_id(region, image),
            "userData": spec.user_data,
            "monthlyBilling": False,
        }
        if self.block.ssh_key_id:
            body["sshKeyId"] = self.block.ssh_key_id
        if self.block.network_id:
            body["networks"] = [{"networkId": self.block.network_id}]
        try:
            raw = self._call(
                what, lambda c: c.post(f"{self._base}/instance", **body), creating=True
            )
        except ResourceNotFoundError as exc:
            raise FatalError(self.name, f"{what}: project not found", _ENDPOINT_FIX) from exc
        instance = self._instance(raw)
        log.info("created %s as %s", spec.name, instance.id)
        return instance

    def get(self, instance_id: str) -> Instance | None:
        native = self._native_id(instance_id)
        try:
            raw = self._call(
                f"get instance {native}", lambda c: c.get(f"{self._base}/instance/{native}")
            )
        except ResourceNotFoundError:
            return None
        if str(raw.get("status") or "").upper() == "DELETED":
            return None
        return self._instance(raw)

    def list_owned(self, cluster_id: str) -> list[Instance]:
        out: list[Instance] = []
        for raw in self._list(None, f"list instances of cluster {cluster_id!r}"):
            parsed = parse_vm_name(str(raw.get("name") or ""))
            if parsed is None or parsed[0] != cluster_id:
                continue
            if str(raw.get("status") or "").upper() == "DELETED":
                continue
            out.append(self._instance(raw))
        return out

    def delete(self, instance_id: str) -> None:
        native = self._native_id(instance_id)
        try:
            self._call(
                f"delete instance {native}", lambda c: c.delete(f"{self._base}/instance/{native}")
            )
        except ResourceNotFoundError:
            log.info("instance %s already gone", native)

    def instance_types(self) -> list[InstanceType]:
        by_name: dict[str, InstanceType] = {}
        for raw in self._flavors(None):
            if raw.get("osType") not in (None, "linux") or raw.get("available") is False:
                continue
            name = str(raw["name"])
            entry = by_name.get(name)
            if entry is None:
                entry = by_name[name] = InstanceType(
                    provider=self.name,
                    name=name,
                    vcpu=float(raw["vcpus"]),
                    # OVH counts memory in MB of 1000 (a "b3-8" has ram 8000 and 8 GB).
                    memory_gib=float(raw["ram"]) / 1000,
                    arch="x86_64",
                    regions=[],
                    # Prices are not in this API (see /order/catalog/public/cloud).
                    price_eur_per_hour=None,
                )
            region = str(raw.get("region") or "")
            if region and region not in entry.regions:
                entry.regions.append(region)
        return list(by_name.values())
