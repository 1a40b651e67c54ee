"""What `cloudburst doctor` holds of the shipped manifests (cli/doctor/shipped.py) is what
deploy/base installs: the rights each ServiceAccount's RBAC grants, its NetworkPolicies and its
Deployments. An installed `cloudburst` has no deploy/ beside it, so doctor keeps its own
copy; these fail when the two part ways."""

from __future__ import annotations

from typing import Any

from cli.doctor.shipped import (
    CLUSTER,
    INSTALL,
    NEEDS,
    NETWORK_POLICIES,
    TRIGGER_DEPLOYMENT,
    WORKER_DEPLOYMENT,
)

NAMESPACE = "cloudburst-system"
Grant = tuple[str, str | None, str, str, str, str | None]


def granted(objects: list[dict[str, Any]]) -> set[Grant]:
    """(account, namespace or None, group, resource, verb, name or None) for every rule of
    every (Cluster)Role bound to a ServiceAccount of the install namespace."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    out: set[Grant] = set()
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        where = binding["metadata"].get("namespace")
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], where if ref["kind"] == "Role" else None, ref["name"]))
        if role is None:
            continue
        for subject in binding.get("subjects") or []:
            if subject["kind"] != "ServiceAccount" or subject.get("namespace") != NAMESPACE:
                continue
            for rule in role.get("rules") or []:
                for group in rule.get("apiGroups") or [""]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            for name in rule.get("resourceNames") or [None]:
                                out.add((subject["name"], where, group, resource, verb, name))
    return out


def needed() -> set[Grant]:
    out: set[Grant] = set()
    for need in NEEDS:
        namespace = (
            None if need.scope == CLUSTER else NAMESPACE if need.scope == INSTALL else need.scope
        )
        for verb in need.verbs:
            for name in need.names or (None,):
                out.add((need.account, namespace, need.group, need.resource, verb, name))
    return out


def test_doctor_checks_every_right_the_shipped_rbac_grants_and_no_other(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """Fails on a rule added to deploy/base/rbac.yaml (or removed) without doctor's need."""
    assert needed() == granted(rendered["base"])


def test_doctor_knows_the_shipped_network_policies_and_deployments(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    base = rendered["base"]
    policies = {o["metadata"]["name"] for o in base if o["kind"] == "NetworkPolicy"}
    deployments = {o["metadata"]["name"] for o in base if o["kind"] == "Deployment"}
    assert set(NETWORK_POLICIES) == policies
    assert {WORKER_DEPLOYMENT, TRIGGER_DEPLOYMENT} <= deployments
