"""NodePoolWorkflow: the single writer of one pool's capacity.

The trigger tells it which pods are pending (keyed by pod UID, so repeats and several trigger
replicas are harmless); its claims tell it what happened to them. It plans the demand that no
Ready or in-flight claim covers, within the pool's limits, and starts one NodeClaim child per
planned node. Being the only writer is what makes any number of triggers safe.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from activities.claim_workflows import ClaimWorkflowActivities
    from activities.events import EventActivities
    from activities.mirror import MirrorActivities
    from activities.planning.activity import PlanningActivities
    from activities.planning.consolidation import ConsolidationActivities
    from api import errors, events
    from api import search_attributes as sa
    from api.claims import (
        CLAIM_SUFFIX_ALPHABET,
        DRIFT_HASH_ANNOTATION,
        claim_details,
        claim_summary,
        drift_hash,
        new_claim,
    )
    from api.events import EventBatch, KubeEvent, ObjectRef
    from api.gc import ClaimState, ClaimStatesInput
    from api.messages import (
        ClaimStart,
        ClaimStarts,
        FailureReason,
        NodeClaimInput,
        claim_task_queue,
        claim_workflow_id,
    )
    from api.nodeclaim import NodeClaim, NodeClaimPhase
    from api.nodepool import (
        API_VERSION,
        LIMIT_REACHED,
        Budget,
        Limits,
        NodePoolStatus,
        parse_duration,
    )
    from api.nodepool.messages import (
        BudgetStatus,
        ClaimReport,
        ConsolidationDecision,
        ConsolidationInput,
        DemandUpdate,
        DisruptionPermit,
        DisruptionRequest,
        NodePoolInput,
        NodePoolStatusUpdate,
        NodeUsage,
        PoolClaim,
        PoolSpecs,
        PoolStatus,
    )
    from api.planning import Plan, PlannedNode, PlanRequest, PodDemand
    from api.quantity import cpu_millis, memory_bytes
    from workflows.alarms import Alarms
    from workflows.decisions import budgets as budget_rules
    from workflows.decisions import pool as pool_rules
    from workflows.history import HistoryBound
    from workflows.nodeclaim import NodeClaimWorkflow
    from workflows.timeouts import KUBE_CALL, PLANNING, QUICK_HEARTBEAT

_ACTIVITY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=errors.POOL_NON_RETRYABLE,
)
_PLANNING_FAILED = "planning failed"
# A plan that failed (a bad credential, the recommender down for good) is tried this often.
_PLANNING_RETRY_S = 15.0
# Claims that fail on their configuration hold new claims back this long, doubling.
_CONFIG_BACKOFF_S = 30.0
_CONFIG_BACKOFF_MAX_S = 600.0
_CONFIG_BLOCKED = "claims fail on the configuration"
_HOLD_PATCH = "hold-partly-filled-nodes"
# Child claim starts one workflow task may send (runs that start claims as children). Each
# costs the task ~1 ms of Python (its input, search attributes, summary), more on a busy
# worker: a floor of 3,000 nodes started in one task ran past the SDK's 2 s deadlock
# detector, which fails the task on every retry, and the pool stood still. The rest start
# as Temporal confirms the first (~0.1-0.5 s a wave).
_CLAIM_STARTS_AT_ONCE = 200
# Claims one run of the pool starts before it continues as new. Temporal refuses a child
# start past 2,000 running children of one run (`PendingChildWorkflowsLimitExceeded`, which
# fails the task on every retry); after a continue-as-new the claims are no run's children
# (they are abandoned, not ended). Kept for claims started by activity too: a run that
# starts claims cannot continue as new until they have started, and its history (the
# claims' reports) is what a worker replays on a takeover.
_CLAIM_STARTS_PER_RUN = 500
# Claims one `start_claim_workflows` activity starts, and their inputs' JSON together (each
# carries its NodeClass: ~4.5 KB usually, far more for a class filled to its bounds). Over
# 512 KB a payload goes compressed, but JSON with copies further apart than zlib's 32 KB
# window barely shrinks: the bound keeps a batch far below Temporal's 2 MB payload limit,
# past which the pool's task would fail on every retry.
_CLAIM_STARTS_PER_ACTIVITY = 100
_CLAIM_STARTS_BYTES_PER_ACTIVITY = 1_000_000
# A batch is tried until Temporal takes it (only a start it refuses outright is given up).
_CLAIM_STARTS_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=0.5), maximum_interval=timedelta(seconds=10)
)
_HOLD_ALARM = "launch partly filled nodes"
_LIVE_PHASES = frozenset(
    {
        NodeClaimPhase.PENDING,
        NodeClaimPhase.PROVISIONING,
        NodeClaimPhase.JOINING,
        NodeClaimPhase.READY,
    }
)


@dataclass(frozen=True)
class _ClaimToStart:
    name: str
    claim: NodeClaim
    node: PlannedNode


@dataclass
class _TimeFacts:
    """What the round may take as having happened by now, decided by alarms (or, in runs
    recorded before them, by the clock): the only place the pool's decisions learn time."""

    lapsed_nominations: set[str] = field(default_factory=set)
    expired_offerings: set[str] = field(default_factory=set)
    active_budgets: list[Budget] = field(default_factory=list)
    consolidation_due: bool = False
    config_retry_due: bool = False
    hold_over: bool = False
    periodic_look: bool = False


