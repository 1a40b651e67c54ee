"""Who may reach what: the namespaces this Cloudburst serves, whose pods each pool serves, what
marks a tenant's nodes, and the endpoints it may call (docs/security.md: the model).

A namespace is a trust boundary. A NodePool serves the pods of its own namespace only. The one
exception is the operator's namespace (the worker's): a pool there is shared — it serves its
`spec.namespaceSelector`'s namespaces — and only an operator may create one (tenants have no
rights there). Where the operator names its tenants (`CLOUDBURST_TENANT_NAMESPACES`), the
nodes of a tenant's pools carry its tenant label and taint, so that only its pods go there
(with the namespace annotations `tenant_namespace_annotations` makes); a cluster without
tenants (the list unset: every namespace served) marks no node.

Whoever may edit a NodeClass in a
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

import json
import re
import reprlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

from yarl import URL

from api.errors import INVALID_CONFIGURATION, application_error
from api.labels import TENANT_LABEL, TENANT_TAINT
from api.nodeclass import NodeClassSpec
from api.nodepool import LIVE_CATALOG_PROVIDERS, PROVIDERS, NodePoolSpec, Taint

DEFAULT_WORKER_NAMESPACE = "cloudburst-system"
# Where an endpoint override may be configured: every provider block, and the Tailscale API.
SERVICES = (*PROVIDERS, "tailscale")

# Services whose plain http endpoint is allowed only by an http entry equal to it (never
# under one): a plug-in's requests carry its bearer token and every first-boot script.
CLEARTEXT_EXACT_SERVICES = frozenset({"plugin"})

# Condition and Event reasons on a refused NodeClass / NodePool.
# A spec the model refuses (field paths in the message).
INVALID_SPEC = "InvalidSpec"
NAMESPACE_NOT_SERVED = "NamespaceNotServed"
ENDPOINT_NOT_ALLOWED = "EndpointNotAllowed"
NAMESPACE_SELECTOR_NOT_ALLOWED = "NamespaceSelectorNotAllowed"
MACHINE_NOT_OWNED = "MachineNotOwned"


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
    be, or lie under (same scheme, host and port; a path prefix on segment boundaries).
    `inventory_owners`: namespace -> the Redfish machines it alone may use, each a BMC address
    (every system behind that host) or a machine name; empty: no owners, one tenant's
    inventory."""

    worker_namespace: str = DEFAULT_WORKER_NAMESPACE
    namespaces: frozenset[str] | None = None
    allowed_endpoints: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    inventory_owners: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The wipe image a returned bare-metal machine boots before its next holder
    # (cluster/machine_hygiene.py); None: returned machines go back to their namespace alone.
    machine_wipe_image_url: str | None = None

    def serves(self, namespace: str) -> bool:
        """Whether NodePools and NodeClasses of `namespace` are served: the operator's own
        namespace always, the tenants' as listed."""
        return (
            namespace == self.worker_namespace
            or self.namespaces is None
            or namespace in self.namespaces
        )

    def is_shared(self, pool_namespace: str) -> bool:
        """A pool of the operator's namespace: it may serve other namespaces' pods."""
        return pool_namespace == self.worker_namespace

    def pool_refusal(self, namespace: str, pool: NodePoolSpec) -> Refusal | None:
        """Why the NodePool `namespace`/… is not served, if it is not."""
        refusal = self.refusal(namespace)
        if refusal is not None or pool.namespace_selector is None or self.is_shared(namespace):
            return refusal
        return Refusal(
            NAMESPACE_SELECTOR_NOT_ALLOWED,
            f"spec.namespaceSelector is for shared pools, which only an operator creates in "
            f"namespace {self.worker_namespace}: a NodePool in {namespace} serves the pods of "
            f"{namespace} alone; remove the field (docs/security.md)",
        )

    def pool_serves(
        self,
        pool_namespace: str,
        pool: NodePoolSpec,
        pod_namespace: str,
        namespace_labels: Mapping[str, str] | None,
    ) -> bool:
        """Whether the pool may launch nodes for a pod of `pod_namespace`, whose Namespace
        carries `namespace_labels` (None: not known yet)."""
        if pod_namespace == pool_namespace:
            return True
        selector = pool.namespace_selector
        return (
            self.is_shared(pool_namespace)
            and selector is not None
            and namespace_labels is not None
            and selector.matches(namespace_labels)
        )

    def is_tenant(self, namespace: str) -> bool:
        """A namespace the operator named as a tenant: its pools' nodes are its alone."""
        return (
            self.namespaces is not None
            and namespace in self.namespaces
            and not self.is_shared(namespace)
        )

    def node_spec(self, namespace: str, pool: NodePoolSpec) -> NodePoolSpec:
        """The pool's spec as its nodes are built and matched: a tenant's pool's template
        carries the tenant label and taint of its namespace (any other pool's, nothing)."""
        if not self.is_tenant(namespace):
            return pool
        template = pool.template.model_copy(
            update={
                "labels": {**pool.template.labels, TENANT_LABEL: namespace},
                "taints": [
                    *(t for t in pool.template.taints if t.key != TENANT_TAINT),
                    tenant_taint(namespace),
                ],
            }
        )
        return pool.model_copy(update={"template": template})

    def refusal(
        self,
        namespace: str,
        node_class: NodeClassSpec | None = None,
        services: Collection[str] | None = None,
    ) -> Refusal | None:
        """The first reason not to serve `node_class` in `namespace`, checking the endpoints
        of `services` only when given (an activity checks what it is about to call)."""
        if not self.serves(namespace):
            # Said where the namespace's own editors read it (its NodeClass's conditions and
            # Events): it names no other tenant.
            return Refusal(
                NAMESPACE_NOT_SERVED,
                f"namespace {namespace} is not one this Cloudburst serves: an operator lists it "
                f"in CLOUDBURST_TENANT_NAMESPACES and lets the worker read its Secrets "
                f"(`cloudburst tenant-rbac {namespace}`; docs/security.md)",
            )
        if node_class is None:
            return None
        for service, path, url in node_class.endpoints():
            if services is not None and service not in services:
                continue
            if not self.endpoint_allowed(service, url):
                return Refusal(ENDPOINT_NOT_ALLOWED, _endpoint_message(service, path, url))
        if node_class.redfish is not None and (services is None or "redfish" in services):
            return self._inventory_refusal(namespace, node_class)
        return None

    def machine_owners(self, name: str, bmc: str) -> frozenset[str]:
        """The namespaces the operator gives the machine `name` at `bmc`: by its name, and by
        its BMC's host (a tenant's NodeClass chooses both, so a machine is usable only where
        every entry that matches it names one and the same namespace)."""
        keys = {inventory_key(name), inventory_key(bmc)}
        return frozenset(
            namespace
            for namespace, machines in self.inventory_owners.items()
            if keys & {inventory_key(machine) for machine in machines}
        )

    def _inventory_refusal(self, namespace: str, node_class: NodeClassSpec) -> Refusal | None:
        """A NodeClass's Redfish machine that the operator's inventory does not give to
        `namespace` alone; the message names no other tenant."""
        if not self.inventory_owners or node_class.redfish is None:
            return None
        for index, machine in enumerate(node_class.redfish.machines):
            if self.machine_owners(machine.name, machine.bmc) != {namespace}:
                return Refusal(
                    MACHINE_NOT_OWNED,
                    f"spec.redfish.machines[{index}] ({machine.name} at {machine.bmc}) is not a "
                    f"machine the operator gives namespace {namespace}: remove it, or an "
                    f"operator lists it (its BMC address or name) under {namespace} in "
                    "CLOUDBURST_INVENTORY_OWNERS of the worker and the trigger "
                    "(docs/security.md)",
                )
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
            raise application_error(
                refusal.message, refusal.reason, type=INVALID_CONFIGURATION, non_retryable=True
            )

    def endpoint_allowed(self, service: str, url: str) -> bool:
        """Whether `url`, normalised (`url_parts`), equals or lies under an entry of
        `service`'s. A plug-in's plain http endpoint (its bearer token and every first-boot
        script in cleartext) only by an `http://` entry naming that very endpoint: an http
        entry is never a prefix for plug-ins."""
        wanted = url_parts(url)
        if wanted is None:
            return False
        exact_only = service in CLEARTEXT_EXACT_SERVICES and wanted[0] == "http"
        for allowed in self.allowed_endpoints.get(service, ()):
            entry = url_parts(allowed)
            if entry is None or wanted[:3] != entry[:3]:
                continue
            if wanted[3] == entry[3] or (not exact_only and wanted[3][: len(entry[3])] == entry[3]):
                return True
        return False


