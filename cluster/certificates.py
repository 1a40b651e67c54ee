"""Whether a kubelet's certificate signing request is a claim's: the CSR approver's judgement.

kubeadm's `kubeadm:node-autoapprove-bootstrap` binding lets kube-controller-manager approve any
kubelet client CSR any bootstrap token makes, for any node name: whoever holds one join token
(a tenant holds its machines' user data) can become `system:node:<any name>`. Cloudburst's
approver (`cloudburst csr-approver`, docs/security.md) replaces it and approves only:

- a kubelet **client** certificate (`kubernetes.io/kube-apiserver-client-kubelet`) for
  `system:node:<name>` requested with a bootstrap token that carries the group of the claim
  named `<name>` (`claim_token_group`; the API server takes a token's
  groups from its Secret in kube-system, which only the worker writes), while that claim is
  launching (its NodeClaim exists, is not being deleted and has no Ready node yet);
- its **renewal**, requested by `system:node:<name>` itself, while the claim whose VM the
  Node is (its whole providerID, `cluster/node_identity.py`) lives;
- a kubelet **serving** certificate (`kubernetes.io/kubelet-serving`) for `system:node:<name>`
  whose DNS names are the node's name and whose IP addresses are those the claim recorded for
  its VM, while the claim lives and the Node's providerID is its VM's.

Each also asks for no longer than the approver's bound (`expirationSeconds`; without it the
signer's `--cluster-signing-duration` applies). Everything else is left pending with a reason.
Pure: the approver gathers the facts, this judges them.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.x509.oid import NameOID

from cluster.node_identity import is_claims_node

KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"
NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
BOOTSTRAP_USER_PREFIX = "system:bootstrap:"
# A claim's join token's extra group (`claim_token_group`): readable, or hashed where too long.
CLAIM_GROUP_PREFIX = "system:bootstrappers:cloudburst:nodeclaim:"
CLAIM_GROUP_HASH_PREFIX = "system:bootstrappers:cloudburst:nodeclaim-sha256:"
CLAIM_GROUP_PREFIXES = (CLAIM_GROUP_PREFIX, CLAIM_GROUP_HASH_PREFIX)
# The API server's pattern for a token's extra groups (k8s.io/cluster-bootstrap,
# token/api BootstrapGroupPattern): one group outside it and the token authenticates nobody.
_BOOTSTRAP_GROUP = re.compile(r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\Z")
# The usages kube-controller-manager's own approver accepts for each (k8s.io/kubernetes
# pkg/apis/certificates: ValidateKubeletClientCSR, ValidateKubeletServingCSR).
_CLIENT_REQUIRED = frozenset({"client auth"})
_CLIENT_ALLOWED = frozenset({"client auth", "digital signature", "key encipherment"})
_SERVING_REQUIRED = frozenset({"server auth"})
_SERVING_ALLOWED = frozenset({"server auth", "digital signature", "key encipherment"})

APPROVED = "ClaimVerified"


@dataclass(frozen=True)
class CertificateRequest:
    """A CertificateSigningRequest as the approver reads it: its spec and its PEM request."""

    name: str
    signer: str
    username: str
    groups: frozenset[str]
    usages: frozenset[str]
    expiration_seconds: int | None
    common_name: str | None
    organizations: tuple[str, ...]
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    # Email addresses or URIs: no kubelet certificate carries either.
    other_names: bool = False

    @property
    def node_name(self) -> str | None:
        if self.common_name and self.common_name.startswith(NODE_USER_PREFIX):
            return self.common_name.removeprefix(NODE_USER_PREFIX) or None
        return None


@dataclass(frozen=True)
class ClaimFacts:
    """A NodeClaim named like the node (in any namespace), as the cluster has it."""

    namespace: str
    name: str
    token_group: str
    deleting: bool
    # Its join under way: Pending, Provisioning or Joining (no Ready node yet).
    launching: bool
    # Failed or Deleted: a failed claim's NodeClaim stays to show why, its node's life is over.
    ended: bool = False
    instance_id: str | None = None
    addresses: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class CertificateVerdict:
    approve: bool
    reason: str
    message: str


def claim_token_group(namespace: str, claim_name: str) -> str:
    """The extra group naming the claim whose join token carries it.

    `system:bootstrappers:cloudburst:nodeclaim:<namespace>:<name>`, each '.' of the name
    written ':' (the API server allows only [a-z0-9:-] there). A namespace has neither '.'
    nor ':' and a name no ':', so the first ':' after the prefix ends the namespace and the
    group names one claim only. Where that would not fit the pattern (256 characters after
    `system:bootstrappers:`), `...:nodeclaim-sha256:<hex>` of `<namespace>/<name>` does.
    """
    readable = f"{CLAIM_GROUP_PREFIX}{namespace}:{claim_name.replace('.', ':')}"
    if ":" not in namespace + claim_name and _BOOTSTRAP_GROUP.match(readable):
        return readable
    digest = hashlib.sha256(f"{namespace}/{claim_name}".encode()).hexdigest()
    return CLAIM_GROUP_HASH_PREFIX + digest


def read_request(
    name: str,
    spec: dict[str, object],
    request_pem: bytes,
) -> CertificateRequest | CertificateVerdict:
    """The request, or the verdict on one whose PEM is not a certificate request."""
    try:
        parsed = x509.load_pem_x509_csr(request_pem)
    except ValueError:
        return _pending("UnreadableRequest", "spec.request is not a PEM certificate request")
    subject = parsed.subject
    common_names = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    try:
        alternative = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns_names = tuple(alternative.get_values_for_type(x509.DNSName))
        ips = tuple(str(ip) for ip in alternative.get_values_for_type(x509.IPAddress))
        others = bool(
            alternative.get_values_for_type(x509.RFC822Name)
            or alternative.get_values_for_type(x509.UniformResourceIdentifier)
        )
    except x509.ExtensionNotFound:
        dns_names, ips, others = (), (), False
    expiration = spec.get("expirationSeconds")
    return CertificateRequest(
        name=name,
        signer=str(spec.get("signerName") or ""),
        username=str(spec.get("username") or ""),
        groups=frozenset(str(g) for g in _strings(spec.get("groups"))),
        usages=frozenset(str(u) for u in _strings(spec.get("usages"))),
        expiration_seconds=int(expiration) if isinstance(expiration, int) else None,
        common_name=str(common_names[0].value) if len(common_names) == 1 else None,
        organizations=tuple(
            str(o.value) for o in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        ),
        dns_names=dns_names,
        ip_addresses=ips,
        other_names=others,
    )


def judge(
    request: CertificateRequest,
    claims: Iterable[ClaimFacts],
    node_provider_id: str | None,
    max_expiration_seconds: int,
) -> CertificateVerdict:
    """Approve, or say why the request stays pending. `claims`: the NodeClaims named like the
    requested node, in every namespace; `node_provider_id`: that Node's, if it exists."""
    if request.signer not in (KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER):
        return _pending("NotAKubeletSigner", f"signer {request.signer!r} is not a kubelet's")
    node = request.node_name
    if node is None or request.organizations != (NODES_GROUP,) or request.other_names:
        return _pending(
            "NotAKubeletRequest",
            f"the subject must be O={NODES_GROUP}, CN={NODE_USER_PREFIX}<node name>, with no "
            "email or URI names",
        )
    if (
        request.expiration_seconds is not None
        and request.expiration_seconds > max_expiration_seconds
    ):
        return _pending(
            "LifetimeTooLong",
            f"expirationSeconds {request.expiration_seconds} is over the approver's bound of "
            f"{max_expiration_seconds}",
        )
    claims = list(claims)
    if request.signer == KUBELET_CLIENT_SIGNER:
        if request.dns_names or request.ip_addresses:
            return _pending("NotAKubeletRequest", "a kubelet client certificate names no hosts")
        if not _usages_fit(request.usages, _CLIENT_REQUIRED, _CLIENT_ALLOWED):
            return _pending("UnexpectedUsages", f"usages {sorted(request.usages)}")
        if request.username.startswith(BOOTSTRAP_USER_PREFIX):
            return _first_join(request, node, claims)
        if request.username == NODE_USER_PREFIX + node:
            return _while_claim_lives(node, claims, node_provider_id, "renewal")
        return _pending(
            "NotTheNodesOwnRequest",
            f"requested by {request.username!r}: a client certificate for {node!r} is "
            "approved for a claim's join token or for the node itself",
        )
    if request.username != NODE_USER_PREFIX + node:
        return _pending(
            "NotTheNodesOwnRequest",
            f"requested by {request.username!r}: a node's serving certificate is approved for "
            "the node itself",
        )
    if not _usages_fit(request.usages, _SERVING_REQUIRED, _SERVING_ALLOWED):
        return _pending("UnexpectedUsages", f"usages {sorted(request.usages)}")
    living = _while_claim_lives(node, claims, node_provider_id, "serving certificate")
    if not living.approve:
        return living
    claim = _node_claim(node, claims, node_provider_id)
    assert claim is not None  # _while_claim_lives found it
    strange_names = [name for name in request.dns_names if name != node]
    if strange_names:
        return _pending(
            "NotTheClaimsAddress", f"DNS names {strange_names} are not the node's name {node!r}"
        )
    strange_ips = [ip for ip in request.ip_addresses if not _recorded(ip, claim.addresses)]
    if strange_ips:
        return _pending(
            "NotTheClaimsAddress",
            f"IP addresses {strange_ips} are not among those recorded for the claim's VM "
            f"({sorted(claim.addresses) or 'none'})",
        )
    if not request.dns_names and not request.ip_addresses:
        return _pending("NotAKubeletRequest", "a serving certificate names at least one host")
    return CertificateVerdict(
        True, APPROVED, f"serving certificate of claim {claim.namespace}/{claim.name}'s node"
    )


