"""Hetzner Cloud through the official `hcloud` client.

- Create is idempotent by name: server names are unique per project, so a retry after a lost
  answer gets `uniqueness_error`; the server of that name is then fetched and returned when
  its labels say it is this claim's (cluster + claim), refused otherwise.
- Labels are the canonical `cloudburst.io/...` keys as they are (Hetzner allows a prefix).
- User data goes as `user_data` (cloud-init; Hetzner's limit is 32 KiB, checked up front).
- Owned VMs: `servers.get_all(label_selector="cloudburst.io/managed=true,cloudburst.io/cluster=<id>")`.
- Errors by `APIException.code` (Hetzner Cloud API's error codes): `resource_unavailable`,
  `resource_limit_exceeded`, `placement_error`, `unavailable`/503 → capacity (next offering);
  `rate_limit_exceeded` → retryable; `unauthorized`, `forbidden`, `invalid_input` → fatal;
  `not_found` → gone. Outages during get/list/delete are retryable rather than capacity.
- hcloud retries `rate_limit_exceeded`, `conflict`, 502/504 and timeouts itself (5 times,
  exponential backoff up to 60 s); version 2.27 has no constructor option for that, so it is
  left in place and what still fails is classified. Actions are not waited on (the claim
  polls `get`), so `poll_interval` does not matter; it is kept short all the same.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, ClassVar, NoReturn

import requests
from hcloud import APIException, Client
from hcloud.firewalls import Firewall
from hcloud.images import Image
from hcloud.locations import Location
from hcloud.networks import Network
from hcloud.server_types import ServerType
from hcloud.servers import BoundServer, Server
from hcloud.ssh_keys import SSHKey

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
from api.nodeclass import HetznerClass

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://api.hetzner.cloud/v1"
USER_DATA_LIMIT = 32 * 1024
TIMEOUT_S = (5.0, 30.0)  # connect, read
_AUTH_FIX = "check the API token in the Secret named by NodeClass spec.hetzner.apiTokenSecretRef"
_CAPACITY_CODES = {
    "resource_unavailable",
    "resource_limit_exceeded",
    "placement_error",
    "unavailable",
    "maintenance",
    "service_error",
}
_STATES = {
    "initializing": InstanceState.PENDING,
    "starting": InstanceState.PENDING,
    "migrating": InstanceState.PENDING,
    "rebuilding": InstanceState.PENDING,
    "unknown": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "deleting": InstanceState.STOPPING,
    "off": InstanceState.TERMINATED,
}
_ARCH = {"x86": "x86_64", "arm": "arm64"}


class HetznerProvider(Provider):
    """`credential` is the Hetzner Cloud API token."""

    name: ClassVar[str] = "hetzner"
    block: HetznerClass

    def __init__(
        self, block: HetznerClass, credential: str | None, namespace: str | None = None
    ) -> None:
        super().__init__(block, credential, namespace)
        if not credential:
            raise FatalError(self.name, "no API token", _AUTH_FIX)
        self.endpoint = (block.endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self.client = Client(
            token=credential,
            api_endpoint=self.endpoint,
            application_name="cloudburst",
            poll_interval=0.5,
            timeout=TIMEOUT_S,
        )

    # ---- errors ----------------------------------------------------------------------------

    def _raise(self, exc: Exception, what: str, *, creating: bool = False) -> NoReturn:
        """Map an hcloud / requests error to the typed errors (never with the token)."""
        if isinstance(exc, requests.exceptions.Timeout):
            raise RetryableError(self.name, f"{what}: timed out") from exc
        if isinstance(exc, requests.exceptions.ConnectionError):
            raise RetryableError(self.name, f"{what}: cannot reach {self.endpoint}") from exc
        if not isinstance(exc, APIException):
            raise exc
        code = exc.code
        detail = f"{what}: {code}: {exc.message}"
        if code == "rate_limit_exceeded" or code == 429:
            raise RetryableError(self.name, detail, retry_after_s=30.0) from exc
        if code in _CAPACITY_CODES or code == 503:
            if creating:
                raise CapacityError(self.name, detail) from exc
            raise RetryableError(self.name, detail) from exc
        if code in ("unauthorized", 401):
            raise FatalError(self.name, detail, _AUTH_FIX) from exc
        if code in ("forbidden", "token_readonly", 403):
            raise FatalError(
                self.name, detail, f"the token lacks permission (read & write needed): {_AUTH_FIX}"
            ) from exc
        if code in ("invalid_input", "json_error", 400, 422):
            fields = [
                str(f.get("name"))
                for f in (exc.details or {}).get("fields") or []
                if isinstance(f, dict) and f.get("name")
            ]
            raise FatalError(self.name, detail, self._invalid_fix(fields)) from exc
        if code in ("server_error", "timeout", "conflict", "locked", "bad_gateway") or (
            isinstance(code, int) and code >= 500
        ):
            raise RetryableError(self.name, detail) from exc
        raise FatalError(
            self.name, detail, f"check NodeClass spec.hetzner (endpoint {self.endpoint})"
        )

    @staticmethod
    def _invalid_fix(fields: list[str]) -> str:
        hints = {
            "location": "the offering's region / NodeClass spec.hetzner.location",
            "server_type": "the instance type (from the catalog)",
            "image": "NodeClass spec.hetzner.image",
            "user_data": "the bootstrap script (32 KiB limit)",
            "name": "the claim name (must be a valid hostname)",
            "networks": "NodeClass spec.hetzner.networkID",
            "firewalls": "NodeClass spec.hetzner.firewallIDs",
            "ssh_keys": "NodeClass spec.hetzner.sshKeys",
            "labels": "label values (≤63 chars of [a-zA-Z0-9._-])",
        }
        if not fields:
            return "the request was refused as invalid: check NodeClass spec.hetzner"
        return "fix " + ", ".join(hints.get(f, f) for f in fields)

    # ---- mapping ---------------------------------------------------------------------------

    def _instance(self, server: BoundServer | Server) -> Instance:
        location = server.location.name if server.location is not None else self.block.location
        labels = dict(server.labels or {})
        created: datetime | None = server.created if isinstance(server.created, datetime) else None
        private = server.private_net[0].ip if server.private_net else None
        public = (
            server.public_net.ipv4.ip
            if server.public_net is not None and server.public_net.ipv4 is not None
            else None
        )
        return Instance(
            id=instance_id(self.name, str(location), str(server.id)),
            name=str(server.name),
            provider=self.name,
            region=str(location),
            instance_type=str(server.server_type.name) if server.server_type else "",
            state=_STATES.get(str(server.status), InstanceState.PENDING),
            labels=labels,
            created_at=created,
            private_ip=private or public,
            public_ip=public,
        )

    def _server_id(self, value: str) -> int:
        try:
            provider, _region, native = split_instance_id(value)
            if provider != self.name:
                raise ValueError(provider)
            return int(native)
        except ValueError as exc:
            raise FatalError(self.name, f"{value!r} is not a hetzner instance id") from exc

    # ---- Provider --------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> Instance:
        location = spec.region or self.block.location
        what = f"create server {spec.name!r} ({spec.instance_type} in {location})"
        size = len(spec.user_data.encode())
        if size > USER_DATA_LIMIT:
            raise FatalError(
                self.name,
                f"{what}: user data is {size} bytes, Hetzner accepts {USER_DATA_LIMIT}",
                "shorten the bootstrap script (NodeClass spec.bootstrap) or use a smaller one",
            )
        labels = spec.vm_labels()
        extra: dict[str, Any] = {}
        if self.block.network_id is not None:
            extra["networks"] = [Network(id=self.block.network_id)]
        if self.block.firewall_ids:
            extra["firewalls"] = [Firewall(id=f) for f in self.block.firewall_ids]
        if self.block.ssh_keys:
            extra["ssh_keys"] = [SSHKey(name=k) for k in self.block.ssh_keys]
        try:
            response = self.client.servers.create(
                name=spec.name,
                server_type=ServerType(name=spec.instance_type),
                image=Image(name=spec.image or self.block.image or "ubuntu-24.04"),
                location=Location(name=location),
                user_data=spec.user_data,
                labels=labels,
                start_after_create=True,
                **extra,
            )
        except APIException as exc:
            if exc.code != "uniqueness_error":
                self._raise(exc, what, creating=True)
            return self._existing(spec, what)
        except requests.exceptions.RequestException as exc:
            self._raise(exc, what, creating=True)
        instance = self._instance(response.server)
        log.info("created %s as %s", spec.name, instance.id)
        return instance

    def _existing(self, spec: InstanceSpec, what: str) -> Instance:
        """The name is taken: ours from an earlier attempt (a retry after a lost answer)?"""
        try:
            server = self.client.servers.get_by_name(spec.name)
        except (APIException, requests.exceptions.RequestException) as exc:
            self._raise(exc, f"{what}: look up the existing server")
        if server is None:
            raise RetryableError(self.name, f"{what}: name conflict on a server that is now gone")
        owner = server.labels or {}
        if owner.get(L.NODECLAIM) != spec.name or owner.get(L.CLUSTER) != spec.cluster_id:
            raise FatalError(
                self.name,
                f"{what}: the name is taken by a server that is not this claim's "
                f"(claim label {owner.get(L.NODECLAIM)!r}, cluster {owner.get(L.CLUSTER)!r})",
                "delete or rename the conflicting server in the Hetzner project",
            )
        instance = self._instance(server)
        if instance.state is InstanceState.STOPPING:
            raise RetryableError(
                self.name, f"{what}: an earlier server of this name is being deleted; retry"
            )
        log.info("server %s already exists as %s", spec.name, instance.id)
        return instance

    def get(self, instance_id: str) -> Instance | None:
        sid = self._server_id(instance_id)
        try:
            server = self.client.servers.get_by_id(sid)
        except APIException as exc:
            if exc.code == "not_found":
                return None
            self._raise(exc, f"get server {instance_id}")
        except requests.exceptions.RequestException as exc:
            self._raise(exc, f"get server {instance_id}")
        return self._instance(server)

    def list_owned(self, cluster_id: str) -> list[Instance]:
        selector = f"{L.MANAGED}=true,{L.CLUSTER}={cluster_id}"
        try:
            servers = self.client.servers.get_all(label_selector=selector)
        except (APIException, requests.exceptions.RequestException) as exc:
            self._raise(exc, f"list servers of cluster {cluster_id!r}")
        return [self._instance(s) for s in servers]

    def delete(self, instance_id: str) -> None:
        sid = self._server_id(instance_id)
        try:
            self.client.servers.delete(Server(id=sid))
        except APIException as exc:
            if exc.code == "not_found":
                log.info("server %s already gone", instance_id)
                return
            self._raise(exc, f"delete server {instance_id}")
        except requests.exceptions.RequestException as exc:
            self._raise(exc, f"delete server {instance_id}")

    def instance_types(self) -> list[InstanceType]:
        try:
            types = self.client.server_types.get_all()
        except (APIException, requests.exceptions.RequestException) as exc:
            self._raise(exc, "list server types")
        out: list[InstanceType] = []
        for t in types:
            regions = [
                str(loc.location.name)
                for loc in t.locations or []
                if loc.location is not None and loc.deprecation is None and loc.available
            ]
            prices: dict[str, float] = {}
            for p in t.prices or []:
                try:
                    prices[str(p["location"])] = float(p["price_hourly"]["net"])
                except (KeyError, TypeError, ValueError):
                    continue
            price = prices.get(self.block.location)
            if price is None and prices:
                price = min(prices.values())
            out.append(
                InstanceType(
                    provider=self.name,
                    name=str(t.name),
                    vcpu=float(t.cores or 0),
                    memory_gib=float(t.memory or 0),
                    arch=_ARCH.get(str(t.architecture), str(t.architecture)),
                    regions=regions or sorted(prices),
                    price_eur_per_hour=price,
                )
            )
        return out
