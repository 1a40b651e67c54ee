"""A local stand-in of the ECB's daily euro reference rates (`eurofxref-daily.xml`).

Served at `/stats/eurofxref/eurofxref-daily.xml` as the ECB publishes it (a gesmes envelope,
`<Cube time=…><Cube currency=… rate=…/>`, dollars per euro). `set_rate` changes the USD rate;
failure injection (op `daily`, kinds `unavailable`, `throttle`) answers as a web server would.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from sim.clouds.base import Failures, Request, Response, ServedStandin

PATH = "/stats/eurofxref/eurofxref-daily.xml"
# Rates of other currencies are there too, as on the real page; only USD is read.
_OTHERS = {"JPY": "161.51", "GBP": "0.8329", "CHF": "0.9298"}


class EcbStandin(ServedStandin):
    def __init__(self, dollars_per_euro: float = 1.0412, host: str = "127.0.0.1") -> None:
        self._lock = threading.Lock()
        self._rate = dollars_per_euro
        self.failures = Failures(("daily",), ("unavailable", "throttle"))
        self._serve(host=host, port=0, name="ecb")

    @property
    def daily_url(self) -> str:
        """The daily file's URL (what `fetch_usd_to_eur` and the price settings take)."""
        return self.url + PATH

    def set_rate(self, dollars_per_euro: float) -> None:
        with self._lock:
            self._rate = dollars_per_euro

    def inject_failure(self, kind: str, times: int | None = 1) -> None:
        self.failures.inject("daily", kind, times)

    def _route(self, req: Request) -> Response:
        if req.path != PATH:
            return Response(404, "<html><body>Not Found</body></html>", content_type="text/html")
        kind = self.failures.take("daily")
        if kind == "unavailable":
            return Response(503, "<html><body>Service Unavailable</body></html>", content_type="text/html")  # fmt: skip
        if kind == "throttle":
            return Response(429, "<html><body>Too Many Requests</body></html>", content_type="text/html")  # fmt: skip
        with self._lock:
            rates = {"USD": f"{self._rate}", **_OTHERS}
        cubes = "".join(f"\n\t\t\t<Cube currency='{c}' rate='{r}'/>" for c, r in rates.items())
        today = datetime.now(UTC).date().isoformat()
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<gesmes:Envelope xmlns:gesmes="http://www.gesmes.org/xml/2002-08-01" '
            'xmlns="http://www.ecb.int/vocabulary/2002-08-01/eurofxref">\n'
            "\t<gesmes:subject>Reference rates</gesmes:subject>\n"
            "\t<gesmes:Sender>\n\t\t<gesmes:name>European Central Bank</gesmes:name>\n"
            "\t</gesmes:Sender>\n"
            f"\t<Cube>\n\t\t<Cube time='{today}'>{cubes}\n\t\t</Cube>\n\t</Cube>\n"
            "</gesmes:Envelope>\n"
        )
        return Response(200, xml, content_type="text/xml")
