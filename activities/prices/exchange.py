"""The USD → EUR rate the catalog converts USD prices with: the ECB's euro reference rate.

The European Central Bank publishes its reference rates every working day around 16:00 CET
as XML (`eurofxref-daily.xml`, no authentication): `<Cube time="2026-11-24"><Cube
currency="USD" rate="1.0412"/>…` — dollars per euro, so one dollar is 1 / rate euros.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass

import httpx

from activities.prices.refresh import RefreshError

ECB_DAILY_URL = "https://www.ecb.europa.eu/stats/eurofxref/eurofxref-daily.xml"
ECB_SOURCE = "ECB euro foreign exchange reference rate (eurofxref-daily.xml)"
_CUBE = "{http://www.ecb.int/vocabulary/2002-08-01/eurofxref}Cube"
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ExchangeRate:
    usd_to_eur: float  # euros per dollar
    date: str  # the ECB's reference date, ISO
    source: str

    @property
    def note(self) -> str:
        return f"{self.usd_to_eur} EUR per USD: {self.source} of {self.date}"


def fetch_usd_to_eur(url: str | None = None) -> ExchangeRate:
    """Today's reference rate; RefreshError naming the call when there is none."""
    url = url or ECB_DAILY_URL
    call = f"GET {url}"
    try:
        with httpx.Client(timeout=TIMEOUT_S, verify=url.startswith("https://")) as http:
            response = http.get(url)
    except httpx.HTTPError as exc:
        raise RefreshError(f"{call}: {type(exc).__name__}: {exc}") from exc
    if not response.is_success:
        raise RefreshError(f"{call}: HTTP {response.status_code}: {response.text[:200]}")
    try:
        root = ElementTree.fromstring(response.content)
    except ElementTree.ParseError as exc:
        raise RefreshError(f"{call}: the answer is not the ECB's XML: {exc}") from exc
    for day in root.iter(_CUBE):
        usd = next((c for c in day if c.get("currency") == "USD"), None)
        if day.get("time") and usd is not None:
            try:
                dollars_per_euro = float(usd.get("rate") or "")
            except ValueError:
                break
            if dollars_per_euro <= 0:
                break
            return ExchangeRate(round(1 / dollars_per_euro, 6), str(day.get("time")), ECB_SOURCE)
    raise RefreshError(f"{call}: no USD reference rate in the answer")
