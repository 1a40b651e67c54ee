"""Tailscale for burst nodes: per-node auth keys and device removal, through the Tailscale API.

With `tailscale.oauthClientSecretRef` (the OAuth mode) nothing reusable ever reaches a VM:
`prepare_bootstrap` mints one auth key per claim — single-use, ephemeral, pre-authorized,
tagged, expiring with the join token — and puts it into the first-boot script Secret only;
`remove_tailnet_device` removes the node's device when the claim is deleted. The calls:

    POST   {api}/api/v2/oauth/token                  client credentials -> bearer (1 h)
    POST   {api}/api/v2/tailnet/{tailnet}/keys       {"capabilities": {"devices": {"create":
           {"reusable": false, "ephemeral": true, "preauthorized": true, "tags": [...]}}},
            "expirySeconds": N, "description": ...}   -> {"id", "key", "expires", ...}
    DELETE {api}/api/v2/tailnet/{tailnet}/keys/{id}   a key minted for a script now replaced
    GET    {api}/api/v2/tailnet/{tailnet}/devices     find the node's device (hostname + tags)
    DELETE {api}/api/v2/device/{id}

The OAuth client needs the `auth_keys` and `devices:core` scopes and may only mint keys with
the tags it owns. Errors: 401/403/400 are `InvalidConfiguration` (the client, its scopes or
the tags need fixing), 429/5xx and unreachable are retryable; no message carries a secret.
With `authKeySecretRef` (the seed's reusable key, weaker) the key is read from its Secret and
there is no API access: devices go when their ephemeral setting says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx
from kubernetes import client as k8s
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.claim_authority import own_claim, refused
from activities.credentials import read_secret_value
from api._base import SecretKeyRef
from api.errors import INVALID_CONFIGURATION
from api.messages import TailnetDeviceRef, TailnetDeviceRemoval
from api.nodeclass import TailscaleSettings
from cluster.tenancy import Tenancy

log = logging.getLogger(__name__)

DEFAULT_API = "https://api.tailscale.com"
TAILSCALE_API_ERROR = "TailscaleApiError"
TIMEOUT_S = 15.0
# The API refuses a longer key description.
MAX_DESCRIPTION = 50


@dataclass(frozen=True)
class MintedKey:
    id: str
    key: str = field(repr=False)
    expires_at: datetime | None = None


def reusable_key(core: k8s.CoreV1Api, namespace: str, settings: TailscaleSettings) -> str:
    """The seed's reusable auth key, from the NodeClass's Secret."""
    assert settings.auth_key_secret_ref is not None
    return read_secret_value(core, namespace, settings.auth_key_secret_ref)


def open_api(core: k8s.CoreV1Api, namespace: str, settings: TailscaleSettings) -> TailscaleApi:
    """A Tailscale API client with the NodeClass's OAuth client (read from its Secret)."""
    ref = settings.oauth_client_secret_ref
    assert ref is not None
    client_id = read_secret_value(
        core, namespace, SecretKeyRef(name=ref.name, key=ref.client_id_key)
    )
    client_secret = read_secret_value(
        core, namespace, SecretKeyRef(name=ref.name, key=ref.client_secret_key)
    )
    return TailscaleApi(
        settings.api_endpoint,
        client_id.strip(),
        client_secret.strip(),
        tailnet=settings.tailnet or "-",
        where=f"Secret {namespace}/{ref.name} (NodeClass spec.tailscale.oauthClientSecretRef)",
    )


