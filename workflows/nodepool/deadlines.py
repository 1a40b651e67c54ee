"""What a round may take as having happened by now: every deadline the pool waits for is an
alarm (`workflows/alarms.py`), asked here each round while it is wanted, so `settle` cancels
only those no longer wanted. This is the only place the pool's decisions learn time."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import workflow

from api.nodepool import Budget, parse_duration
from workflows.decisions import budgets as budget_rules
from workflows.nodepool.state import LIVE_PHASES, PoolRun

HOLD = "launch partly filled nodes"
PLAN_RETRY = "retry planning"


@dataclass
class TimeFacts:
    lapsed_nominations: set[str] = field(default_factory=set)
    expired_offerings: set[str] = field(default_factory=set)
    consolidation_due: bool = False
    config_retry_due: bool = False
    hold_over: bool = False
    periodic_look: bool = False


def time_facts(run: PoolRun) -> TimeFacts:
    state = run.state
    alarms = run.alarms
    facts = TimeFacts()
    facts.expired_offerings = {
        key
        for key, until in state.failed_offerings.items()
        if alarms.reached(f"retry offering {key}", until)
    }
    grace = timedelta(seconds=run.input.nomination_grace_after_ready_s)
    # Every round walks every claim: the cheap tests go first (a pool of thousands of claims
    # replays hundreds of rounds when a worker takes it over).
    facts.lapsed_nominations = {
        claim.name
        for claim in state.claims.values()
        if (claim.nominated or claim.filling)
        and claim.ready_at
        and claim.phase in LIVE_PHASES
        and alarms.reached(f"nominations on {claim.name} lapse", claim.ready_at + grace)
    }
    run.active_budgets = _active_budgets(run)
    disruption = state.specs.pool.disruption
    if disruption.consolidation_policy == "WhenEmptyOrUnderutilized":
        consolidate_at = run.consolidation_due_at(parse_duration(disruption.consolidate_after))
        facts.consolidation_due = alarms.reached("consolidate", consolidate_at)
    else:
        run.consolidation_off()
    if state.config_error and state.config_retry_at:
        facts.config_retry_due = alarms.reached("retry after config error", state.config_retry_at)
    if state.plan_retry_at is not None:
        alarms.reached(PLAN_RETRY, state.plan_retry_at)  # a wake-up, nothing more
    if state.hold_until is not None:
        facts.hold_over = alarms.reached(HOLD, state.hold_until)
    if state.safety_net_at is None or alarms.reached("periodic look", state.safety_net_at):
        # This round is the look; the next one is armed from now.
        facts.periodic_look = True
        interval = timedelta(seconds=run.input.reconcile_interval_s)
        state.safety_net_at = workflow.now() + interval
        alarms.reached("periodic look", state.safety_net_at)
    alarms.settle()
    return facts


def _active_budgets(run: PoolRun) -> list[Budget]:
    """Unscheduled budgets always; a scheduled one from the start of its latest window reached
    (by alarm) until that window's end (by alarm)."""
    state = run.state
    alarms = run.alarms
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
            # Counted from a moment in history: when the trigger read the specs, or else when
            # this run started.
            base = state.specs.observed_at or workflow.info().start_time
            start = budget_rules.latest_window_start(budget, base)
            state.budget_window_starts[identity] = start
        following = budget_rules.next_window_start(budget, start)
        if alarms.reached(f"budget {index} window opens", following):
            start = state.budget_window_starts[identity] = following
            alarms.reached(
                f"budget {index} window opens", budget_rules.next_window_start(budget, start)
            )
        end = budget_rules.window_end(budget, start)
        if not alarms.reached(f"budget {index} window closes", end):
            active.append(budget)
    for identity in [i for i in state.budget_window_starts if i not in wanted]:
        del state.budget_window_starts[identity]
    return active
