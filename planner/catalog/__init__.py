"""The built-in catalog: real instance types with on-demand prices, shipped as `catalog.json`.

A package rather than a `catalog.py` module so that the data file beside it is package data
(`"*.json"` in pyproject) and the import path stays `planner.catalog`.
Prices are kept in their original currency and normalised to EUR/hour with the file's
documented `usd_to_eur` rate; every entry names its source and date. Set
`CLOUDBURST_CATALOG=/path/to/catalog.json` to use a refreshed copy instead of the shipped one.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from api.nodeclaim import Offering
from api.nodepool import ON_DEMAND, SPOT, Requirements
from planner.regions import offering_allowed

SHIPPED_PATH = Path(__file__).with_name("catalog.json")
CATALOG_ENV = "CLOUDBURST_CATALOG"
# Optional per-entry maps left out of the file when empty (most entries have none).
_OMITTED_WHEN_EMPTY = ("zones", "spot_prices", "spot_prices_eur", "spot_source")


@dataclass(frozen=True)
class CatalogEntry:
    provider: str
    name: str
    vcpu: float
    memory_gib: float
    arch: str  # x86_64 or arm64
    currency: str  # of `prices`
    prices: dict[str, float]  # region -> hourly price in `currency`
    prices_eur: dict[str, float]  # region -> hourly price in EUR
    source: str
    as_of: str
    zones: dict[str, str] = field(default_factory=dict)  # region -> zone to launch in
    # Spot/preemptible prices where the provider sells them (AWS, GCP, Azure), same units.
    spot_prices: dict[str, float] = field(default_factory=dict)  # region -> in `currency`
    spot_prices_eur: dict[str, float] = field(default_factory=dict)  # region -> EUR
    # Where the spot prices come from, when not from `source` (e.g. an approximation).
    spot_source: str = ""


class Catalog:
    def __init__(self, header: dict[str, Any], entries: list[CatalogEntry]) -> None:
        self.header = header
        self.entries = entries

    @property
    def usd_to_eur(self) -> float:
        return float(self.header.get("usd_to_eur", 0.92))

    @classmethod
    def load(cls, path: Path | str | None = None) -> Catalog:
        path = Path(path or os.environ.get(CATALOG_ENV) or SHIPPED_PATH)
        data = json.loads(path.read_text())
        entries = [
            CatalogEntry(
                provider=raw["provider"],
                name=raw["name"],
                vcpu=float(raw["vcpu"]),
                memory_gib=float(raw["memory_gib"]),
                arch=raw["arch"],
                currency=raw.get("currency", "EUR"),
                prices={k: float(v) for k, v in raw["prices"].items()},
                prices_eur={k: float(v) for k, v in raw["prices_eur"].items()},
                source=raw.get("source", ""),
                as_of=raw.get("as_of", ""),
                zones=dict(raw.get("zones") or {}),
                spot_prices={k: float(v) for k, v in (raw.get("spot_prices") or {}).items()},
                spot_prices_eur={
                    k: float(v) for k, v in (raw.get("spot_prices_eur") or {}).items()
                },
                spot_source=raw.get("spot_source", ""),
            )
            for raw in data.get("instance_types", [])
        ]
        header = {k: v for k, v in data.items() if k != "instance_types"}
        return cls(header, entries)

    def save(self, path: Path | str) -> None:
        data = dict(self.header)
        data["instance_types"] = [
            {k: v for k, v in asdict(e).items() if k not in _OMITTED_WHEN_EMPTY or v}
            for e in self.entries
        ]
        Path(path).write_text(json.dumps(data, indent=1) + "\n")

    def providers(self) -> list[str]:
        return sorted({e.provider for e in self.entries})

    def to_eur(self, price: float, currency: str) -> float:
        if currency == "EUR":
            return round(price, 5)
        if currency == "USD":
            return round(price * self.usd_to_eur, 5)
        raise ValueError(f"no exchange rate for {currency}")

    def with_usd_to_eur(self, rate: float, note: str) -> Catalog:
        """A copy converting USD prices at `rate` (EUR per USD), `note` saying whose and when."""
        header = {**self.header, "usd_to_eur": rate, "usd_to_eur_note": note}

        def eur(prices: dict[str, float]) -> dict[str, float]:
            return {region: round(price * rate, 5) for region, price in prices.items()}

        entries = [
            replace(e, prices_eur=eur(e.prices), spot_prices_eur=eur(e.spot_prices))
            if e.currency == "USD"
            else e
            for e in self.entries
        ]
        return Catalog(header, entries)

    def with_provider(self, provider: str, entries: list[CatalogEntry]) -> Catalog:
        """A copy with `provider`'s part replaced (what `catalog refresh` writes)."""
        kept = [e for e in self.entries if e.provider != provider]
        return Catalog(dict(self.header), kept + sorted(entries, key=lambda e: e.name))

    def all_offerings(self) -> list[Offering]:
        """Every on-demand offering, and a spot one where the entry has a spot price."""
        return [
            Offering(
                provider=e.provider,
                region=region,
                zone=e.zones.get(region),
                instance_type=e.name,
                vcpu=e.vcpu,
                memory_gib=e.memory_gib,
                arch=e.arch,
                price_eur_per_hour=price,
                price_source=(e.spot_source if capacity_type == SPOT else "") or e.source or None,
                price_as_of=e.as_of or None,
                capacity_type=capacity_type,
            )
            for e in self.entries
            for capacity_type, prices in ((ON_DEMAND, e.prices_eur), (SPOT, e.spot_prices_eur))
            for region, price in prices.items()
        ]

    def offerings(
        self, requirements: Requirements, class_providers: list[str] | None = None
    ) -> list[Offering]:
        """What a pool with these requirements may launch, cheapest first."""
        allowed = [
            o
            for o in self.all_offerings()
            if offering_allowed(o, requirements, class_providers) is None
        ]
        return sorted(allowed, key=lambda o: (o.price_eur_per_hour or 0.0, o.key))


def stale_price_notes(offerings: list[Offering], now: datetime, max_age: timedelta) -> list[str]:
    """One line per provider whose price among `offerings` was read longer than `max_age`
    ago (the oldest date said); prices without a date are not judged."""
    oldest = {
        provider: as_of
        for provider, as_of in oldest_prices(offerings).items()
        if now - as_of > max_age
    }
    hours = max_age.total_seconds() / 3600
    return [
        f"{provider} prices as of {as_of.date().isoformat()} are older than {hours:g} h"
        for provider, as_of in sorted(oldest.items())
    ]


def oldest_prices(offerings: list[Offering]) -> dict[str, datetime]:
    """When each provider's oldest price among `offerings` was read (undated ones left out)."""
    oldest: dict[str, datetime] = {}
    for offering in offerings:
        as_of = _parse_as_of(offering.price_as_of)
        if as_of is not None and (
            offering.provider not in oldest or as_of < oldest[offering.provider]
        ):
            oldest[offering.provider] = as_of
    return oldest


def _parse_as_of(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
