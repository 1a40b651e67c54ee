"""The `plugin` provider: a provider Cloudburst does not ship, over the plug-in contract.

The plug-in is an HTTP server at NodeClass `spec.plugin.endpoint` that serves the five
operations of `api/plugin.py` under `/v1` (docs/providers.md, "Plug-in providers"). This
module is its client, written like the cloud modules: every answer is read through the
contract's models and every failure leaves here as a typed error.

- Create is idempotent by name at the plug-in (a second create of a name answers the
  instance it has); the answer is checked to be this claim's (its labels name the claim and
  the cluster), and one still stopping from an earlier life is retried once it is gone.
- The error body's `kind` decides (capacity / retryable / fatal, `notFound` on 404); an
  answer without one (a proxy's) is classified by status. A capacity answer to anything
  but a create is retryable: only a create has a next offering to go to. 401 and 403 are
  fatal and name the token Secret. A 404 without the contract's body means the endpoint
  serves no contract v1, never that an instance is gone.
- Transport failures (timeouts, refused connections) are retryable: a create that timed
  out may have made the machine, and its retry finds it by name. Redirects are not
  followed, so the token goes nowhere but the allowed endpoint.
- An answer that is not contract v1 (not JSON, a field missing or malformed) is fatal and
  says which field, never with the answer's values (they are the plug-in's, unchecked).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, ClassVar, TypeVar
from urllib.parse import quote

import httpx
from pydantic import ValidationError

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
from api import plugin as contract
from api.nodeclass import PluginClass

log = logging.getLogger(__name__)

# A create may power a machine on before it answers; the contract asks for an answer within
# 60 s (a slower plug-in answers `pending` and carries on in the background).
TIMEOUT = httpx.Timeout(65.0, connect=5.0)
USER_AGENT = f"cloudburst-plugin-client/{contract.VERSION}"
_ENDPOINT_FIX = "check NodeClass spec.plugin.endpoint (the plug-in's base URL, without /v1)"
_CONTRACT_FIX = (
    "the plug-in must answer contract v1 (docs/providers.md, Plug-in providers; "
    "api/plugin_contract.schema.json)"
)
_AUTH_FIX = "check the token in the Secret named by NodeClass spec.plugin.tokenSecretRef"

Model = TypeVar("Model", bound=contract.ContractModel)


class PluginProvider(Provider):
    """`credential` is the bearer token (None: the plug-in asks for none)."""

    name: ClassVar[str] = "plugin"
    block: PluginClass

    def __init__(
        self, block: PluginClass, credential: str | None, namespace: str | None = None
    ) -> None:
        super().__init__(block, credential, namespace)
        if not block.endpoint:
            raise FatalError(self.name, "no plug-in endpoint configured", _ENDPOINT_FIX)
        self.endpoint = block.endpoint.rstrip("/")
        self._lock = threading.Lock()
        self._http: httpx.Client | None = None

    # ---- Provider --------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> Instance:
        region = spec.region or self.block.region
        what = f"create instance {spec.name!r} ({spec.instance_type} in {region or 'default'})"
        try:
            body = contract.CreateInstanceRequest(
                name=spec.name,
                cluster_id=spec.cluster_id,
                node_pool=spec.node_pool,
                region=region or None,
                zone=spec.zone,
                instance_type=spec.instance_type,
                capacity_type="spot" if spec.capacity_type == "spot" else "on-demand",
                image=spec.image,
                labels=spec.vm_labels(),
                user_data=spec.user_data,
            )
        except ValidationError as exc:
            # What we would send is not contract v1 (a region or type the contract cannot
            # carry): no plug-in could accept it. The values stay out (user data is secret).
            raise FatalError(
                self.name,
                f"{what}: the request is not contract v1 ({_fields(exc)})",
                "fix the offering's region / instance type, or NodeClass spec.plugin.region",
            ) from None
        response = self._request(
            "POST", "/instances", what=what, json=body.model_dump(mode="json", exclude_none=True)
        )
        instance = self._read(response, contract.Instance, what)
        owner = instance.labels
        if (
            instance.name != spec.name
            or owner.get(L.NODECLAIM) != spec.name
            or owner.get(L.CLUSTER) != spec.cluster_id
        ):
            raise FatalError(
                self.name,
                f"{what}: the plug-in answered instance {instance.id!r} named "
                f"{instance.name!r} of claim {owner.get(L.NODECLAIM)!r} in cluster "
                f"{owner.get(L.CLUSTER)!r}, not this claim's",
                f"{_CONTRACT_FIX}: create answers the instance of the name asked for, with the "
                "labels it was given",
            )
        if instance.state is contract.InstanceState.STOPPING:
            raise RetryableError(
                self.name,
                f"{what}: an earlier instance of this name is stopping; retry once it is gone",
            )
        result = self._instance(instance)
        log.info("plug-in made %s as %s", spec.name, result.id)
        return result

    def get(self, instance_id: str) -> Instance | None:
        native = self._native_id(instance_id)
        what = f"get instance {instance_id}"
        response = self._request("GET", f"/instances/{quote(native, safe='')}", what=what)
        if response is None:
            return None
        return self._instance(self._read(response, contract.Instance, what))

    def list_owned(self, cluster_id: str) -> list[Instance]:
        what = f"list instances of cluster {cluster_id!r}"
        response = self._request("GET", "/instances", what=what, params={"cluster": cluster_id})
        listed = self._read(response, contract.InstanceList, what)
        # Only this cluster's, whatever the plug-in's filter did: garbage collection deletes
        # what this returns.
        return [
            self._instance(i) for i in listed.instances if i.labels.get(L.CLUSTER) == cluster_id
        ]

    def delete(self, instance_id: str) -> None:
        native = self._native_id(instance_id)
        what = f"delete instance {instance_id}"
        response = self._request("DELETE", f"/instances/{quote(native, safe='')}", what=what)
        if response is None:
            log.info("instance %s already gone", instance_id)

    def instance_types(self) -> list[InstanceType]:
        what = "list instance types"
        response = self._request("GET", "/instance-types", what=what)
        listed = self._read(response, contract.InstanceTypeList, what)
        return [
            InstanceType(
                provider=self.name,
                name=t.name,
                vcpu=t.vcpu,
                memory_gib=t.memory_gib,
                arch=t.arch,
                regions=list(t.regions),
                price_eur_per_hour=t.price_eur_per_hour,
                available=t.available,
            )
            for t in listed.instance_types
        ]

    def close(self) -> None:
        with self._lock:
            if self._http is not None:
                self._http.close()
                self._http = None

    # ---- HTTP ------------------------------------------------------------------------------

    def _client(self) -> httpx.Client:
        """One pooled client per provider object (httpx clients are thread-safe)."""
        with self._lock:
            if self._http is None:
                headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
                if self.credential:
                    headers["Authorization"] = f"Bearer {self.credential}"
                if self.namespace:
                    # The tenant this token is a credential of: the plug-in serves it that
                    # namespace's instances alone (api/plugin.py).
                    headers[contract.NAMESPACE_HEADER] = self.namespace
                self._http = httpx.Client(
                    base_url=f"{self.endpoint}{contract.PREFIX}",
                    headers=headers,
                    timeout=TIMEOUT,
                    follow_redirects=False,
                    # Loading the CA bundle costs ~30 ms per client; plain http needs none.
                    verify=self.endpoint.startswith("https://"),
                )
            return self._http

    def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        params: dict[str, str] | None = None,
        json: dict[str, Any] | None = None,
    ) -> httpx.Response | None:
        """One call: the 2xx response, None for the contract's 404 (no such instance), or a
        typed error."""
        try:
            response = self._client().request(method, path, params=params, json=json)
        except httpx.TimeoutException as exc:
            raise RetryableError(
                self.name, f"{what}: {self.endpoint} did not answer in time ({type(exc).__name__})"
            ) from exc
        except httpx.TransportError as exc:
            raise RetryableError(
                self.name, f"{what}: cannot reach {self.endpoint} ({type(exc).__name__}: {exc})"
            ) from exc
        if response.is_success:
            return response
        self._raise_for(response, what, creating=method == "POST")
        return None

    def _raise_for(self, response: httpx.Response, what: str, *, creating: bool) -> None:
        """Return for the contract's 404 (gone); raise the typed error of any other answer."""
        status = response.status_code
        error = _error_body(response)
        kind = error.kind if error is not None else None
        # Without the contract's body, the status's standard phrase: a server that is no
        # plug-in may echo the request (the first-boot script) in its own.
        message = (
            _shortened(error.message)
            if error is not None
            else httpx.codes.get_reason_phrase(status)
        )
        detail = f"{what}: HTTP {status}{f' {kind.value}' if kind else ''}: {message}"
        if status == 404 and kind is contract.ErrorKind.NOT_FOUND:
            return None
        if status in (401, 403):
            fix = (
                _AUTH_FIX
                if status == 401
                else f"the token lacks permission (a token serves the namespaces the plug-in's "
                f"operator gives it; this call is for {self.namespace or 'no namespace'}): "
                f"{_AUTH_FIX}"
            )
            raise FatalError(self.name, detail, fix)
        if kind is contract.ErrorKind.CAPACITY:
            if creating:
                raise CapacityError(self.name, detail)
            raise RetryableError(self.name, detail, retry_after_s=_retry_after(response, error))
        if kind is contract.ErrorKind.RETRYABLE:
            raise RetryableError(self.name, detail, retry_after_s=_retry_after(response, error))
        if kind is contract.ErrorKind.FATAL:
            fix = _shortened(error.fix) if error is not None and error.fix else _CONTRACT_FIX
            raise FatalError(self.name, detail, fix)
        # No contract body (a proxy, a load balancer, a server that is no plug-in): by status.
        if status == 429 or status in (500, 502, 504):
            raise RetryableError(self.name, detail, retry_after_s=_retry_after(response, None))
        if status == 503:
            if creating:
                raise CapacityError(self.name, detail)
            raise RetryableError(self.name, detail, retry_after_s=_retry_after(response, None))
        if 300 <= status < 400:
            raise FatalError(
                self.name,
                f"{detail} (a redirect to {response.headers.get('Location', '?')!r}, not "
                "followed: the token goes to the allowed endpoint only)",
                _ENDPOINT_FIX,
            )
        if status == 404:
            raise FatalError(
                self.name, f"{detail} (no contract v1 at {self.endpoint})", _ENDPOINT_FIX
            )
        if status >= 500:
            raise RetryableError(self.name, detail)
        raise FatalError(self.name, detail, _CONTRACT_FIX)

    # ---- mapping ---------------------------------------------------------------------------

    def _read(self, response: httpx.Response | None, model: type[Model], what: str) -> Model:
        """The answer as `model`, or fatal naming what is wrong with it."""
        if response is None:
            raise FatalError(
                self.name,
                f"{what}: the plug-in answered 404 notFound where a {model.__name__} was due",
                _CONTRACT_FIX,
            )
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            raise FatalError(
                self.name,
                f"{what}: the answer (HTTP {response.status_code}) is not a contract v1 "
                f"{model.__name__}: {_fields(exc)}",
                _CONTRACT_FIX,
            ) from None

    def _instance(self, raw: contract.Instance) -> Instance:
        return Instance(
            id=instance_id(self.name, raw.region, raw.id),
            name=raw.name,
            provider=self.name,
            region=raw.region,
            instance_type=raw.instance_type,
            state=InstanceState(raw.state.value),
            labels=dict(raw.labels),
            created_at=raw.created_at,
            private_ip=raw.private_ip,
            public_ip=raw.public_ip,
            capacity_type=raw.capacity_type,
        )

    def _native_id(self, value: str) -> str:
        try:
            provider, _region, native = split_instance_id(value)
        except ValueError:
            raise FatalError(self.name, f"malformed instance id {value!r}") from None
        if provider != self.name:
            raise FatalError(self.name, f"instance id {value!r} is not a plug-in instance")
        return native


def _error_body(response: httpx.Response) -> contract.PluginError | None:
    """The contract's error body, when the answer carries one."""
    try:
        return contract.ErrorAnswer.model_validate_json(response.content).error
    except ValidationError:
        return None


def _retry_after(response: httpx.Response, error: contract.PluginError | None) -> float | None:
    if error is not None and error.retry_after_seconds is not None:
        return error.retry_after_seconds
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _shortened(text: str, limit: int = 500) -> str:
    """A plug-in's message as it goes into errors and Events: one line, bounded."""
    line = " ".join(text.split())
    return line if len(line) <= limit else f"{line[: limit - 1]}…"


def _fields(exc: ValidationError, limit: int = 3) -> str:
    """Which fields were wrong and how, without their values."""
    problems = [
        f"{'.'.join(str(part) for part in e['loc']) or 'the body'}: {e['msg']}"
        for e in exc.errors(include_input=False, include_url=False)
    ]
    more = len(problems) - limit
    return "; ".join(problems[:limit]) + (f"; and {more} more" if more > 0 else "")
