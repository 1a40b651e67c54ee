"""`refresh_provider` and `catalog refresh` against the price-API stand-ins (sim/clouds/prices.py).

Each provider's real client (boto3, google-cloud-billing, httpx) talks to a stand-in on a free
127.0.0.1 port that answers with a recorded, real-shaped fixture.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from activities.prices.refresh import REQUIRED_CREDENTIALS, RefreshError, refresh_provider
from cli.commands.catalog import catalog_app
from planner.catalog import SHIPPED_PATH, Catalog, CatalogEntry
from sim.clouds.prices import PriceStandin, price_standin

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
runner = CliRunner()


@pytest.fixture
def standin() -> Iterator[Callable[[str], PriceStandin]]:
    started: list[PriceStandin] = []

    def start(provider: str) -> PriceStandin:
        started.append(price_standin(provider).start())
        return started[-1]

    yield start
    for s in started:
        s.stop()


def refreshed(s: PriceStandin, catalog: Catalog | None = None) -> dict[str, CatalogEntry]:
    catalog = catalog or Catalog.load(SHIPPED_PATH)
    updated = refresh_provider(catalog, s.provider, endpoint=s.endpoint, credentials=s.credentials)
    others = [e for e in updated.entries if e.provider != s.provider]
    assert others == [e for e in catalog.entries if e.provider != s.provider]  # untouched
    part = {e.name: e for e in updated.entries if e.provider == s.provider}
    for e in part.values():
        assert e.source and ISO_UTC.match(e.as_of), (e.source, e.as_of)
        assert e.prices_eur == {r: updated.to_eur(p, e.currency) for r, p in e.prices.items()}
        assert e.spot_prices_eur == {
            r: updated.to_eur(p, e.currency) for r, p in e.spot_prices.items()
        }
    return part


def test_aws_on_demand_from_the_price_list_and_spot_from_the_spot_price_history(
    standin: Callable[[str], PriceStandin],
) -> None:
    aws = refreshed(standin("aws"))
    # Windows, Dedicated and families outside the kept set are not in the catalog.
    assert set(aws) == {"m6i.large", "m7g.large", "r7g.4xlarge", "t3.small"}
    m7g = aws["m7g.large"]
    assert (m7g.vcpu, m7g.memory_gib, m7g.arch, m7g.currency) == (2, 8, "arm64", "USD")
    assert m7g.prices == {"eu-central-1": 0.0953, "us-east-1": 0.0816}
    assert m7g.prices_eur["eu-central-1"] == round(0.0953 * 0.92, 5)
    # The lowest current price across the region's AZs (1b here, not 1a or 1c).
    assert m7g.spot_prices == {"eu-central-1": 0.0329, "us-east-1": 0.0299}
    assert aws["m6i.large"].arch == "x86_64" and aws["r7g.4xlarge"].memory_gib == 128
    assert aws["m6i.large"].spot_prices == {"eu-central-1": 0.0448}  # no us-east-1 history
    assert m7g.zones == {}  # spot AZs do not pin on-demand launches
    assert m7g.source == "aws pricing:GetProducts; ec2:DescribeSpotPriceHistory"


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("GetProducts", "aws pricing:GetProducts: HTTP 403 AccessDeniedException: User is not"),
        (
            "DescribeSpotPriceHistory",
            "aws ec2:DescribeSpotPriceHistory: HTTP 403 UnauthorizedOperation: You are not",
        ),
    ],
)
def test_aws_failures_name_the_call(
    standin: Callable[[str], PriceStandin], op: str, expected: str
) -> None:
    s = standin("aws")
    s.inject_failure(op, "auth")
    with pytest.raises(RefreshError, match=re.escape(expected)):
        refreshed(s)


def test_aws_with_a_key_the_api_does_not_know_is_refused(
    standin: Callable[[str], PriceStandin],
) -> None:
    s = standin("aws")
    wrong = s.credentials | {"AWS_ACCESS_KEY_ID": "AKIAWRONGWRONGWRONG0"}
    with pytest.raises(RefreshError, match="aws pricing:GetProducts: HTTP 403 Unrecognized"):
        refresh_provider(Catalog.load(), "aws", endpoint=s.endpoint, credentials=wrong)


def test_gcp_prices_machine_types_from_core_and_ram_skus(
    standin: Callable[[str], PriceStandin],
) -> None:
    gcp = refreshed(standin("gcp"))
    e2 = gcp["e2-standard-2"]
    # 2 vCPU x core SKU + 8 GiB x RAM SKU, per region of the SKU's serviceRegions.
    assert e2.prices == {
        "us-central1": round(2 * 0.021811 + 8 * 0.002923, 6),
        "europe-west4": round(2 * 0.023964 + 8 * 0.003212, 6),
    }
    assert e2.spot_prices == {"us-central1": round(2 * 0.006543 + 8 * 0.000877, 6)}
    # Shared-core e2-small is billed for half a vCPU: GCP's published 0.016751.
    assert gcp["e2-small"].prices["us-central1"] == 0.016751
    assert gcp["t2a-standard-4"].arch == "arm64"
    assert gcp["t2a-standard-4"].prices == {"us-central1": round(4 * 0.0308 + 16 * 0.0042, 6)}
    # No T2D SKU in the answer: the catalog's t2d types are not priced, so not kept.
    assert not any(name.startswith("t2d-") for name in gcp)
    assert e2.source.startswith("gcp Cloud Billing Catalog API")


def test_gcp_failure_names_the_call(standin: Callable[[str], PriceStandin]) -> None:
    s = standin("gcp")
    s.inject_failure("skus", "auth")
    with pytest.raises(
        RefreshError, match=re.escape("gcp cloudbilling services.skus.list: HTTP 403")
    ):
        refreshed(s)


def test_gcp_without_known_machine_shapes_prices_nothing(
    standin: Callable[[str], PriceStandin],
) -> None:
    shipped = Catalog.load(SHIPPED_PATH)
    no_gcp = Catalog(shipped.header, [e for e in shipped.entries if e.provider != "gcp"])
    with pytest.raises(RefreshError, match="gcp: the API returned no priced instance types"):
        refreshed(standin("gcp"), no_gcp)


def test_ovh_reads_hourly_linux_plans_of_the_public_catalog(
    standin: Callable[[str], PriceStandin],
) -> None:
    ovh = refreshed(standin("ovh"))
    # Monthly, 3-AZ, Windows and GPU plans are left out.
    assert set(ovh) == {"b3-8", "c3-4", "d2-2"}
    b3 = ovh["b3-8"]
    assert (b3.vcpu, b3.memory_gib, b3.currency) == (2, 8, "EUR")
    # Prices are in 10^-8 EUR (5080000 -> 0.0508); regions limited to the catalog's.
    assert b3.prices_eur == {"DE1": 0.0508, "GRA11": 0.0508, "SBG5": 0.0508, "WAW1": 0.0508}
    assert ovh["d2-2"].prices_eur == {"GRA11": 0.0099, "SBG5": 0.0099}
    assert b3.spot_prices == {}


def test_ovh_failure_names_the_call(standin: Callable[[str], PriceStandin]) -> None:
    s = standin("ovh")
    s.inject_failure("catalog", "unavailable")
    with pytest.raises(
        RefreshError, match=r"ovh GET /order/catalog/public/cloud: HTTP 503: .*Service unavailable"
    ):
        refreshed(s)


def test_azure_collects_spot_prices_beside_pay_as_you_go(
    standin: Callable[[str], PriceStandin],
) -> None:
    azure = refreshed(standin("azure"))
    d2 = azure["Standard_D2s_v5"]
    assert d2.prices == {"eastus": 0.096, "westeurope": 0.11}  # not Windows / Low Priority
    assert d2.spot_prices == {"eastus": 0.0115, "westeurope": 0.0146}
    assert d2.spot_prices_eur["eastus"] == round(0.0115 * 0.92, 5)
    assert azure["Standard_D4s_v5"].spot_prices == {}
    assert "Standard_NotInCatalog_v9" not in azure


def test_azure_failure_names_the_call(standin: Callable[[str], PriceStandin]) -> None:
    s = standin("azure")
    s.inject_failure("prices", "throttle")
    with pytest.raises(RefreshError, match="azure GET /api/retail/prices: HTTP 429"):
        refreshed(s)


def test_hetzner_drops_deprecated_types_and_retired_locations(
    standin: Callable[[str], PriceStandin],
) -> None:
    hetzner = refreshed(standin("hetzner"))
    # cx22 and cpx11 carry {"announced", "unavailable_after"}: dropped.
    assert set(hetzner) == {"cax11", "ccx13", "cpx32", "cx23", "cx43"}
    # cpx32's hel1 location has its own deprecation announced: not offered there.
    assert hetzner["cpx32"].prices_eur == {"fsn1": 0.016, "nbg1": 0.016, "ash": 0.016}
    assert hetzner["cax11"].arch == "arm64" and hetzner["cx23"].memory_gib == 4


def test_scaleway_and_digitalocean_from_their_standins(
    standin: Callable[[str], PriceStandin],
) -> None:
    scw = refreshed(standin("scaleway"))
    assert set(scw) == {"COPARM1-2C-8G", "DEV1-S", "PRO2-XS"}  # no GPU type
    assert scw["DEV1-S"].prices_eur == {"fr-par": 0.0088, "nl-ams": 0.0088, "pl-waw": 0.0099}
    assert scw["DEV1-S"].zones["pl-waw"] == "pl-waw-1"
    do = refreshed(standin("digitalocean"))
    assert set(do) == {"g-2vcpu-8gb", "s-2vcpu-4gb"}  # the unavailable size is left out
    assert do["s-2vcpu-4gb"].prices_eur["fra1"] == round(0.03571 * 0.92, 5)


def test_missing_credentials_name_the_env_vars() -> None:
    assert REQUIRED_CREDENTIALS["azure"] == () and REQUIRED_CREDENTIALS["ovh"] == ()
    with pytest.raises(RefreshError, match="aws needs credentials: set AWS_SECRET_ACCESS_KEY"):
        refresh_provider(Catalog.load(), "aws", credentials={"AWS_ACCESS_KEY_ID": "AKIA1"})


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.json"
    path.write_text(SHIPPED_PATH.read_text())
    return path


@pytest.mark.parametrize("provider", ["aws", "gcp", "ovh"])
def test_cli_refresh_reads_credentials_from_the_environment(
    standin: Callable[[str], PriceStandin], catalog_file: Path, provider: str
) -> None:
    s = standin(provider)
    args = ["refresh", "--provider", provider, "--endpoint", s.endpoint]
    result = runner.invoke(catalog_app, [*args, "--catalog", str(catalog_file)], env=s.credentials)
    assert result.exit_code == 0, result.output
    part = [e for e in Catalog.load(catalog_file).entries if e.provider == provider]
    assert part and all(e.source == refreshed(s)[e.name].source for e in part)
    assert f"{provider}: " in result.output and "instance types written to" in result.output


def test_cli_refresh_says_which_env_var_is_missing(catalog_file: Path) -> None:
    env = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    args = ["refresh", "--provider", "aws", "--catalog", str(catalog_file)]
    result = runner.invoke(catalog_app, args, env=env)
    assert result.exit_code == 1
    assert "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in result.output
    assert catalog_file.read_text() == SHIPPED_PATH.read_text()  # nothing written
