"""Least privilege: each process' ServiceAccount is granted exactly what its code calls."""

from __future__ import annotations

import json
from typing import Any

import pytest

from activities.machine_ledger import MACHINES_CONFIGMAP
from api.prices import CATALOG_CONFIGMAP
from cli.commands.tenant_rbac import tenant_objects
from tests.deploy.conftest import OVERLAYS
from tests.deploy.kube_calls import needs_of
from worker.release_guard import RELEASE_CONFIGMAP

# Granted without a call the scan can see; each with its reason (docs/rbac.md says more).
IMPLIED: dict[str, dict[tuple[str, str, str], str]] = {
    "worker": {
        # mirror.py puts an ownerReference with blockOwnerDeletion on each NodeClaim; the
        # OwnerReferencesPermissionEnforcement admission plugin requires this on the owner.
        ("cloudburst.io", "nodepools/finalizers", "update"): "blockOwnerDeletion",
    },
    "trigger": {},
    "csr-approver": {
        # Approving a request needs `approve` on its signer, named: the kubelet's two.
        ("certificates.k8s.io", "signers", "approve"): "the approval of a kubelet certificate",
    },
}

WORKER_NAMESPACE = "cloudburst-system"
# Where each Secret call of the worker runs — what its namespace-scoped grant is: kube-system
# (bootstrap tokens: written, never read), "worker" (its own namespace: first-boot scripts,
# the CloudBroker key) or "tenant" (each namespace it serves: the Secrets a NodeClass names).
# A new Secret call fails test_every_secret_call_is_placed until it is placed here.
SECRET_SCOPES: dict[str, set[str]] = {
    "activities/bootstrap.py:BootstrapActivities._create_token_secret": {"kube-system"},
    "activities/bootstrap.py:BootstrapActivities._put_script": {"worker"},
    "activities/bootstrap.py:BootstrapActivities._read_script": {"worker"},
    # The token, then the script. Refs of claims from before the scripts moved name the
    # pool's namespace: not granted there; the 403 is logged, the operator removes those.
    "activities/bootstrap.py:BootstrapActivities.delete_bootstrap_secrets": {
        "kube-system",
        "worker",
    },
    "activities/gc.py:GcActivities._secrets": {"worker"},
    "activities/gc.py:GcActivities.remove_orphans": {"kube-system", "worker"},
    # A NodeClass's credential Secrets (tenant); the script create_instance reads, the
    # CloudBroker key (worker).
    "activities/credentials.py:read_secret_value": {"tenant", "worker"},
    # The price APIs' credentials an operator keeps beside the worker.
    "activities/prices/activity.py:PriceActivities._credentials": {"worker"},
}


def granted(objects: list[dict[str, Any]], service_account: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every (Cluster)Role bound to the ServiceAccount."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    rules: set[tuple[str, str, str]] = set()
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = binding.get("subjects", [])
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == service_account for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles[(ref["kind"], namespace, ref["name"])]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), f"wildcard in {ref['name']}"
                        rules.add((group, resource, verb))
    return rules


@pytest.mark.parametrize("process", ["worker", "trigger", "csr-approver"])
def test_rbac_grants_exactly_what_the_code_calls(
    rendered: dict[str, list[dict[str, Any]]], process: str
) -> None:
    needs = needs_of(process)
    needed = {n.rule for n in needs} | set(IMPLIED[process])
    have = granted(rendered["base"], f"cloudburst-{process}")

    missing = sorted(needed - have)
    where = {n.rule: n.where for n in sorted(needs, key=lambda n: n.where)}
    assert not missing, f"cloudburst-{process} lacks: " + ", ".join(
        f"{r} (used at {where.get(r, IMPLIED[process].get(r))})" for r in missing
    )
    unused = sorted(have - needed)
    assert not unused, f"cloudburst-{process} is granted what no code uses: {unused}"


def test_the_scan_sees_the_calls_we_know_about() -> None:
    """Guards the scanner itself: a few calls that must be found, per process."""
    worker = {n.rule for n in needs_of("worker")}
    trigger = {n.rule for n in needs_of("trigger")}
    assert ("", "pods/eviction", "create") in worker
    assert ("cloudburst.io", "nodeclaims/status", "patch") in worker
    assert ("", "secrets", "create") in worker
    assert ("", "pods", "watch") in trigger  # a list function handed to the watch loop
    assert ("cloudburst.io", "nodepools", "watch") in trigger
    assert ("", "events", "create") in trigger  # followed into observability.events.record_event
    assert ("", "nodes", "get") in trigger  # a Node gone while no watcher ran
    assert ("", "nodes", "delete") not in trigger  # imports a helper of kube.py, not its calls
    approver = {n.rule for n in needs_of("csr-approver")}
    assert ("certificates.k8s.io", "certificatesigningrequests", "watch") in approver
    assert ("certificates.k8s.io", "certificatesigningrequests/approval", "update") in approver
    assert ("", "events", "create") in approver  # followed into observability.events.record_event


