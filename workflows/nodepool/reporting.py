"""What a pool tells the cluster and its operators: Events on pods and on the NodePool, the
NodePool's status (`kubectl get nodepools`), the Web UI's current details. Events and the
status are written beside the pool's next steps, never before them (during a burst a status
write took a third of each round); they are awaited before the run continues as new."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from activities.events import EventActivities
from activities.mirror import MirrorActivities
from api import events
from api.events import EventBatch, KubeEvent, ObjectRef
from api.nodeclaim import NodeClaimPhase
from api.nodepool import API_VERSION, LIMIT_REACHED
from api.nodepool.messages import NodePoolStatusUpdate
from api.planning import Plan, PodDemand
from api.quantity import cpu_millis, memory_bytes
from workflows.decisions import pool as pool_rules
from workflows.failures import cause
from workflows.nodepool.state import PoolRun
from workflows.retries import FEW_TRIES
from workflows.timeouts import KUBE_CALL, QUICK_HEARTBEAT


def record_events(run: PoolRun, notices: list[KubeEvent]) -> None:
    """Write the Events aside: a burst's Nominated Events (one per pod) take seconds to write,
    and the next plan must not wait for them."""
    if not notices:
        return
    recording = workflow.start_activity_method(
        EventActivities.record_events,
        EventBatch(events=notices),
        start_to_close_timeout=KUBE_CALL,
        heartbeat_timeout=QUICK_HEARTBEAT,
        retry_policy=FEW_TRIES,
        summary=f"{len(notices)} events",
    )
    run.recording.add(recording)

    def recorded(done: asyncio.Future[Any]) -> None:
        run.recording.discard(done)
        if not done.cancelled() and isinstance(done.exception(), ActivityError):
            # Events are a courtesy; the pool goes on without them.
            workflow.logger.warning("events not recorded: %s", done.exception())

    recording.add_done_callback(recorded)


def waiting(run: PoolRun, pods: list[PodDemand], reason: str) -> list[KubeEvent]:
    """Record why these pods wait; a Warning Event on each when the reason is new."""
    notices = []
    for pod in pods:
        if not run.pod_waits(pod.uid, reason):
            continue
        notices.append(_pod_warning(run, pod, events.FAILED_PROVISIONING, reason))
    return notices


def blocked(run: PoolRun, plan: Plan) -> list[KubeEvent]:
    """Record why pods the plan could not place still wait; an Event when the reason is new."""
    state = run.state
    notices = []
    limit = pool_rules.limit_text(state.specs.pool.limits, run.live_claims())
    reasons = {uid: f"{events.LIMIT_REACHED}: {limit}" for uid in plan.limited}
    reasons.update(plan.unschedulable)
    for uid, reason in reasons.items():
        if uid not in state.pending or not run.pod_waits(uid, reason):
            continue
        kind = events.LIMIT_REACHED if uid in plan.limited else events.FAILED_PROVISIONING
        notices.append(_pod_warning(run, state.pending[uid], kind, reason))
    return notices


def nominated(run: PoolRun, uid: str, claim_name: str) -> KubeEvent:
    pod = run.state.pending[uid]
    return KubeEvent(
        regarding=ObjectRef(kind="Pod", name=pod.name, namespace=pod.namespace, uid=uid),
        reason=events.NOMINATED,
        message=f"Pod should schedule on NodeClaim {claim_name}",
    )


def nominations_to_write(run: PoolRun, nominations: list[KubeEvent]) -> list[KubeEvent]:
    """The Nominated Events the pool's allowance leaves room for, in the plan's order."""
    granted, run.nomination_allowance = pool_rules.events_allowed(
        run.nomination_allowance, workflow.now(), len(nominations)
    )
    return nominations[:granted]


def _pod_warning(run: PoolRun, pod: PodDemand, reason: str, message: str) -> KubeEvent:
    return KubeEvent(
        regarding=ObjectRef(kind="Pod", name=pod.name, namespace=pod.namespace, uid=pod.uid),
        reason=reason,
        message=f"NodePool {run.name}: {message}",
        type="Warning",
    )


def publish_status_aside(run: PoolRun) -> None:
    """Write the status beside the next round, one write at a time; a change made while one
    is on its way is written after it (the pool looks again when it is done)."""
    if run.publishing is not None and not run.publishing.done():
        run.status_behind = True
        return
    run.publishing = asyncio.create_task(_publish_status(run))

    def published(_: asyncio.Task[None]) -> None:
        if run.status_behind:
            run.status_behind = False
            run.wake()

    run.publishing.add_done_callback(published)


async def _publish_status(run: PoolRun) -> None:
    """`kubectl get nodepools`' NODES READY CPU MEMORY and conditions, when changed."""
    state = run.state
    cpu_m, memory = pool_rules.held(state.claims.values())
    status = pool_rules.pool_status(state, workflow.now(), held_now=(cpu_m, memory))
    if status == state.published_status and not run.status_stale:
        return
    limit_reached = status.conditions[1]
    was_reached = state.published_status is not None and any(
        c.type == LIMIT_REACHED and c.status == "True" for c in state.published_status.conditions
    )
    if limit_reached.status == "True" and not was_reached:
        pool_ref = ObjectRef(
            kind="NodePool", name=run.name, namespace=run.namespace, api_version=API_VERSION
        )
        record_events(
            run,
            [
                KubeEvent(
                    regarding=pool_ref,
                    reason=events.LIMIT_REACHED,
                    message=limit_reached.message,
                    type="Warning",
                )
            ],
        )
    limits = state.specs.pool.limits
    try:
        await workflow.execute_activity_method(
            MirrorActivities.sync_nodepool_status,
            NodePoolStatusUpdate(
                namespace=run.namespace,
                name=run.name,
                status=status,
                cpu_m=cpu_m,
                memory_bytes=memory,
                max_nodes=limits.max_nodes,
                limit_cpu_m=None if limits.cpu is None else cpu_millis(limits.cpu),
                limit_memory_bytes=None if limits.memory is None else memory_bytes(limits.memory),
            ),
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=FEW_TRIES,
            summary=f"status: {status.nodes} nodes, {status.ready_nodes} Ready",
        )
    except ActivityError as err:  # written again after the next look
        workflow.logger.warning("NodePool status not written: %s", cause(err))
        return
    state.published_status = status
    run.status_stale = False


