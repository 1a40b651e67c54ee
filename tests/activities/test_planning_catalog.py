"""The shipped catalog, `catalog refresh` against local stand-ins of the price APIs, `catalog show`."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import CliRunner

from api.nodepool import Requirements
from cli.commands.catalog import catalog_app
from planner.catalog import SHIPPED_PATH, Catalog

Route = Callable[[str, dict[str, str], dict[str, str]], tuple[int, Any]]


@pytest.fixture
def api() -> Iterator[Callable[[Route], str]]:
    """Start a local JSON API answering with `route(path, query, headers)`; returns its URL."""
    servers: list[ThreadingHTTPServer] = []

    def start(route: Route) -> str:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                status, body = route(url.path, query, dict(self.headers))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.json"
    path.write_text(SHIPPED_PATH.read_text())
    return path


runner = CliRunner()


def refresh(
    catalog_file: Path, provider: str, endpoint: str, env: dict[str, str] | None = None
) -> Catalog:
    result = runner.invoke(
        catalog_app,
        ["refresh", "--provider", provider, "--endpoint", endpoint, "--catalog", str(catalog_file)],
        env=env or {},
    )
    assert result.exit_code == 0, result.output
    return Catalog.load(catalog_file)


def part(catalog: Catalog, provider: str) -> dict[str, Any]:
    return {e.name: e for e in catalog.entries if e.provider == provider}


def test_shipped_catalog_covers_seven_providers_with_sources_and_dates() -> None:
    catalog = Catalog.load()
    assert catalog.providers() == [
        "aws",
        "azure",
        "digitalocean",
        "gcp",
        "hetzner",
        "ovh",
        "scaleway",
    ]
    assert len(catalog.all_offerings()) >= 300
    for e in catalog.entries:
        assert e.source and e.as_of and e.prices and e.vcpu > 0 and e.memory_gib > 0
        assert e.arch in ("x86_64", "arm64")
        for region, price in e.prices.items():
            assert e.prices_eur[region] == catalog.to_eur(price, e.currency)
    names = {(e.provider, e.name) for e in catalog.entries}
    for expected in [("hetzner", "cx23"), ("hetzner", "cpx32"), ("scaleway", "DEV1-S"),
                     ("scaleway", "PLAY2-NANO"), ("scaleway", "PRO2-XS"),
                     ("digitalocean", "s-2vcpu-4gb"), ("aws", "m7g.large"), ("gcp", "t2a-standard-2"),
                     ("azure", "Standard_D2s_v5"), ("ovh", "b3-8")]:  # fmt: skip
        assert expected in names


def test_offerings_follow_the_pool_requirements() -> None:
    catalog = Catalog.load()
    eu_arm = catalog.offerings(Requirements(region_constraint="EU", arch=["arm64"]))
    assert eu_arm and all(o.arch == "arm64" for o in eu_arm)
    assert {o.region for o in eu_arm} <= {"fsn1", "nbg1", "hel1", "fr-par", "nl-ams", "pl-waw",
                                          "eu-central-1", "europe-west4", "westeurope"}  # fmt: skip
    prices = [o.price_eur_per_hour or 0 for o in eu_arm]
    assert prices == sorted(prices)
    capped = catalog.offerings(
        Requirements(max_price_eur_per_hour=0.01, allowed_providers=["aws", "gcp"])
    )
    assert capped == []
    listed = catalog.offerings(Requirements(region_constraint=["nyc3"]), ["digitalocean", "aws"])
    assert {o.provider for o in listed} == {"digitalocean"}


def test_refresh_hetzner_reads_server_types_and_prices_per_location(
    api: Any, catalog_file: Path
) -> None:
    def route(path: str, query: dict[str, str], headers: dict[str, str]) -> tuple[int, Any]:
        if headers.get("Authorization") != "Bearer h-token":
            return 401, {"error": {"code": "unauthorized"}}
        types = [
            {"name": "cx23", "cores": 2, "memory": 4.0, "architecture": "x86", "deprecated": False,
             "prices": [{"location": "fsn1", "price_hourly": {"net": "0.0050000000", "gross": "0.0060"}},
                        {"location": "ash", "price_hourly": {"net": "0.0080000000", "gross": "0.0095"}}]},
            {"name": "cax11", "cores": 2, "memory": 4.0, "architecture": "arm", "deprecated": False,
             "prices": [{"location": "nbg1", "price_hourly": {"net": "0.0045", "gross": "0.0054"}}]},
            {"name": "cx11", "cores": 1, "memory": 2.0, "architecture": "x86", "deprecated": True,
             "prices": [{"location": "fsn1", "price_hourly": {"net": "0.004", "gross": "0.005"}}]},
        ]  # fmt: skip
        page = int(query.get("page", "1"))
        return 200, {
            "server_types": types[:2] if page == 1 else types[2:],
            "meta": {"pagination": {"next_page": 2 if page == 1 else None}},
        }

    url = api(route)
    catalog = refresh(catalog_file, "hetzner", url, {"HCLOUD_TOKEN": "h-token"})
    hetzner = part(catalog, "hetzner")
    assert set(hetzner) == {"cx23", "cax11"}  # replaced, deprecated dropped
    assert hetzner["cx23"].prices_eur == {"fsn1": 0.005, "ash": 0.008}
    assert hetzner["cax11"].arch == "arm64" and hetzner["cax11"].source.startswith(
        "hetzner cloud API"
    )
    assert part(catalog, "aws") == part(Catalog.load(SHIPPED_PATH), "aws")  # others untouched
    failed = runner.invoke(catalog_app, ["refresh", "--provider", "hetzner", "--endpoint", url,
                                         "--catalog", str(catalog_file)], env={"HCLOUD_TOKEN": "x"})  # fmt: skip
    assert failed.exit_code == 1 and "check the API token" in failed.output


def test_refresh_scaleway_merges_zones_into_regions(api: Any, catalog_file: Path) -> None:
    def route(path: str, query: dict[str, str], headers: dict[str, str]) -> tuple[int, Any]:
        assert headers.get("X-Auth-Token") == "scw-secret"
        zone = path.split("/")[4]
        servers = {
            "DEV1-S": {"ncpus": 2, "ram": 2 * 2**30, "arch": "x86_64", "hourly_price": 0.0088},
            "COPARM1-2C-8G": {"ncpus": 2, "ram": 8 * 2**30, "arch": "arm64", "hourly_price": 0.0426},
            "GPU-3070-S": {"ncpus": 8, "ram": 16 * 2**30, "arch": "x86_64", "hourly_price": 0.98, "gpu": 1},
        }  # fmt: skip
        if zone == "pl-waw-1":
            servers = {"DEV1-S": servers["DEV1-S"] | {"hourly_price": 0.0099}}
        return 200, {"servers": servers}

    catalog = refresh(catalog_file, "scaleway", api(route), {"SCW_SECRET_KEY": "scw-secret"})
    scw = part(catalog, "scaleway")
    assert set(scw) == {"DEV1-S", "COPARM1-2C-8G"}
    assert scw["DEV1-S"].prices_eur == {"fr-par": 0.0088, "nl-ams": 0.0088, "pl-waw": 0.0099}
    assert scw["DEV1-S"].zones["pl-waw"] == "pl-waw-1" and scw["DEV1-S"].memory_gib == 2
    assert scw["COPARM1-2C-8G"].arch == "arm64"
    fr = [o for o in catalog.all_offerings() if o.key == "scaleway/fr-par/DEV1-S"]
    assert fr[0].zone == "fr-par-1"


def test_refresh_digitalocean_converts_usd_with_the_documented_rate(
    api: Any, catalog_file: Path
) -> None:
    def route(path: str, query: dict[str, str], headers: dict[str, str]) -> tuple[int, Any]:
        assert headers.get("Authorization") == "Bearer do-token" and path == "/v2/sizes"
        return 200, {
            "sizes": [
                {"slug": "s-2vcpu-4gb", "vcpus": 2, "memory": 4096, "price_hourly": 0.03571,
                 "regions": ["fra1", "nyc3"], "available": True},
                {"slug": "s-old", "vcpus": 1, "memory": 512, "price_hourly": 0.007, "regions": [], "available": False},
            ],
            "links": {},
        }  # fmt: skip

    catalog = refresh(catalog_file, "digitalocean", api(route), {"DIGITALOCEAN_TOKEN": "do-token"})
    do = part(catalog, "digitalocean")
    assert set(do) == {"s-2vcpu-4gb"}
    entry = do["s-2vcpu-4gb"]
    assert entry.currency == "USD" and entry.prices == {"fra1": 0.03571, "nyc3": 0.03571}
    assert entry.prices_eur["fra1"] == round(0.03571 * catalog.usd_to_eur, 5)
    assert entry.memory_gib == 4


def test_refresh_azure_reprices_known_skus_from_retail_prices(api: Any, catalog_file: Path) -> None:
    def route(path: str, query: dict[str, str], headers: dict[str, str]) -> tuple[int, Any]:
        assert path == "/api/retail/prices"
        region = query["$filter"].split("armRegionName eq '")[1].rstrip("'")
        item = {"serviceName": "Virtual Machines", "unitOfMeasure": "1 Hour", "currencyCode": "USD"}
        return 200, {
            "Items": [
                item | {"armSkuName": "Standard_D2s_v5", "productName": "Virtual Machines Dsv5 Series",
                        "skuName": "D2s v5", "retailPrice": 0.1 if region == "eastus" else 0.12},
                item | {"armSkuName": "Standard_D2s_v5", "productName": "Virtual Machines Dsv5 Series Windows",
                        "skuName": "D2s v5", "retailPrice": 0.19},
                item | {"armSkuName": "Standard_D2s_v5", "productName": "Virtual Machines Dsv5 Series",
                        "skuName": "D2s v5 Spot", "retailPrice": 0.01},
                item | {"armSkuName": "Standard_Unknown_v9", "productName": "X", "skuName": "X", "retailPrice": 1},
            ],
            "NextPageLink": None,
        }  # fmt: skip

    catalog = refresh(catalog_file, "azure", api(route))
    azure = part(catalog, "azure")
    assert set(azure) == {"Standard_D2s_v5"}
    assert azure["Standard_D2s_v5"].prices == {"eastus": 0.1, "westeurope": 0.12}
    assert azure["Standard_D2s_v5"].vcpu == 2 and azure["Standard_D2s_v5"].memory_gib == 8


def test_refresh_refuses_unknown_providers(catalog_file: Path) -> None:
    result = runner.invoke(
        catalog_app, ["refresh", "--provider", "nimbus", "--catalog", str(catalog_file)]
    )
    assert result.exit_code == 1 and "unknown provider 'nimbus'" in result.output


def test_show_prints_the_ranking_a_pool_would_get() -> None:
    result = runner.invoke(
        catalog_app,
        ["show", "--min-vcpu", "2", "--min-ram-gb", "4", "--region-constraint", "EU",
         "--providers", "hetzner,scaleway", "--max-price", "0.05", "--limit", "5"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    # Not a terminal: a header line, then one plain row an offering.
    header, *rows = result.output.splitlines()
    assert header.split()[:4] == ["#", "PROVIDER", "REGION", "TYPE"]
    assert len(rows) == 5
    assert "cx23" in rows[0] and "0.0060" in rows[0]  # the cheapest first
    assert all("hetzner" in r or "scaleway" in r for r in rows)
    nothing = runner.invoke(catalog_app, ["show", "--min-vcpu", "512"])
    assert nothing.exit_code == 1 and "0 offerings" in nothing.output
