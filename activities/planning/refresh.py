"""Rebuild one provider's part of the catalog from the provider's own price API.

Hetzner, Scaleway and DigitalOcean list sizes *and* hourly prices; Azure's public Retail
Prices API lists prices only (by SKU name), so its refresh re-prices the SKUs the catalog
already knows the size of. AWS, GCP and OVH need authenticated billing APIs: not supported.
Every call goes through httpx with an endpoint override, so tests use local fakes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from activities.planning.catalog import Catalog, CatalogEntry

DEFAULT_ENDPOINTS = {
    "hetzner": "https://api.hetzner.cloud/v1",
    "scaleway": "https://api.scaleway.com",
    "digitalocean": "https://api.digitalocean.com",
    "azure": "https://prices.azure.com",
}
# What each price API needs, by the environment variable its SDK documents.
REQUIRED_CREDENTIALS: dict[str, tuple[str, ...]] = {
    "hetzner": ("HCLOUD_TOKEN",),
    "scaleway": ("SCW_SECRET_KEY",),
    "digitalocean": ("DIGITALOCEAN_TOKEN",),
    "azure": (),
}
SCALEWAY_ZONES = ("fr-par-1", "nl-ams-1", "pl-waw-1")
AZURE_REGIONS = ("eastus", "westeurope")
TIMEOUT_S = 30.0


class RefreshError(Exception):
    """The provider's API refused or failed; the message says which call and why."""


def refresh_provider(
    catalog: Catalog,
    provider: str,
    *,
    endpoint: str | None = None,
    credentials: Mapping[str, str] | None = None,
) -> Catalog:
    """A copy of `catalog` with `provider`'s instance types and prices fetched anew."""
    fetchers: dict[str, Callable[..., list[CatalogEntry]]] = {
        "hetzner": _hetzner,
        "scaleway": _scaleway,
        "digitalocean": _digitalocean,
        "azure": _azure,
    }
    if provider not in fetchers:
        raise RefreshError(
            f"{provider} has no public price API we can read; supported: {sorted(fetchers)}"
        )
    base = (endpoint or DEFAULT_ENDPOINTS[provider]).rstrip("/")
    missing = [n for n in REQUIRED_CREDENTIALS[provider] if not (credentials or {}).get(n)]
    if missing:
        raise RefreshError(f"{provider} needs {' and '.join(missing)} for its price API")
    names = REQUIRED_CREDENTIALS[provider]
    token = (credentials or {})[names[0]] if names else None
    with httpx.Client(timeout=TIMEOUT_S, verify=base.startswith("https://")) as http:
        entries = fetchers[provider](http, base, token, catalog)
    if not entries:
        raise RefreshError(f"{provider}: the API returned no priced instance types")
    return catalog.with_provider(provider, entries)


def _today() -> str:
    return datetime.now(UTC).date().isoformat()


