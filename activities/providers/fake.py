"""The `fake` provider: talks HTTP to the simulated cloud of `sim/cloud` (demo and tests).

It is written like a real provider module — over the wire, idempotent create by name, every
error classified at this boundary — so that the workflows exercise the same paths they take
against Hetzner or Scaleway. It knows nothing about `sim/`: only the URL in the NodeClass.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any, ClassVar, NoReturn

import httpx

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
from api.nodeclass import FakeClass

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
_AUTH_FIX = "check the Secret referenced by NodeClass spec.fake.apiTokenSecretRef"
_ENDPOINT_FIX = "check NodeClass spec.fake.endpoint"
# Codes the cloud uses for "this offering cannot be had right now": try the next one.
_CAPACITY_CODES = {"resource_unavailable", "resource_limit_exceeded", "unavailable"}


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class FakeProvider(Provider):
    """Provider for the fake cloud. `credential` is the bearer token (may be None)."""

    name: ClassVar[str] = "fake"
    block: FakeClass

    def __init__(
        self, block: FakeClass, credential: str | None, namespace: str | None = None
    ) -> None:
        super().__init__(block, credential, namespace)
        if not block.endpoint:
            raise FatalError(self.name, "no cloud endpoint configured", _ENDPOINT_FIX)
        self.base_url = block.endpoint.rstrip("/")
        self._lock = threading.Lock()
        self._http: httpx.Client | None = None

    # ---- HTTP plumbing -------------------------------------------------------------------

    def _client(self) -> httpx.Client:
        """One pooled client per provider object (httpx clients are thread-safe)."""
        with self._lock:
            if self._http is None:
                headers = {"Accept": "application/json"}
                if self.credential:
                    headers["Authorization"] = f"Bearer {self.credential}"
                self._http = httpx.Client(
                    base_url=self.base_url,
                    headers=headers,
                    timeout=TIMEOUT_S,
                    # Loading the CA bundle costs ~30 ms per client; plain http needs none.
                    verify=self.base_url.startswith("https://"),
                )
            return self._http

    def close(self) -> None:
        with self._lock:
            if self._http is not None:
                self._http.close()
                self._http = None

    def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        params: dict[str, str] | None = None,
        json: dict[str, Any] | None = None,
        accept: tuple[int, ...] = (),
    ) -> httpx.Response:
        """One call; returns the response when 2xx or in `accept`, raises classified errors."""
        try:
            response = self._client().request(method, path, params=params, json=json)
        except httpx.TimeoutException as exc:
            raise RetryableError(self.name, f"{what}: timed out after {TIMEOUT_S:g}s") from exc
        except httpx.TransportError as exc:
            raise RetryableError(
                self.name, f"{what}: cannot reach {self.base_url} ({type(exc).__name__}: {exc})"
            ) from exc
        if response.is_success or response.status_code in accept:
            return response
        self._raise_for(response, what)

    def _raise_for(self, response: httpx.Response, what: str) -> NoReturn:
        """Map an error answer to the typed errors the workflows decide on."""
        status = response.status_code
        try:
            error = response.json().get("error") or {}
        except (ValueError, AttributeError):
            error = {}
        code = str(error.get("code") or "")
        message = str(error.get("message") or response.reason_phrase or "")
        detail = f"{what}: HTTP {status} {code}: {message}".rstrip(": ")
        if status == 429 or code == "rate_limit_exceeded":
            raise RetryableError(self.name, detail, retry_after_s=_retry_after(response))
        if status in (503, 412) or code in _CAPACITY_CODES:
            raise CapacityError(self.name, detail)
        if status == 401:
            raise FatalError(self.name, detail, _AUTH_FIX)
        if status == 403:
            raise FatalError(self.name, detail, f"the token lacks permission: {_AUTH_FIX}")
        if status == 400:
            fields = [
                str(f.get("name"))
                for f in (error.get("details") or {}).get("fields") or []
                if isinstance(f, dict) and f.get("name")
            ]
            fix = (
                f"fix field(s) {', '.join(fields)} (region comes from the NodePool requirements "
                "or NodeClass spec.fake.region, instance_type from the catalog)"
                if fields
                else "the request was refused as invalid"
            )
            raise FatalError(self.name, detail, fix)
        if status >= 500:
            raise RetryableError(self.name, detail)
        raise FatalError(self.name, detail, _ENDPOINT_FIX if status == 404 else "")

    # ---- mapping -------------------------------------------------------------------------

    def _instance(self, raw: dict[str, Any]) -> Instance:
        region = str(raw["region"])
        try:
            state = InstanceState(str(raw.get("state")))
        except ValueError:
            state = InstanceState.PENDING
        return Instance(
            id=instance_id(self.name, region, str(raw["id"])),
            name=str(raw["name"]),
            provider=self.name,
            region=region,
            instance_type=str(raw["instance_type"]),
            state=state,
            labels=dict(raw.get("labels") or {}),
            created_at=_parse_time(raw.get("created_at")),
            private_ip=raw.get("private_ip"),
            public_ip=raw.get("public_ip"),
        )

    def _native_id(self, value: str) -> str:
        try:
            provider, _region, native = split_instance_id(value)
        except ValueError as exc:
            raise FatalError(self.name, f"malformed instance id {value!r}") from exc
        if provider != self.name:
            raise FatalError(self.name, f"instance id {value!r} is not a {self.name} instance")
        return native

    def _find_by_name(self, name: str) -> list[dict[str, Any]]:
        response = self._request(
            "GET", "/v1/instances", params={"name": name}, what=f"find instance {name!r}"
        )
        return list(response.json().get("instances") or [])

    # ---- Provider ------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> Instance:
        region = spec.region or self.block.region
        vm_labels = spec.vm_labels()
        body = {
            "name": spec.name,
            "region": region,
            "instance_type": spec.instance_type,
            "image": spec.image or self.block.image,
            "user_data": spec.user_data,
            "labels": vm_labels,
        }
        what = f"create instance {spec.name!r} ({spec.instance_type} in {region})"
        # A timeout here may still have made the VM: the retry finds it by name (409 below).
        response = self._request("POST", "/v1/instances", json=body, what=what, accept=(409,))
        if response.is_success:
            instance = self._instance(response.json()["instance"])
            log.info("created %s as %s", spec.name, instance.id)
            return instance
        # Name taken: ours from an earlier attempt (a retry after a crash or timeout)?
        for raw in self._find_by_name(spec.name):
            owner = raw.get("labels") or {}
            if owner.get(L.NODECLAIM) == spec.name and owner.get(L.CLUSTER) == spec.cluster_id:
                instance = self._instance(raw)
                if instance.state is InstanceState.STOPPING:
                    raise RetryableError(
                        self.name,
                        f"{what}: an earlier VM with this name is {instance.state.value}; "
                        "retry once it is gone",
                    )
                log.info("instance %s already exists as %s", spec.name, instance.id)
                return instance
            raise FatalError(
                self.name,
                f"{what}: the name is taken by a VM that is not this claim's "
                f"(claim label {owner.get(L.NODECLAIM)!r}, cluster {owner.get(L.CLUSTER)!r})",
                "delete or rename the conflicting VM in the cloud",
            )
        # Conflict, yet nothing by that name: it was deleted in between. Try again.
        raise RetryableError(self.name, f"{what}: name conflict on a VM that is now gone")

    def get(self, instance_id: str) -> Instance | None:
        native = self._native_id(instance_id)
        response = self._request(
            "GET", f"/v1/instances/{native}", what=f"get instance {instance_id}", accept=(404,)
        )
        if response.status_code == 404:
            return None
        return self._instance(response.json()["instance"])

    def list_owned(self, cluster_id: str) -> list[Instance]:
        selector = f"{L.MANAGED}=true,{L.CLUSTER}={cluster_id}"
        out: list[Instance] = []
        page: int | None = 1
        while page is not None:
            response = self._request(
                "GET",
                "/v1/instances",
                params={"label_selector": selector, "page": str(page), "per_page": "100"},
                what=f"list instances of cluster {cluster_id!r}",
            )
            data = response.json()
            out.extend(self._instance(raw) for raw in data.get("instances") or [])
            next_page = ((data.get("meta") or {}).get("pagination") or {}).get("next_page")
            page = int(next_page) if next_page else None
        return out

    def delete(self, instance_id: str) -> None:
        native = self._native_id(instance_id)
        response = self._request(
            "DELETE",
            f"/v1/instances/{native}",
            what=f"delete instance {instance_id}",
            accept=(404,),
        )
        if response.status_code == 404:
            log.info("instance %s already gone", instance_id)

    def instance_types(self) -> list[InstanceType]:
        """The cloud's catalog. A type the cloud holds only so many of says how many more
        each region can make (`available`, by region): one entry per region then."""
        response = self._request("GET", "/v1/instance-types", what="list instance types")
        out: list[InstanceType] = []
        for raw in response.json().get("instance_types") or []:
            kind = InstanceType(
                provider=self.name,
                name=str(raw["name"]),
                vcpu=float(raw["vcpu"]),
                memory_gib=float(raw["memory_gib"]),
                arch=str(raw["arch"]),
                regions=[str(r) for r in raw.get("regions") or []],
                price_eur_per_hour=raw.get("price_eur_per_hour"),
            )
            counts = raw.get("available")
            if not isinstance(counts, dict):
                out.append(kind)
                continue
            out += [
                kind.model_copy(
                    update={"regions": [region], "available": int(counts.get(region, 0))}
                )
                for region in kind.regions
            ]
        return out
