"""What a pool's run knows: the state it carries across continue-as-new (`PoolState`, in its
input) and what lives only as long as the run (work in flight, the alarms, the latest plan)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

from api.messages import claim_task_queue
from api.nodeclaim import NodeClaim
from api.nodepool import Budget
from api.nodepool.messages import NodePoolInput, PoolClaim, PoolState
from api.planning import Plan, PlannedNode, PodDemand
from workflows.alarms import Alarms
from workflows.decisions import pool as pool_rules
from workflows.history import HistoryBound

# Claims one run of the pool starts before it continues as new. A run that starts claims
# cannot continue as new until they have started, and its history (the claims' reports) is
# what a worker replays on a takeover.
CLAIM_STARTS_PER_RUN = 500
LIVE_PHASES = pool_rules.LIVE_PHASES


@dataclass(frozen=True)
class ClaimToStart:
    name: str
    claim: NodeClaim
    node: PlannedNode


@dataclass
class PoolRun:
    input: NodePoolInput
    state: PoolState
    # Set by news and alarms; cleared at the top of each round.
    dirty: bool = True
    last_plan: Plan | None = None
    # The budgets active in the latest round (scheduled ones by their alarms).
    active_budgets: list[Budget] = field(default_factory=list)
    # The NodePool's status must be written even if the pool's view of it is unchanged (its
    # spec was edited: the trigger may have marked it invalid meanwhile).
    status_stale: bool = False
    recording: set[asyncio.Future[Any]] = field(default_factory=set)  # Events being written
    publishing: asyncio.Task[None] | None = None  # the status write in flight
    status_behind: bool = False  # the state changed while it was being written
    # Nominated Events as Karpenter writes them, at most 5 a second after the first 10; the
    # allowance starts full in each run.
    nomination_allowance: pool_rules.EventAllowance | None = None
    # The pods the last plan held back (with `hold_until`): news that uncovers no other pod
    # does not plan them again. Rebuilt by replay; empty after continuing as new.
    held: set[str] = field(default_factory=set)
    starting: set[asyncio.Task[Any]] = field(default_factory=set)  # claim starts in flight
    unsent_starts: list[ClaimToStart] = field(default_factory=list)
    unconfirmed: set[str] = field(default_factory=set)  # claims whose start is on its way
    # Claims the latest periodic look forgot (and what they were made from): a final report
    # may still be on its way (signalled while the look asked Temporal, it lands next task).
    forgotten_by_look: dict[str, str] = field(default_factory=dict)
    starts_left: int = CLAIM_STARTS_PER_RUN  # claims this run may still start
    alarms: Alarms = field(init=False)
    history: HistoryBound = field(init=False)
    claims_queue: str = field(init=False)  # where its claims run (`claim_task_queue`)

    def __post_init__(self) -> None:
        self.alarms = Alarms(on_ring=self.wake)
        self.history = HistoryBound.of_this_run()
        self.claims_queue = claim_task_queue(workflow.info().task_queue)
        self.active_budgets = list(self.state.specs.pool.disruption.budgets)

    @classmethod
    def of(cls, input: NodePoolInput) -> PoolRun:
        return cls(input=input, state=input.state)

    @property
    def name(self) -> str:
        return self.input.name

    @property
    def namespace(self) -> str:
        return self.input.namespace

    # --- the run's own transitions: each field written by more than one phase is written only
    # here (docs/architecture.md, "Who writes the state").

    def wake(self) -> None:
        """News (a signal, an alarm, a claim started): the next round looks again."""
        self.dirty = True

    def begin_round(self) -> None:
        """A round starts: news from here on wakes the next one."""
        self.dirty = False

    def pool_deleted(self) -> None:
        """The NodePool was deleted (the trigger said so, or starting a claim found it gone):
        its claims go, and nothing new is planned."""
        self.state.deleted = True

    def pool_created_again(self) -> None:
        """A NodePool of the name exists again (specs of another uid)."""
        self.state.deleted = False

    # The pods the pool waits for (`pending`), and why they wait (`blocked`).

    def pods_pending(self, pods: Iterable[PodDemand]) -> None:
        """The trigger says these pods wait (a repeat replaces what it said before)."""
        for pod in pods:
            self.state.pending[pod.uid] = pod

    def pod_resolved(self, uid: str) -> None:
        """The pod no longer waits (bound, deleted, matched elsewhere): no reason, and no
        claim's nomination, is kept for it."""
        self.state.pending.pop(uid, None)
        self.state.blocked.pop(uid, None)
        for claim in self.state.claims.values():
            if uid in claim.nominated:
                claim.nominated.remove(uid)

    def pods_not_pending(self, uids: Iterable[str]) -> None:
        """The plan found these pods no longer pending in the cluster: the pool stops waiting
        for them (the trigger's word that resolves them follows)."""
        for uid in uids:
            self.state.pending.pop(uid, None)

    def pod_waits(self, uid: str, reason: str) -> bool:
        """Why the pod waits; whether that is news (an Event says so only then)."""
        if self.state.blocked.get(uid) == reason:
            return False
        self.state.blocked[uid] = reason
        return True

    def pods_unblocked(self, uids: Iterable[str]) -> None:
        """A claim started for these pods: they wait for it, not for a reason."""
        for uid in uids:
            self.state.blocked.pop(uid, None)

    def nothing_blocked(self) -> None:
        """No pod waits for a reason: none is uncovered, or the pool is deleted."""
        self.state.blocked.clear()

    # The pool's claims (`claims`).

    def claim_recorded(self, claim: PoolClaim) -> None:
        """A claim the pool is about to start: counted from now on."""
        self.state.claims[claim.name] = claim

    def claim_dropped(self, name: str) -> PoolClaim | None:
        """Forget a claim (ended, refused by Temporal, or not started): it, if it was known."""
        return self.state.claims.pop(name, None)

    def nominated(self, claim_name: str, uid: str) -> None:
        """The plan put the pending pod on the claim's node: it waits for that node."""
        self.state.claims[claim_name].nominated.append(uid)

    def claim_ready(self, claim: PoolClaim, at: datetime) -> None:
        """The claim reported Ready (first at `at`). While pods wait, its room counts for
        new ones until the grace is over (the scheduler is filling it). With none waiting it
        is the scheduler's alone: pods that do not fit there once it is Ready are planned
        elsewhere (and no alarm is armed for it, which a floor of 1,000 idle claims would pay
        a thousand times)."""
        claim.ready_at = at
        claim.filling = bool(self.state.pending)

    def nominations_lapsed(self, claim: PoolClaim) -> None:
        """The grace after Ready is over: the pods nominated to it that still wait are the
        scheduler's business no more, and are planned again."""
        claim.nominated.clear()
        claim.filling = False

    def nominations_overflowed(self, claim: PoolClaim, left_out: Collection[str]) -> None:
        """The scheduler filled the claim's node with others: the pods left out are no
        longer nominated to it."""
        claim.nominated = [uid for uid in claim.nominated if uid not in left_out]

    # Disruption: the claims waiting for a budget (`disruption_queue`), and those let go
    # (`permits`).

    def disruption_requested(self, claim_name: str, reason: str) -> None:
        """A claim asks to be disrupted for `reason` (asked again: the latest reason, its
        place in the queue kept)."""
        self.state.disruption_queue[claim_name] = reason

    def replaced_may_go(self, claim_name: str, reason: str) -> None:
        """The claim's replacement is Ready: it waits for a budget to go, unless it waits
        already (for its own reason)."""
        self.state.disruption_queue.setdefault(claim_name, reason)

    def disruption_withdrawn(self, claim_name: str) -> None:
        """The claim no longer asks (its pods came back): out of the queue, its permit void."""
        self.state.disruption_queue.pop(claim_name, None)
        self.state.permits.pop(claim_name, None)

    def permit_granted(self, claim_name: str, reason: str) -> None:
        """A waiting claim's turn within the budgets: out of the queue, let go."""
        del self.state.disruption_queue[claim_name]
        self.state.permits[claim_name] = reason

    def permit_offered(self, claim_name: str, reason: str) -> None:
        """A permit the claim did not ask for (consolidation's move)."""
        self.state.permits[claim_name] = reason

    def permit_undelivered(self, claim_name: str) -> None:
        """The permit could not be told (the claim's workflow is gone): it does not count."""
        self.state.permits.pop(claim_name, None)

    def forget_disruption(self, claim: PoolClaim) -> None:
        """A claim past Ready: no longer a disruption candidate, and its pods need another
        node (Deleting still counts against the budgets until Deleted)."""
        self.state.permits.pop(claim.name, None)
        self.state.disruption_queue.pop(claim.name, None)
        self.state.disruption_blocked.pop(claim.name, None)
        claim.nominated.clear()

    def disruption_blocked_by(self, claim_name: str, reason: str) -> None:
        """The claim said do-not-disrupt pods hold it (`DisruptionBlocked: …`)."""
        self.state.disruption_blocked[claim_name] = reason

    def disruption_unblocked(self, claim_name: str) -> None:
        self.state.disruption_blocked.pop(claim_name, None)

    def offering_failed(self, key: str, until: datetime) -> None:
        """A claim could not get the offering (capacity, an outage): skipped until `until`."""
        self.state.failed_offerings[key] = until

    def offerings_expired(self, keys: Iterable[str]) -> None:
        """The offerings' skip has run out: they may be planned again."""
        for key in keys:
            del self.state.failed_offerings[key]

    def config_failing(self, reason: str, retry_at: datetime) -> None:
        """Claims fail on the pool's configuration: no new claim until `retry_at` (or the
        specs change)."""
        self.state.config_error = reason
        self.state.config_retry_at = retry_at

    def config_retry(self) -> None:
        """Try the configuration again: at the backoff's end (its count stays, so a failure
        again waits longer) or on new specs."""
        self.state.config_error = ""
        self.state.config_retry_at = None

    def consolidation_due_at(self, after_s: float) -> datetime:
        """When consolidation looks next: `after_s` from now unless a look is armed."""
        if self.state.consolidate_at is None:
            self.state.consolidate_at = workflow.now() + timedelta(seconds=after_s)
        return self.state.consolidate_at

    def consolidation_off(self) -> None:
        """The pool's policy consolidates only empty nodes: no look is armed."""
        self.state.consolidate_at = None

    def consolidated(self, at: datetime, after_s: float) -> None:
        """Consolidation looked at `at`; the next look once something changes, `after_s`
        later (news wakes the pool, which then arms it): an idle pool does not look again and
        again at the same nodes."""
        self.state.last_consolidation = at
        self.state.consolidate_at = at + timedelta(seconds=after_s)

    def live_claims(self) -> list[PoolClaim]:
        return pool_rules.live(self.state.claims.values())

    def settled(self) -> bool:
        """Nothing of this run in flight that the next run would not know about."""
        return (
            workflow.all_handlers_finished()
            and not self.recording
            and not self.starting
            and (self.publishing is None or self.publishing.done())
        )
