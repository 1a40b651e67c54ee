"""What `cloudburst doctor` found, as plain data: `gather.py` fills these in from the cluster
and Temporal, `checks.py` judges them. A fact records what was seen (or the error that kept it
from being seen), never whether that is good."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal


@dataclass(frozen=True)
class CrdFact:
    """One CRD as served: `versions` maps each served version to its OpenAPI schema; None
    when the CRD is not there."""

    name: str
    versions: dict[str, dict[str, Any]] | None


@dataclass(frozen=True)
class AccessFact:
    """One SubjectAccessReview of a ServiceAccount: may it do `verb` there?"""

    account: str
    namespace: str | None
    group: str
    resource: str
    verb: str
    name: str | None
    allowed: bool

    def says(self) -> str:
        where = f" in {self.namespace}" if self.namespace else " cluster-wide"
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        named = f"/{self.name}" if self.name else ""
        return f"{self.verb} {what}{named}{where}"


@dataclass(frozen=True)
class DeploymentFact:
    """A Deployment's rollout as its status says (None: the Deployment is not there)."""

    name: str
    namespace: str
    desired: int | None
    ready: int = 0
    updated: int = 0


@dataclass(frozen=True)
class TemporalFact:
    address: str
    namespace: str
    # None: reached, and the namespace is there; else why not.
    error: str | None
    # Whether the installed processes connect with TLS (their configuration), and to where.
    installed_tls: bool
    installed_address: str


@dataclass(frozen=True)
class ClusterInfoFact:
    """kube-public/cluster-info, which `kubeadm join` reads anonymously before it trusts
    anything (token discovery)."""

    found: bool
    # The server its kubeconfig names; None when absent or unreadable (`problem` says why).
    server: str | None = None
    problem: str | None = None
    # Whether system:anonymous may get it (kubeadm's Role kubeadm:bootstrap-signer-clusterinfo).
    anonymous_may_read: bool = True
    # None: a TLS handshake with `server`, verified with the CA it carries, succeeded.
    reach_error: str | None = None


@dataclass(frozen=True)
class JoinAddressFact:
    """A NodeClass's `join.hostApiServer`: where its nodes run `kubeadm join` against."""

    node_class: str
    host_api_server: str


@dataclass(frozen=True)
class BootstrapAuthFact:
    """Whether the API server authenticates bootstrap tokens, and how that was learnt:
    - "token-review": a TokenReview of a live bootstrap token found in kube-system (nothing
      created): `authenticated` is the API server's answer;
    - "apiserver-flags": the kube-apiserver static Pod's command line (kubeadm);
    - "unknown": neither was available (`detail` says why)."""

    method: Literal["token-review", "apiserver-flags", "unknown"]
    enabled: bool | None
    detail: str = ""


@dataclass(frozen=True)
class AdmissionFact:
    """A dry-run Pod in a tenant namespace that one admission plugin must refuse."""

    namespace: str
    plugin: str
    # The namespace carries the annotation the plugin reads (`cloudburst tenant-rbac`).
    annotated: bool
    refused: bool
    message: str = ""


@dataclass(frozen=True)
class CredentialFact:
    """One read-only provider call (listing this cluster's VMs) with a NodeClass's credential."""

    node_class: str
    provider: str
    # None: the provider answered; else its error.
    error: str | None


@dataclass(frozen=True)
class PriceFact:
    """The live catalog the planner uses, for the providers the NodeClasses name."""

    providers: list[str]
    max_age_h: float
    # One line a provider whose prices are older than max_age_h (the planner's own notes).
    stale: list[str]
    # Providers whose last scheduled refresh failed, with the error.
    failed: dict[str, str]


@dataclass
class Facts:
    """Everything `doctor` looks at; a gathering step that could not run leaves its error in
    `errors` under the check's name, and that check fails saying so."""

    install_namespace: str
    now: datetime
    # ConfigMap cloudburst-config is in the install namespace.
    config_found: bool = False
    crds: list[CrdFact] = field(default_factory=list)
    access: list[AccessFact] = field(default_factory=list)
    workers: list[DeploymentFact] = field(default_factory=list)
    trigger: DeploymentFact | None = None
    csr_approver: DeploymentFact | None = None
    autoapprove_binding: bool = False
    renewal_binding: bool = False
    temporal: TemporalFact | None = None
    cluster_info: ClusterInfoFact | None = None
    join_addresses: list[JoinAddressFact] = field(default_factory=list)
    bootstrap_auth: BootstrapAuthFact | None = None
    tenant_namespaces: list[str] | None = None
    admission: list[AdmissionFact] = field(default_factory=list)
    network_policies: list[str] = field(default_factory=list)
    credentials: list[CredentialFact] = field(default_factory=list)
    prices: PriceFact | None = None
    errors: dict[str, str] = field(default_factory=dict)
