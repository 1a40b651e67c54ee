"""The live catalog: the shipped catalog with each provider's refreshed part laid over it.

The scheduled refresh (`PriceActivities.refresh_prices`) writes a provider's instance types
into the ConfigMap `cloudburst-catalog` in the worker's namespace only when its price API
answered; on failure it writes the outcome and keeps the last good data. Each provider has
its own keys and every write is a merge patch of those keys alone, so refreshes of different
providers never overwrite each other.

Readers (`plan_capacity`, `cloudburst catalog show --live`) overlay what is there on the
shipped catalog; a provider never refreshed keeps the shipped prices, whose `as_of` says so.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from activities.kube_reads import ConfigMapReader
from activities.prices.exchange import ExchangeRate
from api.prices import CATALOG_CONFIGMAP, EXCHANGE_RATE, ProviderPriceStatus
from planner.catalog import Catalog, CatalogEntry

log = logging.getLogger(__name__)


def prices_key(provider: str) -> str:
    return f"{provider}.json"


def status_key(provider: str) -> str:
    return f"{provider}.status.json"


def read_store(core: ConfigMapReader, namespace: str) -> dict[str, str]:
    """The ConfigMap's data; empty when no refresh has written it yet."""
    try:
        config_map = core.read_namespaced_config_map(CATALOG_CONFIGMAP, namespace)
    except ApiException as err:
        if err.status == 404:
            return {}
        raise
    return dict(config_map.data or {})


def live_catalog(base: Catalog, data: dict[str, str]) -> Catalog:
    """`base` with every provider part found in `data` in place of its own, and every USD
    price converted at the stored exchange rate (when one was fetched)."""
    catalog = base
    for key, text in sorted(data.items()):
        if not key.endswith(".json") or key.endswith(".status.json"):
            continue
        if key == prices_key(EXCHANGE_RATE):
            continue
        provider = key.removesuffix(".json")
        try:
            entries = [CatalogEntry(**raw) for raw in json.loads(text)["instance_types"]]
        except (ValueError, KeyError, TypeError) as err:
            # Written by us, so unreadable means a hand edit: keep the shipped part.
            log.error("%s/%s is unreadable (%s): shipped prices used", CATALOG_CONFIGMAP, key, err)
            continue
        catalog = catalog.with_provider(provider, entries)
    rate = stored_exchange_rate(data)
    return catalog if rate is None else catalog.with_usd_to_eur(rate.usd_to_eur, rate.note)


def stored_exchange_rate(data: dict[str, str]) -> ExchangeRate | None:
    text = data.get(prices_key(EXCHANGE_RATE))
    if text is None:
        return None
    try:
        raw = json.loads(text)
        return ExchangeRate(float(raw["usd_to_eur"]), str(raw["date"]), str(raw["source"]))
    except (ValueError, KeyError, TypeError) as err:
        log.error(
            "%s/%s is unreadable (%s): shipped rate used", CATALOG_CONFIGMAP, EXCHANGE_RATE, err
        )
        return None


def statuses(data: dict[str, str]) -> list[ProviderPriceStatus]:
    out = []
    for key, text in sorted(data.items()):
        if key.endswith(".status.json"):
            try:
                out.append(ProviderPriceStatus.model_validate_json(text))
            except ValueError as err:
                log.error("%s/%s is unreadable: %s", CATALOG_CONFIGMAP, key, err)
    return out


def write_provider(
    core: k8s.CoreV1Api,
    namespace: str,
    status: ProviderPriceStatus,
    entries: list[CatalogEntry] | None,
) -> None:
    """Record one provider's refresh: its status always, its entries only when given."""
    part = None
    if entries is not None:
        part = json.dumps({"instance_types": [_compact(e) for e in entries]}, separators=(",", ":"))
    _write(core, namespace, status, part)


def write_exchange_rate(
    core: k8s.CoreV1Api, namespace: str, status: ProviderPriceStatus, rate: ExchangeRate | None
) -> None:
    """Record the exchange rate's refresh: its status always, the rate only when given."""
    _write(core, namespace, status, None if rate is None else json.dumps(asdict(rate)))


def _write(
    core: k8s.CoreV1Api, namespace: str, status: ProviderPriceStatus, part: str | None
) -> None:
    data = {status_key(status.provider): status.model_dump_json(by_alias=True)}
    if part is not None:
        data[prices_key(status.provider)] = part
    body = {"data": data}
    try:
        core.patch_namespaced_config_map(CATALOG_CONFIGMAP, namespace, body)
    except ApiException as err:
        if err.status != 404:
            raise
        config_map = k8s.V1ConfigMap(
            metadata=k8s.V1ObjectMeta(
                name=CATALOG_CONFIGMAP,
                labels={"app.kubernetes.io/managed-by": "cloudburst"},
            ),
            data=data,
        )
        try:
            core.create_namespaced_config_map(namespace, config_map)
        except ApiException as again:
            if again.status != 409:  # another provider's refresh created it meanwhile
                raise
            core.patch_namespaced_config_map(CATALOG_CONFIGMAP, namespace, body)


def _compact(entry: CatalogEntry) -> dict[str, Any]:
    return {k: v for k, v in asdict(entry).items() if v or k in ("prices", "prices_eur")}


class LiveCatalog:
    """The live catalog for the planner, re-read at most every `ttl_s` (a plan per pending
    burst must not mean a ConfigMap read per plan)."""

    def __init__(
        self, core: ConfigMapReader, namespace: str, base: Catalog, ttl_s: float = 60.0
    ) -> None:
        self._core = core
        self._namespace = namespace
        self._base = base
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._cached: tuple[float, Catalog] | None = None

    def get(self) -> Catalog:
        with self._lock:
            now = time.monotonic()
            if self._cached and now - self._cached[0] < self._ttl_s:
                return self._cached[1]
            try:
                catalog = live_catalog(self._base, read_store(self._core, self._namespace))
            except ApiException as err:
                # The store is an improvement, not a dependency: plan with what we had.
                log.warning("catalog ConfigMap unreadable (%s): last known prices used", err)
                catalog = self._cached[1] if self._cached else self._base
            self._cached = (now, catalog)
            return catalog