def _get(http: httpx.Client, url: str, **kwargs: Any) -> Any:
    try:
        response = http.get(url, **kwargs)
    except httpx.HTTPError as exc:
        raise RefreshError(f"GET {url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code in (401, 403):
        raise RefreshError(f"GET {url}: HTTP {response.status_code}: check the API token")
    if not response.is_success:
        raise RefreshError(f"GET {url}: HTTP {response.status_code}: {response.text[:200]}")
    try:
        return response.json()
    except ValueError as exc:
        raise RefreshError(f"GET {url}: the answer is not JSON") from exc


def _entry(
    catalog: Catalog,
    provider: str,
    name: str,
    vcpu: float,
    memory_gib: float,
    arch: str,
    currency: str,
    prices: dict[str, float],
    zones: dict[str, str] | None = None,
) -> CatalogEntry:
    return CatalogEntry(
        provider=provider,
        name=name,
        vcpu=float(vcpu),
        memory_gib=round(float(memory_gib), 3),
        arch=arch,
        currency=currency,
        prices=prices,
        prices_eur={r: catalog.to_eur(p, currency) for r, p in prices.items()},
        source="provider API",
        as_of=_today(),
        zones=zones or {},
    )


# ---- Hetzner: GET /server_types (paged), prices[] per location, EUR net ------------------


def _hetzner(
    http: httpx.Client, base: str, token: str | None, catalog: Catalog
) -> list[CatalogEntry]:
    headers = {"Authorization": f"Bearer {token}"}
    out: list[CatalogEntry] = []
    for st in _paged(http, f"{base}/server_types", headers, "server_types"):
        if st.get("deprecated") or st.get("deprecation"):
            continue
        prices = {
            str(p["location"]): float(p["price_hourly"]["net"])
            for p in st.get("prices") or []
            if p.get("price_hourly")
        }
        if not prices:
            continue
        arch = "arm64" if st.get("architecture") == "arm" else "x86_64"
        out.append(
            _entry(catalog, "hetzner", st["name"], st["cores"], st["memory"], arch, "EUR", prices)
        )
    return out


def _paged(http: httpx.Client, url: str, headers: dict[str, str], key: str) -> Iterator[Any]:
    page: int | None = 1
    while page:
        data = _get(http, url, headers=headers, params={"page": page, "per_page": 50})
        yield from data.get(key) or []
        page = ((data.get("meta") or {}).get("pagination") or {}).get("next_page")


# ---- Scaleway: GET /instance/v1/zones/{zone}/products/servers, hourly_price EUR ----------


def _scaleway(
    http: httpx.Client, base: str, token: str | None, catalog: Catalog
) -> list[CatalogEntry]:
    headers = {"X-Auth-Token": token or ""}
    merged: dict[str, dict[str, Any]] = {}
    for zone in SCALEWAY_ZONES:
        region = zone.rsplit("-", 1)[0]
        page = 1
        while True:
            data = _get(
                http,
                f"{base}/instance/v1/zones/{zone}/products/servers",
                headers=headers,
                params={"page": page, "per_page": 100},
            )
            servers = data.get("servers") or {}
            for name, info in servers.items():
                if info.get("hourly_price") is None or info.get("gpu"):
                    continue
                item = merged.setdefault(name, {"info": info, "prices": {}, "zones": {}})
                item["prices"][region] = float(info["hourly_price"])
                item["zones"][region] = zone
            if len(servers) < 100:
                break
            page += 1
    return [
        _entry(
            catalog,
            "scaleway",
            name,
            item["info"]["ncpus"],
            int(item["info"]["ram"]) / 2**30,
            "arm64" if str(item["info"].get("arch")) in ("arm", "arm64") else "x86_64",
            "EUR",
            item["prices"],
            item["zones"],
        )
        for name, item in sorted(merged.items())
    ]


# ---- DigitalOcean: GET /v2/sizes (paged by links.pages.next), price_hourly USD -----------


def _digitalocean(
    http: httpx.Client, base: str, token: str | None, catalog: Catalog
) -> list[CatalogEntry]:
    headers = {"Authorization": f"Bearer {token}"}
    out: list[CatalogEntry] = []
    url: str | None = f"{base}/v2/sizes?per_page=200"
    while url:
        data = _get(http, url, headers=headers)
        for size in data.get("sizes") or []:
            if not size.get("available", True) or not size.get("regions"):
                continue
            price = float(size["price_hourly"])
            out.append(
                _entry(
                    catalog,
                    "digitalocean",
                    size["slug"],
                    size["vcpus"],
                    float(size["memory"]) / 1024,
                    "x86_64",
                    "USD",
                    {r: price for r in size["regions"]},
                )
            )
        url = ((data.get("links") or {}).get("pages") or {}).get("next")
    return out


# ---- Azure: public Retail Prices API, re-prices the SKUs whose size we know -------------


def _azure(
    http: httpx.Client, base: str, token: str | None, catalog: Catalog
) -> list[CatalogEntry]:
    known = {e.name: e for e in catalog.entries if e.provider == "azure"}
    prices: dict[str, dict[str, float]] = {}
    for region in AZURE_REGIONS:
        filter_ = (
            "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' "
            f"and armRegionName eq '{region}'"
        )
        url: str | None = f"{base}/api/retail/prices"
        params: dict[str, str] | None = {"currencyCode": "USD", "$filter": filter_}
        while url:
            data = _get(http, url, params=params)
            params = None  # NextPageLink carries the query
            for item in data.get("Items") or []:
                sku = str(item.get("armSkuName") or "")
                name = f"{item.get('productName', '')} {item.get('skuName', '')}"
                if (
                    sku not in known
                    or "Windows" in name
                    or "Spot" in name
                    or "Low Priority" in name
                    or item.get("unitOfMeasure") != "1 Hour"
                ):
                    continue
                prices.setdefault(sku, {})[region] = float(item["retailPrice"])
            url = data.get("NextPageLink")
    return [
        _entry(catalog, "azure", sku, e.vcpu, e.memory_gib, e.arch, "USD", prices[sku])
        for sku, e in sorted(known.items())
        if sku in prices
    ]
