"""Who may reach what: the namespaces this Cloudburst serves and the endpoints it may call.

A namespace is a trust boundary (ARCHITECTURE.md rule 7). Whoever may edit a NodeClass in a
namespace decides which Secrets of *that* namespace the worker reads (the model refuses a
reference to another namespace) and where the providers send them — but only among the API
addresses an operator allows: a provider's own public API (no `endpoint` set), or an
override listed in the worker's settings (`CLOUDBURST_ALLOWED_ENDPOINTS`, per provider and
for `tailscale`). Anything else would let a namespace editor point a credential — the
NodeClass's own, or the worker's ambient cloud identity — at a server of their choosing.

The same `Tenancy` is read by the trigger, which puts a refusal on the NodeClass or NodePool
(`Ready=False` with the reason below and a Warning Event), and by every activity that reads
a credential or calls out, which raises non-retryable `InvalidConfiguration` *before* any
Secret is read or any request is sent (defense in depth: a workflow started by hand, or a
setting changed under a running claim, is refused the same way).
"""

from __future__ import annotations

import reprlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from temporalio.exceptions import ApplicationError

from api.errors import INVALID_CONFIGURATION
from api.nodeclass import NodeClassSpec
from api.nodepool import PROVIDERS

DEFAULT_WORKER_NAMESPACE = "cloudburst-system"
# Where an endpoint override may be configured: every provider block, and the Tailscale API.
SERVICES = (*PROVIDERS, "tailscale")

# Condition and Event reasons on a refused NodeClass / NodePool.
NAMESPACE_NOT_SERVED = "NamespaceNotServed"
ENDPOINT_NOT_ALLOWED = "EndpointNotAllowed"


@dataclass(frozen=True)
class Refusal:
    """Why a NodeClass or NodePool is not served: a condition reason and a message that names
    the field and the setting to change."""

    reason: str
    message: str


@dataclass(frozen=True)
class Tenancy:
    """`namespaces` None: every namespace is served (a single-tenant cluster; the shipped
    manifests always list them). `allowed_endpoints`: service -> URLs an endpoint override may
    be, or lie under (same scheme, host and port; a path prefix on segment boundaries)."""

    worker_namespace: str = DEFAULT_WORKER_NAMESPACE
    namespaces: frozenset[str] | None = None
    allowed_endpoints: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def serves(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def refusal(
        self,
        namespace: str,
        node_class: NodeClassSpec | None = None,
        services: Collection[str] | None = None,
    ) -> Refusal | None:
        """The first reason not to serve `node_class` in `namespace`, checking the endpoints
        of `services` only when given (an activity checks what it is about to call)."""
        if not self.serves(namespace):
            listed = ", ".join(sorted(self.namespaces or ())) or "none"
            return Refusal(
                NAMESPACE_NOT_SERVED,
                f"namespace {namespace} is not one this Cloudburst serves: an operator lists it "
                f"in CLOUDBURST_TENANT_NAMESPACES (now: {listed}) and lets the worker read its "
                f"Secrets (`cloudburst tenant-rbac {namespace}`; docs/security.md)",
            )
        if node_class is None:
            return None
        for service, path, url in node_class.endpoints():
            if services is not None and service not in services:
                continue
            if not self.endpoint_allowed(service, url):
                return Refusal(ENDPOINT_NOT_ALLOWED, _endpoint_message(service, path, url))
        return None

    def require(
        self,
        namespace: str,
        node_class: NodeClassSpec | None = None,
        services: Collection[str] | None = None,
    ) -> None:
        """Raise non-retryable `InvalidConfiguration` for a refusal; call before any read."""
        refusal = self.refusal(namespace, node_class, services)
        if refusal is not None:
            raise ApplicationError(
                refusal.message, refusal.reason, type=INVALID_CONFIGURATION, non_retryable=True
            )

    def endpoint_allowed(self, service: str, url: str) -> bool:
        wanted = url_parts(url)
        if wanted is None:
            return False
        for allowed in self.allowed_endpoints.get(service, ()):
            entry = url_parts(allowed)
            if (
                entry is not None
                and wanted[:3] == entry[:3]
                and wanted[3][: len(entry[3])] == entry[3]
            ):
                return True
        return False


def url_parts(url: str) -> tuple[str, str, int, tuple[str, ...]] | None:
    """(scheme, host, port, path segments) of a plain http(s) URL; None for anything else
    (another scheme, no host, a bad port, user info, a query or a fragment)."""
    try:
        split = urlsplit(url.strip())
        port = split.port
    except ValueError:
        return None
    scheme = split.scheme.lower()
    if scheme not in ("http", "https") or not split.hostname:
        return None
    if split.username is not None or split.password is not None or split.query or split.fragment:
        return None
    segments = tuple(part for part in split.path.split("/") if part)
    return scheme, split.hostname.lower(), port or (443 if scheme == "https" else 80), segments


def _endpoint_message(service: str, path: str, url: str) -> str:
    parts = url_parts(url)
    shown = (
        f"{parts[0]}://{parts[1]}:{parts[2]}/{'/'.join(parts[3])}" if parts else reprlib.repr(url)
    )
    if service == "fake":
        instead = "the fake provider has no public API: it is for the embedded demo and tests"
    elif service == "tailscale":
        instead = "remove the field to use https://api.tailscale.com"
    else:
        instead = f"remove the field to use {service}'s own API"
    return (
        f"{path} {shown} is not an endpoint the operator allows for {service} (the credential "
        f"would be sent there): {instead}, or an operator adds it to "
        f"CLOUDBURST_ALLOWED_ENDPOINTS[{service}] of the worker and the trigger (docs/security.md)"
    )