def test_the_csr_approver_approves_for_the_kubelets_signers_only(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    [role] = [
        o
        for o in rendered["base"]
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "cloudburst-csr-approver"
    ]
    [signers] = [r for r in role["rules"] if "signers" in r["resources"]]
    assert signers["verbs"] == ["approve"]
    assert sorted(signers["resourceNames"]) == [
        "kubernetes.io/kube-apiserver-client-kubelet",
        "kubernetes.io/kubelet-serving",
    ]


def test_user_roles_aggregate_into_view_and_edit(rendered: dict[str, list[dict[str, Any]]]) -> None:
    roles = {o["metadata"]["name"]: o for o in rendered["base"] if o["kind"] == "ClusterRole"}
    view = roles["cloudburst-view"]
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert {v for r in view["rules"] for v in r["verbs"]} == {"get", "list", "watch"}


# The ConfigMaps the worker reads and patches in its own namespace, each granted by name: the
# scan sees the calls, not the names they pass. Only `create` cannot be held to a name.
NAMED_CONFIGMAPS = {
    CATALOG_CONFIGMAP: {"get", "patch"},
    RELEASE_CONFIGMAP: {"get", "patch"},
    MACHINES_CONFIGMAP: {"get", "update"},
}


def test_the_worker_reads_and_patches_its_configmaps_by_name(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["base"]
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Role"}
    by_name: dict[str, set[str]] = {}
    unnamed: set[str] = set()
    for binding in objects:
        if (
            binding["kind"] != "RoleBinding"
            or binding["metadata"].get("namespace") != WORKER_NAMESPACE
            or not any(s["name"] == "cloudburst-worker" for s in binding.get("subjects", []))
        ):
            continue
        for rule in roles[binding["roleRef"]["name"]]["rules"]:
            if "configmaps" not in rule["resources"]:
                continue
            if "resourceNames" not in rule:
                unnamed |= set(rule["verbs"])
            for name in rule.get("resourceNames", []):
                by_name.setdefault(name, set()).update(rule["verbs"])
    assert by_name == NAMED_CONFIGMAPS
    assert unnamed == {"create"}


# --- Secrets: per namespace, never cluster-wide ---------------------------------------------


def config(objects: list[dict[str, Any]]) -> dict[str, str]:
    maps = [o for o in objects if o["kind"] == "ConfigMap"]
    return next(m["data"] for m in maps if m["metadata"]["name"] == "cloudburst-config")


def tenants_of(objects: list[dict[str, Any]]) -> list[str]:
    listed = config(objects)["CLOUDBURST_TENANT_NAMESPACES"]
    return [n.strip() for n in listed.split(",") if n.strip()]


def secret_verbs_by_namespace(
    objects: list[dict[str, Any]], service_account: str
) -> dict[str | None, set[str]]:
    """Namespace (None: cluster-wide) -> Secret verbs granted to the ServiceAccount."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    found: dict[str | None, set[str]] = {}
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == service_account
            for s in binding.get("subjects", [])
        ):
            continue
        ref = binding["roleRef"]
        # A RoleBinding grants in its own namespace, whatever kind of role it names.
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role = roles[(ref["kind"], where if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role["rules"]:
            if "" in rule["apiGroups"] and "secrets" in rule["resources"]:
                found.setdefault(where, set()).update(rule["verbs"])
    return found


def test_every_secret_call_is_placed() -> None:
    calls = {n.function: n for n in needs_of("worker") if n.resource == "secrets"}
    unplaced = sorted(f"{n.where} ({f})" for f, n in calls.items() if f not in SECRET_SCOPES)
    assert not unplaced, f"say in SECRET_SCOPES where these Secret calls run: {unplaced}"
    stale = sorted(set(SECRET_SCOPES) - set(calls))
    assert not stale, f"SECRET_SCOPES names functions that make no Secret call: {stale}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_cluster_role_touches_secrets(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    for role in (o for o in rendered[overlay] if o["kind"] == "ClusterRole"):
        for rule in role.get("rules", []):
            assert "secrets" not in rule["resources"] and "*" not in rule["resources"], (
                f"{overlay}: ClusterRole {role['metadata']['name']} grants {rule}"
            )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_worker_reads_secrets_only_where_its_code_runs(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    """kube-system: write only; its own namespace: the scripts; each tenant namespace the
    overlay serves (its ConfigMap says which): exactly what reading a credential needs."""
    needed: dict[str, set[str]] = {}
    for need in needs_of("worker"):
        if need.resource == "secrets":
            for scope in SECRET_SCOPES[need.function]:
                needed.setdefault(scope, set()).add(need.verb)
    assert needed["kube-system"] == {"create", "delete"}  # never get or list there
    assert needed["tenant"] == {"get"}
    objects = rendered[overlay]
    expected = {"kube-system": needed["kube-system"], WORKER_NAMESPACE: needed["worker"]}
    expected |= {namespace: needed["tenant"] for namespace in tenants_of(objects)}
    assert secret_verbs_by_namespace(objects, "cloudburst-worker") == expected
    assert secret_verbs_by_namespace(objects, "cloudburst-trigger") == {}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_tenant_rbac_is_what_the_generator_makes(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    def shape(o: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in o.items() if k != "metadata"} | {
            "name": o["metadata"]["name"],
            "namespace": o["metadata"].get("namespace"),
            "annotations": o["metadata"].get("annotations"),
        }

    objects = rendered[overlay]
    tenants = set(tenants_of(objects))
    found = [
        shape(o)
        for o in objects
        if (o["kind"] in ("Role", "RoleBinding") and o["metadata"].get("namespace") in tenants)
        or (o["kind"] == "Namespace" and o["metadata"]["name"] in tenants)
    ]

    def key(o: dict[str, Any]) -> str:
        return json.dumps(o, sort_keys=True)

    generated = [shape(o) for o in tenant_objects(tenants_of(objects))]
    assert sorted(found, key=key) == sorted(generated, key=key)


def test_the_dev_overlay_serves_default_and_production_serves_none_by_default(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    assert tenants_of(rendered["overlays/dev"]) == ["default"]
    for overlay in ("base", "overlays/temporal-cloud"):
        assert tenants_of(rendered[overlay]) == []
    for overlay in OVERLAYS:
        assert config(rendered[overlay])["CLOUDBURST_ALLOWED_ENDPOINTS"] == "{}"
