"""The pool's own decisions, pure: what to ask the planner for, which planned nodes go out
now, what holds against the limits, and what the NodePool resource's status says."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from api.explain import PoolPodView
from api.nodeclaim import Condition, NodeClaimPhase
from api.nodepool import (
    LIMIT_REACHED,
    PRICES_STALE,
    READY,
    Limits,
    NodePoolResources,
    NodePoolStatus,
)
from api.nodepool.messages import PoolClaim, PoolState
from api.planning import InFlightNode, PlannedNode, PlanRequest, PodDemand
from api.quantity import cpu_millis, format_cpu, format_memory, memory_bytes

# A claim in these phases holds a node or is making one.
LIVE_PHASES = frozenset(
    {
        NodeClaimPhase.PENDING,
        NodeClaimPhase.PROVISIONING,
        NodeClaimPhase.JOINING,
        NodeClaimPhase.READY,
    }
)


def start_batches(sizes: Sequence[int], max_claims: int, max_bytes: int) -> list[range]:
    """The claim starts of a round in consecutive batches (indexes into `sizes`, each claim's
    input in bytes): at most `max_claims` a batch and `max_bytes` together, but never an
    empty batch (a claim whose input alone is larger goes on its own, as a child start did)."""
    batches: list[range] = []
    first = total = 0
    for at, size in enumerate(sizes):
        if at > first and (at - first >= max_claims or total + size > max_bytes):
            batches.append(range(first, at))
            first, total = at, 0
        total += size
    if first < len(sizes):
        batches.append(range(first, len(sizes)))
    return batches


def held(claims: Iterable[PoolClaim]) -> tuple[int, int]:
    """(cpu millicores, memory bytes) of the claims' offerings: what counts against limits."""
    cpu_m = memory = 0
    for claim in claims:  # a pool's every round: inline, no call per claim
        offering = claim.offering
        cpu_m += int((offering.vcpu or 0) * 1000)
        memory += int((offering.memory_gib or 0) * 2**30)
    return cpu_m, memory


def plan_request(
    pool_name: str,
    namespace: str,
    state: PoolState,
    live: list[PoolClaim],
    uncovered: list[PodDemand],
    missing_floor: int,
) -> PlanRequest:
    """What the planner is asked: the uncovered pods, the nodes still on their way (with what
    is nominated to them), the failure cache, and what the limits leave."""
    specs = state.specs
    limits = specs.pool.limits
    in_flight = []
    # Nodes on their way, and Ready ones the scheduler is still filling (within the grace:
    # their room beside what it bound and what is nominated takes pods a node filled with
    # others left out). Past that the scheduler has tried: a pod pending now does not fit.
    for claim in (c for c in live if c.phase != NodeClaimPhase.READY or c.filling):
        used = claim.bound  # the scheduler may fill a node before its claim says Ready
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
    used_cpu, used_memory = held(live)
    return PlanRequest(
        pool_name=pool_name,
        namespace=namespace,
        pool=specs.pool,
        class_providers=specs.node_class.configured_providers(),
        node_class=specs.node_class,
        pods=uncovered,
        in_flight=in_flight,
        failed_offerings=sorted(state.failed_offerings),
        max_new_nodes=None if limits.max_nodes is None else max(0, limits.max_nodes - len(live)),
        remaining_cpu_m=None if limits.cpu is None else max(0, cpu_millis(limits.cpu) - used_cpu),
        remaining_memory_bytes=(
            None if limits.memory is None else max(0, memory_bytes(limits.memory) - used_memory)
        ),
        min_new_nodes=missing_floor,
    )


# A planned node its pods fill at least this far (in its most used resource) goes out at
# once; one they fill less may wait, within the pool's hold, for pods still arriving.
FULL_ENOUGH = 0.75


def fill(node: PlannedNode) -> float:
    """How far the node's pods fill what pods may use on it, in its most used resource."""
    room = node.allocatable if node.allocatable.pods else node.requests
    used = node.requests
    shares = [
        used.cpu_m / room.cpu_m if room.cpu_m else 0.0,
        used.memory_bytes / room.memory_bytes if room.memory_bytes else 0.0,
        used.pods / room.pods if room.pods else 0.0,
    ]
    return max(shares)


def partly_filled(nodes: Iterable[PlannedNode]) -> list[PlannedNode]:
    """The planned nodes worth holding back while a burst is still arriving: those its pods
    fill less than `FULL_ENOUGH`. A burst's later pods are then packed with theirs, instead
    of each part of the burst ending on a node of its own (empty nodes for minNodes go at
    once: nothing that arrives changes them)."""
    return [node for node in nodes if node.pod_uids and fill(node) < FULL_ENOUGH]


def overflowing(claim: PoolClaim, pending: Mapping[str, PodDemand]) -> list[str]:
    """Pods nominated to the claim that can no longer land on it: the scheduler has begun to
    fill its node with other pods (`bound`) and no room is left for them beside those, in
    the order nominated. The scheduler does not know our nominations; once it has filled a
    node otherwise, waiting out the grace for these only delays their new plan (the room
    planned for them is usually on the claims whose pods went here instead)."""
    if not claim.bound.pods:
        return []
    room = claim.allocatable - claim.bound
    left_out = []
    for uid in claim.nominated:
        pod = pending.get(uid)
        if pod is None:
            continue
        if pod.requests.fits_in(room):
            room = room - pod.requests
        else:
            left_out.append(uid)
    return left_out


# Nominated Events, as Karpenter writes them (its PodNominationRateLimiter): at most 5 a
# second after a first 10, across the pool's pods. A burst of 1,000 pods asked for 1,000
# Event writes, a third of the worker's time and load on the API server that every
# autoscaler is asked to spare; the nomination itself (the claim's pods) is not limited.
NOMINATED_EVENTS_PER_S = 5.0
NOMINATED_EVENTS_BURST = 10


