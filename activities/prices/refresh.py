"""Rebuild one provider's part of the catalog from the provider's own price API.

Hetzner, Scaleway, DigitalOcean and OVH (its public order catalog, no auth) list sizes *and*
hourly prices. AWS lists both in the Price List API (`pricing:GetProducts`) and spot prices
in `ec2:DescribeSpotPriceHistory`. GCP's Cloud Billing Catalog API and Azure's public Retail
Prices API list prices only (per vCPU and GiB, per SKU name), so their refresh re-prices the
machine shapes the catalog already knows. Every call takes one `endpoint` override per
provider (boto3's `endpoint_url`, the Google client's `api_endpoint`, httpx's base URL), so
tests and the simulator use local stand-ins (`sim/clouds/prices.py`).

The function is pure of Temporal: it raises `RefreshError` on any failure (including an
answer with no priced instance type), and the caller keeps the last good data. The AWS and
Google SDKs are imported by their provider's refresh: the planner imports this module (for
`RefreshError`) and `cloudburst plan` with it, neither of which calls them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from planner.catalog import Catalog, CatalogEntry

# The credentials each provider's refresh reads, by the env var names its SDK documents.
# GCP: the Catalog API is called with an API key (its documented way); GOOGLE_API_KEY is
# the name Google's samples use for one.
REQUIRED_CREDENTIALS: dict[str, tuple[str, ...]] = {
    "hetzner": ("HCLOUD_TOKEN",),
    "scaleway": ("SCW_SECRET_KEY",),
    "digitalocean": ("DIGITALOCEAN_TOKEN",),
    "aws": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    "gcp": ("GOOGLE_API_KEY",),
    "azure": (),
    "ovh": (),
}
# None: the SDK's own endpoints (boto3 resolves pricing's and each region's EC2 endpoint).
DEFAULT_ENDPOINTS: dict[str, str | None] = {
    "hetzner": "https://api.hetzner.cloud/v1",
    "scaleway": "https://api.scaleway.com",
    "digitalocean": "https://api.digitalocean.com",
    "azure": "https://prices.azure.com",
    "aws": None,
    "gcp": "https://cloudbilling.googleapis.com",
    "ovh": "https://eu.api.ovh.com/1.0",
}
SOURCES = {
    "hetzner": "hetzner cloud API: GET /v1/server_types",
    "scaleway": "scaleway instance API: GET /instance/v1/zones/{zone}/products/servers",
    "digitalocean": "digitalocean API: GET /v2/sizes",
    "azure": "azure Retail Prices API: GET /api/retail/prices",
    "aws": "aws pricing:GetProducts; ec2:DescribeSpotPriceHistory",
    "gcp": "gcp Cloud Billing Catalog API: services.skus.list (Compute Engine)",
    "ovh": "ovh API: GET /1.0/order/catalog/public/cloud?ovhSubsidiary=FR",
}
SCALEWAY_ZONES = ("fr-par-1", "nl-ams-1", "pl-waw-1")
# Used when the catalog has no entry of that provider yet (else: the regions it lists).
AWS_REGIONS = ("eu-central-1", "us-east-1", "us-west-2")
AZURE_REGIONS = ("eastus", "westeurope")
# Families the shipped catalog has, plus their current generation: keeps the result small
# (the catalog ends up in a ConfigMap, < 1 MiB for all providers).
AWS_FAMILIES = ("t3", "t4g", "m6i", "m7i", "m7g", "c6i", "c7i", "c7g", "r6i", "r7i", "r7g")
AWS_SIZES = ("small", "medium", "large", "xlarge", "2xlarge", "4xlarge", "8xlarge")
GCP_COMPUTE_SERVICE = "services/6F81-5844-456A"
# Shared-core E2 types are billed for a fraction of their vCPUs (GCP's pricing page).
GCP_BILLED_VCPUS = {"e2-micro": 0.25, "e2-small": 0.5, "e2-medium": 1.0}
OVH_SUBSIDIARY = "FR"  # EUR prices
OVH_PRICE_UNIT = 1e8  # the order catalog's prices are in 10^-8 of the currency
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
    fetchers: dict[str, Callable[[_Refresh], list[CatalogEntry]]] = {
        "hetzner": _hetzner,
        "scaleway": _scaleway,
        "digitalocean": _digitalocean,
        "azure": _azure,
        "aws": _aws,
        "gcp": _gcp,
        "ovh": _ovh,
    }
    if provider not in fetchers:
        raise RefreshError(f"unknown provider {provider!r}; supported: {sorted(fetchers)}")
    given = credentials or {}
    missing = [name for name in REQUIRED_CREDENTIALS[provider] if not given.get(name)]
    if missing:
        raise RefreshError(f"{provider} needs credentials: set {' and '.join(missing)}")
    job = _Refresh(
        catalog=catalog,
        provider=provider,
        endpoint=(endpoint or DEFAULT_ENDPOINTS[provider] or "").rstrip("/") or None,
        credentials=dict(given),
        as_of=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    entries = fetchers[provider](job)
    if not entries:
        raise RefreshError(f"{provider}: the API returned no priced instance types")
    return catalog.with_provider(provider, entries)


@dataclass(frozen=True)
class _Refresh:
    catalog: Catalog
    provider: str
    endpoint: str | None
    credentials: dict[str, str]
    as_of: str  # ISO-8601 UTC time of this refresh

    @property
    def base(self) -> str:
        assert self.endpoint is not None, f"{self.provider} has a default endpoint"
        return self.endpoint

    def known(self) -> dict[str, CatalogEntry]:
        return {e.name: e for e in self.catalog.entries if e.provider == self.provider}

    def regions(self, default: tuple[str, ...]) -> list[str]:
        listed = {r for e in self.known().values() for r in e.prices}
        return sorted(listed) or list(default)

    def http(self) -> httpx.Client:
        return httpx.Client(timeout=TIMEOUT_S, verify=self.base.startswith("https://"))

    def entry(
        self,
        name: str,
        vcpu: float,
        memory_gib: float,
        arch: str,
        currency: str,
        prices: dict[str, float],
        zones: dict[str, str] | None = None,
        spot_prices: dict[str, float] | None = None,
    ) -> CatalogEntry:
        spot = spot_prices or {}
        return CatalogEntry(
            provider=self.provider,
            name=name,
            vcpu=float(vcpu),
            memory_gib=round(float(memory_gib), 3),
            arch=arch,
            currency=currency,
            prices=prices,
            prices_eur={r: self.catalog.to_eur(p, currency) for r, p in prices.items()},
            source=SOURCES[self.provider],
            as_of=self.as_of,
            zones=zones or {},
            spot_prices=spot,
            spot_prices_eur={r: self.catalog.to_eur(p, currency) for r, p in spot.items()},
        )


def _get(http: httpx.Client, call: str, url: str, **kwargs: Any) -> Any:
    """GET `url` as JSON; `call` names it in errors ("hetzner GET /v1/server_types")."""
    try:
        response = http.get(url, **kwargs)
    except httpx.HTTPError as exc:
        raise RefreshError(f"{call}: {type(exc).__name__}: {exc}") from exc
    if response.status_code in (401, 403):
        raise RefreshError(
            f"{call}: HTTP {response.status_code}: check the API token: {response.text[:200]}"
        )
    if not response.is_success:
        raise RefreshError(f"{call}: HTTP {response.status_code}: {response.text[:200]}")
    try:
        return response.json()
    except ValueError as exc:
        raise RefreshError(f"{call}: the answer is not JSON") from exc


# ---- Hetzner: GET /server_types (paged), prices[] per location, EUR net ------------------


def _hetzner(job: _Refresh) -> list[CatalogEntry]:
    headers = {"Authorization": f"Bearer {job.credentials['HCLOUD_TOKEN']}"}
    out: list[CatalogEntry] = []
    with job.http() as http:
        for st in _hetzner_paged(http, f"{job.base}/server_types", headers):
            # `deprecation` is {"announced", "unavailable_after"} or null: a type is dropped
            # once its deprecation is announced, and so is a location whose own
            # `locations[].deprecation` is (the per-location form since 2025-09).
            if st.get("deprecated") or st.get("deprecation"):
                continue
            retired = {
                str(loc.get("name")) for loc in st.get("locations") or [] if loc.get("deprecation")
            }
            prices = {
                str(p["location"]): float(p["price_hourly"]["net"])
                for p in st.get("prices") or []
                if p.get("price_hourly") and p.get("location") not in retired
            }
            if not prices:
                continue
            arch = "arm64" if st.get("architecture") == "arm" else "x86_64"
            out.append(job.entry(st["name"], st["cores"], st["memory"], arch, "EUR", prices))
    return out


def _hetzner_paged(http: httpx.Client, url: str, headers: dict[str, str]) -> Iterator[Any]:
    page: int | None = 1
    while page:
        data = _get(
            http,
            "hetzner GET /v1/server_types",
            url,
            headers=headers,
            params={"page": page, "per_page": 50},
        )
        yield from data.get("server_types") or []
        page = ((data.get("meta") or {}).get("pagination") or {}).get("next_page")


# ---- Scaleway: GET /instance/v1/zones/{zone}/products/servers, hourly_price EUR ----------


def _scaleway(job: _Refresh) -> list[CatalogEntry]:
    headers = {"X-Auth-Token": job.credentials["SCW_SECRET_KEY"]}
    merged: dict[str, dict[str, Any]] = {}
    with job.http() as http:
        for zone in SCALEWAY_ZONES:
            region = zone.rsplit("-", 1)[0]
            page = 1
            while True:
                data = _get(
                    http,
                    f"scaleway GET /instance/v1/zones/{zone}/products/servers",
                    f"{job.base}/instance/v1/zones/{zone}/products/servers",
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
        job.entry(
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


def _digitalocean(job: _Refresh) -> list[CatalogEntry]:
    headers = {"Authorization": f"Bearer {job.credentials['DIGITALOCEAN_TOKEN']}"}
    out: list[CatalogEntry] = []
    url: str | None = f"{job.base}/v2/sizes?per_page=200"
    with job.http() as http:
        while url:
            data = _get(http, "digitalocean GET /v2/sizes", url, headers=headers)
            for size in data.get("sizes") or []:
                if not size.get("available", True) or not size.get("regions"):
                    continue
                price = float(size["price_hourly"])
                out.append(
                    job.entry(
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


def _azure(job: _Refresh) -> list[CatalogEntry]:
    known = job.known()
    prices: dict[str, dict[str, float]] = {}
    spot: dict[str, dict[str, float]] = {}
    with job.http() as http:
        for region in job.regions(AZURE_REGIONS):
            filter_ = (
                "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' "
                f"and armRegionName eq '{region}'"
            )
            url: str | None = f"{job.base}/api/retail/prices"
            params: dict[str, str] | None = {"currencyCode": "USD", "$filter": filter_}
            while url:
                data = _get(http, "azure GET /api/retail/prices", url, params=params)
                params = None  # NextPageLink carries the query
                for item in data.get("Items") or []:
                    sku = str(item.get("armSkuName") or "")
                    name = f"{item.get('productName', '')} {item.get('skuName', '')}"
                    if (
                        sku not in known
                        or "Windows" in name
                        or "Low Priority" in name
                        or item.get("unitOfMeasure") != "1 Hour"
                    ):
                        continue
                    # Spot prices are their own items, "D2s v5 Spot" beside "D2s v5".
                    into = spot if "Spot" in str(item.get("skuName") or "") else prices
                    into.setdefault(sku, {})[region] = float(item["retailPrice"])
                url = data.get("NextPageLink")
    return [
        job.entry(sku, e.vcpu, e.memory_gib, e.arch, "USD", prices[sku], spot_prices=spot.get(sku))
        for sku, e in sorted(known.items())
        if sku in prices
    ]


# ---- AWS: pricing:GetProducts (on-demand), ec2:DescribeSpotPriceHistory (spot) ----------


def _aws(job: _Refresh) -> list[CatalogEntry]:
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(
        aws_access_key_id=job.credentials["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=job.credentials["AWS_SECRET_ACCESS_KEY"],
    )
    config = Config(
        connect_timeout=TIMEOUT_S,
        read_timeout=TIMEOUT_S,
        retries={"mode": "standard", "total_max_attempts": 3},
    )
    # The Price List API is served from us-east-1 (and two other regions) for all regions.
    pricing = session.client(
        "pricing", region_name="us-east-1", endpoint_url=job.endpoint, config=config
    )
    shapes: dict[str, tuple[float, float, str]] = {}
    prices: dict[str, dict[str, float]] = {}
    regions = job.regions(AWS_REGIONS)
    for region in regions:
        filters = [
            {"Type": "TERM_MATCH", "Field": field, "Value": value}
            for field, value in (
                ("operatingSystem", "Linux"),
                ("tenancy", "Shared"),
                ("preInstalledSw", "NA"),
                ("capacitystatus", "Used"),
                ("regionCode", region),
            )
        ]
        with _aws_call("pricing:GetProducts"):
            pages = pricing.get_paginator("get_products").paginate(
                ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1"
            )
            for page in pages:
                for raw in page.get("PriceList") or []:
                    product = json.loads(raw) if isinstance(raw, str) else raw
                    parsed = _aws_product(product)
                    if parsed is None:
                        continue
                    name, shape, price = parsed
                    shapes[name] = shape
                    prices.setdefault(name, {}).setdefault(region, price)
    spot: dict[str, dict[str, float]] = {}
    for region in regions:
        wanted = sorted(name for name, by_region in prices.items() if region in by_region)
        if not wanted:
            continue
        ec2 = session.client("ec2", region_name=region, endpoint_url=job.endpoint, config=config)
        with _aws_call("ec2:DescribeSpotPriceHistory"):
            # StartTime now: the price in effect now in each AZ (the API adds the last change
            # before StartTime). The region's spot price is the lowest across its AZs; the
            # AZ is not recorded in `zones`, which pins on-demand launches too: a spot
            # request may go to any AZ of the region.
            pages = ec2.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=wanted,
                ProductDescriptions=["Linux/UNIX"],
                StartTime=datetime.now(UTC),
            )
            for page in pages:
                for item in page.get("SpotPriceHistory") or []:
                    name, price = str(item["InstanceType"]), float(item["SpotPrice"])
                    by_region = spot.setdefault(name, {})
                    by_region[region] = min(price, by_region.get(region, price))
    return [
        job.entry(name, *shapes[name], "USD", by_region, spot_prices=spot.get(name))
        for name, by_region in sorted(prices.items())
    ]


def _aws_product(product: dict[str, Any]) -> tuple[str, tuple[float, float, str], float] | None:
    """(instance type, (vcpu, GiB, arch), USD/hour) of one PriceList item we keep."""
    attrs = (product.get("product") or {}).get("attributes") or {}
    name = str(attrs.get("instanceType") or "")
    family, _, size = name.partition(".")
    if family not in AWS_FAMILIES or size not in AWS_SIZES:
        return None
    price = None
    for term in ((product.get("terms") or {}).get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            usd = (dimension.get("pricePerUnit") or {}).get("USD")
            if dimension.get("unit") == "Hrs" and usd is not None and float(usd) > 0:
                price = float(usd)
    if price is None:
        return None
    # processorArchitecture says "64-bit" for Graviton too: the processor name tells.
    processor = f"{attrs.get('physicalProcessor', '')} {attrs.get('processorArchitecture', '')}"
    arch = "arm64" if "graviton" in processor.lower() or "arm" in processor.lower() else "x86_64"
    memory = float(str(attrs.get("memory", "0")).split()[0].replace(",", ""))
    return name, (float(attrs.get("vcpu", 0)), memory, arch), price


@contextmanager
def _aws_call(call: str) -> Iterator[None]:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error") or {}
        status = (exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        raise RefreshError(
            f"aws {call}: HTTP {status} {error.get('Code')}: {error.get('Message')}"
        ) from exc
    except BotoCoreError as exc:
        raise RefreshError(f"aws {call}: {type(exc).__name__}: {exc}") from exc


# ---- GCP: Cloud Billing Catalog API, per-vCPU and per-GiB SKUs of each family -----------

# "E2 Instance Core running in Americas", "Spot Preemptible N2D AMD Instance Ram running in
# Netherlands", ... (custom, sole-tenancy and commitment SKUs have other descriptions).
_GCP_SKU = re.compile(
    r"^(?P<spot>Spot Preemptible )?(?P<family>[A-Z][A-Z0-9]*)( AMD| Arm)? "
    r"Instance (?P<kind>Core|Ram) running in "
)


def _gcp(job: _Refresh) -> list[CatalogEntry]:
    from google.api_core import exceptions as google_exceptions
    from google.cloud import billing_v1

    client = billing_v1.CloudCatalogClient(
        client_options={"api_endpoint": job.base, "api_key": job.credentials["GOOGLE_API_KEY"]},
        transport="rest",
    )
    regions = set(job.regions(("us-central1", "europe-west4")))
    # (family, "Core"|"Ram", spot?) -> region -> USD per vCPU-hour or GiB-hour
    rates: dict[tuple[str, str, bool], dict[str, float]] = {}
    try:
        for sku in client.list_skus(parent=GCP_COMPUTE_SERVICE):
            match = _GCP_SKU.match(sku.description)
            if match is None or sku.category.usage_type not in ("OnDemand", "Preemptible"):
                continue
            if not sku.pricing_info or not sku.pricing_info[0].pricing_expression.tiered_rates:
                continue
            tiers = sku.pricing_info[0].pricing_expression.tiered_rates
            base = min(tiers, key=lambda t: t.start_usage_amount).unit_price
            key = (match["family"], match["kind"], bool(match["spot"]))
            for region in sku.service_regions:
                if region in regions:
                    rates.setdefault(key, {})[region] = base.units + base.nanos / 1e9
    except google_exceptions.GoogleAPICallError as exc:
        raise RefreshError(
            f"gcp cloudbilling services.skus.list: HTTP {exc.code} "
            f"{type(exc).__name__}: {exc.message}"
        ) from exc
    out: list[CatalogEntry] = []
    for name, e in sorted(job.known().items()):
        prices = _gcp_priced(rates, name, e, spot=False)
        if prices:
            spot = _gcp_priced(rates, name, e, spot=True)
            out.append(
                job.entry(name, e.vcpu, e.memory_gib, e.arch, "USD", prices, spot_prices=spot)
            )
    return out


def _gcp_priced(
    rates: dict[tuple[str, str, bool], dict[str, float]],
    name: str,
    shape: CatalogEntry,
    *,
    spot: bool,
) -> dict[str, float]:
    """region -> USD/hour of machine type `name`: its vCPUs x core rate + GiB x RAM rate."""
    family = name.split("-", 1)[0].upper()  # e2-standard-2 -> E2, n2d-... -> N2D
    vcpus = GCP_BILLED_VCPUS.get(name, shape.vcpu)
    core = rates.get((family, "Core", spot), {})
    ram = rates.get((family, "Ram", spot), {})
    return {
        r: round(vcpus * core[r] + shape.memory_gib * ram[r], 6)
        for r in sorted(core.keys() & ram.keys())
    }


# ---- OVH: the public order catalog (no auth), hourly "consumption" plans, EUR -----------


def _ovh(job: _Refresh) -> list[CatalogEntry]:
    with job.http() as http:
        data = _get(
            http,
            "ovh GET /order/catalog/public/cloud",
            f"{job.base}/order/catalog/public/cloud",
            params={"ovhSubsidiary": OVH_SUBSIDIARY},
        )
    currency = str((data.get("locale") or {}).get("currencyCode") or "EUR")
    wanted = set(job.regions(()))  # empty: every region the catalog lists
    out: list[CatalogEntry] = []
    for addon in data.get("addons") or []:
        blobs = addon.get("blobs") or {}
        technical = blobs.get("technical") or {}
        # `<flavor>.consumption` is the hourly plan; `.monthly.postpaid`, local-zone and
        # 3-AZ variants have other suffixes. GPU and Windows flavors are not for us.
        if (
            addon.get("product") != "publiccloud-instance"
            or not str(addon.get("planCode", "")).endswith(".consumption")
            or technical.get("gpu")
            or (technical.get("os") or {}).get("family", "linux") != "linux"
            or ("active" not in (blobs.get("tags") or ["active"]))
        ):
            continue
        hourly = [p for p in addon.get("pricings") or [] if p.get("intervalUnit") == "hour"]
        regions = [
            str(region)
            for config in addon.get("configurations") or []
            if config.get("name") == "region"
            for region in config.get("values") or []
            if not wanted or region in wanted
        ]
        if not hourly or not regions:
            continue
        price = float(hourly[0]["price"]) / OVH_PRICE_UNIT
        out.append(
            job.entry(
                str(addon["invoiceName"]),
                (technical.get("cpu") or {}).get("cores", 0),
                (technical.get("memory") or {}).get("size", 0),
                "x86_64",
                currency,
                dict.fromkeys(sorted(regions), round(price, 6)),
            )
        )
    return out
