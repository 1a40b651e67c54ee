"""How the planning activity finds its offerings: the built-in catalog or CloudBroker.

Read from the worker's environment:
    CLOUDBURST_CLOUDBROKER_URL              use CloudBroker at this URL (unset: the catalog)
    CLOUDBURST_CLOUDBROKER_API_KEY_SECRET   "namespace/name/key" of the Secret holding the key
                                            (keep it in cloudburst-system: the worker may read
                                            Secrets there and in tenant namespaces only)
    CLOUDBROKER_API_KEY                     the key itself (when no Secret is named)
    CLOUDBURST_CLOUDBROKER_FALLBACK         "true" (default): use the catalog while it is down
    CLOUDBURST_CLOUDBROKER_TIMEOUT_S        per-request timeout, default 5
    CLOUDBURST_CATALOG                      a refreshed catalog.json instead of the shipped one

Live prices (`PriceSettings`, read by the worker's price Schedule and the planner):
    CLOUDBURST_PRICES_ENABLED               "true" (default): the worker keeps the Schedule
    CLOUDBURST_PRICES_INTERVAL_HOURS        how often every provider's prices are fetched (6)
    CLOUDBURST_PRICES_PROVIDERS             comma-separated (default: all seven)
    CLOUDBURST_PRICES_ENDPOINTS             JSON {"hetzner": "https://proxy.internal/v1"}:
                                            the price APIs' base URLs, an operator's choice
    CLOUDBURST_PRICES_MAX_AGE_HOURS         older prices give the pools planning with them
                                            a PricesStale condition (168)
    CLOUDBURST_PRICES_EXCHANGE_RATE_URL     the ECB's eurofxref-daily.xml (default: the ECB's)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from api._base import SecretKeyRef
from api.nodepool import PRICED_PROVIDERS
from api.prices import DEFAULT_PRICE_MAX_AGE_H, DEFAULT_REFRESH_INTERVAL_H

REAL_PROVIDERS = list(PRICED_PROVIDERS)


class PriceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CLOUDBURST_PRICES_", extra="ignore")

    enabled: bool = Field(
        default=True,
        description="The worker keeps the live-price Schedule (creates it, or brings it up "
        "to these settings, at start; its first run at once); false leaves it as it is.",
    )
    interval_hours: float = Field(
        default=DEFAULT_REFRESH_INTERVAL_H,
        gt=0,
        description="How often every provider's prices are fetched.",
    )
    providers: Annotated[list[str], NoDecode] = Field(
        default=REAL_PROVIDERS,
        description="The providers whose prices are fetched, comma-separated (default: all "
        "seven); an empty list leaves the Schedule as it is.",
    )
    endpoints: dict[str, str] = Field(
        default={},
        description='The price APIs\' base URLs, JSON: `{"hetzner": '
        "\"https://proxy.internal/v1\"}`, an operator's choice. Empty: the providers' own.",
    )
    max_age_hours: float = Field(
        default=DEFAULT_PRICE_MAX_AGE_H,
        gt=0,
        description="Older prices give the pools planning with them a PricesStale "
        "condition; the planner reads this too.",
    )
    exchange_rate_url: str | None = Field(
        default=None,
        description="Where the USD to EUR rate that USD prices are converted with is read "
        "(the ECB's eurofxref-daily.xml format). Unset: the ECB's own.",
    )

    @field_validator("providers", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value

    @field_validator("providers", "endpoints")
    @classmethod
    def _known_providers(cls, value: list[str] | dict[str, str]) -> list[str] | dict[str, str]:
        unknown = sorted(set(value) - set(REAL_PROVIDERS))
        if unknown:
            raise ValueError(f"unknown provider(s) {unknown}; use some of {REAL_PROVIDERS}")
        return value


class PlanningConfig(BaseModel):
    cloudbroker_url: str | None = Field(
        default=None,
        description="Plan with CloudBroker's offerings at this URL. Unset: the built-in catalog.",
    )
    cloudbroker_api_key: SecretStr | None = Field(  # SecretStr: never printed
        default=None, description="CloudBroker's API key itself, when no Secret is named."
    )
    cloudbroker_api_key_secret: SecretKeyRef | None = Field(
        default=None,
        description="`namespace/name/key` of the Secret holding CloudBroker's API key (keep "
        "it in the worker's namespace: the worker may read Secrets there and in tenant "
        "namespaces only).",
    )
    fallback_to_catalog: bool = Field(
        default=True, description="Plan with the built-in catalog while CloudBroker is down."
    )
    timeout_s: float = Field(default=5.0, description="CloudBroker's per-request timeout.")
    catalog_path: str | None = Field(
        default=None,
        description="A refreshed catalog.json (`cloudburst catalog refresh`) instead of the "
        "shipped one.",
    )
    price_max_age_h: float = Field(
        default=DEFAULT_PRICE_MAX_AGE_H,
        description="Prices older than this give the pools planning with them a "
        "PricesStale condition; read from `CLOUDBURST_PRICES_MAX_AGE_HOURS` (`PriceSettings`).",
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PlanningConfig:
        env = os.environ if env is None else env
        secret = env.get("CLOUDBURST_CLOUDBROKER_API_KEY_SECRET")
        ref = None
        if secret:
            parts = secret.split("/")
            if len(parts) != 3 or not all(parts):
                raise ValueError(
                    "CLOUDBURST_CLOUDBROKER_API_KEY_SECRET must be namespace/name/key, "
                    f"got {secret!r}"
                )
            ref = SecretKeyRef(namespace=parts[0], name=parts[1], key=parts[2])
        key = env.get("CLOUDBROKER_API_KEY")
        return cls(
            cloudbroker_url=env.get("CLOUDBURST_CLOUDBROKER_URL") or None,
            cloudbroker_api_key=SecretStr(key) if key else None,
            cloudbroker_api_key_secret=ref,
            fallback_to_catalog=env.get("CLOUDBURST_CLOUDBROKER_FALLBACK", "true").lower()
            not in ("0", "false", "no"),
            timeout_s=float(env.get("CLOUDBURST_CLOUDBROKER_TIMEOUT_S", "5")),
            catalog_path=env.get("CLOUDBURST_CATALOG") or None,
            price_max_age_h=float(
                env.get("CLOUDBURST_PRICES_MAX_AGE_HOURS") or DEFAULT_PRICE_MAX_AGE_H
            ),
        )
