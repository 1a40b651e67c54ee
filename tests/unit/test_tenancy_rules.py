"""Which pools serve which pods, what marks a tenant's nodes, and what a tenant namespace's
annotations say: `cluster/tenancy.py`, pure."""

from __future__ import annotations

import json

import pytest

from api.labels import TENANT_LABEL, TENANT_TAINT
from api.nodeclass import NodeClassSpec
from api.nodepool import NodePoolSpec
from api.selectors import LabelSelector
from cluster.tenancy import (
    DEFAULT_TOLERATIONS_ANNOTATION,
    ENDPOINT_NOT_ALLOWED,
    MACHINE_NOT_OWNED,
    NAMESPACE_NOT_SERVED,
    NAMESPACE_SELECTOR_NOT_ALLOWED,
    NODE_SELECTOR_ANNOTATION,
    TOLERATIONS_WHITELIST_ANNOTATION,
    Tenancy,
    tenant_namespace_annotations,
    tenant_toleration,
    url_parts,
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


# ---- the endpoint allow-list's edges ---------------------------------------------------------

PLUGIN_GATEWAY = Tenancy(allowed_endpoints={"plugin": ("https://gw/plugins/team-a",)})


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://gw/plugins/team-a/../team-b",
        "https://gw/plugins/team-a/%2e%2e/team-b",
        "https://gw/plugins/team-a/%2E%2E/team-b",
        "https://gw/plugins/team-a/.%2e/team-b",
        "https://gw/plugins/team-a/%2E%2E/",
        "https://gw/plugins/team-a/%2e%2e%2fteam-b",
        "https://gw/plugins/team-a%2F..%2Fteam-b",
        "https://gw/plugins/team-a/%252e%252e/team-b",
        "https://gw/plugins/team-a/..%5Cteam-b",
        "https://gw/plugins/team-a/..\\team-b",
        "https://gw/plugins/team-a/./../../plugins/team-b",
    ],
)
def test_a_path_that_leaves_the_allowed_prefix_is_refused_however_it_is_spelt(
    endpoint: str,
) -> None:
    """Issue #55: the allow-list judged `…/team-a/../team-b` (and its percent-encoded forms)
    segment by segment, as lying under `…/team-a`, while the server that receives it resolves
    it to `…/team-b`. Each is admitted without the normalisation in `url_parts`."""
    assert not PLUGIN_GATEWAY.endpoint_allowed("plugin", endpoint)
    refusal = PLUGIN_GATEWAY.refusal(
        "team-a",
        NodeClassSpec.model_validate(
            {"plugin": {"endpoint": endpoint}, "join": {"hostApiServer": "https://10.0.0.1:6443"}}
        ),
    )
    assert refusal is not None and refusal.reason == ENDPOINT_NOT_ALLOWED


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://gw/plugins/team-a",
        "https://GW:443/plugins/team-a/",
        "https://gw/plugins/team-a/./v1",
        "https://gw/plugins/%74eam-a",  # an unreserved character, percent-encoded
        "https://gw/plugins/team-b/../team-a",
    ],
)
def test_a_path_that_resolves_under_the_allowed_prefix_is_admitted(endpoint: str) -> None:
    assert PLUGIN_GATEWAY.endpoint_allowed("plugin", endpoint)


def test_url_parts_resolves_the_path_as_a_server_does() -> None:
    assert url_parts("https://gw/a/%2e%2E/b/./c") == ("https", "gw", 443, ("b", "c"))
    assert url_parts("http://gw:8790/x%20y") == ("http", "gw", 8790, ("x y",))
    for ambiguous in (
        "https://gw/a%2fb",
        "https://gw/a%5Cb",
        "https://gw/a%25b",
        "https://gw/a\\b",
    ):
        assert url_parts(ambiguous) is None


def test_a_plugins_plain_http_endpoint_needs_an_http_entry_naming_it() -> None:
    """A plug-in's requests carry its token and every first-boot script: over plain http only
    to an endpoint the operator names by an `http://` entry, never one under such an entry
    (without `CLEARTEXT_EXACT_SERVICES`, `http://gw:8790/plugins/anything` is admitted)."""
    tenancy = Tenancy(
        allowed_endpoints={
            "plugin": ("http://gw:8790/plugins", "https://gw/plugins"),
            "hetzner": ("http://proxy:8080/v1",),
        }
    )
    assert tenancy.endpoint_allowed("plugin", "http://gw:8790/plugins")
    assert tenancy.endpoint_allowed("plugin", "http://gw:8790/plugins/")
    assert not tenancy.endpoint_allowed("plugin", "http://gw:8790/plugins/team-b")
    assert not tenancy.endpoint_allowed("plugin", "http://gw/plugins")  # not the https entry
    assert tenancy.endpoint_allowed("plugin", "https://gw/plugins/team-b")
    assert tenancy.endpoint_allowed("hetzner", "http://proxy:8080/v1/servers")


