"""A client for CloudBroker-compatible recommendation APIs (the seed system's recommender).

    POST {url}/api/recommendations   header X-API-Key
    {"min_vcpu", "min_ram_gb", "arch", "region_constraint": "ANY"|"EU",
     "max_price_eur_per_hour", "allowed_providers": [...], "limit"}
    -> {"recommendations": [{"instance_type_name", "provider_slug", "region_slug", "vcpu",
        "ram_gb", "price_eur_per_hour" (or inside "explain"), "score", "explain": {...}}]}

Errors are typed so the activity can decide: `CloudBrokerUnavailable` (unreachable,
timeout, 5xx, a non-JSON answer) is worth retrying; `CloudBrokerFatal` (401/403, a refused
request) is not, and says what to fix. The API key is never logged or put in a message.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import httpx

from api.nodeclaim import Offering
from api.nodepool import Requirements
from api.planning import Resources
from planner.recommend import Recommender, holds
from planner.regions import offering_allowed

log = logging.getLogger(__name__)

KEY_FIX = "check the CloudBroker API key Secret (CLOUDBURST_CLOUDBROKER_API_KEY_SECRET) or env CLOUDBROKER_API_KEY"
_BROKER_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "arm64": "arm64", "aarch64": "arm64"}


class CloudBrokerError(Exception):
    retryable = False


class CloudBrokerUnavailable(CloudBrokerError):
    """Unreachable, timed out, 5xx or garbled: the same call may work later."""

    retryable = True


class CloudBrokerFatal(CloudBrokerError):
    """Refused (bad key, invalid request): no retry helps; the message says what to fix."""


class CloudBrokerClient:
    def __init__(self, url: str, api_key: str | None, *, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self._api_key = api_key
        self.timeout_s = timeout_s

    def __repr__(self) -> str:  # never show the key
        return f"CloudBrokerClient({self.url!r})"

    def recommendations(
        self,
        *,
        min_vcpu: float,
        min_ram_gb: float,
        arch: str,
        region_constraint: str = "ANY",
        max_price_eur_per_hour: float | None = None,
        allowed_providers: list[str] | None = None,
        limit: int = 50,
    ) -> list[Offering]:
        body: dict[str, Any] = {
            "min_vcpu": min_vcpu,
            "min_ram_gb": min_ram_gb,
            "arch": arch,
            "region_constraint": region_constraint,
            "allowed_providers": list(allowed_providers or []),
            "limit": limit,
        }
        if max_price_eur_per_hour is not None:
            body["max_price_eur_per_hour"] = max_price_eur_per_hour
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["X-API-Key"] = self._api_key
        endpoint = f"{self.url}/api/recommendations"
        try:
            with httpx.Client(
                timeout=self.timeout_s, verify=endpoint.startswith("https://")
            ) as http:
                response = http.post(endpoint, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise CloudBrokerUnavailable(
                f"CloudBroker at {self.url} did not answer within {self.timeout_s:g}s"
            ) from exc
        except httpx.TransportError as exc:
            raise CloudBrokerUnavailable(
                f"cannot reach CloudBroker at {self.url} ({type(exc).__name__}); check "
                "CLOUDBURST_CLOUDBROKER_URL"
            ) from exc
        return _parse(self.url, response, arch)


class CloudBrokerRecommender:
    """Offerings from CloudBroker, filtered again locally; the catalog when it is down
    (if `fallback` is given). Auth and invalid-request errors are never hidden by the
    fallback: a wrong key should be fixed, not silently replaced by the catalog."""

    def __init__(self, client: CloudBrokerClient, fallback: Recommender | None = None) -> None:
        self.client = client
        self.fallback = fallback

    def recommend(
        self,
        shape: Resources,
        requirements: Requirements,
        class_providers: list[str],
        limit: int,
    ) -> list[Offering]:
        try:
            return self._ask(shape, requirements, class_providers, limit)
        except CloudBrokerUnavailable as err:
            if self.fallback is None:
                raise
            log.warning("CloudBroker unavailable, using the built-in catalog: %s", err)
            return self.fallback.recommend(shape, requirements, class_providers, limit)

    def _ask(
        self,
        shape: Resources,
        requirements: Requirements,
        class_providers: list[str],
        limit: int,
    ) -> list[Offering]:
        providers = [p for p in class_providers if p != "fake"]
        if requirements.allowed_providers:
            providers = [p for p in providers if p in requirements.allowed_providers]
        if not providers:
            return []
        constraint = requirements.region_constraint
        # CloudBroker knows ANY and EU; explicit lists and other groups are filtered here.
        broker_region = constraint if constraint in ("ANY", "EU") else "ANY"
        found: dict[str, Offering] = {}
        for arch in sorted({_BROKER_ARCH.get(a, a) for a in requirements.arch}):
            for offering in self.client.recommendations(
                min_vcpu=math.ceil(shape.cpu_m / 1000) if shape.cpu_m else 1,
                min_ram_gb=round(shape.memory_bytes / 2**30, 2),
                arch=arch,
                region_constraint=str(broker_region),
                max_price_eur_per_hour=requirements.max_price_eur_per_hour,
                allowed_providers=providers,
                limit=limit,
            ):
                if offering_allowed(offering, requirements, class_providers) is None and holds(
                    offering, shape
                ):
                    found.setdefault(offering.key, offering)
        ranked = sorted(found.values(), key=lambda o: (o.price_eur_per_hour or 0.0, o.key))
        return ranked[:limit]


def _parse(url: str, response: httpx.Response, arch: str) -> list[Offering]:
    status = response.status_code
    if status in (401, 403):
        raise CloudBrokerFatal(
            f"CloudBroker at {url} refused the API key (HTTP {status}): {KEY_FIX}"
        )
    if status >= 500:
        raise CloudBrokerUnavailable(f"CloudBroker at {url} failed (HTTP {status})")
    if status >= 400:
        raise CloudBrokerFatal(
            f"CloudBroker at {url} refused the request (HTTP {status}): {_server_message(response)}"
        )
    try:
        data = response.json()
        raw = data["recommendations"]
        if not isinstance(raw, list):
            raise TypeError("recommendations is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise CloudBrokerUnavailable(
            f"CloudBroker at {url} sent an answer that is not a recommendations JSON object "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    out: list[Offering] = []
    for rec in raw:
        offering = _offering(rec, arch)
        if offering is not None:
            out.append(offering)
    return out


def _offering(rec: Any, arch: str) -> Offering | None:
    """One recommendation; None (skipped, logged) when a field we need is missing."""
    if not isinstance(rec, dict):
        return None
    explain: dict[str, Any] = rec["explain"] if isinstance(rec.get("explain"), dict) else {}
    # One published example of the API puts the price inside `explain`: accept both.
    price = rec.get("price_eur_per_hour", explain.get("price_eur_per_hour"))
    try:
        provider = str(rec["provider_slug"])
        region = str(rec["region_slug"])
        return Offering(
            provider=provider,
            region=region,
            zone=rec.get("zone_slug"),
            instance_type=str(rec["instance_type_name"]),
            vcpu=float(rec["vcpu"]),
            memory_gib=float(rec["ram_gb"]),
            arch=str(rec.get("arch") or explain.get("arch") or arch),  # we asked for this arch
            price_eur_per_hour=float(price),  # type: ignore[arg-type]  # None -> TypeError
        )
    except (KeyError, TypeError, ValueError):
        log.warning("skipping a CloudBroker recommendation without name/size/price: %s", rec)
        return None


def _server_message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(data, dict):
        for key in ("detail", "message", "error"):
            if key in data:
                return str(data[key])[:300]
    return str(data)[:300]


__all__ = [
    "CloudBrokerClient",
    "CloudBrokerError",
    "CloudBrokerFatal",
    "CloudBrokerRecommender",
    "CloudBrokerUnavailable",
]
