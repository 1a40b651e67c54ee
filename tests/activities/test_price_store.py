"""The live catalog's pure parts: laying refreshed providers over the shipped catalog, and
judging the age of the prices a plan used."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from activities.prices.price_store import live_catalog, statuses
from api.nodeclaim import Offering
from api.prices import ProviderPriceStatus
from planner.catalog import SHIPPED_PATH, Catalog, stale_price_notes

SHIPPED = Catalog.load(SHIPPED_PATH)
NOW = datetime(2026, 11, 24, 12, tzinfo=UTC)


def hetzner_part(price: float) -> str:
    entry = {
        "provider": "hetzner",
        "name": "cx23",
        "vcpu": 2,
        "memory_gib": 4,
        "arch": "x86_64",
        "currency": "EUR",
        "prices": {"fsn1": price},
        "prices_eur": {"fsn1": price},
        "source": "hetzner GET /server_types",
        "as_of": NOW.isoformat(),
    }
    return json.dumps({"instance_types": [entry]})


def test_a_refreshed_provider_replaces_its_shipped_part_and_only_it() -> None:
    live = live_catalog(SHIPPED, {"hetzner.json": hetzner_part(0.0042)})
    hetzner = [e for e in live.entries if e.provider == "hetzner"]
    assert [(e.name, e.prices_eur, e.source) for e in hetzner] == [
        ("cx23", {"fsn1": 0.0042}, "hetzner GET /server_types")
    ]
    aws = [e for e in live.entries if e.provider == "aws"]
    assert aws == [e for e in SHIPPED.entries if e.provider == "aws"]
    [offering] = [o for o in live.all_offerings() if o.provider == "hetzner"]
    assert (offering.price_source, offering.price_as_of) == (
        "hetzner GET /server_types",
        NOW.isoformat(),
    )


def test_an_unreadable_part_keeps_the_shipped_prices_and_statuses_are_read_apart() -> None:
    status = ProviderPriceStatus(provider="ovh", outcome="failed", attempted_at=NOW, error="x")
    data = {"hetzner.json": "{not json", "ovh.status.json": status.model_dump_json(by_alias=True)}
    live = live_catalog(SHIPPED, data)
    assert [e for e in live.entries if e.provider == "hetzner"] == [
        e for e in SHIPPED.entries if e.provider == "hetzner"
    ]
    assert statuses(data) == [status]


def offering(provider: str, as_of: str | None) -> Offering:
    return Offering(provider=provider, region="r", instance_type="t", price_as_of=as_of)


def test_prices_older_than_the_limit_are_named_once_per_provider_by_their_oldest_date() -> None:
    notes = stale_price_notes(
        [
            offering("aws", "2024-06-01"),
            offering("aws", "2024-05-01"),
            offering("hetzner", (NOW - timedelta(hours=2)).isoformat()),
            offering("gcp", None),  # no date: not judged
            offering("ovh", "approx"),  # not a date: not judged
        ],
        NOW,
        timedelta(hours=168),
    )
    assert notes == ["aws prices as of 2024-05-01 are older than 168 h"]


def test_every_shipped_offering_says_where_its_price_comes_from_and_when() -> None:
    offerings = SHIPPED.all_offerings()  # validates: a source too long for the CRD fails here
    assert all(o.price_source and o.price_as_of for o in offerings)
    spot = [o for o in offerings if o.capacity_type == "spot"]
    assert spot and all(o.price_source.startswith("approx:") for o in spot if o.price_source)
