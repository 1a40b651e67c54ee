"""The Temporal client the processes share (pydantic payloads, `worker/payload_codec.py`); the
Kubernetes one is `worker/kube_client.py`'s, so that a command reading the cluster alone
does not load Temporal's."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig

from api import search_attributes
from worker.payload_codec import Keyring, KeyringError, data_converter
from worker.settings import Settings

log = logging.getLogger(__name__)


class TemporalConfigError(Exception):
    """A Temporal connection setting that cannot work; the message names the setting."""


def client_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of `Client.connect` (besides the address) that settings decide."""
    # TLS first: an API key that TLS would not protect is refused before its file is read.
    tls = tls_config(settings)
    telemetry = _telemetry()
    options: dict[str, Any] = {
        "namespace": settings.temporal_namespace,
        "api_key": _api_key(settings),
        "tls": tls,
        "data_converter": payload_converter(settings),
        "interceptors": telemetry.client_interceptors() if telemetry else [],
    }
    return options


def payload_converter(settings: Settings) -> DataConverter:
    """The data converter sealing with the configured keyring (`worker/payload_codec.py`)."""
    return data_converter(payload_keyring(settings), settings.payload_accept_unsealed)


def payload_keyring(settings: Settings) -> Keyring | None:
    if settings.payload_keyring_file is None:
        return None
    try:
        return Keyring.from_file(settings.payload_keyring_file)
    except KeyringError as err:
        raise TemporalConfigError(f"CLOUDBURST_PAYLOAD_KEYRING_FILE: {err}") from None


def announce_payload_keys(settings: Settings) -> None:
    """Say at a worker's or trigger's start whether its payloads are sealed."""
    if settings.payload_keyring_file is None:
        log.warning(
            "payloads are not sealed (CLOUDBURST_PAYLOAD_KEYRING_FILE unset): whoever reaches "
            'Temporal may start and signal workflows (docs/security.md, "Payload keys")'
        )
    elif settings.payload_accept_unsealed:
        log.warning(
            "payloads are sealed, and unsealed ones still read (CLOUDBURST_PAYLOAD_ACCEPT_UNSEALED"
            "): turn it off once the workflows started before the keyring have closed"
        )


def _telemetry() -> Any:
    """`worker.telemetry` where this process set telemetry up (a worker, a trigger: only
    they import it), else None: a command's client has no tracing and no runtime of its own,
    and skips loading OpenTelemetry's SDK and exporters."""
    return sys.modules.get("worker.telemetry")


def tls_config(settings: Settings) -> TLSConfig | bool:
    """False, or the TLS config: mTLS client pair, server CA and server name when given.

    With TLS off, a client certificate or an API key is refused: the key would cross the
    network in cleartext (gRPC's `authorization` header) to whoever answers the address."""
    if not settings.tls_enabled():
        if settings.temporal_tls_cert or settings.temporal_tls_key:
            raise TemporalConfigError(
                "CLOUDBURST_TEMPORAL_TLS is false but a client certificate is configured "
                "(CLOUDBURST_TEMPORAL_TLS_CERT / CLOUDBURST_TEMPORAL_TLS_KEY): set "
                "CLOUDBURST_TEMPORAL_TLS=true, or remove the certificate"
            )
        if settings.temporal_api_key or settings.temporal_api_key_file:
            raise TemporalConfigError(
                "CLOUDBURST_TEMPORAL_TLS is false but an API key is configured "
                "(CLOUDBURST_TEMPORAL_API_KEY / CLOUDBURST_TEMPORAL_API_KEY_FILE), and it would "
                "be sent in cleartext: set CLOUDBURST_TEMPORAL_TLS=true (or leave it unset: an "
                "API key turns TLS on), or remove the API key"
            )
        return False
    if (settings.temporal_tls_cert is None) != (settings.temporal_tls_key is None):
        raise TemporalConfigError(
            "set both CLOUDBURST_TEMPORAL_TLS_CERT and CLOUDBURST_TEMPORAL_TLS_KEY, or neither"
        )
    return TLSConfig(
        server_root_ca_cert=_read(settings.temporal_tls_ca, "CLOUDBURST_TEMPORAL_TLS_CA"),
        client_cert=_read(settings.temporal_tls_cert, "CLOUDBURST_TEMPORAL_TLS_CERT"),
        client_private_key=_read(settings.temporal_tls_key, "CLOUDBURST_TEMPORAL_TLS_KEY"),
        domain=settings.temporal_tls_server_name,
    )


async def connect_temporal(settings: Settings, runtime: Runtime | None = None) -> Client:
    """A client for the configured Temporal; workers built on it inherit its interceptors.

    Raises RuntimeError (as `Client.connect` does) when the server cannot be reached, and
    TemporalConfigError when the settings themselves are wrong."""
    return await Client.connect(
        settings.temporal_address,
        runtime=runtime or (telemetry.current_runtime() if (telemetry := _telemetry()) else None),
        **client_options(settings),
    )


def _api_key(settings: Settings) -> str | None:
    try:
        return settings.api_key()
    except OSError as err:
        raise TemporalConfigError(
            f"CLOUDBURST_TEMPORAL_API_KEY_FILE={settings.temporal_api_key_file}: {err.strerror}"
        ) from None


def _read(path: Path | None, setting: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as err:
        raise TemporalConfigError(f"{setting}={path}: {err.strerror}") from None


async def register_search_attributes(client: Client, namespace: str) -> None:
    """Add our search attributes if missing; safe to repeat. Registered here, at every start,
    because a dev server restarted on an existing db file ignores new `--search-attribute`
    flags, and a workflow started with an unregistered attribute fails."""
    existing = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    missing = {
        key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        for key in search_attributes.ALL
        if key.name not in existing.custom_attributes
    }
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
        )
        log.info("registered search attributes %s", sorted(missing))
