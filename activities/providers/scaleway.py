"""Scaleway Instances through the official `scaleway` SDK (Instance v1 + Block Storage v1).

The Scaleway API's traps, handled here:

- Create has no user-data field: the server is created STOPPED, its `cloud-init` user data
  is set (`set_server_user_data`), and only then is it powered on — cloud-init reads user
  data at first boot, so the order matters.
- No idempotency token: every VM carries the tag `cloudburst.io/nodeclaim=<claim>` and
  create first looks it up (`list_servers_all(tags=[...])`); a server found stopped (an
  interrupted create) gets its user data and is powered on rather than made again. Two
  concurrent creates for one claim could both make one: the claim workflow never runs two.
- `terminate` deletes local (`l_ssd`) volumes but only DETACHES `sbs_volume` block volumes:
  delete notes the server's block volumes, terminates, waits for the server to be gone and
  deletes them through the Block API. A power-on refused for capacity tears the stopped
  server down the same way before the claim moves to its next offering.
- `list_*_all` pages until an empty page; a non-JSON error answer (the edge's 503) surfaces
  as `requests` `JSONDecodeError`: classified as an outage.

Tags are `key=value` strings with the canonical `cloudburst.io/...` keys; they are mapped
back into `Instance.labels`. Instance ids are `scaleway/<zone>/<server uuid>`: get and
delete act in the id's zone.

Zones: an offering may land in any zone of `ZONES_BY_REGION` (or the NodeClass zone), never
elsewhere, and `list_owned` (orphan GC, delete by claim label) lists every one of them — a
server in a zone it did not list would outlive its claim unseen.

Errors: `out_of_stock`, `quotas_exceeded`, 503 (and undecodable answers) on create →
capacity; 429 → retryable (Retry-After); 401/403, `invalid_arguments` → fatal; 404 → gone;
outages outside create → retryable. The SDK has no request timeout setting (gap).
"""

from __future__ import annotations

import json
import logging
import time
from typing import ClassVar, NoReturn

import requests
from scaleway import Client
from scaleway.block.v1 import BlockV1API
from scaleway.instance.v1 import Server, ServerAction
from scaleway.instance.v1.custom_api import InstanceUtilsV1API
from scaleway_core.api import ScalewayException
from scaleway_core.validations.string_validation import is_zone

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
from api.nodeclass import ScalewayClass

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://api.scaleway.com"
# The SDK validates an access key's shape but never sends it (auth is X-Auth-Token).
PLACEHOLDER_ACCESS_KEY = "SCWXXXXXXXXXXXXXXXXX"
USER_DATA_KEY = "cloud-init"
TERMINATE_WAIT_S = 180.0
_AUTH_FIX = "check the secret key in the Secret named by NodeClass spec.scaleway.apiKeySecretRef"
_CAPACITY_TYPES = {"out_of_stock", "quotas_exceeded"}
# Scaleway's Instance zones, by region: the only place they are listed. `_zone` creates only
# in these (or the NodeClass zone) and `list_owned` lists all of them.
ZONES_BY_REGION: dict[str, tuple[str, ...]] = {
    "fr-par": ("fr-par-1", "fr-par-2", "fr-par-3"),
    "nl-ams": ("nl-ams-1", "nl-ams-2", "nl-ams-3"),
    "pl-waw": ("pl-waw-1", "pl-waw-2", "pl-waw-3"),
}
_STATES = {
    "starting": InstanceState.PENDING,
    "locked": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    # Our create powers a server on before returning it: stopped afterwards means it was
    # stopped by someone (or never came up) and will not become a node.
    "stopped": InstanceState.TERMINATED,
    "stopped_in_place": InstanceState.TERMINATED,
}


def _region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def _retry_after(response: requests.Response | None) -> float | None:
    value = response.headers.get("Retry-After") if response is not None else None
    try:
        return None if value is None else max(0.0, float(value))
    except ValueError:
        return None


