"""Join material for a new node: bootstrap token, CA cert hash, first-boot script.

The token and the rendered script are secrets. They live in Kubernetes Secrets; only the
Secrets' names go back to the workflow (`BootstrapRefs`), and the compute activities read the
script in-process with `read_user_data()` when they create the VM.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import re
import secrets
import shlex
import string
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.claim_authority import ClaimAuthority, own_claim
from activities.credentials import read_secret_value
from activities.kube import MERGE_PATCH, STARTUP_TAINT, is_not_found
from activities.tailscale import MintedKey, open_api, reusable_key
from api import labels
from api._base import SecretKeyRef
from api.errors import INVALID_CONFIGURATION, KUBE_CONFLICT, kube_api_error
from api.messages import BootstrapInput, BootstrapRefs
from api.nodeclaim import Offering
from api.nodeclass import NodeClassSpec
from api.nodepool import Taint
from cluster.certificates import claim_token_group
from cluster.responses import discard, resource_version
from cluster.tenancy import Tenancy

log = logging.getLogger(__name__)

TOKEN_NAMESPACE = "kube-system"
TOKEN_SECRET_TYPE = "bootstrap.kubernetes.io/token"
# The group of every claim's join token: what a join may do is bound to it (deploy/base/join.yaml:
# the reads `kubeadm join` makes and its kubelet's certificate request), and only Cloudburst's
# CSR approver approves its certificates. Not kubeadm's `default-node-token` group, which a
# cluster may bind to more (kubeadm binds its blanket CSR auto-approval to it).
JOIN_GROUP = "system:bootstrappers:cloudburst:join"
# Each token also carries a group naming its claim (`claim_token_group`), so that the CSR
# approver can tell which claim's token asked for a node's client certificate.
# The clouds whose instance metadata service the first-boot script asks for the VM's
# identity (the kubelet's --provider-id), and `plugin`, whose machines carry it in a file
# (api/plugin.py PROVIDER_ID_FILE); the fake cloud's kubelet sets its own.
METADATA_PROVIDERS = (
    "aws",
    "gcp",
    "azure",
    "hetzner",
    "scaleway",
    "digitalocean",
    "ovh",
    "plugin",
    # No metadata service: the VM's SMBIOS serial (Proxmox), the seed's meta-data (Redfish).
    "proxmox",
    "redfish",
)
# Where the script cannot learn its region from the machine: the offering's is rendered.
RENDERED_REGION_PROVIDERS = ("ovh", "proxmox", "redfish")
TOKEN_ALPHABET = string.ascii_lowercase + string.digits
TOKEN_PURPOSE = "bootstrap-token"
SCRIPT_PURPOSE = "bootstrap-script"
SCRIPT_KEY = "userdata"
# The script Secret keeps the join token beside the script: a retry reuses it from there.
TOKEN_KEY = "token"
# Token ids are random: a new one taken by another claim's token is drawn again.
_TOKEN_ID_ATTEMPTS = 5
CLUSTER_INFO_NAMESPACE = "kube-public"
CLUSTER_INFO_NAME = "cluster-info"
# How long one read of the cluster's CA serves the claims that follow it on this worker: a
# burst's claims all ask at once, and the CA changes only when an operator rotates it, a
# manual change of minutes (a script rendered in this window after cluster-info changed
# pins the old CA; its node cannot join and the claim fails registration, as any node
# that cannot join does).
CA_HASH_TTL = timedelta(seconds=60)
# Hetzner's user_data limit, the smallest of the providers we support.
MAX_USER_DATA_BYTES = 32 * 1024
# A token this close to expiry is not reused: the VM might not boot before it lapses.
MIN_REUSE_VALIDITY = timedelta(minutes=5)
USER_DATA_TOO_LARGE = "UserDataTooLarge"
# Stands in for the token when checking that a configuration renders, before minting one.
_SAME_LENGTH_TOKEN = "abcdef.0123456789abcdef"
# ...and for a per-node Tailscale key before it is minted (longer than the keys we have seen).
_SAME_LENGTH_AUTH_KEY = "tskey-auth-" + "x" * 100
# The oldest Kubernetes minor pkgs.k8s.io publishes packages for.
MIN_KUBERNETES = (1, 24)

_DNS_LABELISH = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_K8S_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)$")
# A region as a providerID path segment (and safe unquoted in YAML).
_REGION = re.compile(r"^[A-Za-z0-9._-]{1,63}$")


class _Template(string.Template):
    # `@@{NAME}`: bash never writes `@@`, so the script needs no `$$` escaping.
    delimiter = "@@"


def _invalid(message: str) -> ApplicationError:
    return ApplicationError(message, type=INVALID_CONFIGURATION, non_retryable=True)


# --- pure helpers ---------------------------------------------------------------------------


def ca_cert_hash(pem: bytes | str) -> str:
    """kubeadm's discovery hash: `sha256:` + hex SHA-256 of the CA's DER SubjectPublicKeyInfo.

    The same as `openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256sum`.
    """
    data = pem.encode() if isinstance(pem, str) else pem
    cert = x509.load_pem_x509_certificate(data)
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def new_token() -> tuple[str, str]:
    """A kubeadm bootstrap token as (id, secret): `[a-z0-9]{6}` and `[a-z0-9]{16}`."""
    token_id = "".join(secrets.choice(TOKEN_ALPHABET) for _ in range(6))
    token_secret = "".join(secrets.choice(TOKEN_ALPHABET) for _ in range(16))
    return token_id, token_secret


def api_server_endpoint(host_api_server: str) -> str:
    """`host:port` for kubeadm discovery from a URL or address (6443 when no port is given)."""
    raw = host_api_server.strip()
    parts = urlsplit(raw if "://" in raw else f"https://{raw}")
    try:
        port = parts.port
    except ValueError:
        raise _invalid(f"join.hostApiServer {raw!r} has an invalid port") from None
    host = parts.hostname
    if not host:
        raise _invalid(f"join.hostApiServer {raw!r} has no host")
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{host}:{port or 6443}"


def _yaml_str(value: str) -> str:
    # A JSON string is a valid YAML double-quoted scalar, on one line (so it cannot end the
    # heredoc) and with every special character escaped.
    return json.dumps(value)


def registration_taints(taints: list[Taint]) -> list[Taint]:
    """The pool's taints plus the startup taint the claim lifts once it has synced labels.

    NoSchedule, not NoExecute: kube-scheduler binds a waiting pod within milliseconds of the
    taint's lifting, and kube-controller-manager's taint eviction controller, whose Node and
    Pod informers are not ordered with each other, can see that bind before the lifting and
    delete the pod at once (kubernetes/kubernetes#119862, #139992). A NoSchedule taint keeps
    the scheduler off the node just the same, and that controller never acts on it."""
    kept = [t for t in taints if t.key != STARTUP_TAINT]
    return [*kept, Taint(key=STARTUP_TAINT, value="true", effect="NoSchedule")]


def registration_labels(
    claim_name: str,
    namespace: str,
    node_pool: str,
    labels_in: dict[str, str],
    offering: Offering | None,
) -> dict[str, str]:
    """The labels a node registers with: the pool's template labels, namespace, pool and
    claim, and (when the offering is known) provider, region, instance type and capacity type.

    Labels a kubelet may not set on itself (`node-restriction.kubernetes.io/`, which the
    NodeRestriction admission plugin reserves for the control plane, and a kubelet refuses
    to start with) are left out: the claim's worker sets them once the node is its VM's.
    """
    kept = {key: value for key, value in labels_in.items() if labels.kubelet_may_set(key)}
    result = {
        **kept,
        **labels.ownership_labels(claim_name, namespace=namespace, node_pool=node_pool),
    }
    if offering is not None:
        result[labels.PROVIDER] = offering.provider
        result[labels.REGION] = offering.region
        result[labels.INSTANCE_TYPE] = offering.instance_type
        result[labels.CAPACITY_TYPE] = offering.capacity_type
        result[labels.KARPENTER_CAPACITY_TYPE] = offering.capacity_type
    return result


def render_claim_script(
    *,
    claim_name: str,
    namespace: str,
    node_pool: str,
    node_class: NodeClassSpec,
    node_labels: dict[str, str],
    taints: list[Taint],
    offering: Offering | None,
    token: str,
    ca_hash: str,
    tailscale_auth_key: str | None,
) -> str:
    """The first-boot script of one claim: what `prepare_bootstrap` stores and what
    `cloudburst bootstrap render` prints (with placeholders for the secrets)."""
    provider, region = _identity_source(node_class, offering)
    return render_script(
        namespace=namespace,
        claim_name=claim_name,
        kubernetes_version=node_class.bootstrap.kubernetes_version,
        api_server=api_server_endpoint(node_class.join.host_api_server),
        token=token,
        ca_hash=ca_hash,
        node_labels=registration_labels(claim_name, namespace, node_pool, node_labels, offering),
        taints=taints,
        tailscale_auth_key=tailscale_auth_key,
        provider=provider,
        region=region,
    )


def _identity_source(
    node_class: NodeClassSpec, offering: Offering | None
) -> tuple[str | None, str | None]:
    """Whose metadata service the script asks for the VM's identity, and the region to name
    where the machine cannot learn it (OVH's, a Proxmox cluster, a Redfish site): the
    offering's. Without one (a preview, or a claim whose single render precedes its
    offerings) the class's provider when it has only one, which every offering of the class
    is; else none, and the kubelet gets no provider ID."""
    if offering is not None:
        rendered = offering.provider in RENDERED_REGION_PROVIDERS
        return offering.provider, offering.region if rendered else None
    providers = node_class.configured_providers()
    if len(providers) != 1:
        return None, None
    region = None
    if node_class.ovh is not None:
        region = node_class.ovh.region
    elif node_class.proxmox is not None:
        region = node_class.proxmox.cluster
    elif node_class.redfish is not None:
        region = node_class.redfish.site
    return providers[0], region


def render_script(
    *,
    namespace: str,
    claim_name: str,
    kubernetes_version: str,
    api_server: str,
    token: str,
    ca_hash: str,
    node_labels: dict[str, str],
    taints: list[Taint],
    tailscale_auth_key: str | None,
    provider: str | None = None,
    region: str | None = None,
) -> str:
    """The first-boot script, from `bootstrap.sh.tmpl` beside this module.

    Values landing in shell are `shlex.quote`d; values in the join YAML are JSON-quoted.
    The node registers with `taints` plus the startup taint (`registration_taints`), and
    with `--provider-id` read from `provider`'s metadata service (one of
    `METADATA_PROVIDERS`; `region` names the region where the machine cannot learn it, one of
    `RENDERED_REGION_PROVIDERS`); `fake` or None: no lookup.
    """
    if not _DNS_LABELISH.match(claim_name):
        raise _invalid(f"claim name {claim_name!r} is not a valid node/host name")
    if not _DNS_LABELISH.match(namespace):
        raise _invalid(f"namespace {namespace!r} is not valid")
    version = _K8S_VERSION.match(kubernetes_version.strip())
    if not version:
        raise _invalid(
            f"bootstrap.kubernetesVersion {kubernetes_version!r} is not MAJOR.MINOR.PATCH"
        )
    major, minor, patch = (int(part) for part in version.groups())
    if (major, minor) < MIN_KUBERNETES:
        raise _invalid(
            f"bootstrap.kubernetesVersion {kubernetes_version!r}: pkgs.k8s.io has packages "
            f"from {MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]} on"
        )
    lookup = None if provider in (None, "fake") else provider
    if lookup is not None and lookup not in METADATA_PROVIDERS:
        raise _invalid(f"no instance metadata lookup for provider {provider!r}")
    if lookup in RENDERED_REGION_PROVIDERS and not _REGION.match(region or ""):
        raise _invalid(f"{lookup} region {region!r} is not a region name (spec.{lookup})")
    # kubeadm reads JoinConfiguration v1beta4 from 1.31 on; older releases only v1beta3.
    beta4 = (major, minor) >= (1, 31)
    template = _Template(
        resources.files("activities").joinpath("bootstrap.sh.tmpl").read_text(encoding="utf-8")
    )
    script = template.substitute(
        CLAIM_COMMENT=f"{namespace}/{claim_name}",
        NODE_NAME=shlex.quote(claim_name),
        K8S_VERSION=shlex.quote(f"{major}.{minor}.{patch}"),
        K8S_MINOR=shlex.quote(f"{major}.{minor}"),
        TAILSCALE_ENABLED="true" if tailscale_auth_key is not None else "false",
        TAILSCALE_AUTHKEY=shlex.quote(tailscale_auth_key or ""),
        PROVIDER=shlex.quote(lookup or ""),
        REGION=shlex.quote(region if lookup in RENDERED_REGION_PROVIDERS and region else ""),
        KUBELET_ARGS_FORM="list" if beta4 else "map",
        JOIN_API_VERSION="kubeadm.k8s.io/v1beta4" if beta4 else "kubeadm.k8s.io/v1beta3",
        API_SERVER_ENDPOINT=_yaml_str(api_server),
        TOKEN=_yaml_str(token),
        CA_CERT_HASH=_yaml_str(ca_hash),
        NODE_NAME_YAML=_yaml_str(claim_name),
        TAINTS=_render_taints(registration_taints(taints)),
        KUBELET_EXTRA_ARGS=_render_kubelet_args(
            {"node-labels": _render_node_labels(node_labels)}, beta4
        ),
    )
    size = len(script.encode())
    if size > MAX_USER_DATA_BYTES:
        raise ApplicationError(
            f"first-boot script is {size} bytes, over the {MAX_USER_DATA_BYTES}-byte user-data "
            "limit (Hetzner's, the smallest provider limit); reduce node labels/taints",
            type=USER_DATA_TOO_LARGE,
            non_retryable=True,
        )
    return script


def _render_taints(taints: list[Taint]) -> str:
    items = []
    for taint in taints:
        fields = [f"key: {_yaml_str(taint.key)}"]
        if taint.value is not None:
            fields.append(f"value: {_yaml_str(taint.value)}")
        fields.append(f"effect: {_yaml_str(taint.effect)}")
        items.append("{" + ", ".join(fields) + "}")
    return "[" + ", ".join(items) + "]"


def _render_kubelet_args(args: dict[str, str], beta4: bool) -> str:
    # v1beta4 has a list of {name, value}; v1beta3 a map.
    if beta4:
        return "\n".join(
            f"    - {{name: {_yaml_str(k)}, value: {_yaml_str(v)}}}" for k, v in args.items()
        )
    return "\n".join(f"    {_yaml_str(k)}: {_yaml_str(v)}" for k, v in args.items())


def _render_node_labels(node_labels: dict[str, str]) -> str:
    for key, value in node_labels.items():
        # kubelet's --node-labels is comma-separated `k=v`: only valid labels survive it.
        if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
            raise _invalid(f"invalid node label {key}={value!r}")
    return ",".join(f"{k}={v}" for k, v in sorted(node_labels.items()))


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def _unb64(value: bytes | str | None) -> str:
    if value is None:
        return ""
    try:
        return base64.b64decode(value).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_rfc3339(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _secret_write_error(err: ApiException, what: str) -> ApplicationError:
    """Keep the status, drop the body (it could echo the Secret we sent)."""
    permanent = err.status in (400, 422)
    return ApplicationError(
        f"{what} failed: HTTP {err.status} {err.reason or ''}".strip(),
        type=INVALID_CONFIGURATION if permanent else kube_api_error(err.status),
        non_retryable=permanent,
    )


class ScriptHandoff:
    """The first-boot scripts this worker has just written, for its own create calls: the
    script Secret is read back only when another worker (or a try before a crash) wrote it.

    Keyed by the Secret's resourceVersion as written, so a script written again since (a
    retry, the claim's next offering) is never taken for it; each is taken once (a retried
    create reads the Secret) and only the latest `capacity` are kept (a claim may fail
    between its bootstrap and its create)."""

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._scripts: OrderedDict[tuple[str, str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, namespace: str, name: str, version: str, script: str) -> None:
        with self._lock:
            self._scripts[(namespace, name, version)] = script
            while len(self._scripts) > self._capacity:
                self._scripts.popitem(last=False)

    def take(self, refs: BootstrapRefs) -> str | None:
        if refs.script_version is None:
            return None
        with self._lock:
            return self._scripts.pop(
                (refs.namespace, refs.script_secret, refs.script_version), None
            )


def read_user_data(
    core_api: client.CoreV1Api, refs: BootstrapRefs, handoff: ScriptHandoff | None = None
) -> str:
    """The rendered first-boot script, for in-process use by the compute activities only.

    Never return it from an activity: it would land in workflow history with its token.
    `refs.namespace` is the worker's namespace (or, in histories from before the move, the
    pool's).
    """
    written_here = handoff.take(refs) if handoff is not None else None
    if written_here is not None:
        return written_here
    return read_secret_value(
        core_api, refs.namespace, SecretKeyRef(name=refs.script_secret, key=SCRIPT_KEY)
    )


@dataclass(frozen=True)
class _Token:
    """A kubeadm bootstrap token: `<id>.<secret>`, in Secret `bootstrap-token-<id>`."""

    token_id: str
    token_secret: str = field(repr=False)
    expires_at: datetime

    @property
    def value(self) -> str:
        return f"{self.token_id}.{self.token_secret}"

    @property
    def secret_name(self) -> str:
        return f"bootstrap-token-{self.token_id}"

    @classmethod
    def new(cls, ttl_minutes: int) -> _Token:
        token_id, token_secret = new_token()
        expires = (datetime.now(UTC) + timedelta(minutes=ttl_minutes)).replace(microsecond=0)
        return cls(token_id, token_secret, expires)


class BootstrapActivities:
    """`prepare_bootstrap` and `delete_bootstrap_secrets`; one instance per worker.

    Where the Secrets live, and why (docs/security.md):
    - the bootstrap token in `kube-system`, where the API server's bootstrap authenticator
      looks for it; the worker may create and delete Secrets there, never read them;
    - the first-boot script (with the token, and the node's Tailscale key) in the worker's
      own namespace, never in the pool's, where anyone who may read Secrets of that namespace
      would find a join token. The script Secret also records which token it carries (name
      and expiry, annotations), so a retry reuses the token without reading kube-system, and
      the orphan GC finds a leftover token from it.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        tenancy: Tenancy | None = None,
        ca_hash_ttl: timedelta = CA_HASH_TTL,
        handoff: ScriptHandoff | None = None,
    ) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.tenancy = tenancy or Tenancy()
        self.authority = ClaimAuthority(api_client, self.tenancy)
        self.handoff = handoff
        self._ca_hash_ttl_s = ca_hash_ttl.total_seconds()
        # (hash, when read on the monotonic clock)
        self._ca_hash: tuple[str, float] | None = None

    @property
    def namespace(self) -> str:
        """Where the script Secrets live: the worker's own namespace."""
        return self.tenancy.worker_namespace

    def activities(self) -> list[Callable[..., Any]]:
        return [self.prepare_bootstrap, self.delete_bootstrap_secrets]

    @staticmethod
    def script_secret_name(claim_namespace: str, claim_name: str) -> str:
        """`<namespace>.<claim>-bootstrap`: one claim's alone. All claims' scripts share the
        worker's namespace, and a namespace name has no dot, so same-named claims of two
        namespaces never meet here (each would overwrite, reuse and later delete the other's
        token and script under one name)."""
        return f"{claim_namespace}.{claim_name}-bootstrap"

    # --- activities -------------------------------------------------------------------------

    @activity.defn(name="prepare_bootstrap")
    def prepare_bootstrap(self, input: BootstrapInput) -> BootstrapRefs:
        """Script Secret (token reused when it still has one valid), token Secret; names back.

        Order matters for a retry after a crash: the script Secret, which records the token,
        is written before the token Secret is created, so a retry finds the token it may
        reuse (and creating the token Secret again is a harmless 409).
        """
        # What the cluster authorises (activities/claim_authority.py): the NodeClaim behind
        # the claim, its NodeClass as the cluster has it (the Secrets it names, its endpoints),
        # its labels and taints; nothing is read, minted or created for a claim without one.
        warrant = self.authority.warrant(input.namespace, input.claim_name, input.claim_uid)
        node_labels, taints = warrant.node_marks(input.labels, input.taints)
        if input.offering is not None:
            warrant.require_offering(input.offering)
        input = input.model_copy(
            update={
                "node_class": warrant.node_class,
                "node_pool": warrant.node_pool,
                "labels": node_labels,
                "taints": taints,
            }
        )
        spec = input.node_class
        # Nothing is read, minted or sent for a namespace or an endpoint the operator does not
        # allow: the Tailscale API's, and the provider's this script is for. Refused here, the
        # claim fails before it launches anything (so its cleanup has no VM to look for).
        services = ("tailscale", *((input.offering.provider,) if input.offering else ()))
        self.tenancy.require(input.namespace, spec, services=services)
        ca_hash = self._cluster_ca_hash()
        tailscale = spec.tailscale
        reusable = None
        if tailscale is not None and not tailscale.minted:
            reusable = reusable_key(self.core, input.namespace, tailscale)

        def render(token: str, auth_key: str | None) -> str:
            return render_claim_script(
                claim_name=input.claim_name,
                namespace=input.namespace,
                node_pool=input.node_pool,
                node_class=spec,
                node_labels=input.labels,
                taints=input.taints,
                offering=input.offering,
                token=token,
                ca_hash=ca_hash,
                tailscale_auth_key=auth_key,
            )

        # A configuration that cannot render (bad label, version, size) mints nothing.
        placeholder = reusable or (_SAME_LENGTH_AUTH_KEY if tailscale is not None else None)
        render(_SAME_LENGTH_TOKEN, placeholder)
        script_secret = self.script_secret_name(input.namespace, input.claim_name)
        # Created without a read first: a claim's first try finds no script (a burst starts
        # hundreds at once, and this is on the way to the VM's create call). A 409 is an
        # earlier try's script, whose token is reused while valid: read, then replaced. With
        # a key minted per node the script is read first, so no key is minted for nothing.
        minting = bool(tailscale and tailscale.minted)
        previous = self._read_script(script_secret) if minting else None
        reused = _reusable_token(previous)
        token = reused or _Token.new(spec.join.token_ttl_minutes)
        replace = minting
        for _ in range(_TOKEN_ID_ATTEMPTS + 1):  # + the try that finds an earlier script
            minted = self._mint_tailscale_key(input, token) if minting else None
            try:
                script = render(token.value, minted.key if minted else reusable)
                version = self._put_script(
                    input.namespace,
                    input.claim_name,
                    script_secret,
                    script,
                    token,
                    minted,
                    replace=replace,
                )
            except BaseException:
                self._revoke(input, minted)
                raise
            if version is None:
                self._revoke(input, minted)
                previous = self._read_script(script_secret)
                reused = _reusable_token(previous)
                token = reused or _Token.new(spec.join.token_ttl_minutes)
                replace = True
                continue
            replace = True  # a token id taken below: the script is written again
            self._revoke(input, _tailscale_key_id(previous), keep=minted)
            if self._create_token_secret(input.namespace, input.claim_name, token, token == reused):
                break
            # The id is another claim's: draw again (the script Secret is rewritten with it).
            previous = self._read_script(script_secret)
            token = _Token.new(spec.join.token_ttl_minutes)
        else:
            raise ApplicationError(
                "could not find a free bootstrap token id in kube-system", type=KUBE_CONFLICT
            )
        log.info(
            "bootstrap material for %s/%s ready (token secret %s/%s, script secret %s/%s%s)",
            input.namespace,
            input.claim_name,
            TOKEN_NAMESPACE,
            token.secret_name,
            self.namespace,
            script_secret,
            ", a per-node Tailscale key" if tailscale and tailscale.minted else "",
        )
        if version and self.handoff is not None:
            self.handoff.keep(self.namespace, script_secret, version, script)
        return BootstrapRefs(
            namespace=self.namespace,
            token_secret=token.secret_name,
            token_secret_namespace=TOKEN_NAMESPACE,
            script_secret=script_secret,
            token_expires_at=token.expires_at,
            script_version=version or None,
        )

    @activity.defn(name="delete_bootstrap_secrets")
    def delete_bootstrap_secrets(self, refs: BootstrapRefs) -> None:
        """Delete the token and script Secrets; already gone is fine.

        The token goes first: a script Secret left behind (this activity failed between the
        two) still names it, for the orphan GC. Only the claim's own: the script Secret of the
        claim whose workflow this runs for, and the token that script records.
        """
        claim_namespace, claim_name = own_claim()
        if refs.namespace == self.namespace:
            script = self._read_script(refs.script_secret)
            if refs.script_secret == _legacy_script_secret_name(claim_name):
                # A claim that began under a release naming scripts `<claim>-bootstrap`: its
                # script still goes with it, unless that name now holds a same-named claim's
                # of another namespace (which overwrote it): that one, and the token it
                # records, are left to their own claim (this claim's token expires).
                if script is not None and not _is_claims(script, claim_namespace, claim_name):
                    log.warning(
                        "first-boot script Secret %s/%s is another claim's now; left to it",
                        self.namespace,
                        refs.script_secret,
                    )
                    return
            elif refs.script_secret != self.script_secret_name(claim_namespace, claim_name):
                raise self.authority.refused(
                    f"Secret {refs.script_secret} is not claim {claim_name}'s first-boot script"
                )
            recorded = _annotations(script).get(labels.TOKEN_SECRET)
            if recorded is None:
                return  # no script: its token went first, an earlier attempt deleted both
            if recorded != refs.token_secret:
                raise self.authority.refused(
                    f"token {refs.token_secret} is not the one claim {claim_name}'s script records"
                )
        for namespace, name in (
            (refs.token_secret_namespace, refs.token_secret),
            (refs.namespace, refs.script_secret),
        ):
            try:
                discard(self.core.delete_namespaced_secret(name, namespace, _preload_content=False))
            except ApiException as err:
                if is_not_found(err):
                    continue
                if err.status == 403 and namespace not in (self.namespace, TOKEN_NAMESPACE):
                    # A claim from before script Secrets moved to the worker's namespace: its
                    # script sits in the pool's namespace, where the worker may only read. Its
                    # token is gone (above), so the script joins nothing; an operator removes
                    # it (docs/security.md, "Upgrading").
                    log.warning(
                        "cannot delete the first-boot script Secret %s/%s of an older claim "
                        "(HTTP 403); delete it by hand: its join token is already deleted",
                        namespace,
                        name,
                    )
                    continue
                raise _secret_write_error(err, f"deleting Secret {namespace}/{name}") from None

    # --- steps ------------------------------------------------------------------------------

    def _cluster_ca_hash(self) -> str:
        cached, now = self._ca_hash, time.monotonic()
        if cached is not None and now - cached[1] < self._ca_hash_ttl_s:
            return cached[0]
        ca_hash = self._read_cluster_ca_hash()
        self._ca_hash = (ca_hash, now)
        return ca_hash

    def _read_cluster_ca_hash(self) -> str:
        where = f"ConfigMap {CLUSTER_INFO_NAMESPACE}/{CLUSTER_INFO_NAME}"
        try:
            cm = self.core.read_namespaced_config_map(CLUSTER_INFO_NAME, CLUSTER_INFO_NAMESPACE)
        except ApiException as err:
            if is_not_found(err):
                raise _invalid(
                    f"{where} not found: the cluster must publish it (kubeadm does) for nodes "
                    "to discover the API server's CA"
                ) from None
            raise
        try:
            kubeconfig = yaml.safe_load((cm.data or {})["kubeconfig"])
            ca_b64 = kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]
            return ca_cert_hash(base64.b64decode(ca_b64))
        except (KeyError, IndexError, TypeError, ValueError, yaml.YAMLError, binascii.Error):
            raise _invalid(
                f"{where} has no usable kubeconfig "
                "(clusters[0].cluster.certificate-authority-data, a base64 PEM certificate)"
            ) from None

    def _read_script(self, name: str) -> client.V1Secret | None:
        try:
            return self.core.read_namespaced_secret(name, self.namespace)
        except ApiException as err:
            if is_not_found(err):
                return None
            raise _secret_write_error(err, f"reading Secret {self.namespace}/{name}") from None

    def _mint_tailscale_key(self, input: BootstrapInput, token: _Token) -> MintedKey:
        """A key for this claim alone, expiring with its join token."""
        settings = input.node_class.tailscale
        assert settings is not None
        expiry_s = int((token.expires_at - datetime.now(UTC)).total_seconds())
        with open_api(self.core, input.namespace, settings) as api:
            return api.mint_auth_key(
                list(settings.tags or []), expiry_s, f"cloudburst {input.claim_name}"
            )

    def _revoke(
        self, input: BootstrapInput, key: MintedKey | str | None, keep: MintedKey | None = None
    ) -> None:
        """Best effort: revoke a minted key no script carries any more (it would expire with
        its token anyway; a single-use key that was used is spent already)."""
        key_id = key.id if isinstance(key, MintedKey) else key
        settings = input.node_class.tailscale
        if not key_id or (keep is not None and keep.id == key_id) or settings is None:
            return
        if not settings.minted:
            return
        try:
            with open_api(self.core, input.namespace, settings) as api:
                api.revoke_key(key_id)
        except Exception as err:  # it expires on its own
            log.warning(
                "could not revoke Tailscale key %s of %s: %s", key_id, input.claim_name, err
            )

    def _create_token_secret(
        self, namespace: str, claim_name: str, token: _Token, reused: bool
    ) -> bool:
        """Create the token Secret; False when its name is taken by a token not ours.

        The worker may create Secrets in kube-system but not read them: a 409 for a token
        this claim's script Secret had recorded (`reused`: an earlier attempt got this far)
        is this token; for a token just drawn it is another claim's id.
        """
        body = client.V1Secret(
            api_version="v1",
            kind="Secret",
            type=TOKEN_SECRET_TYPE,
            metadata=client.V1ObjectMeta(
                name=token.secret_name,
                namespace=TOKEN_NAMESPACE,
                labels=labels.ownership_labels(
                    claim_name, namespace=namespace, purpose=TOKEN_PURPOSE
                ),
            ),
            data={
                k: _b64(v)
                for k, v in {
                    "description": f"Cloudburst bootstrap token for NodeClaim {namespace}/{claim_name}",
                    "token-id": token.token_id,
                    "token-secret": token.token_secret,
                    "expiration": _rfc3339(token.expires_at),
                    "usage-bootstrap-authentication": "true",
                    "usage-bootstrap-signing": "true",
                    # Cloudburst's join group (its access is bound to it), then the claim's.
                    "auth-extra-groups": ",".join(
                        (JOIN_GROUP, claim_token_group(namespace, claim_name))
                    ),
                }.items()
            },
        )
        try:
            discard(
                self.core.create_namespaced_secret(TOKEN_NAMESPACE, body, _preload_content=False)
            )
        except ApiException as err:
            if err.status == 409:
                return reused
            raise _secret_write_error(
                err, f"creating Secret {TOKEN_NAMESPACE}/{token.secret_name}"
            ) from None
        return True

    def _put_script(
        self,
        claim_namespace: str,
        claim_name: str,
        name: str,
        script: str,
        token: _Token,
        minted: MintedKey | None,
        *,
        replace: bool,
    ) -> str | None:
        """Create the script Secret; one already there is replaced (a retry may carry a
        different token or key) when `replace`, else left for the caller (None). Written:
        its resourceVersion ("" if the answer had none)."""
        secret_labels = labels.ownership_labels(
            claim_name, namespace=claim_namespace, purpose=SCRIPT_PURPOSE
        )
        annotations: dict[str, str | None] = {
            labels.TOKEN_SECRET: token.secret_name,
            labels.TOKEN_EXPIRES: _rfc3339(token.expires_at),
            labels.TAILSCALE_KEY_ID: minted.id if minted else None,
        }
        data = {SCRIPT_KEY: _b64(script), TOKEN_KEY: _b64(token.value)}
        body = client.V1Secret(
            api_version="v1",
            kind="Secret",
            type="Opaque",
            metadata=client.V1ObjectMeta(
                name=name,
                namespace=self.namespace,
                labels=secret_labels,
                annotations={k: v for k, v in annotations.items() if v is not None},
            ),
            data=data,
        )
        try:
            return resource_version(
                self.core.create_namespaced_secret(self.namespace, body, _preload_content=False)
            )
        except ApiException as err:
            if is_not_found(err):
                raise _invalid(
                    f"namespace {self.namespace} (the worker's, for first-boot script Secrets) "
                    "does not exist: create it, or set CLOUDBURST_WORKER_NAMESPACE"
                ) from None
            if err.status != 409:
                raise _secret_write_error(err, f"creating Secret {self.namespace}/{name}") from None
        if not replace:
            return None
        patch = {
            "metadata": {"labels": secret_labels, "annotations": annotations},
            "data": data,
        }
        try:
            return resource_version(
                self.core.patch_namespaced_secret(
                    name, self.namespace, patch, _content_type=MERGE_PATCH, _preload_content=False
                )
            )
        except ApiException as err:
            raise _secret_write_error(err, f"updating Secret {self.namespace}/{name}") from None


