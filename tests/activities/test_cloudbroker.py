"""The CloudBroker client against a local HTTP stand-in: answers, errors, timeouts, fallback."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from activities.planning.cloudbroker import (
    CloudBrokerClient,
    CloudBrokerFatal,
    CloudBrokerRecommender,
    CloudBrokerUnavailable,
)
from api.nodepool import Requirements
from api.planning import Resources
from planner.catalog import Catalog
from planner.recommend import CatalogRecommender

KEY = "cb-test-key-123"
Reply = tuple[int, Any]  # status, JSON body (or raw bytes)


class FakeBroker:
    """`reply(request_json)` decides the answer; requests are recorded."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.reply: Callable[[dict[str, Any]], Reply] = lambda body: (200, {"recommendations": []})
        self.delay_s = 0.0
        broker = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                broker.requests.append((dict(self.headers), body))
                if self.path != "/api/recommendations":
                    status, out = 404, {"detail": "not found"}
                elif self.headers.get("X-API-Key") != KEY:
                    status, out = 401, {"detail": "invalid API key"}
                else:
                    status, out = broker.reply(body)
                time.sleep(broker.delay_s)
                data = out if isinstance(out, bytes) else json.dumps(out).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def server() -> Iterator[FakeBroker]:
    broker = FakeBroker()
    yield broker
    broker.server.shutdown()


@pytest.fixture
def broker(server: FakeBroker) -> FakeBroker:
    server.requests.clear()
    server.delay_s = 0.0
    return server


def rec(
    name: str,
    provider: str,
    region: str,
    vcpu: int,
    ram: int,
    price: float,
    *,
    inside: bool = False,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "instance_type_name": name,
        "provider_slug": provider,
        "region_slug": region,
        "vcpu": vcpu,
        "ram_gb": ram,
        "score": 0.9,
        "explain": {"reason": "cheapest"},
    }
    if inside:  # the published example's shape
        out["explain"]["price_eur_per_hour"] = price
    else:
        out["price_eur_per_hour"] = price
    return out


SHAPE = Resources(cpu_m=1500, memory_bytes=2 * 2**30)
EU = Requirements(region_constraint="EU", max_price_eur_per_hour=0.5)


def test_both_response_shapes_are_read_and_ranked_cheapest_first(broker: FakeBroker) -> None:
    broker.reply = lambda body: (
        200,
        {
            "recommendations": [
                rec("PRO2-XS", "scaleway", "fr-par", 4, 16, 0.11),
                rec("cx32", "hetzner", "fsn1", 4, 8, 0.0109, inside=True),
                rec("no-price", "hetzner", "fsn1", 4, 8, 0.0, inside=True) | {"explain": {}},
            ]
        },
    )
    recommender = CloudBrokerRecommender(CloudBrokerClient(broker.url, KEY))
    offerings = recommender.recommend(SHAPE, EU, ["hetzner", "scaleway", "fake"], 10)
    assert [(o.key, o.price_eur_per_hour) for o in offerings] == [
        ("hetzner/fsn1/cx32", 0.0109),
        ("scaleway/fr-par/PRO2-XS", 0.11),
    ]
    headers, body = broker.requests[0]
    assert headers["X-API-Key"] == KEY
    assert body == {
        "min_vcpu": 2,
        "min_ram_gb": 2.0,
        "arch": "x86_64",
        "region_constraint": "EU",
        "max_price_eur_per_hour": 0.5,
        "allowed_providers": ["hetzner", "scaleway"],  # never "fake"
        "limit": 10,
    }


def test_offerings_outside_the_pool_requirements_are_dropped_locally(broker: FakeBroker) -> None:
    broker.reply = lambda body: (
        200,
        {
            "recommendations": [
                rec("m6i.large", "aws", "us-east-1", 2, 8, 0.09),  # not EU
                rec("cx22", "hetzner", "fsn1", 2, 4, 0.006),  # too small after reserved
                rec("cx42", "hetzner", "nbg1", 8, 16, 0.0263),
            ]
        },
    )
    recommender = CloudBrokerRecommender(CloudBrokerClient(broker.url, KEY))
    offerings = recommender.recommend(
        Resources(cpu_m=1950, memory_bytes=2**30), EU, ["hetzner", "aws"], 10
    )
    assert [o.key for o in offerings] == ["hetzner/nbg1/cx42"]


def test_wrong_key_is_fatal_and_says_which_secret(broker: FakeBroker) -> None:
    client = CloudBrokerClient(broker.url, "wrong-key")
    with pytest.raises(CloudBrokerFatal, match="CloudBroker API key Secret") as err:
        client.recommendations(min_vcpu=1, min_ram_gb=1, arch="x86_64")
    assert "wrong-key" not in str(err.value)
    # A catalog fallback must not hide a key that needs fixing.
    recommender = CloudBrokerRecommender(client, CatalogRecommender())
    with pytest.raises(CloudBrokerFatal):
        recommender.recommend(SHAPE, EU, ["hetzner"], 5)


def test_invalid_request_is_fatal_with_the_server_message(broker: FakeBroker) -> None:
    broker.reply = lambda body: (422, {"detail": "arch must be x86_64 or arm64"})
    with pytest.raises(CloudBrokerFatal, match="arch must be x86_64 or arm64"):
        CloudBrokerClient(broker.url, KEY).recommendations(min_vcpu=1, min_ram_gb=1, arch="sparc")


def test_server_error_is_retryable(broker: FakeBroker) -> None:
    broker.reply = lambda body: (500, {"detail": "database is down"})
    with pytest.raises(CloudBrokerUnavailable, match="HTTP 500"):
        CloudBrokerClient(broker.url, KEY).recommendations(min_vcpu=1, min_ram_gb=1, arch="x86_64")


def test_malformed_json_is_retryable(broker: FakeBroker) -> None:
    broker.reply = lambda body: (200, b"<html>502 Bad Gateway</html>")
    with pytest.raises(CloudBrokerUnavailable, match="not a recommendations JSON"):
        CloudBrokerClient(broker.url, KEY).recommendations(min_vcpu=1, min_ram_gb=1, arch="x86_64")


def test_timeout_is_retryable(broker: FakeBroker) -> None:
    broker.delay_s = 1.0
    client = CloudBrokerClient(broker.url, KEY, timeout_s=0.2)
    with pytest.raises(CloudBrokerUnavailable, match=r"did not answer within 0\.2s"):
        client.recommendations(min_vcpu=1, min_ram_gb=1, arch="x86_64")


def test_unreachable_falls_back_to_the_catalog_when_configured() -> None:
    client = CloudBrokerClient("http://127.0.0.1:9", KEY, timeout_s=1)  # nothing listens there
    with pytest.raises(CloudBrokerUnavailable, match="cannot reach CloudBroker"):
        CloudBrokerRecommender(client).recommend(SHAPE, EU, ["hetzner"], 5)
    offerings = CloudBrokerRecommender(client, CatalogRecommender()).recommend(
        SHAPE, EU, ["hetzner"], 5
    )
    expected = CatalogRecommender(Catalog.load()).recommend(SHAPE, EU, ["hetzner"], 5)
    assert offerings == expected and offerings[0].provider == "hetzner"


def test_the_client_never_shows_its_key() -> None:
    client = CloudBrokerClient("http://broker", "s3cret")
    assert "s3cret" not in repr(client) and "s3cret" not in str(vars(client).get("url"))
