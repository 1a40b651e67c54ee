"""The judgements of `cloudburst doctor`: pure functions of the gathered facts (`facts.py`),
each giving lines of ok / warn / fail, every line that is not ok with the fix. docs/doctor.md
describes each check; `tests/unit/test_doctor_checks.py` breaks each fact in turn.

A warning is something that works but is weaker than it should be (Temporal without TLS) or
that the doctor could not tell; a failure is something that stops a claim, or a promise of
docs/security.md that does not hold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel
from temporalio.exceptions import ApplicationError

from activities.bootstrap import api_server_endpoint
from cli.doctor.facts import (
    AccessFact,
    AdmissionFact,
    BootstrapAuthFact,
    ClusterInfoFact,
    CrdFact,
    CredentialFact,
    DeploymentFact,
    Facts,
    JoinAddressFact,
    PriceFact,
    TemporalFact,
)
from cli.doctor.shipped import (
    CONFIG_MAP,
    KUBEADM_AUTOAPPROVE_BINDING,
    KUBEADM_RENEWAL_BINDING,
    NETWORK_POLICIES,
    TRIGGER_ACCOUNT,
    WORKER_ACCOUNT,
)

DOCS = "docs/doctor.md"


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


class CheckLine(BaseModel):
    """One line of the report (and one object of `-o json`'s "checks")."""

    check: str
    status: Status
    message: str
    fix: str = ""


def ok(check: str, message: str) -> CheckLine:
    return CheckLine(check=check, status=Status.OK, message=message)


def warn(check: str, message: str, fix: str) -> CheckLine:
    return CheckLine(check=check, status=Status.WARN, message=message, fix=fix)


def fail(check: str, message: str, fix: str) -> CheckLine:
    return CheckLine(check=check, status=Status.FAIL, message=message, fix=fix)


def judge(facts: Facts, expected_crds: Mapping[str, Mapping[str, Any]]) -> list[CheckLine]:
    """Every check, in the order of the report. A fact its gathering could not collect fails
    its check with the reason (`facts.errors`)."""
    lines: list[CheckLine] = []
    steps: list[tuple[str, Callable[[], list[CheckLine]]]] = [
        ("config", lambda: [judge_config(facts.install_namespace, facts.config_found)]),
        ("crds", lambda: [judge_crds(facts.crds, expected_crds)]),
        ("rbac", lambda: judge_access(facts.access)),
        ("worker", lambda: [judge_deployments("worker", facts.workers)]),
        (
            "trigger",
            lambda: [judge_deployments("trigger", [facts.trigger] if facts.trigger else [])],
        ),
        ("temporal", lambda: judge_temporal(facts.temporal)),
        ("cluster-info", lambda: [judge_cluster_info(facts.cluster_info)]),
        (
            "join-address",
            lambda: [judge_join_addresses(facts.cluster_info, facts.join_addresses)],
        ),
        ("bootstrap-token-auth", lambda: [judge_bootstrap_auth(facts.bootstrap_auth)]),
        (
            "csr-approver",
            lambda: judge_csr_approval(
                facts.csr_approver, facts.autoapprove_binding, facts.renewal_binding
            ),
        ),
        (
            "admission-plugins",
            lambda: [judge_admission(facts.tenant_namespaces, facts.admission)],
        ),
        ("network-policies", lambda: [judge_network_policies(facts.network_policies)]),
        ("credentials", lambda: judge_credentials(facts.credentials)),
        ("prices", lambda: [judge_prices(facts.prices)]),
    ]
    for name, step in steps:
        error = facts.errors.get(name)
        if error is not None:
            lines.append(fail(name, f"could not check: {error}", f"see {DOCS}#{name}"))
        else:
            lines.extend(step())
    return lines


def judge_config(namespace: str, found: bool) -> CheckLine:
    if not found:
        return fail(
            "config",
            f"no ConfigMap {CONFIG_MAP} in {namespace}: the checks below judge the defaults",
            f"install Cloudburst (deploy/) into {namespace}, or pass -n <namespace>",
        )
    return ok("config", f"ConfigMap {namespace}/{CONFIG_MAP} reads as the worker's settings")


# --- CRDs -------------------------------------------------------------------------------------


def judge_crds(served: list[CrdFact], expected: Mapping[str, Mapping[str, Any]]) -> CheckLine:
    """Every CRD of this release present, each version at this release's schema
    (`expected`: CRD name -> version -> openAPIV3Schema, as `cloudburst crds` generates)."""
    fix = (
        "apply this release's CRDs: `cloudburst crds --out crds/ && kubectl apply "
        "--server-side -f crds/` (or deploy/base/crds of this release)"
    )
    by_name = {c.name: c for c in served}
    missing = [n for n in expected if by_name.get(n) is None or by_name[n].versions is None]
    if missing:
        return fail("crds", f"missing: {', '.join(sorted(missing))}", fix)
    stale = []
    for name, versions in expected.items():
        have = by_name[name].versions or {}
        for version, schema in versions.items():
            if version not in have:
                stale.append(f"{name} does not serve {version}")
            elif have[version] != schema:
                where = first_difference(schema, have[version])
                stale.append(f"{name} {version} differs at {where}")
    if stale:
        return fail("crds", "not this release's schema: " + "; ".join(stale), fix)
    return ok("crds", f"{', '.join(sorted(expected))} at this release's schema")


def first_difference(expected: Any, served: Any, path: str = "") -> str:
    """The path of the first place where `served` differs from `expected`."""
    if isinstance(expected, dict) and isinstance(served, dict):
        for key in sorted(set(expected) | set(served)):
            if expected.get(key) != served.get(key):
                return first_difference(expected.get(key), served.get(key), f"{path}.{key}")
    elif isinstance(expected, list) and isinstance(served, list) and len(expected) == len(served):
        for i, (a, b) in enumerate(zip(expected, served, strict=True)):
            if a != b:
                return first_difference(a, b, f"{path}[{i}]")
    return path or "."


# --- RBAC -------------------------------------------------------------------------------------


def judge_access(access: list[AccessFact]) -> list[CheckLine]:
    """One line a ServiceAccount: every right the shipped RBAC grants it, allowed."""
    lines = []
    for account in (WORKER_ACCOUNT, TRIGGER_ACCOUNT):
        mine = [a for a in access if a.account == account]
        denied = [a.says() for a in mine if not a.allowed]
        check = f"rbac-{account.removeprefix('cloudburst-')}"
        if denied:
            lines.append(
                fail(
                    check,
                    f"ServiceAccount {account} may not: {'; '.join(denied)}",
                    "apply the release's RBAC (deploy/base/rbac.yaml) and, per served "
                    "namespace, `cloudburst tenant-rbac <namespace>`",
                )
            )
        else:
            lines.append(ok(check, f"ServiceAccount {account} has the {len(mine)} rights it needs"))
    return lines


# --- the Deployments --------------------------------------------------------------------------


def judge_deployments(what: str, deployments: list[DeploymentFact]) -> CheckLine:
    """Every Deployment of the component rolled out with all its replicas ready."""
    check = f"{what}-ready"
    if not deployments or all(d.desired is None for d in deployments):
        names = ", ".join(d.name for d in deployments) or what
        namespace = deployments[0].namespace if deployments else "the install namespace"
        return fail(
            check,
            f"no Deployment {names} in {namespace}",
            f"install Cloudburst (deploy/) into {namespace}, or pass -n <namespace>",
        )
    problems = []
    for d in deployments:
        if d.desired is None:
            problems.append(f"{d.name} is missing")
        elif d.desired == 0:
            problems.append(f"{d.name} is scaled to 0")
        elif d.ready < d.desired or d.updated < d.desired:
            problems.append(f"{d.name}: {d.ready}/{d.desired} ready, {d.updated} updated")
    if problems:
        namespace = deployments[0].namespace
        return fail(
            check,
            "; ".join(problems),
            f"`kubectl -n {namespace} describe deployment {deployments[0].name}` and its "
            "pods' logs (a crash at start names the setting it refuses)",
        )
    said = ", ".join(f"{d.name} {d.ready}/{d.desired}" for d in deployments)
    return ok(check, f"{said} ready")


def judge_csr_approval(
    approver: DeploymentFact | None, autoapprove: bool, renewal: bool = False
) -> list[CheckLine]:
    """The CSR approver runs, and kubeadm's blanket auto-approvals are gone (docs/security.md
    "Node identity")."""
    lines = [judge_deployments("csr-approver", [approver] if approver else [])]
    if autoapprove:
        lines.append(
            fail(
                "kubeadm-autoapprove",
                f"ClusterRoleBinding {KUBEADM_AUTOAPPROVE_BINDING} exists: any bootstrap token "
                "gets a kubelet certificate for any node name",
                f"`kubectl delete clusterrolebinding {KUBEADM_AUTOAPPROVE_BINDING}` (the CSR "
                "approver approves each claim's own node)",
            )
        )
    else:
        lines.append(ok("kubeadm-autoapprove", f"{KUBEADM_AUTOAPPROVE_BINDING} is absent"))
    if renewal:
        lines.append(
            fail(
                "kubeadm-renewal",
                f"ClusterRoleBinding {KUBEADM_RENEWAL_BINDING} exists: a node renews its "
                "certificate after its claim ended",
                f"`kubectl delete clusterrolebinding {KUBEADM_RENEWAL_BINDING}` (the CSR "
                "approver renews a claim's node while the claim lives; approve your own "
                "nodes' renewals yourself)",
            )
        )
    else:
        lines.append(ok("kubeadm-renewal", f"{KUBEADM_RENEWAL_BINDING} is absent"))
    return lines


# --- Temporal ---------------------------------------------------------------------------------


def judge_temporal(temporal: TemporalFact | None) -> list[CheckLine]:
    if temporal is None:
        return [fail("temporal", "not checked", f"see {DOCS}#temporal")]
    if temporal.error is not None:
        reach = fail(
            "temporal-reachable",
            f"{temporal.address} (namespace {temporal.namespace}): {temporal.error}",
            "check CLOUDBURST_TEMPORAL_ADDRESS/NAMESPACE in ConfigMap cloudburst-config; from "
            "outside the cluster pass --temporal-address (e.g. through `kubectl port-forward`)",
        )
    else:
        reach = ok(
            "temporal-reachable", f"{temporal.address}, namespace {temporal.namespace} answers"
        )
    if temporal.installed_tls:
        tls = ok("temporal-tls", f"the worker and trigger use TLS to {temporal.installed_address}")
    else:
        tls = warn(
            "temporal-tls",
            f"the worker and trigger reach {temporal.installed_address} without TLS (a dev "
            "Temporal's default): anyone on its network can read and write workflows",
            "for a production Temporal set CLOUDBURST_TEMPORAL_TLS=true with a client "
            "certificate or API key (deploy/overlays/temporal-cloud, docs/security.md "
            '"Closing Temporal")',
        )
    return [reach, tls]


# --- joining ----------------------------------------------------------------------------------


def judge_cluster_info(info: ClusterInfoFact | None) -> CheckLine:
    """kube-public/cluster-info there, readable anonymously, naming a server that answers
    with the CA it carries."""
    fix_create = (
        "on a kubeadm cluster `kubeadm init phase bootstrap-token` makes it; elsewhere create "
        "ConfigMap kube-public/cluster-info with key `kubeconfig` naming the API server and "
        "its CA, readable by system:anonymous"
    )
    if info is None or not info.found:
        return fail("cluster-info", "ConfigMap kube-public/cluster-info is missing", fix_create)
    if info.server is None:
        return fail("cluster-info", f"cluster-info is unreadable: {info.problem}", fix_create)
    if not info.anonymous_may_read:
        return fail(
            "cluster-info",
            "system:anonymous may not get kube-public/cluster-info: `kubeadm join`'s token "
            "discovery reads it before it has any credential",
            "`kubeadm init phase bootstrap-token` (its Role and RoleBinding "
            "kubeadm:bootstrap-signer-clusterinfo), and --anonymous-auth=true on the API server",
        )
    if info.reach_error is not None:
        return fail(
            "cluster-info",
            f"its server {info.server} does not answer with its CA: {info.reach_error}",
            "put the control plane's address that the nodes reach (over Tailscale) in "
            "cluster-info's kubeconfig `server`, with the CA that signs its certificate",
        )
    return ok("cluster-info", f"present, its server {info.server} answers with its CA")


def join_endpoint(address: str) -> str | None:
    """`host:port` of an API server URL or address as kubeadm dials it (the first-boot
    script's own reading); None when it has none."""
    try:
        return api_server_endpoint(address)
    except ApplicationError:
        return None


def judge_join_addresses(info: ClusterInfoFact | None, joins: list[JoinAddressFact]) -> CheckLine:
    """Each NodeClass's `join.hostApiServer` is the server cluster-info names: kubeadm reads
    cluster-info from the first and then bootstraps its kubelet against the second."""
    if not joins:
        return ok("join-address", "no NodeClass yet: nothing joins")
    if info is None or info.server is None:
        return fail(
            "join-address", "cluster-info names no server to compare with", "fix cluster-info first"
        )
    expected = join_endpoint(info.server)
    wrong = [
        f"NodeClass {j.node_class} joins {j.host_api_server}"
        for j in joins
        if join_endpoint(j.host_api_server) != expected
    ]
    if wrong:
        return fail(
            "join-address",
            f"{'; '.join(wrong)}, but cluster-info names {info.server}",
            f"set spec.join.hostApiServer to {expected} (the address nodes reach over "
            "Tailscale), or correct cluster-info's server",
        )
    return ok("join-address", f"{len(joins)} NodeClass(es) join {expected}, as cluster-info says")


def judge_bootstrap_auth(auth: BootstrapAuthFact | None) -> CheckLine:
    fix = "start kube-apiserver with --enable-bootstrap-token-auth=true (kubeadm sets it)"
    if auth is None or auth.enabled is None:
        detail = auth.detail if auth else "not checked"
        return warn(
            "bootstrap-token-auth",
            f"cannot tell whether the API server authenticates bootstrap tokens: {detail}",
            "`kubeadm token create --ttl 10m` and run doctor again (it reviews a live token, "
            "creating none), or check kube-apiserver for --enable-bootstrap-token-auth=true",
        )
    if not auth.enabled:
        return fail(
            "bootstrap-token-auth",
            f"the API server does not authenticate bootstrap tokens ({auth.detail})",
            fix,
        )
    return ok("bootstrap-token-auth", f"enabled ({auth.detail})")


# --- tenancy ----------------------------------------------------------------------------------


PLUGIN_FIX = (
    "start kube-apiserver with --enable-admission-plugins=...,PodNodeSelector,"
    "PodTolerationRestriction (docs/security.md)"
)


def judge_admission(tenants: list[str] | None, dry_runs: list[AdmissionFact]) -> CheckLine:
    """Each served namespace is a tenant the admission plugins enforce: a dry-run Pod that
    tolerates another tenant's taint, or (where the namespace pins its pods) selects another
    tenant's nodes, is refused."""
    if not tenants:
        return ok(
            "admission-plugins",
            "single tenant (CLOUDBURST_TENANT_NAMESPACES empty): no namespace to keep apart",
        )
    unannotated = sorted({d.namespace for d in dry_runs if not d.annotated})
    admitted = [d for d in dry_runs if d.annotated and not d.refused]
    problems = []
    if unannotated:
        problems.append(f"namespace(s) {', '.join(unannotated)} lack the tenant annotations")
    for d in admitted:
        problems.append(f"{d.plugin} admitted a dry-run Pod in {d.namespace} it must refuse")
    if problems:
        fixes = []
        if unannotated:
            fixes.append(f"apply `cloudburst tenant-rbac {' '.join(unannotated)}`")
        if admitted:
            fixes.append(PLUGIN_FIX)
        return fail("admission-plugins", "; ".join(problems), "; ".join(fixes))
    plugins = sorted({d.plugin for d in dry_runs})
    return ok(
        "admission-plugins",
        f"{' and '.join(plugins)} refuse another tenant's Pod in {', '.join(tenants)}",
    )


def judge_network_policies(present: list[str]) -> CheckLine:
    missing = [n for n in NETWORK_POLICIES if n not in present]
    if missing:
        return fail(
            "network-policies",
            f"missing: {', '.join(missing)}",
            "apply deploy/base/network-policies.yaml of this release (they take effect only "
            "under a network plugin that enforces NetworkPolicy)",
        )
    return ok("network-policies", f"{', '.join(NETWORK_POLICIES)} present")


# --- the clouds -------------------------------------------------------------------------------


def judge_credentials(credentials: list[CredentialFact]) -> list[CheckLine]:
    """One line a NodeClass and provider: its credential answered a read-only call."""
    if not credentials:
        return [ok("credentials", "no NodeClass yet: no credential to try")]
    lines = []
    for c in credentials:
        check = f"credentials {c.node_class} {c.provider}"
        if c.error is None:
            lines.append(ok(check, "the provider answered a read-only call"))
        else:
            lines.append(
                fail(
                    check,
                    c.error,
                    f"fix the credential Secret NodeClass {c.node_class} names for "
                    f"{c.provider} (docs/providers.md), or its endpoint",
                )
            )
    return lines


def judge_prices(prices: PriceFact | None) -> CheckLine:
    if prices is None or not prices.providers:
        return ok("prices", "no NodeClass yet: no prices in use")
    problems = [*prices.stale]
    problems += [f"{p}'s last refresh failed: {e}" for p, e in sorted(prices.failed.items())]
    if problems:
        return warn(
            "prices",
            "; ".join(problems),
            "`cloudburst catalog status`; list the providers in CLOUDBURST_PRICES_PROVIDERS and "
            "give their price APIs' credentials in Secret cloudburst-price-credentials "
            "(deploy/base/config.yaml)",
        )
    return ok(
        "prices",
        f"no price of {', '.join(prices.providers)} older than {prices.max_age_h:g} h",
    )


def summary(lines: list[CheckLine]) -> dict[str, int]:
    return {s.value: sum(1 for line in lines if line.status == s) for s in Status}


def failed(lines: list[CheckLine]) -> bool:
    return any(line.status == Status.FAIL for line in lines)
