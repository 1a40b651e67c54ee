"""The USD → EUR rate from the ECB's daily reference rates (a stand-in serving the ECB's XML),
and USD prices converted with it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from activities.prices.exchange import ECB_SOURCE, fetch_usd_to_eur
from activities.prices.refresh import RefreshError
from planner.catalog import SHIPPED_PATH, Catalog
from sim.clouds.exchange import EcbStandin


@pytest.fixture
def ecb() -> Iterator[EcbStandin]:
    standin = EcbStandin(dollars_per_euro=1.25).start()
    try:
        yield standin
    finally:
        standin.stop()


def test_the_rate_is_euros_per_dollar_with_the_ecb_date(ecb: EcbStandin) -> None:
    rate = fetch_usd_to_eur(ecb.daily_url)
    assert rate.usd_to_eur == 0.8  # 1.25 dollars per euro
    assert rate.source == ECB_SOURCE and len(rate.date) == 10
    assert rate.date in rate.note and "0.8 EUR per USD" in rate.note


def test_a_failing_or_wrong_answer_names_the_call(ecb: EcbStandin) -> None:
    ecb.inject_failure("unavailable")
    with pytest.raises(RefreshError, match=r"GET http://.*eurofxref-daily.xml: HTTP 503"):
        fetch_usd_to_eur(ecb.daily_url)
    with pytest.raises(RefreshError, match="HTTP 404"):
        fetch_usd_to_eur(ecb.daily_url.replace("daily", "weekly"))


def test_usd_prices_are_converted_at_the_rate_and_eur_ones_kept() -> None:
    shipped = Catalog.load(SHIPPED_PATH)
    converted = shipped.with_usd_to_eur(0.5, "0.5 EUR per USD: test")
    assert converted.usd_to_eur == 0.5
    for before, after in zip(shipped.entries, converted.entries, strict=True):
        if before.currency == "USD":
            assert after.prices_eur == {r: round(p * 0.5, 5) for r, p in before.prices.items()}
            assert after.spot_prices_eur == {
                r: round(p * 0.5, 5) for r, p in before.spot_prices.items()
            }
        else:
            assert after == before