@dataclass(frozen=True)
class EventAllowance:
    """A token bucket: how many Events may still be written, as of `at`."""

    tokens: float
    at: datetime


def events_allowed(
    allowance: EventAllowance | None, now: datetime, wanted: int
) -> tuple[int, EventAllowance]:
    """How many of `wanted` Events may be written now, and the bucket after writing them.
    A pool that has written none yet starts with a full bucket."""
    if allowance is None:
        tokens = float(NOMINATED_EVENTS_BURST)
    else:
        refill = max(0.0, (now - allowance.at).total_seconds()) * NOMINATED_EVENTS_PER_S
        tokens = min(float(NOMINATED_EVENTS_BURST), allowance.tokens + refill)
    granted = min(wanted, int(tokens))
    return granted, EventAllowance(tokens=tokens - granted, at=now)


def limit_text(limits: Limits, live: Sequence[PoolClaim]) -> str:
    """The pool's limits, each with what its live claims hold of it:
    `pool limits maxNodes=3 (3 in use), cpu=8 (8 in use)`."""
    cpu_m, memory = held(live)
    parts = [
        f"maxNodes={limits.max_nodes} ({len(live)} in use)" if limits.max_nodes is not None else "",
        f"cpu={limits.cpu} ({format_cpu(cpu_m)} in use)" if limits.cpu else "",
        f"memory={limits.memory} ({format_memory(memory)} in use)" if limits.memory else "",
    ]
    return "pool limits " + ", ".join(p for p in parts if p)


def live(claims: Iterable[PoolClaim]) -> list[PoolClaim]:
    """The claims that hold a node or are making one: what counts against the limits."""
    return [c for c in claims if c.phase in LIVE_PHASES]


def pool_status(
    state: PoolState, now: datetime, *, held_now: tuple[int, int] | None = None
) -> NodePoolStatus:
    """`kubectl get nodepools`' NODES READY CPU MEMORY and the conditions. A condition keeps
    its transition time (from the status last written) while its status stays the same.
    `held_now`: the claims' `held` when the caller has it already."""
    claims = list(state.claims.values())
    limited = sum(1 for why in state.blocked.values() if why.startswith(LIMIT_REACHED))
    cpu_m, memory = held_now if held_now is not None else held(claims)
    if state.config_error:
        ready = (False, "ClaimsFailing", f"new claims held back: {state.config_error}")
    else:
        ready = (True, "Reconciled", "the pool's workflow is running")
    text = (
        f"{limited} pods wait: {limit_text(state.specs.pool.limits, live(claims))}"
        if limited
        else ""
    )
    previous = state.published_status
    conditions = [
        _condition(previous, READY, *ready, now),
        _condition(
            previous,
            LIMIT_REACHED,
            limited > 0,
            "PodsWaiting" if limited else "WithinLimits",
            text,
            now,
        ),
    ]
    # Shown from the first stale plan on (not before: a pool whose prices were never old
    # has nothing to say, and statuses written before the condition existed stay as they were).
    earlier = previous.conditions if previous else []
    if state.stale_prices or any(c.type == PRICES_STALE for c in earlier):
        stale = "; ".join(state.stale_prices)
        conditions.append(
            _condition(
                previous,
                PRICES_STALE,
                bool(state.stale_prices),
                "OldPrices" if stale else "CurrentPrices",
                f"{stale} (see `cloudburst catalog status`)" if stale else "",
                now,
            )
        )
    return NodePoolStatus(
        nodes=len(claims),
        ready_nodes=sum(1 for c in claims if c.phase == NodeClaimPhase.READY),
        resources=NodePoolResources(cpu=format_cpu(cpu_m), memory=format_memory(memory)),
        conditions=conditions,
    )


def _condition(
    previous: NodePoolStatus | None,
    type_: str,
    true: bool,
    reason: str,
    message: str,
    now: datetime,
) -> Condition:
    value: Literal["True", "False"] = "True" if true else "False"
    for old in previous.conditions if previous else []:
        if old.type == type_ and old.status == value and old.reason == reason:
            return old.model_copy(update={"message": message})
    return Condition(
        type=type_, status=value, reason=reason, message=message, last_transition_time=now
    )


def pod_view(state: PoolState, held_back: set[str], uid: str) -> PoolPodView:
    """What the pool knows of one pod: nominated to a claim (which, in what phase, on which
    offering), held back for more of a burst, or why it waits."""
    claims = live(state.claims.values())
    limits = limit_text(state.specs.pool.limits, claims)
    if uid not in state.pending:
        return PoolPodView(known=False, limits=limits, config_error=state.config_error)
    claim = next((c for c in claims if uid in c.nominated), None)
    return PoolPodView(
        known=True,
        nominated_to=claim.name if claim else None,
        claim_phase=claim.phase if claim else None,
        claim_started_at=claim.started_at if claim else None,
        offering=claim.offering if claim else None,
        blocked=state.blocked.get(uid),
        held_until=state.hold_until if uid in held_back else None,
        limits=limits,
        config_error=state.config_error,
    )


def waiting_reasons(state: PoolState, most: int) -> list[tuple[str, int, str]]:
    """The most common reasons pods wait: (reason, how many pods, one of them as
    namespace/name), most pods first."""
    counts: dict[str, int] = {}
    example: dict[str, str] = {}
    for uid, reason in state.blocked.items():
        pod = state.pending.get(uid)
        if pod is None:
            continue
        counts[reason] = counts.get(reason, 0) + 1
        example.setdefault(reason, f"{pod.namespace}/{pod.name}")
    ranked = sorted(counts, key=lambda r: (-counts[r], r))[:most]
    return [(reason, counts[reason], example[reason]) for reason in ranked]