# Namespace annotations of kube-apiserver's PodNodeSelector and PodTolerationRestriction
# admission plugins (their own names), which give a tenant namespace's pods its node selector
# and toleration, and refuse any other toleration.
NODE_SELECTOR_ANNOTATION = "scheduler.alpha.kubernetes.io/node-selector"
DEFAULT_TOLERATIONS_ANNOTATION = "scheduler.alpha.kubernetes.io/defaultTolerations"
TOLERATIONS_WHITELIST_ANNOTATION = "scheduler.alpha.kubernetes.io/tolerationsWhitelist"
# The node controller's condition taints: tolerating them reaches no other tenant's node (its
# tenant taint still keeps a pod off), and Kubernetes itself adds some to every pod
# (DefaultTolerationSeconds: not-ready and unreachable; PodTolerationRestriction:
# memory-pressure), so a whitelist without them would refuse ordinary pods.
NODE_CONDITION_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    *(
        {"key": f"node.kubernetes.io/{condition}", "operator": "Exists", "effect": "NoSchedule"}
        for condition in (
            "memory-pressure",
            "disk-pressure",
            "pid-pressure",
            "network-unavailable",
            "unschedulable",
        )
    ),
)


def with_default_tolerations(
    tolerations: Sequence[Mapping[str, object]], annotations: Mapping[str, str]
) -> list[dict[str, object]]:
    """A pod's tolerations as PodTolerationRestriction admits the pod into a namespace with
    these annotations: the namespace's default tolerations merged in, a pod's own toleration
    of the same key and effect kept over the default. What a pod written in a file (not yet
    admitted) will carry, for a plan of it. An unreadable annotation adds nothing (the API
    server refuses such a namespace's pods; the plan shows them as written)."""
    try:
        defaults = json.loads(annotations.get(DEFAULT_TOLERATIONS_ANNOTATION) or "[]")
    except json.JSONDecodeError:
        return [dict(t) for t in tolerations]
    if not isinstance(defaults, list):
        return [dict(t) for t in tolerations]
    merged = [dict(t) for t in tolerations]
    own = {(t.get("key"), t.get("effect")) for t in merged}
    for default in defaults:
        if isinstance(default, dict) and (default.get("key"), default.get("effect")) not in own:
            merged.append(default)
    return merged