class TailscaleApi:
    """The few calls we make, with a bearer token from the OAuth client (fetched once)."""

    def __init__(
        self,
        endpoint: str | None,
        client_id: str,
        client_secret: str,
        *,
        tailnet: str = "-",
        where: str = "the OAuth client",
    ) -> None:
        self.base = (endpoint or DEFAULT_API).rstrip("/")
        self._client_id = client_id
        self._client_secret = client_secret
        self._tailnet = quote(tailnet, safe="")
        self._where = where
        self._token: str | None = None
        # No redirects: a credential goes to the allowed endpoint and nowhere else.
        self._http = httpx.Client(base_url=self.base, timeout=TIMEOUT_S, follow_redirects=False)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TailscaleApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- calls ---------------------------------------------------------------------------

    def mint_auth_key(self, tags: list[str], expiry_s: int, description: str) -> MintedKey:
        body = {
            "capabilities": {
                "devices": {
                    "create": {
                        "reusable": False,
                        "ephemeral": True,
                        "preauthorized": True,
                        "tags": tags,
                    }
                }
            },
            "expirySeconds": max(1, expiry_s),
            "description": description[:MAX_DESCRIPTION],
        }
        data = self._call("POST", f"/api/v2/tailnet/{self._tailnet}/keys", "mint an auth key", body)
        key, key_id = data.get("key"), data.get("id")
        if not isinstance(key, str) or not key or not isinstance(key_id, str) or not key_id:
            raise ApplicationError(
                f"Tailscale API at {self.base} answered a key without `id` and `key`",
                type=TAILSCALE_API_ERROR,
            )
        return MintedKey(id=key_id, key=key, expires_at=_time(data.get("expires")))

    def revoke_key(self, key_id: str) -> None:
        self._call(
            "DELETE",
            f"/api/v2/tailnet/{self._tailnet}/keys/{quote(key_id, safe='')}",
            f"revoke auth key {key_id}",
            missing_ok=True,
        )

    def devices(self) -> list[dict[str, Any]]:
        data = self._call("GET", f"/api/v2/tailnet/{self._tailnet}/devices", "list devices")
        listed = data.get("devices")
        return [d for d in listed if isinstance(d, dict)] if isinstance(listed, list) else []

    def delete_device(self, device_id: str) -> None:
        self._call(
            "DELETE",
            f"/api/v2/device/{quote(device_id, safe='')}",
            f"remove device {device_id}",
            missing_ok=True,
        )

    # ---- plumbing ------------------------------------------------------------------------

    def _access_token(self) -> str:
        if self._token is None:
            try:
                response = self._http.post(
                    "/api/v2/oauth/token",
                    data={
                        "client_id": self._client_id,
                        "client_secret": self._client_secret,
                        "grant_type": "client_credentials",
                    },
                )
            except httpx.TransportError as exc:
                raise self._unreachable("get an access token", exc) from None
            if response.status_code != 200:
                # The body is not quoted: an OAuth error may echo what was sent.
                raise self._error(response, "get an access token", quote_body=False)
            token = _json(response).get("access_token")
            if not isinstance(token, str) or not token:
                raise ApplicationError(
                    f"Tailscale API at {self.base} answered the token request without a token",
                    type=TAILSCALE_API_ERROR,
                )
            self._token = token
        return self._token

    def _call(
        self,
        method: str,
        path: str,
        what: str,
        body: dict[str, Any] | None = None,
        *,
        missing_ok: bool = False,
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self._access_token()}"}
        try:
            response = self._http.request(method, path, json=body, headers=headers)
        except httpx.TransportError as exc:
            raise self._unreachable(what, exc) from None
        if response.status_code == 404 and missing_ok:
            return {}
        if response.status_code >= 300:
            raise self._error(response, what, quote_body=True)
        return _json(response) if response.content else {}

    def _unreachable(self, what: str, exc: Exception) -> ApplicationError:
        return ApplicationError(
            f"Tailscale API: {what}: cannot reach {self.base} ({type(exc).__name__})",
            type=TAILSCALE_API_ERROR,
        )

    def _error(self, response: httpx.Response, what: str, *, quote_body: bool) -> ApplicationError:
        status = response.status_code
        said = _message(response) if quote_body else ""
        detail = f"Tailscale API: {what}: HTTP {status}{f': {said}' if said else ''}"
        if status in (401, 403):
            return ApplicationError(
                f"{detail} — check the OAuth client in {self._where}: its id and secret, the "
                "auth_keys and devices:core scopes, and that it owns the tags",
                type=INVALID_CONFIGURATION,
                non_retryable=True,
            )
        if status in (400, 404, 422):
            return ApplicationError(
                f"{detail} — check NodeClass spec.tailscale (tags, tailnet) and the OAuth client "
                f"in {self._where}",
                type=INVALID_CONFIGURATION,
                non_retryable=True,
            )
        return ApplicationError(detail, type=TAILSCALE_API_ERROR)


class TailscaleActivities:
    """`remove_tailnet_device`; one instance per worker."""

    def __init__(self, api_client: k8s.ApiClient, tenancy: Tenancy | None = None) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._tenancy = tenancy or Tenancy()

    def activities(self) -> list[Callable[..., Any]]:
        return [self.remove_tailnet_device]

    @activity.defn(name="remove_tailnet_device")
    def remove_tailnet_device(self, input: TailnetDeviceRef) -> TailnetDeviceRemoval:
        """Remove the claim's node from the tailnet: every device whose hostname is the node
        name and that carries the NodeClass's tags (so nobody else's device of that name).
        Idempotent: a device already gone is fine. Only the claim's own node's."""
        if own_claim(input.node_name) != (input.namespace, input.node_name):
            raise refused(f"the activity runs for another claim than {input.node_name}")
        settings = input.node_class.tailscale
        if settings is None:
            return TailnetDeviceRemoval(skipped="the NodeClass has no Tailscale settings")
        if not settings.minted:
            return TailnetDeviceRemoval(
                skipped="reusable-key mode (authKeySecretRef): no API access to remove devices"
            )
        self._tenancy.require(input.namespace, input.node_class, services=("tailscale",))
        tags = set(settings.tags or [])
        removed: list[str] = []
        with open_api(self._core, input.namespace, settings) as api:
            for device in api.devices():
                device_id = device.get("nodeId") or device.get("id")
                if (
                    isinstance(device_id, str)
                    and device.get("hostname") == input.node_name
                    and tags <= set(device.get("tags") or [])
                ):
                    api.delete_device(device_id)
                    removed.append(device_id)
        if removed:
            log.info("removed tailnet device(s) %s of node %s", ", ".join(removed), input.node_name)
        return TailnetDeviceRemoval(removed=removed)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _message(response: httpx.Response) -> str:
    text = _json(response).get("message")
    if not isinstance(text, str):
        return ""
    return "".join(c for c in text if c.isprintable())[:200]


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