def _legacy_script_secret_name(claim_name: str) -> str:
    """The script Secret's name before it carried the claim's namespace: what the histories
    of claims begun under an earlier release record."""
    return f"{claim_name}-bootstrap"


def _is_claims(secret: client.V1Secret, claim_namespace: str, claim_name: str) -> bool:
    """Whether the Secret is labelled as claim `claim_namespace/claim_name`'s."""
    found = (secret.metadata.labels if secret.metadata else None) or {}
    return (
        found.get(labels.NODEPOOL_NAMESPACE) == claim_namespace
        and found.get(labels.NODECLAIM) == claim_name
    )


def _annotations(secret: client.V1Secret | None) -> dict[str, str]:
    if secret is None or secret.metadata is None or secret.metadata.deletion_timestamp:
        return {}
    return dict(secret.metadata.annotations or {})


def _tailscale_key_id(secret: client.V1Secret | None) -> str | None:
    return _annotations(secret).get(labels.TAILSCALE_KEY_ID)


def _reusable_token(secret: client.V1Secret | None) -> _Token | None:
    """The token an earlier attempt recorded in the script Secret, while valid long enough."""
    annotations = _annotations(secret)
    expires = _parse_rfc3339(annotations.get(labels.TOKEN_EXPIRES, ""))
    value = _unb64((secret.data or {}).get(TOKEN_KEY)) if secret is not None else ""
    token_id, _, token_secret = value.partition(".")
    if not (expires and token_id and token_secret):
        return None
    if annotations.get(labels.TOKEN_SECRET) != f"bootstrap-token-{token_id}":
        return None
    if expires - datetime.now(UTC) < MIN_REUSE_VALIDITY:
        return None
    return _Token(token_id, token_secret, expires)