def _first_join(
    request: CertificateRequest, node: str, claims: list[ClaimFacts]
) -> CertificateVerdict:
    groups = {g for g in request.groups if g.startswith(CLAIM_GROUP_PREFIXES)}
    if not groups:
        return _pending(
            "NotAClaimsToken",
            f"bootstrap token {request.username!r} carries no Cloudburst claim's group: not a "
            "join Cloudburst made (approve it yourself if it is one of yours)",
        )
    if len(groups) > 1:
        return _pending("NotAClaimsToken", "the token carries the groups of several claims")
    (group,) = groups
    claim = next((c for c in claims if c.token_group == group), None)
    if claim is None:
        return _pending(
            "NotTheClaimsNode",
            f"the token is not the join token of a claim named {node!r}: a claim's token joins "
            "its own node only",
        )
    if claim.deleting or not claim.launching:
        return _pending(
            "ClaimNotLaunching",
            f"claim {claim.namespace}/{claim.name} is "
            f"{'being deleted' if claim.deleting else 'past its join'}: a join token's "
            "certificate is for a launching claim's first join only",
        )
    return CertificateVerdict(
        True, APPROVED, f"join of claim {claim.namespace}/{claim.name}, with its own token"
    )


def _node_claim(
    node: str, claims: list[ClaimFacts], node_provider_id: str | None
) -> ClaimFacts | None:
    return next(
        (
            c
            for c in claims
            if c.name == node
            and not c.deleting
            and not c.ended
            and is_claims_node(node_provider_id, c.instance_id)
        ),
        None,
    )


def _while_claim_lives(
    node: str, claims: list[ClaimFacts], node_provider_id: str | None, what: str
) -> CertificateVerdict:
    claim = _node_claim(node, claims, node_provider_id)
    if claim is None:
        return _pending(
            "ClaimEnded",
            f"no live claim's VM is Node {node!r} (providerID {node_provider_id!r}): a node "
            f"gets a {what} only while its claim lives",
        )
    return CertificateVerdict(
        True, APPROVED, f"{what} of claim {claim.namespace}/{claim.name}'s node"
    )


def _usages_fit(usages: frozenset[str], required: frozenset[str], allowed: frozenset[str]) -> bool:
    return required <= usages <= allowed


def _recorded(ip: str, addresses: frozenset[str]) -> bool:
    try:
        wanted = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return any(_same_ip(wanted, known) for known in addresses)


def _same_ip(wanted: ipaddress.IPv4Address | ipaddress.IPv6Address, known: str) -> bool:
    try:
        return ipaddress.ip_address(known) == wanted
    except ValueError:
        return False


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _pending(reason: str, message: str) -> CertificateVerdict:
    return CertificateVerdict(False, reason, message)
