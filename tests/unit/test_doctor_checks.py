"""`cloudburst doctor`'s judgements (cli/doctor/checks.py), each over facts as the gathering
records them: a healthy install judges all ok but the dev Temporal's plaintext, and each
prerequisite broken in turn fails its own line, with a fix, and no other line."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from cli.commands.doctor import print_lines
from cli.doctor.checks import Status, failed, first_difference, judge
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
from cli.doctor.gather import expected_crds

NS = "cloudburst-system"
SERVER = "https://10.0.0.1:6443"
EXPECTED = expected_crds()
TEMPORAL = TemporalFact("127.0.0.1:7233", "default", None, True, "temporal:7233")


def healthy() -> Facts:
    return Facts(
        install_namespace=NS,
        now=datetime(2026, 1, 1, tzinfo=UTC),
        config_found=True,
        crds=[CrdFact(name, dict(versions)) for name, versions in EXPECTED.items()],
        access=[
            AccessFact("cloudburst-worker", None, "", "nodes", "get", None, True),
            AccessFact("cloudburst-trigger", None, "", "pods", "watch", None, True),
        ],
        workers=[DeploymentFact("cloudburst-worker", NS, 2, 2, 2)],
        trigger=DeploymentFact("cloudburst-trigger", NS, 2, 2, 2),
        csr_approver=DeploymentFact("cloudburst-csr-approver", NS, 1, 1, 1),
        autoapprove_binding=False,
        temporal=TEMPORAL,
        cluster_info=ClusterInfoFact(found=True, server=SERVER),
        join_addresses=[JoinAddressFact("team-a/hetzner", "10.0.0.1")],
        bootstrap_auth=BootstrapAuthFact("token-review", True, "authenticated"),
        tenant_namespaces=["team-a"],
        admission=[
            AdmissionFact("team-a", "PodTolerationRestriction", True, True),
            AdmissionFact("team-a", "PodNodeSelector", True, True),
        ],
        network_policies=["cloudburst-default-deny-ingress", "cloudburst-metrics"],
        credentials=[CredentialFact("team-a/hetzner", "hetzner", None)],
        prices=PriceFact(["hetzner"], 168, [], {}),
    )


def not_ok(facts: Facts) -> dict[str, Status]:
    return {line.check: line.status for line in judge(facts, EXPECTED) if line.status != Status.OK}


def test_a_healthy_install_is_all_ok() -> None:
    assert not_ok(healthy()) == {}


def _schema_of_another_release(f: Facts) -> None:
    name = next(iter(EXPECTED))
    versions = {v: {**s, "properties": {}} for v, s in EXPECTED[name].items()}
    f.crds = [CrdFact(name, versions), *f.crds[1:]]


BREAKS: dict[str, tuple[Callable[[Facts], Any], dict[str, Status]]] = {
    "no ConfigMap cloudburst-config": (
        lambda f: setattr(f, "config_found", False),
        {"config": Status.FAIL},
    ),
    "a ConfigMap cloudburst-config the settings refuse": (
        lambda f: f.errors.__setitem__("config", "cluster_id: not a DNS label"),
        {"config": Status.FAIL},
    ),
    "a CRD missing": (
        lambda f: setattr(f, "crds", [CrdFact(f.crds[0].name, None), *f.crds[1:]]),
        {"crds": Status.FAIL},
    ),
    "a CRD of another release": (_schema_of_another_release, {"crds": Status.FAIL}),
    "a right of the worker denied": (
        lambda f: f.access.__setitem__(0, dataclasses.replace(f.access[0], allowed=False)),
        {"rbac-worker": Status.FAIL},
    ),
    "a right of the trigger denied": (
        lambda f: f.access.__setitem__(1, dataclasses.replace(f.access[1], allowed=False)),
        {"rbac-trigger": Status.FAIL},
    ),
    "no worker": (
        lambda f: setattr(f, "workers", [DeploymentFact("cloudburst-worker", NS, None)]),
        {"worker-ready": Status.FAIL},
    ),
    "a worker not ready": (
        lambda f: setattr(f, "workers", [DeploymentFact("cloudburst-worker", NS, 2, 1, 2)]),
        {"worker-ready": Status.FAIL},
    ),
    "the trigger scaled to nothing": (
        lambda f: setattr(f, "trigger", DeploymentFact("cloudburst-trigger", NS, 0)),
        {"trigger-ready": Status.FAIL},
    ),
    "no CSR approver": (
        lambda f: setattr(f, "csr_approver", DeploymentFact("cloudburst-csr-approver", NS, None)),
        {"csr-approver-ready": Status.FAIL},
    ),
    "kubeadm's blanket approval": (
        lambda f: setattr(f, "autoapprove_binding", True),
        {"kubeadm-autoapprove": Status.FAIL},
    ),
    "kubeadm's blanket renewal": (
        lambda f: setattr(f, "renewal_binding", True),
        {"kubeadm-renewal": Status.FAIL},
    ),
    "Temporal unreachable": (
        lambda f: setattr(f, "temporal", dataclasses.replace(TEMPORAL, error="refused")),
        {"temporal-reachable": Status.FAIL},
    ),
    "Temporal without TLS (a dev server's)": (
        lambda f: setattr(f, "temporal", dataclasses.replace(TEMPORAL, installed_tls=False)),
        {"temporal-tls": Status.WARN},
    ),
    "no cluster-info": (
        lambda f: setattr(f, "cluster_info", ClusterInfoFact(found=False)),
        # No server to compare the join addresses with either.
        {"cluster-info": Status.FAIL, "join-address": Status.FAIL},
    ),
    "cluster-info closed to anonymous": (
        lambda f: setattr(
            f, "cluster_info", ClusterInfoFact(True, SERVER, anonymous_may_read=False)
        ),
        {"cluster-info": Status.FAIL},
    ),
    "cluster-info's server unreachable": (
        lambda f: setattr(f, "cluster_info", ClusterInfoFact(True, SERVER, reach_error="timeout")),
        {"cluster-info": Status.FAIL},
    ),
    "a NodeClass joining elsewhere": (
        lambda f: setattr(f, "join_addresses", [JoinAddressFact("team-a/x", "10.0.0.2:6443")]),
        {"join-address": Status.FAIL},
    ),
    "bootstrap-token auth off": (
        lambda f: setattr(f, "bootstrap_auth", BootstrapAuthFact("token-review", False)),
        {"bootstrap-token-auth": Status.FAIL},
    ),
    "bootstrap-token auth unknown": (
        lambda f: setattr(f, "bootstrap_auth", BootstrapAuthFact("unknown", None)),
        {"bootstrap-token-auth": Status.WARN},
    ),
    "a tenant namespace not annotated": (
        lambda f: f.admission.__setitem__(
            0, AdmissionFact("team-a", "PodTolerationRestriction", False, False)
        ),
        {"admission-plugins": Status.FAIL},
    ),
    "PodNodeSelector off": (
        lambda f: f.admission.__setitem__(
            1, AdmissionFact("team-a", "PodNodeSelector", True, False)
        ),
        {"admission-plugins": Status.FAIL},
    ),
    "a NetworkPolicy missing": (
        lambda f: setattr(f, "network_policies", ["cloudburst-default-deny-ingress"]),
        {"network-policies": Status.FAIL},
    ),
    "a credential refused": (
        lambda f: setattr(
            f, "credentials", [CredentialFact("team-a/hetzner", "hetzner", "401 Unauthorized")]
        ),
        {"credentials team-a/hetzner hetzner": Status.FAIL},
    ),
    "stale prices": (
        lambda f: setattr(f, "prices", PriceFact(["hetzner"], 168, ["hetzner old"], {})),
        {"prices": Status.WARN},
    ),
    "a refresh failed": (
        lambda f: setattr(f, "prices", PriceFact(["hetzner"], 168, [], {"hetzner": "503"})),
        {"prices": Status.WARN},
    ),
    "a fact its gathering could not collect": (
        lambda f: f.errors.__setitem__("network-policies", "HTTP 403: forbidden"),
        {"network-policies": Status.FAIL},
    ),
}


@pytest.mark.parametrize("broken", list(BREAKS))
def test_each_broken_prerequisite_fails_its_own_line_with_a_fix(broken: str) -> None:
    """Fails on a judgement that misses its fact (all ok) or blames another line."""
    facts = healthy()
    breaks, expected = BREAKS[broken]
    breaks(facts)
    assert not_ok(facts) == expected
    for line in judge(facts, EXPECTED):
        if line.status != Status.OK:
            assert line.fix, line


def test_a_join_address_matches_in_any_spelling_kubeadm_dials_alike() -> None:
    """`10.0.0.1` and `https://10.0.0.1:6443/` are the same endpoint as cluster-info's
    `https://10.0.0.1:6443` (kubeadm's default port); fails on a string comparison."""
    facts = healthy()
    facts.join_addresses = [
        JoinAddressFact("a/x", "10.0.0.1"),
        JoinAddressFact("a/y", "https://10.0.0.1:6443/"),
    ]
    assert not_ok(facts) == {}


def test_a_single_tenant_install_needs_no_admission_plugins() -> None:
    facts = healthy()
    facts.tenant_namespaces, facts.admission = [], []
    assert not_ok(facts) == {}


def test_the_first_difference_names_the_field() -> None:
    expected = {"properties": {"spec": {"properties": {"a": {"type": "string"}}}}}
    served = {"properties": {"spec": {"properties": {"a": {"type": "integer"}}}}}
    assert first_difference(expected, served) == ".properties.spec.properties.a.type"


def test_the_report_marks_each_line_and_puts_the_fix_under_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As `linkerd check` prints: a mark and the check's name a line, the fix indented under a
    line that is not ok, the counts last. Fails on a fix not printed, or a warning counted as
    a failure."""
    facts = healthy()
    facts.temporal = dataclasses.replace(TEMPORAL, installed_tls=False)
    facts.autoapprove_binding = True
    lines = judge(facts, EXPECTED)
    print_lines(lines, NS)
    out = capsys.readouterr().out.splitlines()
    marked = {line.split()[1]: line.split()[0] for line in out if line[:1] in ("✔", "‼", "✘")}
    assert marked["temporal-tls"] == "‼"
    assert marked["kubeadm-autoapprove"] == "✘"
    assert marked["crds"] == "✔"
    after = out[out.index(next(o for o in out if o.startswith("✘ kubeadm-autoapprove"))) + 1]
    assert after.startswith("    fix: `kubectl delete clusterrolebinding")
    assert out[-1] == f"{len(lines) - 2} ok, 1 warning(s), 1 failed (see docs/doctor.md)"
    assert failed(lines)
    assert not failed([line for line in lines if line.check != "kubeadm-autoapprove"])
