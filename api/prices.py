"""Live prices: the scheduled refresh's input and report, and what each provider's last refresh
left in the catalog ConfigMap.

Everything here enters Temporal history or a ConfigMap: provider names, endpoints chosen by
the operator, counts, times and error messages — never a credential (the refresh activity
reads those from the worker's own Secret, `PRICE_CREDENTIALS_SECRET`).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from api._base import CamelModel

PRICE_SCHEDULE_ID = "cloudburst-price-refresh"
# Runs started by the schedule get this id plus the schedule's timestamp suffix.
PRICE_WORKFLOW_ID = "cloudburst-price-refresh"
# In the worker's namespace: one key per provider with its refreshed part of the catalog
# (`<provider>.json`) and one with its last refresh's outcome (`<provider>.status.json`).
CATALOG_CONFIGMAP = "cloudburst-catalog"
# In the worker's namespace, optional: the price APIs' credentials, one key per environment
# variable the provider's SDK documents (HCLOUD_TOKEN, AWS_ACCESS_KEY_ID, ...).
PRICE_CREDENTIALS_SECRET = "cloudburst-price-credentials"
# The status row (and ConfigMap keys) of the USD → EUR rate, beside the providers'.
EXCHANGE_RATE = "exchange-rate"
DEFAULT_REFRESH_INTERVAL_H = 6.0
# Prices older than this give the pools that plan with them a PricesStale condition.
DEFAULT_PRICE_MAX_AGE_H = 7 * 24.0


class PriceRefreshInput(BaseModel):
    providers: list[str]
    # provider -> price API base URL (an operator's choice; unset: the provider's own API)
    endpoints: dict[str, str] = {}
    # The ECB's daily reference rates file (unset: the ECB's own URL).
    exchange_rate_url: str | None = None


class ExchangeRateRefresh(BaseModel):
    url: str | None = None


class ProviderPriceRefresh(BaseModel):
    """One provider's refresh: the `refresh_prices` activity's input."""

    provider: str
    endpoint: str | None = None


class ProviderPriceStatus(CamelModel):
    """What `cloudburst catalog status` shows for one provider."""

    provider: str
    # refreshed: new prices written; failed: the last good data is kept (see `error`);
    # unconfigured: a credential the price API needs is not in the Secret.
    outcome: str = Field(pattern="^(refreshed|failed|unconfigured)$")
    attempted_at: datetime
    # When the prices in use were fetched (None: never; the shipped catalog is used).
    refreshed_at: datetime | None = None
    instance_types: int = 0
    source: str = ""
    error: str = ""


class PriceRefreshReport(BaseModel):
    statuses: list[ProviderPriceStatus] = []

    @property
    def failed(self) -> list[str]:
        return [s.provider for s in self.statuses if s.outcome == "failed"]
