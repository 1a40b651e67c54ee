"""Which pools serve which pods, what marks a tenant's nodes, and what a tenant namespace's
annotations say: `cluster/tenancy.py`, pure."""

from __future__ import annotations

import json

from api.labels import TENANT_LABEL, TENANT_TAINT
from api.nodepool import NodePoolSpec
from api.selectors import LabelSelector
from cluster.tenancy import (
    DEFAULT_TOLERATIONS_ANNOTATION,
    NAMESPACE_SELECTOR_NOT_ALLOWED,
    NODE_SELECTOR_ANNOTATION,
    TOLERATIONS_WHITELIST_ANNOTATION,
    Tenancy,
    tenant_namespace_annotations,
    tenant_toleration,
    with_default_tolerations,
)

OPERATOR = "cloudburst-system"
TENANCY = Tenancy(worker_namespace=OPERATOR, namespaces=frozenset({"team-a", "team-b"}))


def shared(**selector: object) -> NodePoolSpec:
    return NodePoolSpec(namespace_selector=LabelSelector.model_validate(selector))


def test_a_tenants_pool_serves_its_own_namespace_only() -> None:
    pool = NodePoolSpec()
    assert TENANCY.pool_serves("team-a", pool, "team-a", {})
    assert not TENANCY.pool_serves("team-a", pool, "team-b", {})
    assert not TENANCY.pool_serves("team-a", pool, "kube-system", {})


def test_a_tenants_pool_with_a_selector_is_refused_and_serves_no_one_else() -> None:
    pool = shared()  # `{}`: every namespace
    refusal = TENANCY.pool_refusal("team-a", pool)
    assert refusal is not None and refusal.reason == NAMESPACE_SELECTOR_NOT_ALLOWED
    assert "spec.namespaceSelector" in refusal.message
    assert not TENANCY.pool_serves("team-a", pool, "team-b", {})


def test_a_shared_pool_serves_what_its_selector_selects() -> None:
    assert TENANCY.pool_refusal(OPERATOR, shared()) is None
    everyone = shared()
    assert TENANCY.pool_serves(OPERATOR, everyone, "team-b", {})
    picky = shared(matchLabels={"burst": "yes"})
    assert TENANCY.pool_serves(OPERATOR, picky, "team-b", {"burst": "yes"})
    assert not TENANCY.pool_serves(OPERATOR, picky, "team-b", {"burst": "no"})
    assert not TENANCY.pool_serves(OPERATOR, picky, "team-b", None)  # labels not known yet
    # Without a selector, the operator's pool serves the operator's namespace only.
    assert not TENANCY.pool_serves(OPERATOR, NodePoolSpec(), "team-b", {})


def test_a_tenants_nodes_carry_its_label_and_taint_and_a_shared_pools_none() -> None:
    built = TENANCY.node_spec("team-a", NodePoolSpec())
    assert built.template.labels == {TENANT_LABEL: "team-a"}
    assert [(t.key, t.value, t.effect) for t in built.template.taints] == [
        (TENANT_TAINT, "team-a", "NoSchedule")
    ]
    assert TENANCY.node_spec(OPERATOR, NodePoolSpec()) == NodePoolSpec()
    # A cluster without tenants (every namespace served) marks no node.
    assert Tenancy().node_spec("default", NodePoolSpec()) == NodePoolSpec()


def test_a_tenant_namespaces_pods_tolerate_its_taint_and_no_other() -> None:
    said = tenant_namespace_annotations(
        "team-a", tolerations=[{"key": "gpu", "operator": "Exists"}]
    )
    defaults = json.loads(said[DEFAULT_TOLERATIONS_ANNOTATION])
    whitelist = json.loads(said[TOLERATIONS_WHITELIST_ANNOTATION])
    own = {"key": TENANT_TAINT, "operator": "Equal", "value": "team-a", "effect": "NoSchedule"}
    assert defaults == [own]
    assert own in whitelist and {"key": "gpu", "operator": "Exists"} in whitelist
    tenant_entries = [t for t in whitelist if t.get("key") == TENANT_TAINT]
    assert {t["value"] for t in tenant_entries} == {"team-a"}
    assert not any(t.get("key") in (None, "") for t in whitelist)  # no tolerate-everything
    assert said[NODE_SELECTOR_ANNOTATION] == f"{TENANT_LABEL}=team-a"
    assert NODE_SELECTOR_ANNOTATION not in tenant_namespace_annotations(
        "team-a", node_selector=False
    )


def test_a_pod_in_a_file_gets_its_namespaces_default_toleration_as_admission_gives_it() -> None:
    """`cloudburst plan -f` of a tenant's pods plans them with the toleration the namespace's
    PodTolerationRestriction annotation adds on create (without it, the plan found the
    tenant's own pool's taint untolerated and bought nothing); a pod's own toleration of the
    same key and effect is kept, and a namespace without the annotation adds nothing."""
    annotations = tenant_namespace_annotations("shop")
    assert with_default_tolerations([], annotations) == [tenant_toleration("shop")]
    own = {"key": "cloudburst.io/tenant", "operator": "Exists", "effect": "NoSchedule"}
    assert with_default_tolerations([own], annotations) == [own]
    other = {"key": "gpu", "operator": "Exists"}
    assert with_default_tolerations([other], annotations) == [other, tenant_toleration("shop")]
    assert with_default_tolerations([other], {}) == [other]
    broken = {DEFAULT_TOLERATIONS_ANNOTATION: "not json"}
    assert with_default_tolerations([other], broken) == [other]
