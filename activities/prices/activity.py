"""The `refresh_prices` activity: one provider's price API → its part of the live catalog.

Credentials come from the operator's Secret `cloudburst-price-credentials` in the worker's
namespace (one key per environment variable the provider's SDK documents), never from a
tenant's NodeClass: the live catalog is shared by every pool, so who may feed it prices is
the operator's choice, like the endpoints. A provider whose credentials are absent is
reported `unconfigured`, not failed, and keeps its shipped prices.

The refresh never raises for the provider's own failures: it records them (the last good
data stays in place) and the next scheduled run tries again. Only a failure to record — the
Kubernetes API — is raised, for Temporal to retry.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from activities.prices.exchange import fetch_usd_to_eur
from activities.prices.price_store import (
    live_catalog,
    read_store,
    statuses,
    stored_exchange_rate,
    write_exchange_rate,
    write_provider,
)
from activities.prices.refresh import REQUIRED_CREDENTIALS, RefreshError, refresh_provider
from api.prices import (
    EXCHANGE_RATE,
    PRICE_CREDENTIALS_SECRET,
    ExchangeRateRefresh,
    ProviderPriceRefresh,
    ProviderPriceStatus,
)
from planner.catalog import Catalog

log = logging.getLogger(__name__)


class PriceActivities:
    def __init__(
        self, api_client: k8s.ApiClient, worker_namespace: str, base: Catalog | None = None
    ) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._namespace = worker_namespace
        self._base = base or Catalog.load()

    def activities(self) -> list[Callable[..., Any]]:
        return [self.refresh_prices, self.refresh_exchange_rate]

    @activity.defn(name="refresh_exchange_rate")
    def refresh_exchange_rate(self, request: ExchangeRateRefresh) -> ProviderPriceStatus:
        """The ECB's USD reference rate, which every USD price is converted with; on failure
        the last good rate (or the shipped catalog's) stays in use."""
        now = datetime.now(UTC)
        data = read_store(self._core, self._namespace)
        previous = stored_exchange_rate(data)
        try:
            rate = fetch_usd_to_eur(request.url)
        except RefreshError as err:
            log.warning("exchange rate not refreshed (last good kept): %s", err)
            kept = [s for s in statuses(data) if s.provider == EXCHANGE_RATE]
            status = ProviderPriceStatus(
                provider=EXCHANGE_RATE,
                outcome="failed",
                attempted_at=now,
                refreshed_at=kept[0].refreshed_at if kept else None,
                source=previous.note if previous else "",
                error=str(err),
            )
            write_exchange_rate(self._core, self._namespace, status, None)
            return status
        status = ProviderPriceStatus(
            provider=EXCHANGE_RATE,
            outcome="refreshed",
            attempted_at=now,
            refreshed_at=now,
            source=rate.note,
        )
        write_exchange_rate(self._core, self._namespace, status, rate)
        return status

    @activity.defn(name="refresh_prices")
    def refresh_prices(self, request: ProviderPriceRefresh) -> ProviderPriceStatus:
        provider = request.provider
        now = datetime.now(UTC)
        data = read_store(self._core, self._namespace)
        previous = next((s for s in statuses(data) if s.provider == provider), None)
        kept_since = previous.refreshed_at if previous else None
        credentials = self._credentials(provider)
        missing = [n for n in REQUIRED_CREDENTIALS.get(provider, ()) if n not in credentials]
        if missing:
            status = ProviderPriceStatus(
                provider=provider,
                outcome="unconfigured",
                attempted_at=now,
                refreshed_at=kept_since,
                error=f"no {', '.join(missing)} in Secret "
                f"{self._namespace}/{PRICE_CREDENTIALS_SECRET}",
            )
            write_provider(self._core, self._namespace, status, None)
            return status
        current = live_catalog(self._base, data)
        try:
            updated = refresh_provider(
                current, provider, endpoint=request.endpoint, credentials=credentials
            )
        except RefreshError as err:
            log.warning("prices of %s not refreshed (last good data kept): %s", provider, err)
            status = ProviderPriceStatus(
                provider=provider,
                outcome="failed",
                attempted_at=now,
                refreshed_at=kept_since,
                instance_types=previous.instance_types if previous else 0,
                source=previous.source if previous else "",
                error=str(err),
            )
            write_provider(self._core, self._namespace, status, None)
            return status
        entries = [e for e in updated.entries if e.provider == provider]
        status = ProviderPriceStatus(
            provider=provider,
            outcome="refreshed",
            attempted_at=now,
            refreshed_at=now,
            instance_types=len(entries),
            source=entries[0].source if entries else "",
        )
        write_provider(self._core, self._namespace, status, entries)
        log.info("prices of %s refreshed: %d instance types", provider, len(entries))
        return status

    def _credentials(self, provider: str) -> dict[str, str]:
        """The provider's keys of the operator's price-credentials Secret, decoded."""
        names = REQUIRED_CREDENTIALS.get(provider, ())
        if not names:
            return {}
        try:
            secret = self._core.read_namespaced_secret(PRICE_CREDENTIALS_SECRET, self._namespace)
        except ApiException as err:
            if err.status == 404:
                return {}
            raise
        data = secret.data or {}
        return {n: base64.b64decode(data[n]).decode() for n in names if data.get(n)}
