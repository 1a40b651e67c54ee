"""`cloudburst explain pod`, each kind of answer: the pools' verdicts (namespace, invalid spec,
refused, NodeClass, taints, selectors, affinity) and what the chosen pool did (a claim with its
offering and price, the limits with numbers, a failing configuration, a held-back node), and
the pods no pool plans for (bound, a DaemonSet's, gated, not yet Unschedulable)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s

from api import NodeClass, NodePool
from api.explain import ClaimView, PoolPodView
from api.nodeclaim import NodeClaimPhase, Offering
from cluster.matching import ClusterSpecs, match
from cluster.pods import pod_model
from cluster.requirements import pod_demand
from cluster.tenancy import Tenancy
from explain.pod import explain_pod

OPERATOR = "cloudburst-system"
FAKE_CLOUD = "http://127.0.0.1:8788"
TENANCY = Tenancy(
    worker_namespace=OPERATOR,
    namespaces=frozenset({"team-a", "team-b"}),
    allowed_endpoints={"fake": (FAKE_CLOUD,)},
)
NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
FAKE_CLASS = {"fake": {"endpoint": FAKE_CLOUD}, "join": {"hostApiServer": "https://10.0.0.1:6443"}}


def cluster(*objects: tuple[str, str, str, dict[str, Any]]) -> ClusterSpecs:
    """(kind, namespace, name, spec) objects, judged as the trigger judges them."""
    specs = ClusterSpecs()
    for kind, namespace, name, spec in objects:
        raw = {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
        specs.put(raw, NodePool if kind == "NodePool" else NodeClass, TENANCY)
    return specs


def pool(namespace: str, name: str, **spec: Any) -> tuple[str, str, str, dict[str, Any]]:
    return ("NodePool", namespace, name, {"nodeClassRef": "burst", **spec})


def node_class(
    namespace: str, name: str = "burst", **spec: Any
) -> tuple[str, str, str, dict[str, Any]]:
    return ("NodeClass", namespace, name, {**FAKE_CLASS, **spec})


def pending_pod(namespace: str = "team-a", **spec: Any) -> k8s.V1Pod:
    tolerations = [{"key": "cloudburst.io/tenant", "value": namespace, "effect": "NoSchedule"}]
    return pod_model(
        {
            "metadata": {"name": "web-1", "namespace": namespace, "uid": "uid-1"},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "250m"}}}],
                "tolerations": tolerations,
                **spec,
            },
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            },
        }
    )


def explained(pod: k8s.V1Pod, specs: ClusterSpecs, **known: Any) -> Any:
    found = match(pod_demand(pod), specs, TENANCY, {})
    return explain_pod(pod, found, worker_namespace=OPERATOR, now=NOW, **known)


def verdict(answer: Any, name: str) -> Any:
    return next(v for v in answer.pools if v.pool == name)


def test_a_selector_no_pool_offers_names_every_pool_and_its_reason() -> None:
    specs = cluster(node_class("team-a"), pool("team-a", "small"), pool("team-a", "big"))
    answer = explained(pending_pod(nodeSelector={"disktype": "ssd"}), specs)
    assert answer.chosen_pool is None
    assert answer.summary.startswith("no NodePool takes it: ")
    for name in ("team-a/small", "team-a/big"):
        assert "disktype=ssd is not among the pool's labels" in (verdict(answer, name).reason or "")
        assert name in answer.summary


def test_another_tenants_pool_is_listed_as_not_serving_the_namespace_and_never_chosen() -> None:
    specs = cluster(node_class("team-b"), pool("team-b", "theirs", weight=100))
    answer = explained(pending_pod("team-a"), specs)
    theirs = verdict(answer, "team-b/theirs")
    assert (theirs.serves_namespace, theirs.hosts, theirs.chosen) == (False, False, False)
    assert theirs.reason == "serves the pods of namespace team-b only"
    # The summary a tenant reads names no other tenant's pool.
    assert (
        "team-b" not in answer.summary and "no NodePool serves namespace team-a" in answer.summary
    )


def test_an_invalid_pool_and_a_refused_one_say_what_to_fix() -> None:
    specs = cluster(
        node_class("team-a"),
        ("NodePool", "team-a", "broken", {"nodeClassRef": "burst", "limits": {"maxNodes": -1}}),
        pool("team-a", "shared", namespaceSelector={"matchLabels": {"x": "y"}}),
    )
    answer = explained(pending_pod(), specs)
    assert "is invalid" in (verdict(answer, "team-a/broken").reason or "")
    assert "spec.limits.maxNodes" in (verdict(answer, "team-a/broken").reason or "")
    assert "NamespaceSelectorNotAllowed" in (verdict(answer, "team-a/shared").reason or "")


def test_a_node_class_with_an_endpoint_the_operator_does_not_allow_is_named() -> None:
    specs = cluster(
        node_class("team-a", fake={"endpoint": "http://attacker.example:80"}),
        pool("team-a", "burst"),
    )
    reason = verdict(explained(pending_pod(), specs), "team-a/burst").reason or ""
    assert "EndpointNotAllowed" in reason and "attacker.example" in reason


def test_a_pool_without_its_node_class_says_which_is_missing() -> None:
    answer = explained(pending_pod(), cluster(pool("team-a", "orphan")))
    assert verdict(answer, "team-a/orphan").reason == (
        "its NodeClass burst (spec.nodeClassRef) does not exist in team-a"
    )


def test_a_taint_the_pod_does_not_tolerate_is_named() -> None:
    taint = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
    specs = cluster(node_class("team-a"), pool("team-a", "gpus", template={"taints": [taint]}))
    answer = explained(pending_pod(), specs)
    assert "gpu=true:NoSchedule" in (verdict(answer, "team-a/gpus").reason or "")


def test_required_node_affinity_no_pool_can_meet_is_named() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["moon"]}]}
                ]
            }
        }
    }
    specs = cluster(node_class("team-a"), pool("team-a", "earth"))
    answer = explained(pending_pod(affinity=affinity), specs)
    assert "zone" in (verdict(answer, "team-a/earth").reason or "")
    assert answer.chosen_pool is None


def test_a_pod_held_by_the_pools_limit_shows_the_limit_with_numbers() -> None:
    specs = cluster(node_class("team-a"), pool("team-a", "tiny", limits={"maxNodes": 1}))
    view = PoolPodView(
        known=True,
        blocked="LimitReached: pool limits maxNodes=1 (1 in use)",
        limits="pool limits maxNodes=1 (1 in use)",
    )
    answer = explained(pending_pod(), specs, in_pool=view)
    assert answer.chosen_pool == "team-a/tiny"
    assert answer.summary == (
        "NodePool team-a/tiny cannot place it: LimitReached: pool limits maxNodes=1 (1 in use)"
    )


def test_a_nominated_pod_names_its_claim_phase_age_offering_and_price_source() -> None:
    specs = cluster(node_class("team-a"), pool("team-a", "burst"))
    offering = Offering(provider="hetzner", region="fsn1", instance_type="cx22")
    view = PoolPodView(
        known=True,
        nominated_to="burst-abcde",
        claim_phase=NodeClaimPhase.PROVISIONING,
        offering=offering,
    )
    claim = ClaimView(
        namespace="team-a",
        name="burst-abcde",
        phase="Provisioning",
        age_s=42,
        offering="hetzner/fsn1/cx22 (on-demand)",
        price_eur_per_hour=0.0071,
        price_source="hetzner pricing API",
        price_as_of="2026-11-28T10:00:00Z",
    )
    answer = explained(pending_pod(), specs, in_pool=view, claim=claim)
    assert answer.summary == (
        "waiting for NodeClaim team-a/burst-abcde (Provisioning, 42s old) of NodePool "
        "team-a/burst: hetzner/fsn1/cx22 (on-demand) at €0.0071/h (hetzner pricing API, as of "
        "2026-11-28T10:00:00Z)"
    )


def test_claims_failing_on_the_configuration_and_a_held_node_are_said() -> None:
    specs = cluster(node_class("team-a"), pool("team-a", "burst"))
    failing = PoolPodView(known=True, config_error="Secret hcloud-token not found")
    assert explained(pending_pod(), specs, in_pool=failing).summary == (
        "NodePool team-a/burst holds new claims back: Secret hcloud-token not found"
    )
    held = PoolPodView(known=True, held_until=NOW + timedelta(seconds=1))
    assert (
        "holds its node back 1s more for the rest of the burst"
        in explained(pending_pod(), specs, in_pool=held).summary
    )


def test_a_pool_that_has_not_heard_of_the_pod_or_did_not_answer_is_said_so() -> None:
    specs = cluster(node_class("team-a"), pool("team-a", "burst"))
    unknown = explained(pending_pod(), specs, in_pool=PoolPodView(known=False))
    assert "has not heard of it yet" in unknown.summary
    silent = explained(pending_pod(), specs, pool_unanswered="no answer within 10s")
    assert silent.summary == (
        "NodePool team-a/burst takes it; the pool did not answer: no answer within 10s"
    )


def test_pods_no_pool_plans_for_say_why_not() -> None:
    specs = cluster(node_class("team-a"), pool("team-a", "burst"))
    bound = explained(
        pending_pod(nodeName="burst-x"),
        specs,
        node_labels={
            "cloudburst.io/nodeclaim": "burst-x",
            "cloudburst.io/nodepool": "burst",
            "cloudburst.io/nodepool-namespace": "team-a",
        },
    )
    assert bound.summary == "running on node burst-x, a node of NodePool team-a/burst"
    gated = explained(pending_pod(schedulingGates=[{"name": "wait-for-quota"}]), specs)
    assert "scheduling gates (wait-for-quota)" in gated.summary
    fresh = pending_pod()
    fresh.status.conditions = []
    assert "not marked Unschedulable" in explained(fresh, specs).summary
    daemon = pending_pod()
    daemon.metadata.owner_references = [
        k8s.V1OwnerReference(api_version="apps/v1", kind="DaemonSet", name="ds", uid="d")
    ]
    assert "DaemonSet" in explained(daemon, specs).summary
