"""Consolidation: find the one move that saves the most — remove a node whose pods fit on the
pool's other nodes, or replace it with a cheaper one that fits them — never below a threshold.

It reads the cluster (which pods run where, what each node can still take) and asks the
planner (`planner/plan.py`) for the cheapest replacement, on the inputs a pool's plan reads
(`activities/planning/inputs.py`), so the same offerings, limits, overheads and counts
apply: a cloud node is replaced by an on-premises machine once one is free again (an offering
with `available` left, cheaper), never by an offering with none left.

At the pool's floor (as many Ready nodes as `minNodes`, or fewer) no node is deleted: the
floor would start another at once. A node there is only replaced, by the cheapest node that
takes its pods (an empty one: the cheapest node the floor would start), so a static pool
moves back to free machines of its own too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from temporalio import activity
from urllib3.exceptions import HTTPError

from activities.planning.inputs import PlanningInputs
from api.events import UNCONSOLIDATABLE, KubeEvent, ObjectRef
from api.nodepool import API_VERSION
from api.nodepool.messages import ConsolidationDecision, ConsolidationInput
from api.planning import PlanRequest, PodDemand, Resources, Toleration
from api.quantity import cpu_millis, memory_bytes
from cluster.pods import has_do_not_disrupt, is_left_alone
from cluster.requirements import pod_demand
from observability.events import record_event
from planner.plan import plan_capacity

log = logging.getLogger(__name__)


class ConsolidationActivities:
    def __init__(self, api_client: k8s.ApiClient, inputs: PlanningInputs) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._inputs = inputs

    def activities(self) -> list[Callable[..., Any]]:
        return [self.find_consolidation]

    @activity.defn(name="find_consolidation")
    def find_consolidation(self, input: ConsolidationInput) -> ConsolidationDecision:
        nodes = {name: self._node(name) for name in input.ready}
        pods = {name: self._workload(name) for name in input.ready}
        free = {
            name: _allocatable(node) - _sum(p for p, _ in pods[name])
            for name, node in nodes.items()
            if node is not None and not (node.spec and node.spec.unschedulable)
        }
        stable = _stable_candidates(input)
        at_floor = len(input.ready) <= input.pool.limits.min_nodes
        verdicts = {
            name: "Ready for less than consolidateAfter"
            for name in input.candidates
            if name not in stable
        }
        moves: list[ConsolidationDecision] = []
        pinned: list[str] = []  # nodes do-not-disrupt pods keep, with the pods
        for name in stable:
            node_pods = pods.get(name, [])
            protected = [
                f"{p.namespace}/{p.name}" for p, annotations in node_pods if _protected(annotations)
            ]
            if protected:
                verdicts[name] = f"do-not-disrupt pods: {', '.join(protected)}"
                pinned.append(f"{name}: {verdicts[name]}")
                continue
            price = input.ready[name].price_eur_per_hour or 0.0
            demands = [p for p, _ in node_pods]
            others = {n: capacity for n, capacity in free.items() if n != name}
            if not at_floor and _fits_elsewhere(demands, others, nodes):
                move = ConsolidationDecision(
                    action="delete",
                    claim_name=name,
                    savings_eur_per_hour=round(price, 6),
                    explanation=f"{len(demands)} pods of {name} fit on the pool's other nodes",
                )
            else:
                move = self._replacement(input, name, demands, price)
            verdicts[name] = move.explanation
            if move.action != "none" and move.savings_eur_per_hour > 0:
                moves.append(move)
            elif move.action != "none":
                verdicts[name] += ", but that saves nothing (its price is 0)"
        best = max(moves, key=lambda m: m.savings_eur_per_hour, default=None)
        threshold = input.min_savings_eur_per_hour
        for move in moves:
            assert move.claim_name is not None
            saves = f"saves {move.savings_eur_per_hour:.4f} EUR/h"
            if move.savings_eur_per_hour < threshold:
                verdicts[move.claim_name] += (
                    f", but {saves}, below the pool's {threshold:.4f} EUR/h threshold"
                )
            elif move is not best:
                verdicts[move.claim_name] += f" ({saves}); another move saves more"
            else:
                verdicts[move.claim_name] += f" ({saves}): chosen"
        if best is not None and best.savings_eur_per_hour >= threshold:
            decision = best.model_copy(update={"verdicts": verdicts})
        else:
            # The pool's one line: what held the moves back (the verdicts say it per node).
            notes = list(pinned)
            if best is not None:
                notes.append(
                    f"best move ({best.action} {best.claim_name}) saves only "
                    f"{best.savings_eur_per_hour:.4f} EUR/h, below the threshold"
                )
            decision = ConsolidationDecision(
                explanation="; ".join(notes) or "no node is underutilized", verdicts=verdicts
            )
        self._tell_unconsolidatable(input, decision)
        log.info("pool %s consolidation: %s", input.pool_name, decision.explanation)
        return decision

    def _tell_unconsolidatable(
        self, input: ConsolidationInput, decision: ConsolidationDecision
    ) -> None:
        """An `Unconsolidatable` Event on each node kept, and on its NodeClaim, with the
        reason (Karpenter writes the same): where `kubectl describe` shows it. Repeats fold
        into one Event (`record_event`); a failed write only loses the courtesy."""
        for name, why in decision.verdicts.items():
            if name == decision.claim_name:
                continue
            for regarding in (
                ObjectRef(kind="Node", name=name),
                ObjectRef(
                    kind="NodeClaim", name=name, namespace=input.namespace, api_version=API_VERSION
                ),
            ):
                try:
                    record_event(
                        self._core,
                        KubeEvent(regarding=regarding, reason=UNCONSOLIDATABLE, message=why),
                    )
                except (k8s.ApiException, OSError, HTTPError) as err:
                    log.warning("Unconsolidatable Event for %s not written: %s", name, err)

    def _replacement(
        self, input: ConsolidationInput, name: str, demands: list[PodDemand], price: float
    ) -> ConsolidationDecision:
        """The cheapest single node that takes all the pods, if it is cheaper than this one
        (for an empty node, kept by the floor: the cheapest node of all)."""
        together = PodDemand(
            uid=f"consolidate/{name}",
            namespace=input.namespace,
            name=f"pods of {name}",
            requests=_sum(demands),
            # They run on the pool's node: they tolerate its taints, which the new one has too.
            tolerations=[Toleration(operator="Exists")],
        )
        request = PlanRequest(
            pool_name=input.pool_name,
            namespace=input.namespace,
            pool=input.pool,
            class_providers=input.node_class.configured_providers(),
            node_class=input.node_class,
            pods=[together] if demands else [],
            failed_offerings=input.failed_offerings,
            max_new_nodes=1,
            min_new_nodes=0 if demands else 1,
        )
        offerings, overhead = self._inputs.planning_inputs(request)
        plan = plan_capacity(request, offerings, overhead)
        if not plan.new_nodes:
            return ConsolidationDecision(explanation=f"no single offering takes the pods of {name}")
        node = plan.new_nodes[0]
        new_price = node.offerings[0].price_eur_per_hour or 0.0
        if new_price >= price:
            return ConsolidationDecision(explanation=f"{name} is already the cheapest fit")
        return ConsolidationDecision(
            action="replace",
            claim_name=name,
            replacement=node,
            savings_eur_per_hour=round(price - new_price, 6),
            explanation=f"{name} can be replaced by {node.offerings[0].key}",
        )

    def _node(self, name: str) -> k8s.V1Node | None:
        try:
            node: k8s.V1Node = self._core.read_node(name)
        except k8s.ApiException as err:
            if err.status == 404:
                return None
            raise
        return node

    def _workload(self, node: str) -> list[tuple[PodDemand, dict[str, str]]]:
        listing = self._core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        return [
            (pod_demand(pod), dict((pod.metadata.annotations if pod.metadata else None) or {}))
            for pod in listing.items
            if not is_left_alone(pod)
        ]


def _fits_elsewhere(
    demands: list[PodDemand], free: dict[str, Resources], nodes: dict[str, k8s.V1Node | None]
) -> bool:
    """First-fit decreasing onto the other nodes' free capacity, honouring nodeSelectors."""
    remaining = dict(free)
    for demand in sorted(
        demands, key=lambda d: (d.requests.cpu_m, d.requests.memory_bytes), reverse=True
    ):
        for name, capacity in remaining.items():
            node = nodes.get(name)
            labels = (node.metadata.labels if node and node.metadata else None) or {}
            selector_ok = all(labels.get(k) == v for k, v in demand.node_selector.items())
            if selector_ok and demand.requests.fits_in(capacity):
                remaining[name] = capacity - demand.requests
                break
        else:
            return False
    return True


def _stable_candidates(input: ConsolidationInput) -> list[str]:
    """The candidates Ready for long enough. Judged here, by the activity's clock, so the
    workflow never compares its own clock with a deadline (see workflows/alarms.py)."""
    if not input.stable_since:
        return list(input.candidates)
    now = datetime.now(UTC)
    return [
        name
        for name in input.candidates
        if name in input.stable_since
        and (now - input.stable_since[name]).total_seconds() >= input.min_stable_s
    ]


def _allocatable(node: k8s.V1Node | None) -> Resources:
    values = (node.status.allocatable if node and node.status else None) or {}
    return Resources(
        cpu_m=cpu_millis(values.get("cpu", "0")),
        memory_bytes=memory_bytes(values.get("memory", "0")),
        pods=int(values.get("pods", "0")),
    )


def _sum(demands: Any) -> Resources:
    total = Resources()
    for demand in demands:
        total = total + demand.requests
    return total


def _protected(annotations: dict[str, str]) -> bool:
    return has_do_not_disrupt(annotations)