def tenant_toleration(namespace: str) -> dict[str, str]:
    """The toleration of `namespace`'s tenant taint, as a pod spec writes it."""
    return {"key": TENANT_TAINT, "operator": "Equal", "value": namespace, "effect": "NoSchedule"}


def tenant_namespace_annotations(
    namespace: str,
    *,
    node_selector: bool = True,
    tolerations: Sequence[Mapping[str, str]] = (),
) -> dict[str, str]:
    """What makes `namespace` a tenant, for the two admission plugins: its pods tolerate its
    own nodes' taint and no other tenant's (the whitelist: its toleration, the node
    conditions' and `tolerations`, e.g. of its pools' own taints), and with `node_selector`
    they run on its own nodes only (the label only the worker sets, once a node is known to
    be the claim's VM; without it they may also run on the cluster's other nodes)."""
    own = tenant_toleration(namespace)
    # The same toleration as a pod may also write it, without `operator` (Equal by default):
    # the plugin compares such a toleration with the whitelist's field by field.
    own_unspelled = {k: v for k, v in own.items() if k != "operator"}
    annotations = {
        DEFAULT_TOLERATIONS_ANNOTATION: json.dumps([own]),
        TOLERATIONS_WHITELIST_ANNOTATION: json.dumps(
            [own, own_unspelled, *NODE_CONDITION_TOLERATIONS, *(dict(t) for t in tolerations)]
        ),
    }
    if node_selector:
        annotations[NODE_SELECTOR_ANNOTATION] = f"{TENANT_LABEL}={namespace}"
    return annotations