class ScalewayProvider(Provider):
    """`credential`: the secret key, or JSON `{"access_key", "secret_key"}` (see the block)."""

    name: ClassVar[str] = "scaleway"
    block: ScalewayClass

    def __init__(
        self, block: ScalewayClass, credential: str | None, namespace: str | None = None
    ) -> None:
        super().__init__(block, credential, namespace)
        access_key, secret_key = self._keys(credential)
        self.endpoint = (block.endpoint or DEFAULT_ENDPOINT).rstrip("/")
        client = Client(
            access_key=access_key,
            secret_key=secret_key,
            api_url=self.endpoint,
            default_zone=block.zone,
            default_region=_region_of(block.zone),
            default_project_id=block.project_id,
        )
        try:
            client.validate_settings()
        except ValueError as exc:
            raise FatalError(
                self.name,
                f"invalid settings ({exc})",
                "check NodeClass spec.scaleway.zone (like fr-par-1), projectID (the project's "
                "UUID) and endpoint",
            ) from None
        try:
            client.validate_credentials()
        except ValueError:
            raise FatalError(
                self.name,
                "the API key is malformed (the secret key must be a UUID, an access key "
                "SCW + 17 characters)",
                _AUTH_FIX,
            ) from None
        self.instance = InstanceUtilsV1API(client, bypass_validation=True)
        self.block_api = BlockV1API(client, bypass_validation=True)

    def _keys(self, credential: str | None) -> tuple[str, str]:
        if not credential:
            raise FatalError(self.name, "no API key", _AUTH_FIX)
        value = credential.strip()
        if value.startswith("{"):
            try:
                doc = json.loads(value)
            except json.JSONDecodeError:
                raise FatalError(
                    self.name, "the API key Secret is not valid JSON", _AUTH_FIX
                ) from None
            if not isinstance(doc, dict) or not doc.get("secret_key"):
                raise FatalError(self.name, 'the API key JSON lacks "secret_key"', _AUTH_FIX)
            return str(doc.get("access_key") or PLACEHOLDER_ACCESS_KEY), str(doc["secret_key"])
        return PLACEHOLDER_ACCESS_KEY, value

    # ---- errors ----------------------------------------------------------------------------

    def _raise(self, exc: Exception, what: str, *, creating: bool = False) -> NoReturn:
        if isinstance(exc, requests.exceptions.JSONDecodeError):
            # An error answer that is not JSON: the edge's 503 page (an outage).
            detail = f"{what}: the API answered an undecodable error page (outage)"
            if creating:
                raise CapacityError(self.name, detail) from exc
            raise RetryableError(self.name, detail) from exc
        if isinstance(exc, requests.exceptions.Timeout):
            raise RetryableError(self.name, f"{what}: timed out") from exc
        if isinstance(exc, requests.exceptions.RequestException):
            raise RetryableError(self.name, f"{what}: cannot reach {self.endpoint}") from exc
        if not isinstance(exc, ScalewayException):
            raise exc
        status = exc.status_code or 0
        try:
            body = exc.response.json()
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        kind = str(body.get("type") or "")
        message = str(body.get("message") or exc.response.reason or "")
        detail = f"{what}: HTTP {status} {kind}: {message}"
        if status == 429:
            raise RetryableError(self.name, detail, _retry_after(exc.response)) from exc
        if kind in _CAPACITY_TYPES or status in (502, 503, 504):
            if creating:
                raise CapacityError(self.name, detail) from exc
            raise RetryableError(self.name, detail) from exc
        if status == 401 or kind in ("denied_authentication", "authentication"):
            raise FatalError(self.name, detail, _AUTH_FIX) from exc
        if status == 403:
            raise FatalError(
                self.name,
                detail,
                f"the API key lacks permission on project {self.block.project_id} "
                f"(InstancesFullAccess, BlockStorageFullAccess): {_AUTH_FIX}",
            ) from exc
        if status in (400, 422) or kind in ("invalid_arguments", "invalid_request_error"):
            fields = [
                str(d.get("argument_name"))
                for d in body.get("details") or []
                if isinstance(d, dict) and d.get("argument_name")
            ] + [str(f) for f in (body.get("fields") or {})]
            fix = (
                f"fix {', '.join(fields)} (NodeClass spec.scaleway.zone/image/securityGroup, "
                "the offering's instance type)"
                if fields
                else "the request was refused as invalid: check NodeClass spec.scaleway"
            )
            raise FatalError(self.name, detail, fix) from exc
        if status >= 500:
            raise RetryableError(self.name, detail) from exc
        raise FatalError(
            self.name, detail, f"check NodeClass spec.scaleway (endpoint {self.endpoint})"
        )

    @staticmethod
    def _not_found(exc: Exception) -> bool:
        return isinstance(exc, ScalewayException) and exc.status_code == 404

    # ---- mapping ---------------------------------------------------------------------------

    def zones(self) -> list[str]:
        """Every zone `create` may use: the NodeClass zone first, then `ZONES_BY_REGION`."""
        known = [z for zones in ZONES_BY_REGION.values() for z in zones]
        return [self.block.zone, *(z for z in known if z != self.block.zone)]

    def _zone(self, spec: InstanceSpec) -> str:
        zone = self._pick_zone(spec)
        if zone not in self.zones():
            # list_owned would never see a server there: refuse rather than leak it.
            raise FatalError(
                self.name,
                f"zone {zone!r} (offering region {spec.region!r}) is not a known Scaleway zone",
                f"use an offering in one of {', '.join(self.zones())}, or add the zone to "
                "ZONES_BY_REGION in activities/providers/scaleway.py",
            )
        return zone

    def _pick_zone(self, spec: InstanceSpec) -> str:
        if spec.zone:
            return spec.zone
        region = spec.region
        if not region:
            return self.block.zone
        if is_zone(region):
            return region
        if _region_of(self.block.zone) == region:
            return self.block.zone
        return f"{region}-{self.block.zone.rsplit('-', 1)[1]}"

    @staticmethod
    def _tags(spec: InstanceSpec) -> list[str]:
        labels = spec.vm_labels()
        return [f"{k}={v}" for k, v in sorted(labels.items())]

    def _instance(self, server: Server) -> Instance:
        zone = str(server.zone)
        labels = dict(t.split("=", 1) for t in server.tags or [] if "=" in t)
        public = server.public_ip.address if server.public_ip is not None else None
        if public is None and server.public_ips:
            public = server.public_ips[0].address
        return Instance(
            id=instance_id(self.name, zone, str(server.id)),
            name=str(server.name),
            provider=self.name,
            region=_region_of(zone),
            instance_type=str(server.commercial_type),
            state=_STATES.get(str(server.state), InstanceState.PENDING),
            labels=labels,
            created_at=server.creation_date,
            private_ip=server.private_ip or public,
            public_ip=public,
        )

    def _split(self, value: str) -> tuple[str, str]:
        try:
            provider, zone, native = split_instance_id(value)
        except ValueError as exc:
            raise FatalError(self.name, f"malformed instance id {value!r}") from exc
        if provider != self.name or not is_zone(zone):
            raise FatalError(self.name, f"{value!r} is not a scaleway instance id")
        return zone, native

    def _get_server(self, zone: str, sid: str, what: str) -> Server | None:
        try:
            return self.instance.get_server(server_id=sid, zone=zone).server
        except Exception as exc:
            if self._not_found(exc):
                return None
            self._raise(exc, what)

    # ---- Provider --------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> Instance:
        zone = self._zone(spec)
        what = f"create server {spec.name!r} ({spec.instance_type} in {zone})"
        claim_tag = f"{L.NODECLAIM}={spec.name}"
        try:
            found = self.instance.list_servers_all(
                zone=zone, tags=[claim_tag], project=self.block.project_id
            )
        except Exception as exc:
            self._raise(exc, f"{what}: look for an earlier server of this claim", creating=True)
        server: Server | None = None
        for candidate in found:
            if claim_tag not in (candidate.tags or []):
                continue
            if f"{L.CLUSTER}={spec.cluster_id}" not in (candidate.tags or []):
                raise FatalError(
                    self.name,
                    f"{what}: a server tagged for this claim belongs to another cluster",
                    "delete the conflicting server in the Scaleway project",
                )
            if str(candidate.state) == "stopping":
                raise RetryableError(
                    self.name, f"{what}: an earlier server of this claim is terminating; retry"
                )
            server = candidate
            log.info("server for %s already exists (%s): resuming", spec.name, server.id)
            break
        if server is None:
            try:
                server = self.instance.create_server(
                    zone=zone,
                    commercial_type=spec.instance_type,
                    name=spec.name,
                    image=spec.image or self.block.image or "ubuntu_jammy",
                    tags=self._tags(spec),
                    project=self.block.project_id,
                    dynamic_ip_required=True,
                    security_group=self.block.security_group,
                    placement_group=self.block.placement_group,
                ).server
            except Exception as exc:
                self._raise(exc, what, creating=True)
        if str(server.state) == "stopped":
            self._boot(server, zone, spec.user_data, what)
            server = self._get_server(zone, server.id, what) or server
        instance = self._instance(server)
        log.info("created %s as %s", spec.name, instance.id)
        return instance

    def _boot(self, server: Server, zone: str, user_data: str, what: str) -> None:
        """User data first, then power on (cloud-init reads it at first boot)."""
        try:
            self.instance.set_server_user_data(
                server_id=server.id, key=USER_DATA_KEY, content=user_data.encode(), zone=zone
            )
        except Exception as exc:
            self._raise(exc, f"{what}: set user data", creating=True)
        try:
            self.instance.server_action(server_id=server.id, zone=zone, action=ServerAction.POWERON)
        except Exception as exc:
            try:
                self._raise(exc, f"{what}: power on", creating=True)
            except CapacityError:
                # No slot for it: do not leave a stopped server (and its volumes) behind
                # while the claim moves to another offering.
                try:
                    self._terminate(zone, server.id, f"{what}: clean up after power-on failed")
                except (RetryableError, FatalError, CapacityError) as cleanup:
                    log.warning("could not clean up server %s: %s", server.id, cleanup)
                raise

    def get(self, instance_id: str) -> Instance | None:
        zone, sid = self._split(instance_id)
        server = self._get_server(zone, sid, f"get server {instance_id}")
        return None if server is None else self._instance(server)

    def list_owned(self, cluster_id: str) -> list[Instance]:
        """Our servers in every zone `create` may use; any zone failing fails the listing
        (a partial answer would make a delete by claim label think the server gone)."""
        tags = [f"{L.MANAGED}=true", f"{L.CLUSTER}={cluster_id}"]
        out: list[Instance] = []
        for zone in self.zones():
            try:
                servers = self.instance.list_servers_all(
                    zone=zone, tags=tags, project=self.block.project_id
                )
            except Exception as exc:
                self._raise(exc, f"list servers of cluster {cluster_id!r} in {zone}")
            out += [self._instance(s) for s in servers if all(t in (s.tags or []) for t in tags)]
        return out

    def delete(self, instance_id: str) -> None:
        zone, sid = self._split(instance_id)
        self._terminate(zone, sid, f"delete server {instance_id}")

    def _terminate(self, zone: str, sid: str, what: str) -> None:
        """Terminate, wait until the server is gone, then delete its detached block volumes."""
        server = self._get_server(zone, sid, what)
        if server is None:
            log.info("server %s/%s already gone", zone, sid)
            return
        block_volumes = [
            v.id
            for v in (server.volumes or {}).values()
            if v is not None and str(v.volume_type) == "sbs_volume"
        ]
        if str(server.state) != "stopping":
            try:
                self.instance.server_action(server_id=sid, zone=zone, action=ServerAction.TERMINATE)
            except Exception as exc:
                if not self._not_found(exc):
                    self._raise(exc, what)
        deadline = time.monotonic() + TERMINATE_WAIT_S
        delay = 0.1
        while self._get_server(zone, sid, what) is not None:
            if time.monotonic() > deadline:
                raise RetryableError(
                    self.name, f"{what}: still terminating after {TERMINATE_WAIT_S:g}s"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 2.0)
        for vid in block_volumes:
            self._delete_volume(zone, vid, deadline, what)

    def _delete_volume(self, zone: str, vid: str, deadline: float, what: str) -> None:
        delay = 0.1
        while True:
            try:
                self.block_api.delete_volume(volume_id=vid, zone=zone)
                log.info("deleted detached block volume %s/%s", zone, vid)
                return
            except Exception as exc:
                if self._not_found(exc):
                    return
                in_use = isinstance(exc, ScalewayException) and exc.status_code in (409, 412)
                if not in_use or time.monotonic() > deadline:
                    self._raise(exc, f"{what}: delete block volume {vid}")
            time.sleep(delay)  # still detaching
            delay = min(delay * 1.5, 2.0)

    def instance_types(self) -> list[InstanceType]:
        zone = self.block.zone
        try:
            response = self.instance.list_servers_types(zone=zone)
        except Exception as exc:
            self._raise(exc, f"list server types in {zone}")
        out: list[InstanceType] = []
        for name, t in sorted((response.servers or {}).items()):
            if t.gpu:
                continue
            arch = str(t.arch)
            out.append(
                InstanceType(
                    provider=self.name,
                    name=name,
                    vcpu=float(t.ncpus),
                    memory_gib=float(t.ram) / 2**30,
                    arch="arm64" if arch in ("arm", "arm64") else "x86_64",
                    regions=[_region_of(zone)],
                    price_eur_per_hour=float(t.hourly_price) if t.hourly_price else None,
                )
            )
        return out


__all__ = ["PLACEHOLDER_ACCESS_KEY", "ScalewayProvider"]