def rewrite_status(run: PoolRun) -> None:
    """The NodePool's status is written on the next publish even if the pool's view of it is
    unchanged (its spec was edited: the trigger may have marked it invalid meanwhile)."""
    run.status_stale = True


def update_details(run: PoolRun) -> None:
    """Current details in the Web UI, with why pods wait (each reason, how many, and the
    command that explains one of them in full)."""
    state = run.state
    ready = sum(1 for c in state.claims.values() if c.phase == NodeClaimPhase.READY)
    lines = [
        f"**NodePool {run.namespace}/{run.name}**",
        "",
        "| | |",
        "|---|---|",
        f"| Claims | {len(state.claims)} ({ready} Ready) |",
        f"| Pending pods | {len(state.pending)} |",
        f"| Waiting on limits / unschedulable | {len(state.blocked)} |",
        f"| Offerings skipped | {', '.join(sorted(state.failed_offerings)) or '—'} |",
        f"| Claims started | {state.claims_started} |",
    ]
    if state.consolidation_note:
        lines.append(f"| Consolidation | {_cell(state.consolidation_note)} |")
    for reason, count, example in pool_rules.waiting_reasons(state, most=3):
        lines.append(f"| Waiting ({count}) | {_cell(reason)}: `cloudburst explain pod {example}` |")
    workflow.set_current_details("\n".join(lines))


def _cell(text: str, most: int = 200) -> str:
    """User text in a Markdown table cell: one line, no column breaks, not too long."""
    flat = " ".join(text.split()).replace("|", "\\|")
    return flat if len(flat) <= most else flat[: most - 1] + "…"
