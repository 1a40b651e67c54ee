"""A pool's claims as Temporal knows them: `start_claim_workflows` starts a round's new
claims; `claim_workflow_states` says which still run (the pool's periodic look, and the
orphan GC before it removes a VM). Async: only they get the worker's client.

`start_claim_workflows`: a pool's new claims, started by its worker.

Why not child workflows: Temporal records each child's start in the parent's history under
the parent's lock, one after another, and the pool's next workflow task waits behind them:
in a 1,000-pod burst a pool starting children sat 0.3-0.8 s on each round whose claims were
still starting while new demand waited (docs/benchmarks-history.md, "Burst").
Started from here, a claim is its own workflow from the first (a child would be abandoned by
its pool at the pool's next continue-as-new anyway, and reports by signal), the pool records one
activity for a whole round, and its next round goes on while Temporal creates the claims.

Idempotent: a claim's workflow id is its name, and an id once used is never started again
(`REJECT_DUPLICATE`), so a retried attempt starts only the claims the last one did not reach
and never revives one that has ended.

A batch whose NodePool is no longer in the cluster (404, or another object of its name: the
uid its claims' owner references name differs) starts nothing and says so (`pool_gone`): on a
real cluster the garbage collector deletes a deleted pool's NodeClaims at once, each a
scale-down whose end frees the pool's limits, and that news can reach the pool before the
trigger's word that the pool is gone; its pods must not get a node of a pool that no longer
exists.

Each claim's NodeClaim object is created here, before its workflow starts: the object, owned
by the NodePool read from the cluster, is what authorises the claim's activities to spend
money and mark a node (`activities/claim_authority.py`), and only the worker (and an
operator) may create one. Its labels and taints are the pool's as the cluster has it now, with
the marks the worker's tenancy gives its namespace, whatever the batch says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kubernetes import client as k8s
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.claim_authority import ClaimNotAuthorised, create_nodeclaim, delete_nodeclaim
from api import search_attributes as sa
from api.claims import claim_details, claim_summary
from api.gc import ClaimState, ClaimStates, ClaimStatesInput
from api.messages import ClaimStart, ClaimStarts, ClaimStartsResult, claim_workflow_id
from api.nodeclaim import NodeClaimPhase
from api.nodepool import API_VERSION, NodePool
from cluster.tenancy import Tenancy

_GROUP, _, _VERSION = API_VERSION.partition("/")
# Start calls in flight at once: a round of a burst starts tens of claims, a floor hundreds.
# (The worker's `HeartbeatInterceptor` beats meanwhile: the pool's 2 s heartbeat timeout
# notices a worker that died mid-batch, not the start-to-close timeout.)
_STARTS_AT_ONCE = 32
_DESCRIBE_CONCURRENCY = 16
# What Temporal answers for a start that no retry can make succeed (an id or input it will
# not take): the claim is refused, the rest of the batch goes on.
_REFUSED = frozenset([RPCStatusCode.INVALID_ARGUMENT])


class ClaimWorkflowActivities:
    def __init__(self, api_client: k8s.ApiClient, tenancy: Tenancy) -> None:
        self.custom = k8s.CustomObjectsApi(api_client)
        self._tenancy = tenancy

    def activities(self) -> list[Callable[..., Any]]:
        return [self.start_claim_workflows, self.claim_workflow_states]

    def _pool(self, namespace: str, name: str, uid: str) -> NodePool | None:
        """NodePool namespace/name with this uid as the cluster has it; None when it is gone
        (or another object of its name is there)."""
        try:
            raw = self.custom.get_namespaced_custom_object(
                _GROUP, _VERSION, namespace, "nodepools", name
            )
        except k8s.ApiException as err:
            if err.status == 404:
                return None
            raise
        metadata = raw.get("metadata", {}) if isinstance(raw, dict) else {}
        if metadata.get("uid") != uid:
            return None
        return NodePool.model_validate(raw)

    def _made(self, item: ClaimStart, pool: NodePool) -> tuple[ClaimStart, bool]:
        """`item` with the pool's labels and taints as the cluster has them, after creating
        its NodeClaim object (the input carries that object's uid), and whether this call
        created the object."""
        claim = item.input.claim
        template = self._tenancy.node_spec(claim.metadata.namespace, pool.spec).template
        spec = claim.spec.model_copy(
            update={"labels": dict(template.labels), "taints": list(template.taints)}
        )
        claim = claim.model_copy(update={"spec": spec})
        uid, created = create_nodeclaim(self.custom, claim)
        claim = claim.model_copy(
            update={"metadata": claim.metadata.model_copy(update={"uid": uid})}
        )
        made = item.model_copy(update={"input": item.input.model_copy(update={"claim": claim})})
        return made, created

    @activity.defn(name="start_claim_workflows")
    async def start_claim_workflows(self, batch: ClaimStarts) -> ClaimStartsResult:
        owners = {
            (item.input.claim.metadata.namespace, owner.name, owner.uid)
            for item in batch.starts
            for owner in item.input.claim.metadata.owner_references
            if owner.kind == "NodePool"
        }
        pools: dict[tuple[str, str], NodePool] = {}
        for namespace, name, uid in owners:
            pool = await asyncio.to_thread(self._pool, namespace, name, uid)
            if pool is None:
                why = f"NodePool {namespace}/{name} (uid {uid}) is gone from the cluster"
                return ClaimStartsResult(
                    refused={item.input.claim.metadata.name: why for item in batch.starts},
                    pool_gone=True,
                )
            pools[namespace, name] = pool
        client = activity.client()
        limit = asyncio.Semaphore(_STARTS_AT_ONCE)
        refused: dict[str, str] = {}

        async def start(item: ClaimStart) -> None:
            claim = item.input.claim
            namespace = claim.metadata.namespace
            pool = pools.get((namespace, claim.spec.node_pool))
            if pool is None:
                refused[claim.metadata.name] = (
                    f"NodeClaim {namespace}/{claim.metadata.name} names no NodePool it belongs to"
                )
                return
            async with limit:
                try:
                    item, created = await asyncio.to_thread(self._made, item, pool)
                except ClaimNotAuthorised as refusal:
                    refused[claim.metadata.name] = str(refusal)
                    return
                outcome = await start_claim_workflow(client, item)
                if outcome == STARTED_BEFORE and created:
                    # Started by an earlier attempt, whose NodeClaim is gone (that claim has
                    # ended since): the one made now has no workflow.
                    await asyncio.to_thread(
                        delete_nodeclaim, self.custom, namespace, claim.metadata.name
                    )
                elif outcome != STARTED and outcome != STARTED_BEFORE:
                    refused[claim.metadata.name] = outcome
                    await asyncio.to_thread(
                        delete_nodeclaim, self.custom, namespace, claim.metadata.name
                    )

        await asyncio.gather(*(start(item) for item in batch.starts))
        return ClaimStartsResult(refused=refused)

    @activity.defn(name="claim_workflow_states")
    async def claim_workflow_states(self, input: ClaimStatesInput) -> ClaimStates:
        """Each claim workflow named: running, closed or unknown."""
        client = activity.client()
        limit = asyncio.Semaphore(_DESCRIBE_CONCURRENCY)

        async def state(workflow_id: str) -> tuple[str, ClaimState]:
            async with limit:
                handle = client.get_workflow_handle(workflow_id)
                try:
                    desc = await handle.describe()
                except RPCError as err:
                    if err.status == RPCStatusCode.NOT_FOUND:
                        return workflow_id, ClaimState.UNKNOWN
                    raise
            running = desc.status == WorkflowExecutionStatus.RUNNING
            return workflow_id, ClaimState.RUNNING if running else ClaimState.CLOSED

        results = await asyncio.gather(*(state(c) for c in sorted(set(input.workflow_ids))))
        return ClaimStates(states=dict(results))


# What `start_claim_workflow` says: the claim's workflow started now, was started by an earlier
# attempt, or (a string) why Temporal refused it for good.
STARTED, STARTED_BEFORE = "started", "started before"


async def start_claim_workflow(client: Client, item: ClaimStart) -> str:
    """Start one claim's workflow: `STARTED`, `STARTED_BEFORE` (an earlier attempt did, and it
    may have ended since: an id once used is never started again), or any other string: why
    Temporal refused it for good. The server busy or away raises (the batch is retried)."""
    claim = item.input.claim
    try:
        await client.start_workflow(
            "NodeClaimWorkflow",
            item.input,
            id=claim_workflow_id(claim.metadata.namespace, claim.metadata.name),
            task_queue=item.task_queue,
            task_timeout=(
                None if item.task_timeout_s is None else timedelta(seconds=item.task_timeout_s)
            ),
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(sa.NODE_POOL, item.pool_name),
                    SearchAttributePair(sa.PHASE, NodeClaimPhase.PENDING.value),
                ]
            ),
            static_summary=claim_summary(claim),
            static_details=claim_details(claim),
        )
    except WorkflowAlreadyStartedError:
        return STARTED_BEFORE
    except RPCError as err:
        if err.status not in _REFUSED:
            raise
        return err.message or str(err.status)
    return STARTED
