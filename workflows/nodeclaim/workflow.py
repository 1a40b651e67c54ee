"""The NodeClaimWorkflow's spine: its state, what operators and the watcher can ask and say,
and `run`, which steps through the phases (each a module of this package).

Pending → Provisioning → Joining → Ready → Deleting → Deleted (or Failed). The node watcher
drives it with `observe_node` signals; a slow poll of the node is the safety net for a lost
signal. Every step that touches the world is an idempotent activity, so a worker crash at any
line only means the step runs again.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    # The phases hold no state of their own: passed through, they are loaded once per
    # worker, not again for every claim's run.
    from api.messages import (
        ClaimSignal,
        NodeClaimInput,
        NodeObservation,
        ScaleDownRequest,
        ScaleDownResult,
    )
    from api.nodeclaim import ConditionType, NodeClaimPhase, NodeClaimStatus
    from api.nodepool.messages import DisruptionPermit
    from workflows.decisions import claim_disruption
    from workflows.nodeclaim import launch, liveness, node, registration, termination
    from workflows.nodeclaim.state import ClaimFailed, ClaimState

_FINAL_PHASES = (NodeClaimPhase.DELETED, NodeClaimPhase.FAILED)


@workflow.defn
class NodeClaimWorkflow:
    @workflow.init
    def __init__(self, input: NodeClaimInput) -> None:
        self._state = ClaimState.of(input)

    @workflow.run
    async def run(self, input: NodeClaimInput) -> NodeClaimStatus:
        state = self._state
        # A run recorded before node identity compared the whole providerID replays with the
        # last-segment comparison it ran with (CHANGELOG, "Patches added").
        state.identity_judged(workflow.patched("node-identity-whole-provider-id"))
        try:
            if state.status.phase == NodeClaimPhase.READY:
                reason = await liveness.live(state)  # resumed after continue-as-new
            else:
                await launch.provision(state)
                if await registration.join(state):
                    await registration.become_ready(state)
                    reason = await liveness.live(state)
                else:
                    reason = state.scale_down.reason if state.scale_down else "ScaleDown"
            # "Empty" was true when last observed; pods bound since then must not be evicted.
            while reason == claim_disruption.EMPTY:
                if await liveness.still_empty_once_cordoned(state):
                    break
                reason = await liveness.live(state)
            await termination.delete(state, reason)
        except ClaimFailed as failure:
            await termination.fail(state, failure)
        except (asyncio.CancelledError, ActivityError) as err:
            if not is_cancelled_exception(err):
                raise
            # Cancelling a claim means "give the node back": the same cleanup, then cancelled.
            await termination.delete(state, "Cancelled")
            raise
        return state.status

    # --- what operators and the watcher can ask and say ------------------------------------

    @workflow.query
    def status(self) -> NodeClaimStatus:
        return self._state.status

    @workflow.signal(name=ClaimSignal.OBSERVE_NODE)
    def observe_node(self, observation: NodeObservation) -> None:
        node.observed(self._state, observation)

    @workflow.signal(name=ClaimSignal.SCALE_DOWN)
    def scale_down(self, request: ScaleDownRequest) -> None:
        state = self._state
        if state.status.phase.is_final:
            return
        if request.resource_uid and state.resource_uid not in (None, request.resource_uid):
            return  # another NodeClaim object of this name was deleted, not this claim's
        if state.scale_down is None or (request.force and not state.scale_down.force):
            state.scale_down = request
            state.wake()

    @workflow.signal(name=ClaimSignal.DISRUPTION_PERMITTED)
    def disruption_permitted(self, permit: DisruptionPermit) -> None:
        self._state.permitted(permit)
        self._state.wake()

    @workflow.signal(name=ClaimSignal.MARK_DRIFTED)
    def mark_drifted(self, reason: str) -> None:
        state = self._state
        if not state.drifted:
            state.drifted = True
            state.status.set_condition(
                ConditionType.DRIFTED, True, "Drifted", reason, workflow.now()
            )
            state.wake()

    @workflow.update
    def request_scale_down(self, request: ScaleDownRequest) -> ScaleDownResult:
        state = self._state
        if state.scale_down is not None and not request.force:
            return ScaleDownResult(
                accepted=False, reason=f"already scaling down: {state.scale_down.reason}"
            )
        state.scale_down = request
        state.wake()
        if request.force or not state.budgeted:
            return ScaleDownResult(accepted=True, reason=f"scale-down requested: {request.reason}")
        return ScaleDownResult(
            accepted=True,
            reason=f"scale-down requested: {request.reason}; waiting for the pool's "
            "disruption budget (--force skips it)",
        )

    @request_scale_down.validator
    def _validate_scale_down(self, request: ScaleDownRequest) -> None:
        phase = self._state.status.phase
        if phase in (NodeClaimPhase.DELETING, *_FINAL_PHASES):
            raise ValueError(f"claim is already {phase.value}")
