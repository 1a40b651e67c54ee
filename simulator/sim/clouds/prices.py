"""Local stand-ins of the providers' price APIs, answering from recorded, real-shaped fixtures.

`price_standin(provider)` serves, at one base URL, every call `catalog refresh` makes for
that provider (`activities/prices/refresh.py`), shaped as the provider documents it; the
answers come from `sim/clouds/price_fixtures/<provider>.json`:

    aws           POST /  X-Amz-Target: AWSPriceListService.GetProducts (JSON 1.1; TERM_MATCH
                  filters on the product attributes; NextToken paging; PriceList items are
                  JSON strings) and Action=DescribeSpotPriceHistory (EC2 query API, XML; the
                  region from the SigV4 scope, InstanceType.N filters). Both check the
                  signing access key id.
    gcp           GET /v1/services/6F81-5844-456A/skus (pageToken paging; API key in
                  `x-goog-api-key` or `?key=`)
    ovh           GET /1.0/order/catalog/public/cloud?ovhSubsidiary=FR (no auth)
    azure         GET /api/retail/prices?$filter=... (armRegionName filter, NextPageLink paging)
    hetzner       GET /v1/server_types (Bearer token, page/per_page, meta.pagination)
    scaleway      GET /instance/v1/zones/{zone}/products/servers (X-Auth-Token)
    digitalocean  GET /v2/sizes (Bearer token, links.pages.next)

These are small stateless fakes, not the compute stand-ins (`sim/clouds/<provider>.py`); EC2's
spot history is a single read-only call, so it is answered here rather than by moto, whose
spot prices are generated. Failure injection per op (`PRICE_OPS`), kinds `unavailable`,
`throttle` and `auth`, each answered with that API's own error document.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode
from xml.sax.saxutils import escape

from sim.clouds.base import Failures, Request, Response, ServedStandin

FIXTURES = Path(__file__).with_name("price_fixtures")
PRICE_OPS: dict[str, tuple[str, ...]] = {
    "aws": ("GetProducts", "DescribeSpotPriceHistory"),
    "gcp": ("skus",),
    "ovh": ("catalog",),
    "azure": ("prices",),
    "hetzner": ("server_types",),
    "scaleway": ("products",),
    "digitalocean": ("sizes",),
}
PRICE_FAILURE_KINDS = ("unavailable", "throttle", "auth")
PAGE_SIZE = 2  # small, so that every client's paging is exercised


def price_standin(provider: str, *, host: str = "127.0.0.1", port: int = 0) -> PriceStandin:
    """The price-API stand-in of `provider`, not yet started."""
    if provider not in PRICE_OPS:
        raise ValueError(f"no price stand-in for {provider!r}; known: {sorted(PRICE_OPS)}")
    return PriceStandin(provider, host=host, port=port)


class PriceStandin(ServedStandin):
    def __init__(self, provider: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.provider = provider
        self.fixture: dict[str, Any] = json.loads((FIXTURES / f"{provider}.json").read_text())
        self.failures = Failures(PRICE_OPS[provider], PRICE_FAILURE_KINDS)
        token = secrets.token_hex(12)
        # What `refresh_provider` must be given (REQUIRED_CREDENTIALS' names).
        self.credentials: dict[str, str] = {
            "aws": {
                "AWS_ACCESS_KEY_ID": "AKIA" + secrets.token_hex(8).upper(),
                "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30),
            },
            "gcp": {"GOOGLE_API_KEY": "AIza" + token},
            "hetzner": {"HCLOUD_TOKEN": token},
            "scaleway": {"SCW_SECRET_KEY": token},
            "digitalocean": {"DIGITALOCEAN_TOKEN": token},
        }.get(provider, {})
        self._lock = threading.Lock()
        self._calls: list[str] = []
        self._serve(host=host, port=port, name=f"{provider}-prices")

    @property
    def endpoint(self) -> str:
        """The base URL `refresh_provider(endpoint=...)` takes (with the API's path prefix)."""
        prefix = {"hetzner": "/v1", "ovh": "/1.0"}.get(self.provider, "")
        return self.url + prefix

    def inject_failure(self, op: str, kind: str, times: int | None = 1) -> None:
        self.failures.inject(op, kind, times)

    def clear_failures(self) -> None:
        self.failures.clear()

    def calls(self) -> list[str]:
        """The op of every request answered (or failed), in order."""
        with self._lock:
            return list(self._calls)

    # ---- routing ---------------------------------------------------------------------------

    def _route(self, req: Request) -> Response:
        match self.provider:
            case "aws":
                return self._aws(req)
            case "gcp":
                return self._gcp(req)
            case "ovh":
                return self._ovh(req)
            case "azure":
                return self._azure(req)
            case "hetzner":
                return self._hetzner(req)
            case "scaleway":
                return self._scaleway(req)
        return self._digitalocean(req)

    def _failure(self, op: str) -> str | None:
        with self._lock:
            self._calls.append(op)
        return self.failures.take(op)

    # ---- AWS -------------------------------------------------------------------------------

    def _aws(self, req: Request) -> Response:
        target = req.headers.get("x-amz-target", "")
        key_id = _sigv4_scope(req)[0]
        if target == "AWSPriceListService.GetProducts":
            if key_id != self.credentials["AWS_ACCESS_KEY_ID"]:
                return _aws_json_error(403, "UnrecognizedClientException", "The security token included in the request is invalid.")  # fmt: skip
            kind = self._failure("GetProducts")
            if kind is not None:
                return _aws_json_error(*_AWS_JSON_FAILURES[kind])
            return Response(200, self._get_products(req.json()), content_type="application/x-amz-json-1.1")  # fmt: skip
        form = parse_qs(req.body.decode(), keep_blank_values=True)
        action = (form.get("Action") or [""])[-1]
        if action != "DescribeSpotPriceHistory":
            return _ec2_error(400, "InvalidAction", f"The action {action} is not valid for this web service.")  # fmt: skip
        if key_id != self.credentials["AWS_ACCESS_KEY_ID"]:
            return _ec2_error(401, "AuthFailure", "AWS was not able to validate the provided access credentials")  # fmt: skip
        kind = self._failure("DescribeSpotPriceHistory")
        if kind is not None:
            return _ec2_error(*_EC2_FAILURES[kind])
        return self._spot_price_history(form, region=_sigv4_scope(req)[2])

    def _get_products(self, body: dict[str, Any]) -> dict[str, Any]:
        wanted = {
            (f["Field"], f["Value"]) for f in body.get("Filters") or [] if f["Type"] == "TERM_MATCH"
        }
        matching = [
            p
            for p in self.fixture["GetProducts"]["PriceList"]
            if p["serviceCode"] == body.get("ServiceCode")
            and all(p["product"]["attributes"].get(k) == v for k, v in wanted)
        ]
        start = int(body.get("NextToken") or 0)
        size = int(body.get("MaxResults") or PAGE_SIZE)
        answer: dict[str, Any] = {
            "FormatVersion": "aws_v1",
            "PriceList": [json.dumps(p) for p in matching[start : start + size]],
        }
        if start + size < len(matching):
            answer["NextToken"] = str(start + size)
        return answer

    def _spot_price_history(self, form: dict[str, list[str]], region: str) -> Response:
        types = {v[-1] for k, v in form.items() if k.startswith("InstanceType.")}
        descriptions = {v[-1] for k, v in form.items() if k.startswith("ProductDescription.")}
        items = [
            item
            for item in self.fixture["DescribeSpotPriceHistory"]["spotPriceHistorySet"]
            if item["availabilityZone"][:-1] == region
            and (not types or item["instanceType"] in types)
            and (not descriptions or item["productDescription"] in descriptions)
        ]
        start = int((form.get("NextToken") or ["0"])[-1] or 0)
        page = items[start : start + PAGE_SIZE]
        more = start + PAGE_SIZE < len(items)
        rows = "".join(
            "<item>" + "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in item.items()) + "</item>"
            for item in page
        )
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<DescribeSpotPriceHistoryResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
            f"<requestId>{secrets.token_hex(16)}</requestId>"
            f"<spotPriceHistorySet>{rows}</spotPriceHistorySet>"
            f"<nextToken>{start + PAGE_SIZE if more else ''}</nextToken>"
            "</DescribeSpotPriceHistoryResponse>"
        )
        return Response(200, xml.encode(), content_type="text/xml;charset=UTF-8")

    # ---- GCP -------------------------------------------------------------------------------

    def _gcp(self, req: Request) -> Response:
        if req.parts != ["v1", "services", "6F81-5844-456A", "skus"]:
            return _google_error(404, "NOT_FOUND", f"Requested entity was not found: {req.path}")
        key = req.headers.get("x-goog-api-key") or req.q("key")
        if key != self.credentials["GOOGLE_API_KEY"]:
            return _google_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")  # fmt: skip
        kind = self._failure("skus")
        if kind is not None:
            return _google_error(*_GOOGLE_FAILURES[kind])
        skus = self.fixture["skus"]
        start = int(req.q("pageToken") or 0)
        size = int(req.q("pageSize") or PAGE_SIZE)
        more = start + size < len(skus)
        return Response(
            200,
            {
                "skus": skus[start : start + size],
                "nextPageToken": str(start + size) if more else "",
            },
        )

    # ---- OVH -------------------------------------------------------------------------------

    def _ovh(self, req: Request) -> Response:
        if req.parts != ["1.0", "order", "catalog", "public", "cloud"]:
            return Response(404, {"class": "Client::NotFound", "message": f"Got an invalid (or empty) URL: {req.path}"})  # fmt: skip
        if not req.q("ovhSubsidiary"):
            return Response(400, {"class": "Client::BadRequest", "message": "[ovhSubsidiary] Property is mandatory"})  # fmt: skip
        kind = self._failure("catalog")
        if kind is not None:
            status, klass, message = _OVH_FAILURES[kind]
            return Response(status, {"class": klass, "message": message})
        return Response(200, self.fixture)

    # ---- Azure -----------------------------------------------------------------------------

    def _azure(self, req: Request) -> Response:
        if req.path != "/api/retail/prices":
            return Response(404, {"Error": {"Code": "NotFound", "Message": req.path}})
        kind = self._failure("prices")
        if kind is not None:
            status, code, message = _AZURE_FAILURES[kind]
            return Response(status, {"Error": {"Code": code, "Message": message}})
        filter_ = req.q("$filter") or ""
        region = re.search(r"armRegionName eq '([^']*)'", filter_)
        items = [
            i
            for i in self.fixture["Items"]
            if region is None or i["armRegionName"] == region.group(1)
        ]
        skip = int(req.q("$skip") or 0)
        more = skip + PAGE_SIZE < len(items)
        next_link = None
        if more:
            query = {"currencyCode": req.q("currencyCode") or "USD", "$filter": filter_, "$skip": skip + PAGE_SIZE}  # fmt: skip
            next_link = f"{self.url}/api/retail/prices?{urlencode(query)}"
        page = items[skip : skip + PAGE_SIZE]
        return Response(200, {"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail", "Items": page, "NextPageLink": next_link, "Count": len(page)})  # fmt: skip

    # ---- Hetzner, Scaleway, DigitalOcean ---------------------------------------------------

    def _hetzner(self, req: Request) -> Response:
        if req.parts != ["v1", "server_types"]:
            return Response(404, {"error": {"code": "not_found", "message": req.path}})
        if req.headers.get("authorization") != f"Bearer {self.credentials['HCLOUD_TOKEN']}":
            return Response(401, {"error": {"code": "unauthorized", "message": "unable to authenticate"}})  # fmt: skip
        kind = self._failure("server_types")
        if kind is not None:
            status, code = {"unavailable": (503, "unavailable"), "throttle": (429, "rate_limit_exceeded"), "auth": (401, "unauthorized")}[kind]  # fmt: skip
            return Response(status, {"error": {"code": code, "message": f"{code} (injected)"}})
        types = self.fixture["server_types"]
        page, per_page = int(req.q("page") or 1), int(req.q("per_page") or 25)
        per_page = min(per_page, PAGE_SIZE)
        last = max(1, -(-len(types) // per_page))
        return Response(
            200,
            {
                "server_types": types[(page - 1) * per_page : page * per_page],
                "meta": {
                    "pagination": {
                        "page": page,
                        "per_page": per_page,
                        "previous_page": page - 1 or None,
                        "next_page": page + 1 if page < last else None,
                        "last_page": last,
                        "total_entries": len(types),
                    }
                },
            },
        )

    def _scaleway(self, req: Request) -> Response:
        parts = req.parts
        if len(parts) != 6 or parts[:3] != ["instance", "v1", "zones"] or parts[4:] != ["products", "servers"]:  # fmt: skip
            return Response(404, {"message": "resource is not found", "type": "not_found"})
        if req.headers.get("x-auth-token") != self.credentials["SCW_SECRET_KEY"]:
            return Response(401, {"message": "authentication is denied", "type": "denied_authentication"})  # fmt: skip
        kind = self._failure("products")
        if kind is not None:
            status = {"unavailable": 503, "throttle": 429, "auth": 403}[kind]
            return Response(status, {"message": f"{kind} (injected)", "type": kind})
        servers = (self.fixture.get(parts[3]) or {}).get("servers") or {}
        return Response(200, {"servers": servers} if int(req.q("page") or 1) == 1 else {"servers": {}})  # fmt: skip

    def _digitalocean(self, req: Request) -> Response:
        if req.path != "/v2/sizes":
            return Response(404, {"id": "not_found", "message": "The resource you requested could not be found."})  # fmt: skip
        if req.headers.get("authorization") != f"Bearer {self.credentials['DIGITALOCEAN_TOKEN']}":
            return Response(401, {"id": "Unauthorized", "message": "Unable to authenticate you"})
        kind = self._failure("sizes")
        if kind is not None:
            status, id_ = {"unavailable": (503, "service_unavailable"), "throttle": (429, "too_many_requests"), "auth": (401, "Unauthorized")}[kind]  # fmt: skip
            return Response(status, {"id": id_, "message": f"{id_} (injected)"})
        sizes = self.fixture["sizes"]
        page = int(req.q("page") or 1)
        start = (page - 1) * PAGE_SIZE
        links: dict[str, Any] = {}
        if start + PAGE_SIZE < len(sizes):
            links = {"pages": {"next": f"{self.url}/v2/sizes?page={page + 1}&per_page={PAGE_SIZE}"}}  # fmt: skip
        return Response(200, {"sizes": sizes[start : start + PAGE_SIZE], "links": links, "meta": {"total": len(sizes)}})  # fmt: skip


# ---- the providers' error documents -----------------------------------------------------------

_AWS_JSON_FAILURES: dict[str, tuple[int, str, str]] = {
    "unavailable": (503, "ServiceUnavailableException", "The service is unavailable (injected)."),
    "throttle": (400, "ThrottlingException", "Rate exceeded (injected)."),
    "auth": (
        403,
        "AccessDeniedException",
        "User is not authorized to perform: pricing:GetProducts (injected)",
    ),
}
_EC2_FAILURES: dict[str, tuple[int, str, str]] = {
    "unavailable": (503, "Unavailable", "The server is overloaded and can't handle the request."),
    "throttle": (503, "RequestLimitExceeded", "Request limit exceeded (injected)."),
    "auth": (
        403,
        "UnauthorizedOperation",
        "You are not authorized to perform this operation: ec2:DescribeSpotPriceHistory "
        "(injected).",
    ),
}
_GOOGLE_FAILURES: dict[str, tuple[int, str, str]] = {
    "unavailable": (503, "UNAVAILABLE", "The service is currently unavailable (injected)."),
    "throttle": (
        429,
        "RESOURCE_EXHAUSTED",
        "Quota exceeded for quota metric 'Read requests' (injected).",
    ),
    "auth": (
        403,
        "PERMISSION_DENIED",
        "Cloud Billing API has not been used in project 0 before or it is disabled (injected).",
    ),
}
_OVH_FAILURES: dict[str, tuple[int, str, str]] = {
    "unavailable": (503, "Server::ServiceUnavailable", "Service unavailable (injected)"),
    "throttle": (429, "Client::TooManyRequests", "Too many requests (injected)"),
    "auth": (403, "Client::Forbidden", "This call has not been granted (injected)"),
}
_AZURE_FAILURES: dict[str, tuple[int, str, str]] = {
    "unavailable": (503, "ServiceUnavailable", "The service is unavailable (injected)."),
    "throttle": (429, "TooManyRequests", "Too many requests (injected)."),
    "auth": (403, "Forbidden", "Forbidden (injected)."),
}


def _sigv4_scope(req: Request) -> list[str]:
    """[access key id, date, region, service, "aws4_request"] of a SigV4-signed request."""
    _, _, scope = req.headers.get("authorization", "").partition("Credential=")
    parts = scope.split(",", 1)[0].split("/")
    return parts + [""] * (5 - len(parts))


def _aws_json_error(status: int, code: str, message: str) -> Response:
    return Response(
        status, {"__type": code, "Message": message}, content_type="application/x-amz-json-1.1"
    )


def _ec2_error(status: int, code: str, message: str) -> Response:
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{escape(code)}</Code>"
        f"<Message>{escape(message)}</Message></Error></Errors>"
        f"<RequestID>{secrets.token_hex(16)}</RequestID></Response>"
    )
    return Response(status, xml.encode(), content_type="text/xml;charset=UTF-8")


def _google_error(status: int, reason: str, message: str) -> Response:
    return Response(status, {"error": {"code": status, "message": message, "status": reason}})
