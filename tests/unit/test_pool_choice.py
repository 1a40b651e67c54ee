"""`cluster/matching.py`: the pool a pending pod goes to across namespaces, and what the pod's
Event and `cloudburst explain pod` say of every pool."""

from __future__ import annotations

from typing import Any

from api import NodeClass, NodePool
from api.planning import PodDemand, Resources
from cluster.matching import ClusterSpecs, match
from cluster.tenancy import INVALID_SPEC, Refusal, Tenancy

OPERATOR = "cloudburst-system"
TENANCY = Tenancy(worker_namespace=OPERATOR, namespaces=frozenset({"team-a", "team-b"}))


def specs(*pools: tuple[str, str, dict[str, Any]]) -> ClusterSpecs:
    """Each pool with a NodeClass of its own name in its namespace."""
    found = ClusterSpecs()
    for namespace, name, spec in pools:
        key = (namespace, name)
        pool = NodePool.model_validate(
            {
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"nodeClassRef": name, **spec},
            }
        )
        found.pools[key] = pool
        found.node_specs[key] = TENANCY.node_spec(namespace, pool.spec)
        found.classes[key] = NodeClass.model_validate(
            {
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"fake": {}, "join": {"hostApiServer": "https://10.0.0.1:6443"}},
            }
        )
    return found


def pod(namespace: str, tolerate: str | None = None) -> PodDemand:
    tolerations = []
    if tolerate:
        tolerations = [{"key": "cloudburst.io/tenant", "value": tolerate, "effect": "NoSchedule"}]
    return PodDemand.model_validate(
        {
            "uid": "u1",
            "namespace": namespace,
            "name": "p",
            "requests": Resources(cpu_m=250, pods=1).model_dump(),
            "tolerations": tolerations,
        }
    )


def test_a_pod_goes_to_a_pool_of_its_own_namespace_never_another_tenants() -> None:
    cluster = specs(("team-a", "greedy", {"weight": 100}), ("team-b", "own", {}))
    found = match(pod("team-b", tolerate="team-b"), cluster, TENANCY, {})
    assert found.chosen == ("team-b", "own")
    greedy = next(v for v in found.verdicts if v.pool == ("team-a", "greedy"))
    assert (greedy.serves, greedy.hosts) == (False, False)
    assert greedy.why == "serves the pods of namespace team-a only"


def test_the_event_names_only_the_pools_that_serve_the_pods_namespace() -> None:
    cluster = specs(("team-a", "greedy", {"weight": 100}), ("team-b", "gpu", {"weight": 5}))
    cluster.node_specs[("team-b", "gpu")] = cluster.node_specs[("team-b", "gpu")].model_copy(
        update={
            "template": cluster.node_specs[("team-b", "gpu")].template.model_copy(
                update={"labels": {"gpu": "a100"}}
            )
        }
    )
    demand = pod("team-b", tolerate="team-b").model_copy(update={"node_selector": {"gpu": "h100"}})
    found = match(demand, cluster, TENANCY, {})
    assert found.chosen is None
    said = found.reason("team-b", OPERATOR)
    assert said.startswith("team-b/gpu: ") and "greedy" not in said and "team-a" not in said


def test_without_a_pool_the_reason_says_who_serves_a_namespace() -> None:
    found = match(pod("team-b"), specs(("team-a", "greedy", {})), TENANCY, {})
    assert found.reason("team-b", OPERATOR).startswith("no NodePool serves namespace team-b")


def test_the_tenant_taint_not_tolerated_says_what_to_do() -> None:
    found = match(pod("team-a"), specs(("team-a", "own", {})), TENANCY, {})
    [verdict] = found.verdicts
    assert verdict.serves and not verdict.hosts
    assert "defaultTolerations" in str(verdict.why) and "tenant-rbac team-a" in str(verdict.why)


def test_a_shared_pool_takes_the_namespaces_its_selector_selects() -> None:
    selector = {"matchLabels": {"burst": "yes"}}
    cluster = specs((OPERATOR, "shared", {"namespaceSelector": selector}))
    assert match(pod("team-b"), cluster, TENANCY, {"burst": "yes"}).chosen == (OPERATOR, "shared")
    refused = match(pod("team-b"), cluster, TENANCY, {"burst": "no"})
    assert refused.chosen is None
    assert "burst=yes" in str(refused.verdicts[0].why)


def test_the_highest_weight_wins_then_the_name() -> None:
    cluster = specs(
        (OPERATOR, "b", {"namespaceSelector": {}, "weight": 10}),
        (OPERATOR, "a", {"namespaceSelector": {}, "weight": 10}),
        (OPERATOR, "c", {"namespaceSelector": {}, "weight": 1}),
    )
    assert match(pod("team-b"), cluster, TENANCY, {}).chosen == (OPERATOR, "a")


def test_an_invalid_pool_of_the_namespace_says_so() -> None:
    cluster = ClusterSpecs(
        invalid_pools={("team-b", "broken"): Refusal(INVALID_SPEC, "spec.weight: too big")}
    )
    found = match(pod("team-b"), cluster, TENANCY, {})
    assert (
        found.reason("team-b", OPERATOR)
        == "team-b/broken: the NodePool is invalid: spec.weight: too big"
    )
