"""NodePoolWorkflow: the single writer of one pool's capacity.

The trigger tells it which pods are pending (keyed by pod UID, so repeats and several trigger
replicas are harmless); its claims tell it what happened to them. It plans the demand that no
Ready or in-flight claim covers, within the pool's limits, and starts one NodeClaim child per
planned node. Being the only writer is what makes any number of triggers safe.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from api import events
    from api import search_attributes as sa
    from api.claims import CLAIM_SUFFIX_ALPHABET, claim_details, claim_summary, new_claim
    from api.events import EventBatch, KubeEvent, ObjectRef
    from api.messages import NodeClaimInput, claim_workflow_id
    from api.nodeclaim import NodeClaimPhase, Offering
    from api.planning import InFlightNode, Plan, PlannedNode, PlanRequest, PodDemand, Resources
    from api.pool import (
        BudgetStatus,
        ClaimReport,
        DemandUpdate,
        DisruptionPermit,
        DisruptionRequest,
        NodePoolInput,
        PoolClaim,
        PoolSpecs,
        PoolStatus,
    )
    from api.quantity import cpu_millis, memory_bytes
    from workflows.nodeclaim import NodeClaimWorkflow

_ACTIVITY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=["InvalidConfiguration"],
)
_LIVE_PHASES = (
    NodeClaimPhase.PENDING,
    NodeClaimPhase.PROVISIONING,
    NodeClaimPhase.JOINING,
    NodeClaimPhase.READY,
)


@workflow.defn
class NodePoolWorkflow:
    @workflow.init
    def __init__(self, input: NodePoolInput) -> None:
        self._input = input
        self._state = input.state
        self._dirty = True
        self._last_plan: Plan | None = None

    @workflow.run
    async def run(self, input: NodePoolInput) -> None:
        while True:
            self._update_details()
            # Woken by news, or after the interval for a periodic look (failure cache, floor).
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self._dirty,
                    timeout=input.reconcile_interval_s,
                    timeout_summary="reconcile",
                )
            self._dirty = False
            await self._reconcile()
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self._input.model_copy(update={"state": self._state}))

    # --- what the trigger and the claims say -----------------------------------------------

    @workflow.signal
    def demand(self, update: DemandUpdate) -> None:
        state = self._state
        if update.specs:
            self._apply_specs(update.specs)
        if update.full_resync:
            listed = {pod.uid for pod in update.pods}
            for uid in [uid for uid in state.pending if uid not in listed]:
                self._resolve(uid)
        for pod in update.pods:
            state.pending[pod.uid] = pod
        for uid in update.resolved:
            self._resolve(uid)
        self._dirty = True

    @workflow.signal
    def update_specs(self, specs: PoolSpecs) -> None:
        self._apply_specs(specs)
        self._dirty = True

    @workflow.signal
    def claim_report(self, report: ClaimReport) -> None:
        state = self._state
        name = report.claim_name
        if report.failed_offering:
            until = workflow.now() + timedelta(seconds=self._input.failed_offering_ttl_s)
            state.failed_offerings[report.failed_offering] = until
        claim = state.claims.get(name)
        if claim is None:
            return
        claim.phase = report.phase
        if report.offering:
            claim.offering = report.offering
        if report.reason.startswith("DisruptionBlocked"):
            state.disruption_blocked[name] = report.reason
        elif report.phase == NodeClaimPhase.READY:
            state.disruption_blocked.pop(name, None)
        if report.phase not in _LIVE_PHASES:
            # Deleting counts against the budgets until Deleted; its pods need another node.
            state.permits.pop(name, None)
            state.disruption_queue.pop(name, None)
            state.disruption_blocked.pop(name, None)
            claim.nominated.clear()
        if report.phase.is_final:
            del state.claims[name]
        self._dirty = True

    @workflow.signal
    def request_disruption(self, request: DisruptionRequest) -> None:
        if request.claim_name in self._state.claims:
            self._state.disruption_queue[request.claim_name] = request.reason
            self._dirty = True

    @workflow.signal
    def withdraw_disruption(self, request: DisruptionRequest) -> None:
        self._state.disruption_queue.pop(request.claim_name, None)
        self._state.permits.pop(request.claim_name, None)
        self._dirty = True

    @workflow.query
    def status(self) -> PoolStatus:
        claims = list(self._state.claims.values())
        return PoolStatus(
            name=self._input.name,
            namespace=self._input.namespace,
            pending_pods=len(self._state.pending),
            blocked=dict(self._state.blocked),
            claims=claims,
            failed_offerings=dict(self._state.failed_offerings),
            disruption_queue=dict(self._state.disruption_queue),
            permits=dict(self._state.permits),
            disruption_blocked=dict(self._state.disruption_blocked),
            budgets=[
                BudgetStatus(
                    nodes=budget.nodes,
                    reasons=list(budget.reasons) if budget.reasons is not None else None,
                    schedule=budget.schedule,
                    duration=budget.duration,
                    active=budget.active(workflow.now()),
                )
                for budget in self._state.specs.pool.disruption.budgets
            ],
            disruptions_allowed={
                reason: self._disruptions_allowed(reason)
                for reason in ("Empty", "Drifted", "Underutilized", "Manual")
            },
            nodes=len(claims),
            ready_nodes=sum(1 for c in claims if c.phase == NodeClaimPhase.READY),
            cpu_m=sum(_offering_cpu_m(c.offering) for c in claims),
            memory_bytes=sum(_offering_memory(c.offering) for c in claims),
        )

    # --- planning --------------------------------------------------------------------------

    async def _reconcile(self) -> None:
        state = self._state
        now = workflow.now()
        for key in [k for k, until in state.failed_offerings.items() if until <= now]:
            del state.failed_offerings[key]
        await self._grant_permits()
        live = self._live_claims()
        nominated = {uid for claim in live for uid in claim.nominated}
        uncovered = [pod for uid, pod in state.pending.items() if uid not in nominated]
        pool = state.specs.pool
        missing_floor = max(0, pool.limits.min_nodes - len(live))
        if not uncovered and not missing_floor:
            state.blocked.clear()
            return
        plan = await workflow.execute_activity(
            "plan_capacity",
            self._plan_request(uncovered, missing_floor),
            result_type=Plan,
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=_ACTIVITY_RETRY,
            summary=f"plan {len(uncovered)} pods",
        )
        self._last_plan = plan
        notices: list[KubeEvent] = []
        for uid, claim_name in plan.assignments.items():
            if claim_name in state.claims:
                state.claims[claim_name].nominated.append(uid)
                notices.append(self._nominated(uid, claim_name))
        for node in plan.new_nodes:
            claim_name = await self._start_claim(node, for_min_nodes=not node.pod_uids)
            notices += [self._nominated(uid, claim_name) for uid in node.pod_uids]
        notices += self._blocked(plan)
        if notices:
            await workflow.execute_activity(
                "record_events",
                EventBatch(events=notices),
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_attempts=5),
                summary=f"{len(notices)} events",
            )

    def _plan_request(self, uncovered: list[PodDemand], missing_floor: int) -> PlanRequest:
        state = self._state
        specs = state.specs
        pool = specs.pool
        limits = pool.limits
        claims = self._live_claims()
        in_flight = []
        for claim in claims:
            used = Resources()
            for uid in claim.nominated:
                pod = state.pending.get(uid)
                if pod is not None:
                    used = used + pod.requests
            in_flight.append(
                InFlightNode(
                    claim_name=claim.name,
                    offering=claim.offering,
                    allocatable=claim.allocatable,
                    used=used,
                )
            )
        used_cpu = sum(_offering_cpu_m(c.offering) for c in claims)
        used_memory = sum(_offering_memory(c.offering) for c in claims)
        return PlanRequest(
            pool_name=self._input.name,
            pool=pool,
            class_providers=specs.node_class.configured_providers(),
            node_class=specs.node_class,
            pods=uncovered,
            in_flight=in_flight,
            failed_offerings=sorted(state.failed_offerings),
            max_new_nodes=None
            if limits.max_nodes is None
            else max(0, limits.max_nodes - len(claims)),
            remaining_cpu_m=None
            if limits.cpu is None
            else max(0, cpu_millis(limits.cpu) - used_cpu),
            remaining_memory_bytes=(
                None if limits.memory is None else max(0, memory_bytes(limits.memory) - used_memory)
            ),
            min_new_nodes=missing_floor,
        )

    async def _start_claim(self, node: PlannedNode, *, for_min_nodes: bool) -> str:
        state = self._state
        specs = state.specs
        name = self._new_claim_name()
        claim = new_claim(
            name=name,
            namespace=self._input.namespace,
            pool_name=self._input.name,
            pool=specs.pool,
            node_class_name=specs.node_class_name,
            offerings=node.offerings,
            cpu_m=node.requests.cpu_m,
            memory_bytes=node.requests.memory_bytes,
            pods=node.requests.pods,
        )
        await workflow.start_child_workflow(
            NodeClaimWorkflow.run,
            NodeClaimInput(
                claim=claim,
                node_class_name=specs.node_class_name,
                node_class=specs.node_class,
                cluster_id=self._input.cluster_id,
                timings=self._input.claim_timings,
                pool_workflow_id=workflow.info().workflow_id,
            ),
            id=claim_workflow_id(name),
            # The claim outlives a pool workflow that continues as new or is replaced.
            parent_close_policy=ParentClosePolicy.ABANDON,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(sa.NODE_POOL, self._input.name),
                    SearchAttributePair(sa.PHASE, NodeClaimPhase.PENDING.value),
                ]
            ),
            static_summary=claim_summary(claim),
            static_details=claim_details(claim),
        )
        allocatable = node.allocatable if node.allocatable.pods else node.requests
        state.claims[name] = PoolClaim(
            name=name,
            phase=NodeClaimPhase.PENDING,
            offering=node.offerings[0],
            allocatable=allocatable,
            nominated=list(node.pod_uids),
            started_at=workflow.now(),
            for_min_nodes=for_min_nodes,
        )
        state.claims_started += 1
        for uid in node.pod_uids:
            state.blocked.pop(uid, None)
        return name

    def _new_claim_name(self) -> str:
        # workflow.random() is seeded by Temporal: the same names on replay.
        rng = workflow.random()
        while True:
            suffix = "".join(rng.choice(CLAIM_SUFFIX_ALPHABET) for _ in range(5))
            name = f"{self._input.name}-{suffix}"
            if name not in self._state.claims:
                return name

    def _blocked(self, plan: Plan) -> list[KubeEvent]:
        """Record why pods still wait; an Event only when the reason is new."""
        state = self._state
        notices = []
        reasons = {uid: f"{events.LIMIT_REACHED}: {self._limit_text()}" for uid in plan.limited}
        reasons.update(plan.unschedulable)
        for uid, reason in reasons.items():
            if state.blocked.get(uid) == reason or uid not in state.pending:
                continue
            state.blocked[uid] = reason
            pod = state.pending[uid]
            limited = uid in plan.limited
            notices.append(
                KubeEvent(
                    regarding=ObjectRef(
                        kind="Pod", name=pod.name, namespace=pod.namespace, uid=uid
                    ),
                    reason=events.LIMIT_REACHED if limited else events.FAILED_PROVISIONING,
                    message=f"NodePool {self._input.name}: {reason}",
                    type="Warning",
                )
            )
        return notices

    def _nominated(self, uid: str, claim_name: str) -> KubeEvent:
        pod = self._state.pending[uid]
        return KubeEvent(
            regarding=ObjectRef(kind="Pod", name=pod.name, namespace=pod.namespace, uid=uid),
            reason=events.NOMINATED,
            message=f"Pod should schedule on NodeClaim {claim_name}",
        )

    def _limit_text(self) -> str:
        limits = self._state.specs.pool.limits
        parts = [
            f"maxNodes={limits.max_nodes}" if limits.max_nodes is not None else "",
            f"cpu={limits.cpu}" if limits.cpu else "",
            f"memory={limits.memory}" if limits.memory else "",
        ]
        return "pool limits " + ", ".join(p for p in parts if p)

    # --- disruption budgets ---------------------------------------------------------------

    async def _grant_permits(self) -> None:
        """Grant waiting claims their permits, first asked first served, within the budgets."""
        state = self._state
        for name, reason in list(state.disruption_queue.items()):
            if self._disruptions_allowed(reason) <= 0:
                continue
            del state.disruption_queue[name]
            state.permits[name] = reason
            handle = workflow.get_external_workflow_handle(claim_workflow_id(name))
            try:
                await handle.signal("disruption_permitted", DisruptionPermit(reason=reason))
            except Exception as err:  # the claim is gone: its permit goes with it
                workflow.logger.warning("claim %s did not take its permit: %s", name, err)
                state.permits.pop(name, None)

    def _disruptions_allowed(self, reason: str) -> int:
        """How many more nodes may be disrupted for `reason` now: the strictest active budget."""
        state = self._state
        budgets = state.specs.pool.disruption.budgets
        now = workflow.now()
        total = len(state.claims)
        disrupting = len(
            set(state.permits)
            | {c.name for c in state.claims.values() if c.phase == NodeClaimPhase.DELETING}
        )
        limits = [
            budget.allowed(total)
            for budget in budgets
            if budget.active(now) and (budget.reasons is None or reason in budget.reasons)
        ]
        if not limits:
            return max(0, total - disrupting)
        return max(0, min(limits) - disrupting)

    # --- state helpers ----------------------------------------------------------------------

    def _live_claims(self) -> list[PoolClaim]:
        return [c for c in self._state.claims.values() if c.phase in _LIVE_PHASES]

    def _resolve(self, uid: str) -> None:
        state = self._state
        state.pending.pop(uid, None)
        state.blocked.pop(uid, None)
        for claim in state.claims.values():
            if uid in claim.nominated:
                claim.nominated.remove(uid)

    def _apply_specs(self, specs: PoolSpecs) -> None:
        current = self._state.specs
        if (specs.pool_generation, specs.class_generation) >= (
            current.pool_generation,
            current.class_generation,
        ):
            self._state.specs = specs

    def _update_details(self) -> None:
        state = self._state
        ready = sum(1 for c in state.claims.values() if c.phase == NodeClaimPhase.READY)
        lines = [
            f"**NodePool {self._input.namespace}/{self._input.name}**",
            "",
            "| | |",
            "|---|---|",
            f"| Claims | {len(state.claims)} ({ready} Ready) |",
            f"| Pending pods | {len(state.pending)} |",
            f"| Waiting on limits / unschedulable | {len(state.blocked)} |",
            f"| Offerings skipped | {', '.join(sorted(state.failed_offerings)) or '—'} |",
            f"| Claims started | {state.claims_started} |",
        ]
        workflow.set_current_details("\n".join(lines))


def _offering_cpu_m(offering: Offering) -> int:
    return int((offering.vcpu or 0) * 1000)


def _offering_memory(offering: Offering) -> int:
    return int((offering.memory_gib or 0) * 2**30)
