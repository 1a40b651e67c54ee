"""The NodePoolWorkflow's spine: its run loop, what the trigger and the claims say, and the
status query.

The trigger tells it which pods are pending (keyed by pod UID, so repeats and several trigger
replicas are harmless); its claims tell it what happened to them. It plans the demand that no
Ready or in-flight claim covers, within the pool's limits, and starts one NodeClaim per
planned node. Being the only writer of the pool's decisions is what makes any number of
triggers safe. It continues as new at its own history bound (`workflows/history.py`), once
nothing it started is in flight.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    # The modules hold no state of their own: passed through, they are loaded once per
    # worker, not again for every run.
    from api.explain import PoolPodView
    from api.nodeclaim import NodeClaimPhase
    from api.nodepool.messages import (
        BudgetStatus,
        ClaimReport,
        DemandUpdate,
        DisruptionRequest,
        NodePoolInput,
        NodeUsage,
        PoolQuery,
        PoolSignal,
        PoolSpecs,
        PoolStatus,
    )
    from workflows.decisions import pool as pool_rules
    from workflows.nodepool import claims, deadlines, disruption, news, planning, reporting
    from workflows.nodepool.state import LIVE_PHASES, PoolRun


async def _round(run: PoolRun) -> None:
    """One round of the pool: what time has brought, permits, drift and consolidation, then
    the pods no claim covers. A round runs whenever the pool is dirty (news or an alarm)."""
    state = run.state
    facts = deadlines.time_facts(run)
    run.offerings_expired(facts.expired_offerings)
    for claim in state.claims.values():
        if not (claim.nominated or claim.filling) or claim.phase not in LIVE_PHASES:
            continue  # nothing to lapse, nothing nominated that could overflow
        if claim.name in facts.lapsed_nominations:
            run.nominations_lapsed(claim)
        elif left_out := pool_rules.overflowing(claim, state.pending):
            # The scheduler filled its node with others: those left out are planned again.
            run.nominations_overflowed(claim, left_out)
    if facts.config_retry_due:
        run.config_retry()
    if facts.periodic_look:
        await claims.forget_those_gone(run)
    await disruption.grant_permits(run)
    if state.deleted:
        # Nothing new for a deleted pool: no drift replacement, no consolidation's, no floor,
        # no pods (the trigger resolved them).
        run.nothing_blocked()
        return
    await disruption.replace_drifted(run)
    await disruption.consolidate(run, facts.consolidation_due)
    await planning.plan_uncovered(run, facts)


@workflow.defn
class NodePoolWorkflow:
    @workflow.init
    def __init__(self, input: NodePoolInput) -> None:
        self._run = PoolRun.of(input)

    @workflow.run
    async def run(self, input: NodePoolInput) -> None:
        run = self._run
        while True:
            reporting.update_details(run)
            await workflow.wait_condition(lambda: run.dirty)
            run.begin_round()
            await _round(run)
            reporting.publish_status_aside(run)
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(run.settled)
                self._continue_as_new()
            # This run started all the claims it may: the next run starts the rest, once
            # this one's starts are confirmed (a few seconds; news waits for that).
            if run.starts_left == 0:
                await workflow.wait_condition(run.settled)
                self._continue_as_new()
            # Past our own bound, once nothing is in flight; news meanwhile is not kept
            # waiting for that (a burst's claim starts keep a pool busy for many rounds)
            # until the hard bound: then news waits.
            if run.history.reached():
                await workflow.wait_condition(
                    lambda: run.settled() or (run.dirty and not run.history.overdue())
                )
                if run.settled():
                    self._continue_as_new()

    def _continue_as_new(self) -> None:
        run = self._run
        workflow.continue_as_new(run.input.model_copy(update={"state": run.state}))

    # --- what the trigger and the claims say -----------------------------------------------

    @workflow.signal(name=PoolSignal.DEMAND)
    def demand(self, update: DemandUpdate) -> None:
        news.demand(self._run, update)

    @workflow.signal(name=PoolSignal.NODE_USAGE)
    def node_usage(self, usage: NodeUsage) -> None:
        news.node_usage(self._run, usage)

    @workflow.signal(name=PoolSignal.UPDATE_SPECS)
    def update_specs(self, specs: PoolSpecs) -> None:
        news.apply_specs(self._run, specs)
        self._run.wake()

    @workflow.signal(name=PoolSignal.RETRY_NOW)
    def retry_now(self) -> None:
        """The operator fixed what new claims failed on without a change of the pool or its
        class (created the missing Secret, raised a quota): the configuration back-off ends,
        and the pods held back are planned again at once (`cloudburst pools retry`)."""
        news.end_config_backoff(self._run)
        self._run.wake()

    @workflow.signal(name=PoolSignal.CLAIM_REPORT)
    def claim_report(self, report: ClaimReport) -> None:
        news.claim_report(self._run, report)

    @workflow.signal(name=PoolSignal.WORKLOAD_LEFT)
    def workload_left(self, node_name: str) -> None:
        """The watcher saw pods leave one of our nodes: news for consolidation, which looks
        again (by its alarm, after consolidateAfter) rather than on a timer of its own."""
        if node_name in self._run.state.claims:
            self._run.wake()

    @workflow.signal(name=PoolSignal.REQUEST_DISRUPTION)
    def request_disruption(self, request: DisruptionRequest) -> None:
        if request.claim_name in self._run.state.claims:
            self._run.disruption_requested(request.claim_name, request.reason)
            self._run.wake()

    @workflow.signal(name=PoolSignal.WITHDRAW_DISRUPTION)
    def withdraw_disruption(self, request: DisruptionRequest) -> None:
        self._run.disruption_withdrawn(request.claim_name)
        self._run.wake()

    @workflow.query(name=PoolQuery.POD)
    def pod(self, uid: str) -> PoolPodView:
        """What the pool knows of one pending pod (`cloudburst explain pod`)."""
        return pool_rules.pod_view(self._run.state, self._run.held, uid)

    @workflow.query(name=PoolQuery.STATUS)
    def status(self) -> PoolStatus:
        run = self._run
        state = run.state
        claims = list(state.claims.values())
        cpu_m, memory = pool_rules.held(claims)
        return PoolStatus(
            name=run.name,
            namespace=run.namespace,
            pending_pods=len(state.pending),
            blocked=dict(state.blocked),
            claims=claims,
            failed_offerings=dict(state.failed_offerings),
            consolidation=state.consolidation_note,
            consolidation_verdicts=dict(state.consolidation_verdicts),
            disruption_queue=dict(state.disruption_queue),
            permits=dict(state.permits),
            disruption_blocked=dict(state.disruption_blocked),
            budgets=[
                BudgetStatus(
                    nodes=budget.nodes,
                    reasons=list(budget.reasons) if budget.reasons is not None else None,
                    schedule=budget.schedule,
                    duration=budget.duration,
                    active=any(budget is active for active in run.active_budgets),
                )
                for budget in state.specs.pool.disruption.budgets
            ],
            disruptions_allowed={
                reason: disruption.allowed(run, reason) for reason in disruption.SHOWN_REASONS
            },
            nodes=len(claims),
            ready_nodes=sum(1 for c in claims if c.phase == NodeClaimPhase.READY),
            cpu_m=cpu_m,
            memory_bytes=memory,
            config_error=state.config_error,
            config_retry_at=state.config_retry_at if state.config_error else None,
            alarms=run.alarms.armed,
        )
