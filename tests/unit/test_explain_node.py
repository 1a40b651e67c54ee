"""`cloudburst explain node`: each reason a node stays, with its numbers — not a Cloudburst
node, not Ready yet, do-not-disrupt pods (named), pods on it with consolidation's verdict, the
empty-TTL left, a budget it waits for, drift, expiry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from api.explain import ClaimView
from api.nodeclaim import ClaimDisruption, ConditionType, NodeClaimPhase, NodeClaimStatus, Offering
from api.nodepool import NodePoolSpec
from api.nodepool.messages import BudgetStatus, PoolClaim, PoolStatus
from cluster.pods import pod_model
from explain.node import explain_node

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
CLAIM = ClaimView(namespace="team-a", name="burst-abcde", phase="Ready")


def status(
    phase: NodeClaimPhase = NodeClaimPhase.READY,
    conditions: dict[str, tuple[bool, datetime]] | None = None,
) -> NodeClaimStatus:
    found = NodeClaimStatus(phase=phase, created_at=NOW - timedelta(hours=1))
    for type_, (value, since) in (conditions or {}).items():
        found.set_condition(type_, value, type_, "why", since)
    return found


def pod(name: str, *, do_not_disrupt: bool = False, daemonset: bool = False) -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", "uid": name}
    if do_not_disrupt:
        meta["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}
    if daemonset:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d"}
        ]
    return pod_model(
        {
            "metadata": meta,
            "spec": {"nodeName": "burst-abcde", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }
    )


def pool_status(**fields: Any) -> PoolStatus:
    fields.setdefault("claims", [])
    return PoolStatus(
        name="burst",
        namespace="team-a",
        pending_pods=0,
        blocked={},
        failed_offerings={},
        nodes=1,
        ready_nodes=1,
        cpu_m=2000,
        memory_bytes=2**32,
        **fields,
    )


def explain(**given: Any) -> Any:
    facts: dict[str, Any] = {
        "claim": CLAIM,
        "status": status(),
        "disruption": ClaimDisruption(ttl_seconds_after_empty=300),
        "pods": [],
        "pool": "team-a/burst",
        "pool_spec": NodePoolSpec(),
        "pool_status": pool_status(),
        "now": NOW,
    }
    facts.update(given)
    return explain_node("burst-abcde", **facts)


def kinds(answer: Any) -> list[str]:
    return [b.kind for b in answer.blockers]


def test_a_node_no_claim_made_is_another_autoscalers() -> None:
    answer = explain(claim=None, status=None)
    assert answer.summary.startswith("not a Cloudburst node")


def test_a_claim_not_ready_yet_keeps_its_node() -> None:
    answer = explain(status=status(NodeClaimPhase.JOINING))
    assert answer.summary == "its claim is Joining: a node is disrupted only once Ready"


def test_a_do_not_disrupt_pod_is_named_first() -> None:
    pods = [pod("web-1"), pod("batch-7", do_not_disrupt=True), pod("logs", daemonset=True)]
    answer = explain(pods=pods)
    assert answer.summary == "do-not-disrupt pods: team-a/batch-7"
    assert answer.do_not_disrupt == ["team-a/batch-7"]
    # The DaemonSet's pod makes nothing busy; the two others do.
    assert answer.workload_pods == ["team-a/web-1", "team-a/batch-7"]
    assert kinds(answer)[:2] == ["DoNotDisrupt", "NotEmpty"]


def test_pods_on_it_with_consolidations_verdict_the_cheaper_replacement() -> None:
    verdict = "burst-abcde can be replaced by hetzner/fsn1/cx22 (saves 0.0100 EUR/h): chosen"
    spec = NodePoolSpec.model_validate(
        {"disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized"}}
    )
    answer = explain(
        pods=[pod("web-1")],
        pool_spec=spec,
        pool_status=pool_status(consolidation_verdicts={"burst-abcde": verdict}),
    )
    assert answer.summary == "1 pods run on it: team-a/web-1"
    assert answer.consolidation == verdict
    assert "Consolidation" in kinds(answer)


def test_consolidation_off_says_which_policy_keeps_it() -> None:
    answer = explain(pods=[pod("web-1")])
    assert answer.consolidation.startswith("off: the pool's consolidationPolicy is WhenEmpty")


def test_an_empty_node_says_how_long_its_empty_ttl_still_runs() -> None:
    answer = explain(
        status=status(conditions={ConditionType.EMPTY: (True, NOW - timedelta(seconds=100))})
    )
    assert answer.empty_ttl_remaining_s == 200
    assert answer.summary == "empty for 1m40s: goes in 3m20s (ttlSecondsAfterEmpty=300)"
    unset = explain(
        status=status(conditions={ConditionType.EMPTY: (True, NOW)}),
        disruption=ClaimDisruption(ttl_seconds_after_empty=None),
    )
    assert "ttlSecondsAfterEmpty is unset" in unset.summary


def test_a_disruption_waiting_for_a_budget_gives_the_numbers() -> None:
    queued = pool_status(
        disruption_queue={"burst-abcde": "Empty"},
        permits={"burst-other": "Empty"},
        disruptions_allowed={"Empty": 0},
        budgets=[BudgetStatus(nodes="1", reasons=None, schedule=None, duration=None, active=True)],
    )
    empty_long = status(conditions={ConditionType.EMPTY: (True, NOW - timedelta(hours=1))})
    answer = explain(status=empty_long, pool_status=queued)
    assert answer.summary == (
        "waits for a disruption budget (Empty): 0 more may go now (budgets: nodes=1; 1 disrupting)"
    )


def test_drift_waits_for_its_replacement() -> None:
    drifted = status(conditions={ConditionType.DRIFTED: (True, NOW)})
    offering = Offering(provider="fake", region="sim-1", instance_type="fk-small")
    claim = PoolClaim(
        name="burst-abcde",
        phase=NodeClaimPhase.READY,
        offering=offering,
        allocatable={},
        started_at=NOW,
        replaced_by="burst-new",
    )
    answer = explain(status=drifted, pool_status=pool_status(claims=[claim]))
    assert answer.drifted
    assert "replaced by burst-new once it is Ready" in answer.summary


def test_expiry_is_counted_from_the_claims_creation() -> None:
    answer = explain(disruption=ClaimDisruption(ttl_seconds_until_expired=7200))
    assert answer.expires_at == NOW + timedelta(hours=1)
    assert answer.summary == "expires in 1h0m (ttlSecondsUntilExpired=7200), whatever runs on it"