def tenant_taint(namespace: str) -> Taint:
    """What keeps other namespaces' pods off a tenant's nodes: only pods that tolerate it go
    there, and the PodTolerationRestriction annotations let only `namespace`'s tolerate it.
    Built unvalidated: the key lies in a domain pools may not use, which is why it is ours."""
    return Taint.model_construct(key=TENANT_TAINT, value=namespace, effect="NoSchedule")


def url_parts(url: str) -> tuple[str, str, int, tuple[str, ...]] | None:
    """(scheme, host, port, path segments) of a plain http(s) URL as a server resolves it;
    None for anything else (another scheme, no host, a bad port, user info, a query or a
    fragment) and for a path whose meaning depends on the server.

    The path is normalised as RFC 3986 says (yarl's parsing, section 6.2.2): percent-encoded
    unreserved characters decoded, then dot segments removed — so `/team-a/../team-b`,
    `/team-a/%2e%2e/team-b` and `/team-a/.%2E/team-b` are all `/team-b`, as the server that
    receives them reads them. A segment still holding an encoded `/` or `\\`, a `\\`, or an
    encoded `%` (`%2F`, `%5C`, `%25`) is refused: whether a server or a proxy before it
    decodes it (into a separator, or into a dot segment on a second decoding) is its own
    choice, so no prefix can be judged for it.
    """
    try:
        parsed = URL(url.strip())
        port = parsed.port
        raw_path = parsed.raw_path
    except (ValueError, TypeError):
        return None
    scheme = parsed.scheme.lower()
    if scheme not in ("http", "https") or not parsed.host or not parsed.absolute:
        return None
    if (
        parsed.raw_user is not None
        or parsed.raw_password is not None
        or parsed.raw_query_string
        or parsed.raw_fragment
        or "?" in url
        or "#" in url
    ):
        return None
    raw_segments = [part for part in raw_path.split("/") if part]
    if any(_AMBIGUOUS_IN_PATH.search(part) for part in raw_segments):
        return None
    segments = tuple(unquote(part) for part in raw_segments)
    return scheme, parsed.host.lower(), port or (443 if scheme == "https" else 80), segments


def inventory_key(machine: str) -> str:
    """What an inventory entry or a NodeClass's machine is matched by: a BMC address by its
    host (every system behind it; any scheme, port or path reaches the same hardware), any
    other text as a machine name."""
    if "://" in machine:
        parts = url_parts(machine)
        return f"bmc:{parts[1]}" if parts else f"unparsed:{machine}"
    return f"name:{machine}"


# In a path segment, what a server may or may not decode into a separator or a dot segment:
# an encoded slash, backslash or percent sign, and a raw backslash (a separator to some).
_AMBIGUOUS_IN_PATH = re.compile(r"%2f|%5c|%25|\\", re.IGNORECASE)


def _endpoint_message(service: str, path: str, url: str) -> str:
    parts = url_parts(url)
    shown = (
        f"{parts[0]}://{parts[1]}:{parts[2]}/{'/'.join(parts[3])}" if parts else reprlib.repr(url)
    )
    if service == "fake":
        instead = "the fake provider has no public API: it is for the embedded demo and tests"
    elif service in LIVE_CATALOG_PROVIDERS:
        instead = (
            f"a {service} endpoint is the operator's own machine API: there is no public one "
            "to fall back to"
        )
    elif service == "tailscale":
        instead = "remove the field to use https://api.tailscale.com"
    else:
        instead = f"remove the field to use {service}'s own API"
    if service in CLEARTEXT_EXACT_SERVICES and parts is not None and parts[0] == "http":
        instead += (
            f" (plain http: the token and the first-boot scripts in cleartext; use https, or "
            f"an operator lists this very URL as an http:// entry of "
            f"CLOUDBURST_ALLOWED_ENDPOINTS[{service}], which no prefix stands for)"
        )
    return (
        f"{path} {shown} is not an endpoint the operator allows for {service} (the credential "
        f"would be sent there): {instead}, or an operator adds it to "
        f"CLOUDBURST_ALLOWED_ENDPOINTS[{service}] of the worker and the trigger (docs/security.md)"
    )