def test_redfish_image_url_is_judged_by_the_allow_list() -> None:
    """Issue #55: a BMC boots whatever `imageUrl` points at, and the allow-list never saw it
    (without it in `RedfishClass.addresses`, this class is admitted)."""
    spec = NodeClassSpec.model_validate(
        {
            "redfish": {
                "machines": [
                    {
                        "name": "m1",
                        "bmc": "https://bmc.lab/redfish/v1",
                        "credentialsSecretRef": {"name": "bmc", "key": "m1"},
                    }
                ],
                "seedUrl": "https://seed.lab/seeds",
                "boot": "Cd",
                "imageUrl": "https://images.elsewhere.example/live.iso",
            },
            "join": {"hostApiServer": "https://10.0.0.1:6443"},
        }
    )
    tenancy = Tenancy(allowed_endpoints={"redfish": ("https://bmc.lab", "https://seed.lab/seeds")})
    refusal = tenancy.refusal("team-a", spec)
    assert refusal is not None and refusal.reason == ENDPOINT_NOT_ALLOWED
    assert "spec.redfish.imageUrl" in refusal.message
    lab = Tenancy(
        allowed_endpoints={
            "redfish": (
                "https://bmc.lab",
                "https://seed.lab/seeds",
                "https://images.elsewhere.example",
            )
        }
    )
    assert lab.refusal("team-a", spec) is None


def test_namespace_not_served_names_no_other_tenant() -> None:
    """Issue #55: the refusal, on the refused namespace's own NodeClass, listed every tenant
    namespace (`now: team-a, team-b`)."""
    refusal = TENANCY.refusal("team-c")
    assert refusal is not None and refusal.reason == NAMESPACE_NOT_SERVED
    assert "team-c" in refusal.message
    assert "team-a" not in refusal.message and "team-b" not in refusal.message


def _metal(*machines: tuple[str, str]) -> NodeClassSpec:
    return NodeClassSpec.model_validate(
        {
            "redfish": {
                "machines": [
                    {"name": name, "bmc": bmc, "credentialsSecretRef": {"name": "bmc", "key": name}}
                    for name, bmc in machines
                ],
                "seedUrl": "https://seed.lab/seeds",
            },
            "join": {"hostApiServer": "https://10.0.0.1:6443"},
        }
    )


OWNED = Tenancy(
    namespaces=frozenset({"team-a", "team-b"}),
    allowed_endpoints={"redfish": ("https://bmc.lab", "https://bmc2.lab", "https://seed.lab")},
    inventory_owners={
        "team-a": ("rack1-07", "https://bmc.lab"),
        "team-b": ("rack2-01",),
    },
)


def test_a_nodeclass_listing_another_namespaces_machine_is_refused_naming_no_tenant() -> None:
    """Issue #55: tenant B's NodeClass listing A's machine (by A's name, or another name at
    A's BMC) is refused where B looks, and the message names no other tenant. Fails without
    the fix: no inventory has an owner, and any NodeClass whose BMCs are allowed is served."""
    a_name = _metal(("rack1-07", "https://bmc2.lab/redfish/v1"))
    a_bmc = _metal(("rack2-01", "https://BMC.lab/redfish/v1/"))
    unlisted = _metal(("rack9-99", "https://bmc2.lab/redfish/v1"))
    for spec in (a_name, a_bmc, unlisted):
        refusal = OWNED.refusal("team-b", spec)
        assert refusal is not None and refusal.reason == MACHINE_NOT_OWNED
        assert "spec.redfish.machines[0]" in refusal.message
        assert "team-a" not in refusal.message
    assert OWNED.refusal("team-a", _metal(("rack1-07", "https://bmc.lab/redfish/v1"))) is None
    assert OWNED.refusal("team-b", _metal(("rack2-01", "https://bmc2.lab/redfish/v1"))) is None
    # Checked by the activities that call Redfish, not by those that call another service.
    assert OWNED.refusal("team-b", a_name, services=("tailscale",)) is None
    assert OWNED.refusal("team-b", a_name, services=("redfish",)) is not None
    # No owners configured: one tenant's inventory, every allowed machine usable.
    assert Tenancy(allowed_endpoints=OWNED.allowed_endpoints).refusal("team-b", a_name) is None
