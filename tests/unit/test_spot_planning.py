"""Spot capacity in the plan: allowed only where the pool says so, preferred (cheaper), and
always followed by the same shape on demand, so that a spot capacity error falls back."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api.nodeclaim import Offering
from api.nodepool import NodePoolSpec, Requirements
from api.planning import PlanRequest, PodDemand, Resources
from cluster.requirements import offering_filter, offering_labels, pool_can_host
from planner.catalog import Catalog
from planner.plan import plan_capacity

GI = 2**30


def offering(name: str, price: float, capacity_type: str = "on-demand", **kw: object) -> Offering:
    fields: dict[str, object] = {"provider": "aws", "region": "eu-central-1", "vcpu": 2}
    fields.update(kw)
    return Offering.model_validate(
        {
            "instanceType": name,
            "memoryGib": 8,
            "priceEurPerHour": price,
            "capacityType": capacity_type,
            **fields,
        }
    )


def pool(capacity_type: list[str] | None = None) -> NodePoolSpec:
    requirements: dict[str, object] = {}
    if capacity_type is not None:
        requirements["capacityType"] = capacity_type
    return NodePoolSpec.model_validate({"requirements": requirements})


def pod(uid: str = "p1", selector: dict[str, str] | None = None) -> PodDemand:
    return PodDemand(
        uid=uid,
        namespace="default",
        name=uid,
        requests=Resources(cpu_m=500, memory_bytes=GI, pods=1),
        node_selector=selector or {},
    )


def plan_for(spec: NodePoolSpec, offerings: list[Offering], **kw: object) -> list[list[str]]:
    request = PlanRequest.model_validate(
        {
            "pool_name": "burst",
            "pool": spec,
            "class_providers": ["aws", "gcp"],
            "pods": [pod()],
            **kw,
        }
    )
    plan = plan_capacity(request, offerings)
    assert not plan.unschedulable, plan.unschedulable
    return [[o.key for o in node.offerings] for node in plan.new_nodes]


SPOT = offering("m6i.large", 0.03, "spot")
ON_DEMAND = offering("m6i.large", 0.09)
CHEAP_OTHER = offering("e2-standard-2", 0.05, provider="gcp", region="europe-west4")


def test_on_demand_keys_are_unchanged_and_spot_keys_distinct() -> None:
    # Recorded histories and failed-offering caches hold on-demand keys as they were.
    assert ON_DEMAND.key == "aws/eu-central-1/m6i.large"
    assert SPOT.key == "aws/eu-central-1/m6i.large/spot"


def test_capacity_type_defaults_to_on_demand_and_refuses_unknown_values() -> None:
    assert Requirements().capacity_type == ["on-demand"]
    with pytest.raises(ValidationError, match="unknown capacity type"):
        Requirements.model_validate({"capacityType": ["preemptible"]})
    with pytest.raises(ValidationError):
        Requirements.model_validate({"capacityType": []})
    with pytest.raises(ValidationError):
        Offering.model_validate(
            {"provider": "aws", "region": "r", "instanceType": "t", "capacityType": "cheap"}
        )


def test_a_default_pool_never_launches_spot() -> None:
    assert plan_for(pool(), [SPOT, ON_DEMAND]) == [[ON_DEMAND.key]]


def test_a_spot_only_pool_never_launches_on_demand() -> None:
    assert plan_for(pool(["spot"]), [SPOT, ON_DEMAND, CHEAP_OTHER]) == [[SPOT.key]]


def test_spot_is_preferred_and_falls_back_to_the_same_shape_on_demand_next() -> None:
    # The gcp offering is cheaper than the on-demand twin, but a spot shortage on this type
    # should first try the same type on demand (the pods were planned for this shape).
    nodes = plan_for(pool(["spot", "on-demand"]), [ON_DEMAND, CHEAP_OTHER, SPOT])
    assert nodes == [[SPOT.key, ON_DEMAND.key, CHEAP_OTHER.key]]


def test_a_failed_spot_offering_is_skipped_but_its_on_demand_twin_is_not() -> None:
    nodes = plan_for(pool(["spot", "on-demand"]), [ON_DEMAND, SPOT], failed_offerings=[SPOT.key])
    assert nodes == [[ON_DEMAND.key]]


def test_node_labels_carry_the_capacity_type_and_selectors_filter_on_it() -> None:
    assert offering_labels(SPOT)["karpenter.sh/capacity-type"] == "spot"
    assert offering_labels(ON_DEMAND)["cloudburst.io/capacity-type"] == "on-demand"
    wants_spot = pod(selector={"karpenter.sh/capacity-type": "spot"})
    allows = offering_filter("burst", pool(["spot", "on-demand"]), wants_spot)
    assert allows is not None
    assert [allows(o) for o in (SPOT, ON_DEMAND)] == [True, False]
    # A pool that may not launch spot cannot host a pod that insists on it, and says why.
    reason = pool_can_host("burst", pool(), wants_spot)
    assert reason is not None and "capacityType ['on-demand']" in reason
    assert pool_can_host("burst", pool(["spot"]), wants_spot) is None


def test_a_pod_selecting_spot_gets_a_spot_node_from_a_mixed_pool() -> None:
    # Its plan keeps only spot offerings, so no on-demand fallback: the selector forbids it.
    request = PlanRequest.model_validate(
        {
            "pool_name": "burst",
            "pool": pool(["spot", "on-demand"]),
            "class_providers": ["aws"],
            "pods": [pod(selector={"karpenter.sh/capacity-type": "spot"})],
        }
    )
    plan = plan_capacity(request, [ON_DEMAND, SPOT])
    assert [[o.key for o in n.offerings] for n in plan.new_nodes] == [[SPOT.key]]


def test_the_shipped_catalog_offers_spot_for_the_hyperscalers_only_where_allowed() -> None:
    catalog = Catalog.load()
    spot = catalog.offerings(Requirements(capacity_type=["spot"]))
    assert spot and {o.provider for o in spot} == {"aws", "gcp", "azure"}
    assert all(o.spot for o in spot)
    assert not any(o.spot for o in catalog.offerings(Requirements()))
    by_key = {o.key: o for o in catalog.all_offerings()}
    for o in spot:
        twin = by_key[o.key.removesuffix("/spot")]
        assert (o.price_eur_per_hour or 0) < (twin.price_eur_per_hour or 0)


def test_the_default_capacity_type_leaves_drift_hashes_as_they_were() -> None:
    # Running claims carry hashes made before the field existed: an upgrade must not make
    # every node look drifted. Allowing spot is a change, and drifts like any other.
    import hashlib
    import json

    from api.claims import drift_hash
    from api.nodeclass import FakeClass, JoinSettings, NodeClassSpec

    node_class = NodeClassSpec(
        fake=FakeClass(), join=JoinSettings(host_api_server="https://127.0.0.1:6443")
    )
    spec = pool()
    requirements = spec.requirements.model_dump(mode="json")
    del requirements["capacityType"]
    basis = {
        "template": spec.template.model_dump(mode="json"),
        "requirements": requirements,
        "nodeClass": node_class.model_dump(mode="json"),
    }
    before = hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]
    assert drift_hash(spec, node_class) == before
    assert drift_hash(pool(["spot", "on-demand"]), node_class) != before
