"""Least privilege: each process' ServiceAccount is granted exactly what its code calls."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.kube_calls import needs_of

# Granted without a call the scan can see; each with its reason (docs/rbac.md says more).
IMPLIED: dict[str, dict[tuple[str, str, str], str]] = {
    "worker": {
        # mirror.py puts an ownerReference with blockOwnerDeletion on each NodeClaim; the
        # OwnerReferencesPermissionEnforcement admission plugin requires this on the owner.
        ("cloudburst.io", "nodepools/finalizers", "update"): "blockOwnerDeletion",
    },
    "trigger": {},
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


@pytest.mark.parametrize("process", ["worker", "trigger"])
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
    assert ("", "events", "create") in trigger  # followed into activities.events.record_event
    assert ("", "nodes", "get") not in trigger  # trigger imports a helper of kube.py, not its calls


def test_user_roles_aggregate_into_view_and_edit(rendered: dict[str, list[dict[str, Any]]]) -> None:
    roles = {o["metadata"]["name"]: o for o in rendered["base"] if o["kind"] == "ClusterRole"}
    view = roles["cloudburst-view"]
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert {v for r in view["rules"] for v in r["verbs"]} == {"get", "list", "watch"}
