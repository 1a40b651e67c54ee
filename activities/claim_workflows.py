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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kubernetes import client as k8s
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from api import search_attributes as sa
from api.claims import claim_details, claim_summary
from api.gc import ClaimState, ClaimStates, ClaimStatesInput
from api.messages import ClaimStart, ClaimStarts, ClaimStartsResult, claim_workflow_id
from api.nodeclaim import NodeClaimPhase
from api.nodepool import API_VERSION

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
    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.custom = k8s.CustomObjectsApi(api_client)

    def activities(self) -> list[Callable[..., Any]]:
        return [self.start_claim_workflows, self.claim_workflow_states]

    def _pool_gone(self, namespace: str, name: str, uid: str) -> bool:
        """Whether NodePool namespace/name with this uid is gone from the cluster."""
        try:
            pool = self.custom.get_namespaced_custom_object(
                _GROUP, _VERSION, namespace, "nodepools", name
            )
        except k8s.ApiException as err:
            if err.status == 404:
                return True
            raise
        metadata = pool.get("metadata", {}) if isinstance(pool, dict) else {}
        return bool(metadata.get("uid") != uid)

    @activity.defn(name="start_claim_workflows")
    async def start_claim_workflows(self, batch: ClaimStarts) -> ClaimStartsResult:
        owners = {
            (item.input.claim.metadata.namespace, owner.name, owner.uid)
            for item in batch.starts
            for owner in item.input.claim.metadata.owner_references
            if owner.kind == "NodePool"
        }
        for namespace, name, uid in owners:
            if await asyncio.to_thread(self._pool_gone, namespace, name, uid):
                why = f"NodePool {namespace}/{name} (uid {uid}) is gone from the cluster"
                return ClaimStartsResult(
                    refused={item.input.claim.metadata.name: why for item in batch.starts},
                    pool_gone=True,
                )
        client = activity.client()
        limit = asyncio.Semaphore(_STARTS_AT_ONCE)
        refused: dict[str, str] = {}

        async def start(item: ClaimStart) -> None:
            claim = item.input.claim
            async with limit:
                try:
                    await client.start_workflow(
                        "NodeClaimWorkflow",
                        item.input,
                        id=claim_workflow_id(claim.metadata.namespace, claim.metadata.name),
                        task_queue=item.task_queue,
                        task_timeout=(
                            None
                            if item.task_timeout_s is None
                            else timedelta(seconds=item.task_timeout_s)
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
                    pass  # started by an earlier attempt (and perhaps ended since)
                except RPCError as err:
                    if err.status not in _REFUSED:
                        raise  # the server busy or away: the whole batch is tried again
                    refused[claim.metadata.name] = err.message

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