@workflow.defn
class NodePoolWorkflow:
    @workflow.init
    def __init__(self, input: NodePoolInput) -> None:
        self._input = input
        self._state = input.state
        self._dirty = True
        self._last_plan: Plan | None = None
        # Runs started since deadlines became alarms (workflows/alarms.py) decide on time
        # only through them; runs recorded before keep reading the clock, as they did.
        self._alarmed = workflow.patched("deadline-alarms")
        self._alarms = Alarms(on_ring=self._wake)
        self._active_budgets: list[Budget] = list(input.state.specs.pool.disruption.budgets)
        # Runs before the alarms: the claims whose grace set the wake timer, and those whose
        # grace that timer reached when it fired (it means them whatever the clock says).
        self._wake_for: list[str] = []
        self._timer_reached: list[str] = []
        self._status_stale = False
        # Runs since then write Events and the NodePool's status beside the pool's next
        # steps, not before them: during a burst a status write took a third of each round.
        self._aside = self._alarmed and workflow.patched("events-and-status-aside")
        self._recording: set[asyncio.Future[Any]] = set()  # Events being written
        # Runs since then write Nominated Events as Karpenter does, at most 5 a second after
        # the first 10 (`pool_rules.events_allowed`); the allowance starts full in each run.
        self._nominations_limited = self._aside and workflow.patched("nominated-events-limited")
        self._nomination_allowance: pool_rules.EventAllowance | None = None
        self._publishing: asyncio.Task[None] | None = None  # the status write in flight
        self._status_behind = False  # the state changed while it was being written
        # The pods the last plan held back (with `hold_until`): news that uncovers no other
        # pod does not plan them again. Rebuilt by replay; empty after continuing as new.
        self._held: set[str] = set()
        # Runs since then start a round's claims beside the pool's next steps: the round
        # does not wait for every child's start to be confirmed (several workflow tasks
        # during a burst) before it may plan the pods that arrived meanwhile. Continuing as
        # new waits for the starts in flight.
        self._claims_aside = self._aside and workflow.patched("claim-starts-aside")
        self._starting: set[asyncio.Task[Any]] = set()
        # Runs since then start claims from an activity, a round's in one batch, not as
        # children: Temporal records child starts under the pool's lock, one by one, and the
        # pool's next workflow task waited behind them (activities/claim_workflows.py).
        self._starts_by_activity = self._claims_aside and workflow.patched(
            "claim-starts-by-activity"
        )
        self._unsent_starts: list[_ClaimToStart] = []
        self._unconfirmed: set[str] = set()  # claims whose start is still on its way
        # Claims the latest periodic look forgot (and what they were made from): a final
        # report may still be on its way (signalled while the look asked Temporal, it lands
        # in the next task).
        self._forgotten_by_look: dict[str, str] = {}
        # Runs since then ask Temporal, on each periodic look, which of their claims still
        # run: a claim that closed without a final report is forgotten. Children started by
        # a run were also heard closing (`_claim_closed`); claims of an earlier run never were.
        self._checks_claims = self._alarmed and workflow.patched("claims-checked-on-look")
        # Runs since then send at most `_CLAIM_STARTS_AT_ONCE` claim starts a workflow task.
        waves = workflow.patched("claim-starts-in-waves")
        self._start_slots = asyncio.Semaphore(_CLAIM_STARTS_AT_ONCE) if waves else None
        # ... and at most `_CLAIM_STARTS_PER_RUN` claims a run: the rest in the next.
        self._starts_left: int | None = _CLAIM_STARTS_PER_RUN if waves else None
        # Runs since then start claims on their own task queue, which the worker keeps in a
        # cache apart from the pool's (`claim_task_queue`); runs before keep them on theirs.
        self._claims_queue = (
            claim_task_queue(workflow.info().task_queue)
            if workflow.patched("claims-own-task-queue")
            else None
        )
        # Runs since then continue as new at the pool's own history bound too, before
        # Temporal suggests it (workflows/history.py): a replay of the pool stays short.
        # ... and stop at a hard bound (events) even while news keeps coming.
        self._history = HistoryBound.of_this_run(
            workflow.patched("pool-history-soft-bound"),
            hard=workflow.patched("pool-history-hard-bound"),
        )

    @workflow.run
    async def run(self, input: NodePoolInput) -> None:
        while True:
            self._update_details()
            if self._alarmed:
                await workflow.wait_condition(lambda: self._dirty)
            else:
                # Woken by news, or after the interval for a periodic look.
                try:
                    await workflow.wait_condition(
                        lambda: self._dirty,
                        timeout=self._next_wake_s(),
                        timeout_summary="reconcile",
                    )
                except TimeoutError:
                    self._timer_reached = self._wake_for
            self._dirty = False
            await self._reconcile()
            if self._aside:
                self._publish_aside()
            elif self._alarmed or workflow.patched("nodepool-status"):
                await self._publish_status()
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(self._settled)
                self._continue_as_new()
            # This run started all the claims it may: the next run starts the rest, once
            # this one's starts are confirmed (a few seconds; news waits for that).
            if self._starts_left == 0:
                await workflow.wait_condition(self._settled)
                self._continue_as_new()
            # Past our own bound, once nothing is in flight; news meanwhile is not kept
            # waiting for that (a burst's claim starts keep a pool busy for many rounds)
            # until the hard bound (`HARD_HISTORY_EVENTS`): then news waits.
            if self._history.reached():
                await workflow.wait_condition(
                    lambda: self._settled() or (self._dirty and not self._history.overdue())
                )
                if self._settled():
                    self._continue_as_new()

    def _continue_as_new(self) -> None:
        workflow.continue_as_new(self._input.model_copy(update={"state": self._state}))

    def _settled(self) -> bool:
        """Nothing of this run in flight that the next run would not know about."""
        return (
            workflow.all_handlers_finished()
            and not self._recording
            and not self._starting
            and (self._publishing is None or self._publishing.done())
        )

    def _wake(self) -> None:
        self._dirty = True

    # --- what the trigger and the claims say -----------------------------------------------

    @workflow.signal
    def demand(self, update: DemandUpdate) -> None:
        state = self._state
        if update.specs:
            self._apply_specs(update.specs)
        if update.pool_deleted:
            state.deleted = True
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
    def node_usage(self, usage: NodeUsage) -> None:
        """What the scheduler put on the pool's new nodes (repeats are harmless: the latest
        figures replace the earlier ones)."""
        state = self._state
        for uid in usage.bound:
            if uid in state.pending:
                self._resolve(uid)
        for name, requested in usage.requested.items():
            claim = state.claims.get(name)
            if claim is not None:
                claim.bound = requested
        self._dirty = True

    @workflow.signal
    def update_specs(self, specs: PoolSpecs) -> None:
        self._apply_specs(specs)
        self._dirty = True

    @workflow.signal
    def retry_now(self) -> None:
        """The operator fixed what new claims failed on without a change of the pool or its
        class (created the missing Secret, raised a quota): the configuration back-off ends,
        and the pods held back are planned again at once (`cloudburst pools retry`)."""
        self._end_config_backoff()
        self._dirty = True

    def _end_config_backoff(self) -> None:
        state = self._state
        state.config_error = ""
        state.config_retry_at = None
        state.config_failures = 0

    @workflow.signal
    def claim_report(self, report: ClaimReport) -> None:
        state = self._state
        name = report.claim_name
        # The claim's own time of the report when it sent one: a value in history (runs
        # before the alarms read the pool's clock here, which a replay may not see the same).
        at = report.at if self._alarmed and report.at else workflow.now()
        if report.failed_offering:
            until = at + timedelta(seconds=self._input.failed_offering_ttl_s)
            state.failed_offerings[report.failed_offering] = until
        claim = state.claims.get(name)
        if claim is None:
            if (
                report.phase == NodeClaimPhase.FAILED
                and name in self._forgotten_by_look
                and workflow.patched("late-report-of-a-forgotten-claim")
            ):
                # The look found it ended a moment before its report landed: the failure
                # still counts (a configuration error holds the next claims back).
                self._claim_failed(report, at, self._forgotten_by_look.pop(name))
                self._dirty = True
            return
        if report.phase == NodeClaimPhase.READY and claim.ready_at is None:
            claim.ready_at = at
            # While pods wait, its room counts for new ones until the grace is over (the
            # scheduler is filling it). With none waiting it is the scheduler's alone: pods
            # that do not fit there once it is Ready are planned elsewhere (and no alarm is
            # armed for it, which a floor of 1,000 idle claims would pay a thousand times).
            claim.filling = (
                self._alarmed and bool(state.pending) and workflow.patched("ready-claims-fill")
            )
        claim.phase = report.phase
        if report.offering:
            claim.offering = report.offering
        if report.phase == NodeClaimPhase.READY and claim.replaces in state.claims:
            # The replacement is up: the drifted node may now go, within the budgets.
            state.disruption_queue.setdefault(claim.replaces, claim.replace_reason)
        if report.reason.startswith("DisruptionBlocked"):
            state.disruption_blocked[name] = report.reason
        elif report.phase == NodeClaimPhase.READY:
            state.disruption_blocked.pop(name, None)
        if self._alarmed and report.phase == NodeClaimPhase.FAILED:
            self._claim_failed(report, at, claim.drift_hash)
        if report.phase not in _LIVE_PHASES:
            self._forget_disruption(claim)
        if report.phase.is_final:
            del state.claims[name]
        self._dirty = True

    @workflow.signal
    def workload_left(self, node_name: str) -> None:
        """The watcher saw pods leave one of our nodes: news for consolidation, which looks
        again (by its alarm, after consolidateAfter) rather than on a timer of its own."""
        if node_name in self._state.claims:
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
        cpu_m, memory = pool_rules.held(claims)
        budgets = self._state.specs.pool.disruption.budgets
        return PoolStatus(
            name=self._input.name,
            namespace=self._input.namespace,
            pending_pods=len(self._state.pending),
            blocked=dict(self._state.blocked),
            claims=claims,
            failed_offerings=dict(self._state.failed_offerings),
            consolidation=self._state.consolidation_note,
            disruption_queue=dict(self._state.disruption_queue),
            permits=dict(self._state.permits),
            disruption_blocked=dict(self._state.disruption_blocked),
            budgets=[
                BudgetStatus(
                    nodes=budget.nodes,
                    reasons=list(budget.reasons) if budget.reasons is not None else None,
                    schedule=budget.schedule,
                    duration=budget.duration,
                    active=any(budget is active for active in self._active_budgets)
                    if self._alarmed
                    else budget.active(workflow.now()),
                )
                for budget in budgets
            ],
            disruptions_allowed={
                reason: self._disruptions_allowed(reason)
                for reason in ("Empty", "Drifted", "Underutilized", "Manual")
            },
            nodes=len(claims),
            ready_nodes=sum(1 for c in claims if c.phase == NodeClaimPhase.READY),
            cpu_m=cpu_m,
            memory_bytes=memory,
            config_error=self._state.config_error,
            config_retry_at=self._state.config_retry_at if self._state.config_error else None,
            alarms=self._alarms.armed,
        )

    # --- time --------------------------------------------------------------------------------

    def _time_facts(self) -> _TimeFacts:
        """This round's view of time. With alarms, every deadline still wanted is asked
        here each round (so `settle` cancels only what is no longer wanted)."""
        if not self._alarmed:
            return self._time_facts_by_clock()
        state = self._state
        alarms = self._alarms
        facts = _TimeFacts()
        facts.expired_offerings = {
            key
            for key, until in state.failed_offerings.items()
            if alarms.reached(f"retry offering {key}", until)
        }
        grace = timedelta(seconds=self._input.nomination_grace_after_ready_s)
        # Every round walks every claim: the cheap tests go first (a pool of thousands of
        # claims replays hundreds of rounds when a worker takes it over).
        facts.lapsed_nominations = {
            claim.name
            for claim in state.claims.values()
            if (claim.nominated or claim.filling)
            and claim.ready_at
            and claim.phase in _LIVE_PHASES
            and alarms.reached(f"nominations on {claim.name} lapse", claim.ready_at + grace)
        }
        facts.active_budgets = self._budgets_by_alarm()
        if state.specs.pool.disruption.consolidation_policy == "WhenEmptyOrUnderutilized":
            if state.consolidate_at is None:
                after = parse_duration(state.specs.pool.disruption.consolidate_after)
                state.consolidate_at = workflow.now() + timedelta(seconds=after)
            facts.consolidation_due = alarms.reached("consolidate", state.consolidate_at)
        else:
            state.consolidate_at = None
        if state.config_error and state.config_retry_at:
            facts.config_retry_due = alarms.reached(
                "retry after config error", state.config_retry_at
            )
        if state.plan_retry_at is not None:
            alarms.reached("retry planning", state.plan_retry_at)  # a wake-up, nothing more
        if state.hold_until is not None:
            facts.hold_over = alarms.reached(_HOLD_ALARM, state.hold_until)
        if state.safety_net_at is None or alarms.reached("periodic look", state.safety_net_at):
            # This round is the look; the next one is armed from now.
            facts.periodic_look = True
            interval = timedelta(seconds=self._input.reconcile_interval_s)
            state.safety_net_at = workflow.now() + interval
            alarms.reached("periodic look", state.safety_net_at)
        alarms.settle()
        return facts

    def _time_facts_by_clock(self) -> _TimeFacts:
        """Runs recorded before the alarms: time as they read it, from the clock."""
        state = self._state
        now = workflow.now()
        grace = timedelta(seconds=self._input.nomination_grace_after_ready_s)
        reached, self._timer_reached = self._timer_reached, []
        # Budgets and consolidation read the clock later, where these runs read it.
        return _TimeFacts(
            expired_offerings={k for k, until in state.failed_offerings.items() if until <= now},
            lapsed_nominations={
                claim.name
                for claim in self._live_claims()
                if claim.nominated
                and claim.ready_at
                and (now >= claim.ready_at + grace or claim.name in reached)
            },
        )

    def _budgets_by_alarm(self) -> list[Budget]:
        """The active budgets: unscheduled ones always; a scheduled one from the start of its
        latest window reached (by alarm) until that window's end (by alarm)."""
        state = self._state
        active: list[Budget] = []
        wanted: set[str] = set()
        for index, budget in enumerate(state.specs.pool.disruption.budgets):
            if budget.schedule is None or budget.duration is None:
                active.append(budget)
                continue
            identity = budget_rules.budget_identity(index, budget)
            wanted.add(identity)
            start = state.budget_window_starts.get(identity)
            if start is None:
                # Counted from a moment in history: when the trigger read the specs, or else
                # when this run started.
                base = state.specs.observed_at or workflow.info().start_time
                start = budget_rules.latest_window_start(budget, base)
                state.budget_window_starts[identity] = start
            following = budget_rules.next_window_start(budget, start)
            if self._alarms.reached(f"budget {index} window opens", following):
                start = state.budget_window_starts[identity] = following
                self._alarms.reached(
                    f"budget {index} window opens", budget_rules.next_window_start(budget, start)
                )
            end = budget_rules.window_end(budget, start)
            if not self._alarms.reached(f"budget {index} window closes", end):
                active.append(budget)
        for identity in [i for i in state.budget_window_starts if i not in wanted]:
            del state.budget_window_starts[identity]
        self._active_budgets = active
        return active

    # --- planning --------------------------------------------------------------------------

    async def _reconcile(self) -> None:
        state = self._state
        facts = self._time_facts()
        for key in facts.expired_offerings:
            del state.failed_offerings[key]
        for claim in state.claims.values():
            if not (claim.nominated or claim.filling) or claim.phase not in _LIVE_PHASES:
                continue  # nothing to lapse, nothing nominated that could overflow
            if claim.name in facts.lapsed_nominations:
                claim.nominated.clear()
                claim.filling = False
            elif (
                self._alarmed
                and (left_out := pool_rules.overflowing(claim, state.pending))
                and workflow.patched("replan-nominations-that-no-longer-fit")
            ):
                claim.nominated = [uid for uid in claim.nominated if uid not in left_out]
        if facts.config_retry_due:
            state.config_error = ""
            state.config_retry_at = None
        if facts.periodic_look and self._checks_claims:
            await self._forget_claims_gone()
        await self._grant_permits()
        if state.deleted:
            # Nothing new for a deleted pool: no drift replacement, no consolidation's, no
            # floor, no pods (the trigger resolved them). Only histories with the trigger's
            # `pool_deleted` word take this branch: no patch marker needed.
            state.blocked.clear()
            return
        await self._replace_drifted()
        await self._consolidate(facts.consolidation_due)
        live = self._live_claims()
        nominated = {uid for claim in live for uid in claim.nominated}
        uncovered = [pod for uid, pod in state.pending.items() if uid not in nominated]
        pool = state.specs.pool
        missing_floor = max(0, pool.limits.min_nodes - len(live))
        if (
            state.hold_until is not None
            and not facts.hold_over
            and {pod.uid for pod in uncovered} == self._held
        ):
            return  # only the pods held back are uncovered: they wait for company, or the alarm
        if not uncovered and not missing_floor:
            state.blocked.clear()
            state.plan_retry_at = None
            if state.hold_until is not None:
                state.hold_until = None
                self._alarms.cancel(_HOLD_ALARM)
            return
        if state.config_error:
            # Another claim would fail the same way: the pods wait, and say why.
            await self._record_events(
                self._waiting(uncovered, f"{_CONFIG_BLOCKED}: {state.config_error}")
            )
            return
        try:
            plan = await self._plan(
                self._plan_request(uncovered, missing_floor), f"plan {len(uncovered)} pods"
            )
        except ActivityError as err:
            # A configuration error (e.g. the recommender refuses our credentials) must not
            # end the pool: the pods wait, say why, and the next look tries again.
            if self._alarmed:
                # Armed now: nothing else may wake the pool before the retry is due.
                state.plan_retry_at = workflow.now() + timedelta(seconds=_PLANNING_RETRY_S)
                self._alarms.reached("retry planning", state.plan_retry_at)
            await self._record_events(
                self._waiting(uncovered, f"{_PLANNING_FAILED}: {_cause(err)}")
            )
            return
        state.plan_retry_at = None
        self._last_plan = plan
        if plan.new_nodes:  # the prices a pool is judged by: those it launched with
            state.stale_prices = plan.stale_prices
        # Signals handled while planning may have resolved pods or ended claims: only what
        # is still pending is nominated.
        nominations: list[KubeEvent] = []
        for uid, claim_name in plan.assignments.items():
            if claim_name in state.claims and uid in state.pending:
                state.claims[claim_name].nominated.append(uid)
                nominations.append(self._nominated(uid, claim_name))
        launching = self._launch_now(plan.new_nodes, facts.hold_over)
        if self._starts_left is not None:
            # The nodes past this run's starts stay unplanned: the next run plans their pods.
            launching = launching[: self._starts_left]
        if (
            launching
            and state.config_error
            and workflow.patched("config-failure-while-planning-holds-the-plan")
        ):
            # A claim failed on the configuration while this plan was made (its report came
            # during the plan, or the look that forgot it planned its pods): the plan's new
            # nodes would fail the same way. Their pods wait with the others, and say why.
            waiting = [
                state.pending[uid]
                for node in launching
                for uid in node.pod_uids
                if uid in state.pending
            ]
            await self._record_events(
                self._nominations_to_write(nominations)
                + self._waiting(waiting, f"{_CONFIG_BLOCKED}: {state.config_error}")
                + self._blocked(plan)
            )
            return
        names: list[str | None]
        if self._claims_aside:
            names = [self._start_claim_aside(n, for_min_nodes=not n.pod_uids) for n in launching]
            self._send_claim_starts()
        elif self._alarmed or workflow.patched("parallel-claim-starts"):
            # All in one workflow task: a burst of nodes starts at once, not one per round trip.
            names = await asyncio.gather(
                *(self._start_claim(n, for_min_nodes=not n.pod_uids) for n in launching)
            )
        else:
            names = [await self._start_claim(n, for_min_nodes=not n.pod_uids) for n in launching]
        for node, started in zip(launching, names, strict=True):
            if started is None:  # refused: its pods are planned again
                continue
            nominations += [
                self._nominated(uid, started) for uid in node.pod_uids if uid in state.pending
            ]
        await self._record_events(self._nominations_to_write(nominations) + self._blocked(plan))

    async def _record_events(self, notices: list[KubeEvent]) -> None:
        if not notices:
            return
        recording = workflow.start_activity_method(
            EventActivities.record_events,
            EventBatch(events=notices),
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=RetryPolicy(maximum_attempts=5),
            summary=f"{len(notices)} events",
        )
        if self._aside:
            # A burst's Nominated Events (one per pod) take seconds to write: the next
            # plan must not wait for them. They are awaited before continuing as new.
            self._recording.add(recording)
            recording.add_done_callback(self._recorded)
            return
        try:
            await recording
        except ActivityError as err:  # Events are a courtesy; the pool goes on without them
            workflow.logger.warning("events not recorded: %s", _cause(err))

    def _recorded(self, recording: asyncio.Future[Any]) -> None:
        self._recording.discard(recording)
        if not recording.cancelled() and isinstance(recording.exception(), ActivityError):
            workflow.logger.warning("events not recorded: %s", recording.exception())

    def _waiting(self, pods: list[PodDemand], reason: str) -> list[KubeEvent]:
        """Record why these pods wait; a Warning Event on each when the reason is new."""
        notices = []
        for pod in pods:
            if self._state.blocked.get(pod.uid) == reason:
                continue
            self._state.blocked[pod.uid] = reason
            notices.append(
                KubeEvent(
                    regarding=ObjectRef(
                        kind="Pod", name=pod.name, namespace=pod.namespace, uid=pod.uid
                    ),
                    reason=events.FAILED_PROVISIONING,
                    message=f"NodePool {self._input.name}: {reason}",
                    type="Warning",
                )
            )
        return notices

    async def _plan(self, request: PlanRequest, summary: str) -> Plan:
        return await workflow.execute_activity_method(
            PlanningActivities.plan_capacity,
            request,
            start_to_close_timeout=PLANNING,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=_ACTIVITY_RETRY,
            summary=summary,
        )

    def _launch_now(self, planned: list[PlannedNode], hold_over: bool) -> list[PlannedNode]:
        """The planned nodes to start now. While a burst is arriving, nodes its pods fill only
        partly wait (by alarm, at most `partial_node_hold_s` from the first held) so that the
        rest of the burst is packed with them: pods no longer wait for the whole burst (the
        trigger sends in short windows) and its parts do not each end on a node of their
        own. Their pods stay uncovered meanwhile, and are planned again with the next pods
        that arrive (or whatever else uncovers pods), or when the alarm rings."""
        state = self._state
        held = pool_rules.partly_filled(planned) if self._input.partial_node_hold_s > 0 else []
        if not held or hold_over or not self._alarmed or not workflow.patched(_HOLD_PATCH):
            self._held = set()
            if state.hold_until is not None:
                state.hold_until = None
                self._alarms.cancel(_HOLD_ALARM)
            return planned
        self._held = {uid for node in held for uid in node.pod_uids}
        if state.hold_until is None:
            state.hold_until = workflow.now() + timedelta(seconds=self._input.partial_node_hold_s)
            self._alarms.reached(_HOLD_ALARM, state.hold_until)
        return [node for node in planned if all(node is not h for h in held)]

    def _plan_request(self, uncovered: list[PodDemand], missing_floor: int) -> PlanRequest:
        return pool_rules.plan_request(
            self._input.name,
            self._input.namespace,
            self._state,
            self._live_claims(),
            uncovered,
            missing_floor,
        )

    async def _start_claim(
        self,
        node: PlannedNode,
        *,
        for_min_nodes: bool = False,
        replaces: str | None = None,
        replace_reason: str = "Drifted",
    ) -> str | None:
        """The new claim's name, or None if Temporal refused to start it."""
        name, claim = self._record_claim(
            node, for_min_nodes=for_min_nodes, replaces=replaces, replace_reason=replace_reason
        )
        started = await self._start_claim_workflow(name, claim, node)
        return name if started else None

    def _start_claim_aside(self, node: PlannedNode, *, for_min_nodes: bool) -> str:
        """Record the claim and start its workflow without waiting for the start (by
        activity: once the round has recorded all of its claims, `_send_claim_starts`)."""
        name, claim = self._record_claim(node, for_min_nodes=for_min_nodes)
        if self._starts_by_activity:
            self._unsent_starts.append(_ClaimToStart(name, claim, node))
            return name
        self._start_aside(self._start_claim_workflow(name, claim, node))
        return name

    def _send_claim_starts(self) -> None:
        """The round's claims, started aside in batches (`pool_rules.start_batches`)."""
        unsent, self._unsent_starts = self._unsent_starts, []
        starts = [self._claim_start(start) for start in unsent]
        sizes = [len(start.model_dump_json()) for start in starts]
        for batch in pool_rules.start_batches(
            sizes, _CLAIM_STARTS_PER_ACTIVITY, _CLAIM_STARTS_BYTES_PER_ACTIVITY
        ):
            self._start_aside(
                self._start_claims(
                    unsent[batch.start : batch.stop], starts[batch.start : batch.stop]
                )
            )

    def _start_aside(self, start: Coroutine[Any, Any, Any]) -> None:
        starting = asyncio.create_task(start)
        self._starting.add(starting)
        starting.add_done_callback(self._claim_start_ended)

    def _claim_start_ended(self, starting: asyncio.Task[Any]) -> None:
        self._starting.discard(starting)
        failure = None if starting.cancelled() else starting.exception()
        if failure is not None:
            # The claim is forgotten (`_start_claim_workflow`): its pods are planned again.
            workflow.logger.warning("a claim did not start: %s", failure)
            self._dirty = True

    def _record_claim(
        self,
        node: PlannedNode,
        *,
        for_min_nodes: bool = False,
        replaces: str | None = None,
        replace_reason: str = "Drifted",
    ) -> tuple[str, NodeClaim]:
        """A new claim for the planned node, counted by the pool from now on."""
        if self._starts_left is not None:
            self._starts_left = max(0, self._starts_left - 1)
        state = self._state
        specs = state.specs
        name = self._new_claim_name()
        current_hash = drift_hash(specs.pool, specs.node_class)
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
            annotations={DRIFT_HASH_ANNOTATION: current_hash},
            pool_uid=specs.pool_uid or None,
        )
        allocatable = node.allocatable if node.allocatable.pods else node.requests
        # Recorded before the start is awaited: claims started side by side each see the
        # others' names, and news about this one that arrives meanwhile finds it.
        state.claims[name] = PoolClaim(
            name=name,
            phase=NodeClaimPhase.PENDING,
            offering=node.offerings[0],
            allocatable=allocatable,
            # Only real pending pods: a drift replacement is planned for a synthetic one.
            nominated=[uid for uid in node.pod_uids if uid in state.pending],
            started_at=workflow.now(),
            for_min_nodes=for_min_nodes,
            requests=node.requests,
            drift_hash=current_hash,
            replaces=replaces,
            replace_reason=replace_reason,
        )
        return name, claim

    async def _start_claim_workflow(self, name: str, claim: NodeClaim, node: PlannedNode) -> bool:
        """False if Temporal refused to start it (the claim is forgotten)."""
        if self._starts_by_activity:
            return name not in await self._start_claims([_ClaimToStart(name, claim, node)])
        async with self._start_slots or contextlib.nullcontext():
            await self._start_claim_child(name, claim, node)
        return True

    def _claim_input(self, claim: NodeClaim) -> NodeClaimInput:
        specs = self._state.specs
        return NodeClaimInput(
            claim=claim,
            node_class_name=specs.node_class_name,
            node_class=specs.node_class,
            cluster_id=self._input.cluster_id,
            timings=self._input.claim_timings,
            pool_workflow_id=workflow.info().workflow_id,
        )

    def _claim_start(self, start: _ClaimToStart) -> ClaimStart:
        return ClaimStart(
            input=self._claim_input(start.claim),
            task_queue=self._claims_queue or workflow.info().task_queue,
            task_timeout_s=self._input.claim_task_timeout_s,
            pool_name=self._input.name,
        )

    async def _start_claims(
        self, batch: list[_ClaimToStart], built: list[ClaimStart] | None = None
    ) -> set[str]:
        """Start the claims' workflows (`start_claim_workflows`; `built`: their starts, if
        made already); the names of those Temporal refused, which are forgotten (their pods
        are planned again)."""
        state = self._state
        starts = ClaimStarts(starts=built or [self._claim_start(start) for start in batch])
        self._unconfirmed.update(start.name for start in batch)
        try:
            result = await workflow.execute_activity_method(
                ClaimWorkflowActivities.start_claim_workflows,
                starts,
                start_to_close_timeout=KUBE_CALL,
                heartbeat_timeout=QUICK_HEARTBEAT,
                # Until Temporal takes them: a claim given up on here could still have been
                # started by the attempt that failed, and would run uncounted.
                retry_policy=_CLAIM_STARTS_RETRY,
                summary=f"start {len(batch)} claims",
            )
        except BaseException:
            for start in batch:
                state.claims.pop(start.name, None)
            raise
        finally:
            self._unconfirmed.difference_update(start.name for start in batch)
        for start in batch:
            if start.name in result.refused:
                workflow.logger.warning(
                    "claim %s was not started: %s", start.name, result.refused[start.name]
                )
                state.claims.pop(start.name, None)
                self._dirty = True
                continue
            state.claims_started += 1
            for uid in start.node.pod_uids:
                state.blocked.pop(uid, None)
        return set(result.refused)

    async def _start_claim_child(self, name: str, claim: NodeClaim, node: PlannedNode) -> None:
        state = self._state
        try:
            handle = await workflow.start_child_workflow(
                NodeClaimWorkflow.run,
                self._claim_input(claim),
                id=claim_workflow_id(name),
                task_queue=self._claims_queue,
                task_timeout=(
                    None
                    if self._input.claim_task_timeout_s is None
                    else timedelta(seconds=self._input.claim_task_timeout_s)
                ),
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
        except BaseException:
            state.claims.pop(name, None)
            raise
        # Claims report what happens to them by signal; their results are not awaited here
        # (they outlive this run), so a failed claim's error is consumed, not left dangling.
        handle.add_done_callback(_consume_result)
        if self._alarmed:
            # A claim that ended without saying so (it failed before it could report) must
            # not hold its pods and count against the limits for good.
            handle.add_done_callback(lambda _: self._claim_closed(name))
        state.claims_started += 1
        for uid in node.pod_uids:
            state.blocked.pop(uid, None)

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

    def _nominations_to_write(self, nominations: list[KubeEvent]) -> list[KubeEvent]:
        """The Nominated Events the pool's allowance leaves room for, in the plan's order."""
        if not self._nominations_limited:
            return nominations
        granted, self._nomination_allowance = pool_rules.events_allowed(
            self._nomination_allowance, workflow.now(), len(nominations)
        )
        return nominations[:granted]

    def _nominated(self, uid: str, claim_name: str) -> KubeEvent:
        pod = self._state.pending[uid]
        return KubeEvent(
            regarding=ObjectRef(kind="Pod", name=pod.name, namespace=pod.namespace, uid=uid),
            reason=events.NOMINATED,
            message=f"Pod should schedule on NodeClaim {claim_name}",
        )

    def _limit_text(self) -> str:
        return pool_rules.limit_text(self._state.specs.pool.limits)

    # --- drift ------------------------------------------------------------------------------

    async def _replace_drifted(self) -> None:
        """Claims built from an older template/class get a replacement first; the old one
        is disrupted (within the budgets) once its replacement is Ready."""
        state = self._state
        current = drift_hash(state.specs.pool, state.specs.node_class)
        drifted = [
            c
            for c in self._live_claims()
            if c.drift_hash and c.drift_hash != current and not c.replaces
        ]
        if not drifted:
            return
        replacing = sum(
            1 for c in state.claims.values() if c.replaces and c.phase != NodeClaimPhase.READY
        )
        for claim in drifted:
            if not claim.drifted:
                claim.drifted = True
                await self._tell_claim(claim.name, "mark_drifted", "NodePool or NodeClass changed")
            if claim.replaced_by is not None or claim.phase != NodeClaimPhase.READY:
                continue
            if self._disruptions_allowed("Drifted") - replacing <= 0:
                break
            synthetic = PodDemand(
                uid=f"replacement-for/{claim.name}",
                namespace=self._input.namespace,
                name=f"replacement for {claim.name}",
                requests=claim.requests if claim.requests.pods else claim.allocatable,
            )
            try:
                plan = await self._plan(
                    self._plan_request([synthetic], 0), "plan drift replacement"
                )
            except ActivityError as err:
                workflow.logger.warning("no replacement for %s: %s", claim.name, _cause(err))
                break
            if plan.new_nodes:
                new = await self._start_claim(plan.new_nodes[0], replaces=claim.name)
                if new is not None:
                    claim.replaced_by = new
                    replacing += 1

    # --- consolidation ----------------------------------------------------------------------

    async def _consolidate(self, due: bool) -> None:
        """Opt-in: every consolidateAfter, make the one move that saves the most, if any."""
        state = self._state
        disruption = state.specs.pool.disruption
        if disruption.consolidation_policy != "WhenEmptyOrUnderutilized":
            return
        now = workflow.now()
        after = timedelta(seconds=parse_duration(disruption.consolidate_after))
        if not self._alarmed:
            due = not (state.last_consolidation and now < state.last_consolidation + after)
        if not due:
            return
        busy = [c for c in state.claims.values() if c.replaces and c.phase != NodeClaimPhase.READY]
        if busy or "Underutilized" in {*state.permits.values(), *state.disruption_queue.values()}:
            return  # one move at a time: let the last one finish
        if self._disruptions_allowed("Underutilized") <= 0:
            return
        ready = {c.name: c for c in self._live_claims() if c.phase == NodeClaimPhase.READY}
        candidates = [
            c.name
            for c in ready.values()
            if c.replaced_by is None
            and c.replaces is None
            # With alarms the activity judges who is old enough, by its clock.
            and (self._alarmed or now - c.started_at >= after)
        ]
        if not candidates:
            return
        state.last_consolidation = now
        if self._alarmed:
            # The next look, once something changes (news wakes the pool, which then arms
            # it): an idle pool does not look again and again at the same nodes.
            state.consolidate_at = now + after
        try:
            decision = await self._find_consolidation(candidates, ready)
        except ActivityError as err:
            state.consolidation_note = f"consolidation failed: {_cause(err)}"
            return
        state.consolidation_note = decision.explanation
        name = decision.claim_name
        if decision.action == "delete" and name:
            state.permits[name] = "Underutilized"
            if not await self._tell_claim(
                name, "disruption_permitted", DisruptionPermit(reason="Underutilized")
            ):
                state.permits.pop(name, None)
        elif decision.action == "replace" and name and decision.replacement:
            new = await self._start_claim(
                decision.replacement, replaces=name, replace_reason="Underutilized"
            )
            if new is not None and name in state.claims:  # it may have ended meanwhile
                state.claims[name].replaced_by = new

    async def _find_consolidation(
        self, candidates: list[str], ready: dict[str, PoolClaim]
    ) -> ConsolidationDecision:
        state = self._state
        disruption = state.specs.pool.disruption
        return await workflow.execute_activity_method(
            ConsolidationActivities.find_consolidation,
            ConsolidationInput(
                pool_name=self._input.name,
                namespace=self._input.namespace,
                pool=state.specs.pool,
                node_class=state.specs.node_class,
                candidates=candidates,
                ready={name: c.offering for name, c in ready.items()},
                min_savings_eur_per_hour=disruption.consolidation_min_savings_eur_per_hour,
                failed_offerings=sorted(state.failed_offerings),
                stable_since={
                    name: ready[name].ready_at or ready[name].started_at for name in candidates
                }
                if self._alarmed
                else {},
                min_stable_s=parse_duration(disruption.consolidate_after),
            ),
            start_to_close_timeout=PLANNING,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=_ACTIVITY_RETRY,
            summary="look for consolidation",
        )

    def _next_wake_s(self) -> float:
        """Runs before the alarms: the periodic look, sooner when consolidation or a
        nomination expiry is due. Remembers which claims' grace the timer is for."""
        disruption = self._state.specs.pool.disruption
        interval = self._input.reconcile_interval_s
        now = workflow.now()
        grace = timedelta(seconds=self._input.nomination_grace_after_ready_s)
        graces = {
            claim.name: max(0.5, (claim.ready_at + grace - now).total_seconds())
            for claim in self._live_claims()
            if claim.nominated and claim.ready_at
        }
        interval = min([interval, *graces.values()])
        if disruption.consolidation_policy == "WhenEmptyOrUnderutilized":
            interval = min(interval, max(1.0, parse_duration(disruption.consolidate_after)))
        if any(why.startswith(_PLANNING_FAILED) for why in self._state.blocked.values()):
            interval = min(interval, _PLANNING_RETRY_S)  # the operator may have fixed it
        self._wake_for = [name for name, wait in graces.items() if wait == interval]
        return interval

    async def _tell_claim(self, claim_name: str, signal: str, arg: object) -> bool:
        handle = workflow.get_external_workflow_handle(claim_workflow_id(claim_name))
        try:
            await handle.signal(signal, arg)
        except Exception as err:  # the claim is gone
            workflow.logger.warning("claim %s did not take %s: %s", claim_name, signal, err)
            return False
        return True

    # --- disruption budgets ---------------------------------------------------------------

    async def _grant_permits(self) -> None:
        """Grant waiting claims their permits, first asked first served, within the budgets."""
        state = self._state
        for name, reason in list(state.disruption_queue.items()):
            # A report handled while a permit was being sent may have dropped this one.
            if name not in state.disruption_queue or self._disruptions_allowed(reason) <= 0:
                continue
            claim = state.claims.get(name)
            nominated = reason == "Empty" and claim is not None and bool(claim.nominated)
            if nominated:
                # Retired patch (Temporal's deprecate_patch step): no recorded history needs
                # the old branch, which granted the permit anyway.
                workflow.deprecate_patch("hold-empty-while-nominated")
                continue  # pods planned onto it are on their way: it will not stay empty
            if reason == "Empty" and self._at_floor() and workflow.patched("hold-empty-at-floor"):
                # A minNodes node is empty by nature: let it go and the floor starts another,
                # which empties and goes the same way. Held until the floor is lowered.
                continue
            del state.disruption_queue[name]
            state.permits[name] = reason
            permit = DisruptionPermit(reason=reason)
            if not await self._tell_claim(name, "disruption_permitted", permit):
                state.permits.pop(name, None)

    def _at_floor(self) -> bool:
        """True when one more node going would take the pool under its minNodes."""
        state = self._state
        going = set(state.permits)
        staying = [c for c in self._live_claims() if c.name not in going]
        return len(staying) <= state.specs.pool.limits.min_nodes

    def _disruptions_allowed(self, reason: str) -> int:
        """How many more nodes may be disrupted for `reason` now: the strictest active budget."""
        state = self._state
        if self._alarmed:
            active = self._active_budgets
        else:
            now = workflow.now()
            active = [b for b in state.specs.pool.disruption.budgets if b.active(now)]
        disrupting = len(
            set(state.permits)
            | {c.name for c in state.claims.values() if c.phase == NodeClaimPhase.DELETING}
        )
        return budget_rules.disruptions_allowed(active, reason, len(state.claims), disrupting)

    # --- the NodePool resource's status ---------------------------------------------------

    def _publish_aside(self) -> None:
        """Write the status beside the next round, one write at a time; a change made while
        one is on its way is written after it (the pool looks again when it is done)."""
        if self._publishing is not None and not self._publishing.done():
            self._status_behind = True
            return
        self._publishing = asyncio.create_task(self._publish_status())
        self._publishing.add_done_callback(self._published)

    def _published(self, publishing: asyncio.Task[None]) -> None:
        if self._status_behind:
            self._status_behind = False
            self._dirty = True

    async def _publish_status(self) -> None:
        """Write `kubectl get nodepools`' NODES READY CPU MEMORY and conditions, when changed."""
        state = self._state
        cpu_m, memory = pool_rules.held(state.claims.values())
        status = pool_rules.pool_status(state, workflow.now(), held_now=(cpu_m, memory))
        if status == state.published_status and not (self._alarmed and self._status_stale):
            return
        limit_reached = status.conditions[1]
        was_reached = state.published_status is not None and any(
            c.type == LIMIT_REACHED and c.status == "True"
            for c in state.published_status.conditions
        )
        if limit_reached.status == "True" and not was_reached:
            await self._record_events(
                [
                    KubeEvent(
                        regarding=ObjectRef(
                            kind="NodePool",
                            name=self._input.name,
                            namespace=self._input.namespace,
                            api_version=API_VERSION,
                        ),
                        reason=events.LIMIT_REACHED,
                        message=limit_reached.message,
                        type="Warning",
                    )
                ]
            )
        limits = state.specs.pool.limits
        try:
            await self._sync_status(status, cpu_m, memory, limits)
        except ActivityError as err:  # written again after the next look
            workflow.logger.warning("NodePool status not written: %s", _cause(err))
            return
        state.published_status = status
        self._status_stale = False

    async def _sync_status(
        self, status: NodePoolStatus, cpu_m: int, memory: int, limits: Limits
    ) -> None:
        await workflow.execute_activity_method(
            MirrorActivities.sync_nodepool_status,
            NodePoolStatusUpdate(
                namespace=self._input.namespace,
                name=self._input.name,
                status=status,
                cpu_m=cpu_m,
                memory_bytes=memory,
                max_nodes=limits.max_nodes,
                limit_cpu_m=None if limits.cpu is None else cpu_millis(limits.cpu),
                limit_memory_bytes=None if limits.memory is None else memory_bytes(limits.memory),
            ),
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=RetryPolicy(maximum_attempts=5),
            summary=f"status: {status.nodes} nodes, {status.ready_nodes} Ready",
        )

    # --- state helpers ----------------------------------------------------------------------

    async def _forget_claims_gone(self) -> None:
        """Forget the claims whose workflow is no longer running. A claim reports its end
        itself; one that could not (terminated by hand, failed outside its own error
        handling) would otherwise hold its nominated pods and count against the limits for
        good. A local activity: one event on the periodic look, which an idle pool pays."""
        names = [name for name in self._state.claims if name not in self._unconfirmed]
        if not names:
            return
        try:
            states = await workflow.execute_local_activity_method(
                ClaimWorkflowActivities.claim_workflow_states,
                ClaimStatesInput(claim_names=names),
                start_to_close_timeout=KUBE_CALL,
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"which of {len(names)} claims still run",
            )
        except ActivityError as err:
            workflow.logger.warning("the claims could not be checked: %s", _cause(err))
            return  # the next look asks again
        self._forgotten_by_look = {}
        for name, claim_state in states.states.items():
            if claim_state == ClaimState.RUNNING or name in self._unconfirmed:
                continue
            if forgotten := self._claim_closed(name):
                self._forgotten_by_look[name] = forgotten.drift_hash

    def _claim_closed(self, name: str) -> PoolClaim | None:
        """Forget a claim whose workflow ended: the claim, or None if it was not known."""
        claim = self._state.claims.pop(name, None)
        if claim is None:
            return None
        workflow.logger.warning("claim %s ended without a final report", name)
        self._forget_disruption(claim)
        self._dirty = True
        return claim

    def _forget_disruption(self, claim: PoolClaim) -> None:
        """A claim past Ready: it is no longer a disruption candidate, and its pods need
        another node (Deleting still counts against the budgets until Deleted)."""
        state = self._state
        state.permits.pop(claim.name, None)
        state.disruption_queue.pop(claim.name, None)
        state.disruption_blocked.pop(claim.name, None)
        claim.nominated.clear()

    def _claim_failed(self, report: ClaimReport, at: datetime, made_from: str) -> None:
        """A claim failed. On its configuration (a missing Secret, a NodeClass the cloud
        refuses), the next claim would fail the same way: hold new claims back, doubling the
        wait, until the specs change. Other failures (capacity everywhere) just re-plan, and
        so does a configuration failure of a claim made from specs changed since
        (`made_from`, its drift hash): the change may be the fix."""
        if report.failure_reason != FailureReason.INVALID_CONFIG.value:
            return
        state = self._state
        if (
            made_from
            and made_from != drift_hash(state.specs.pool, state.specs.node_class)
            and workflow.patched("config-failures-of-changed-specs-ignored")
        ):
            workflow.logger.info(
                "claim %s failed on specs changed since: %s", report.claim_name, report.reason
            )
            return
        state.config_failures += 1
        backoff = min(_CONFIG_BACKOFF_S * 2 ** (state.config_failures - 1), _CONFIG_BACKOFF_MAX_S)
        state.config_error = report.reason
        state.config_retry_at = at + timedelta(seconds=backoff)

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
        if self._state.deleted and specs.pool_uid and specs.pool_uid != current.pool_uid:
            # A NodePool created again under the name (a late word from the deleted one,
            # the same uid, does not bring it back).
            self._state.deleted = False
        if specs.supersedes(current):
            if self._alarmed and (specs.pool, specs.node_class) != (
                current.pool,
                current.node_class,
            ):
                # Whatever the failed claims tripped on may be fixed now: try again at once.
                self._end_config_backoff()
            if specs.edited_since(current):
                # Edited (or created again: a new object has no status yet), perhaps from a
                # spec the trigger marked invalid on the resource: write the status again
                # even if the pool's own view of it is the same.
                self._status_stale = True
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


def _cause(err: ActivityError) -> str:
    cause = err.cause
    return str(cause.message if isinstance(cause, ApplicationError) else cause or err)


def _consume_result(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
