"""NodeClaimWorkflow: one burst node's whole life, readable top to bottom.

Pending → Provisioning → Joining → Ready → Deleting → Deleted (or Failed). The node watcher
drives it with `observe_node` signals; a slow poll of the node is the safety net for a lost
signal. Every step that touches the world is an idempotent activity, so a worker crash at any
line only means the step runs again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    RetryState,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from activities.bootstrap import BootstrapActivities
    from activities.compute import ComputeActivities
    from activities.kube import KubeActivities
    from activities.mirror import MirrorActivities
    from activities.tailscale import TailscaleActivities
    from api import errors, events, labels
    from api import search_attributes as sa
    from api.events import KubeEvent, ObjectRef
    from api.messages import (
        BootstrapInput,
        BootstrapRefs,
        CreateInstanceInput,
        DrainInput,
        FailureReason,
        InstanceInfo,
        InstanceRef,
        LabelNodeInput,
        MirrorInput,
        NodeClaimInput,
        NodeObservation,
        NodeRef,
        NodeState,
        ScaleDownRequest,
        ScaleDownResult,
        TailnetDeviceRef,
    )
    from api.nodeclaim import ConditionType, NodeClaimPhase, NodeClaimStatus, Offering
    from api.nodepool import API_VERSION, ON_DEMAND
    from api.nodepool.messages import ClaimReport, DisruptionPermit, DisruptionRequest
    from workflows.alarms import Alarms
    from workflows.decisions import disruption
    from workflows.timeouts import HEARTBEAT, KUBE_CALL, QUICK_HEARTBEAT, VM_CALL

# Errors an activity raises that no retry can fix (see activities/compute.py).
_NON_RETRYABLE = errors.CLAIM_NON_RETRYABLE
_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=_NON_RETRYABLE,
)
# A provider that keeps failing transiently is, for this claim, as good as out of capacity.
_CREATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=8,
    non_retryable_error_types=_NON_RETRYABLE,
)
# A VM must never outlive its claim: keep retrying even "fatal" errors (an expired credential
# can be fixed while the activity waits), visibly, in the Web UI's pending activities.
_DELETE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=5),
)
# The mirror is a view: a few tries, then the claim goes on without it.
_MIRROR_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
)


Arg = TypeVar("Arg")
Result = TypeVar("Result")


class ClaimFailed(Exception):
    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


async def _together(*steps: Coroutine[Any, Any, None]) -> None:
    """Run the steps side by side (their commands in one workflow task) and return when all
    are done; a failure is raised only then, so that no step outlives the call. (No await in
    a `finally`: an evicted workflow's coroutines must close without waiting again.)"""
    tasks = [asyncio.create_task(step) for step in steps]
    await _all_of(tasks)
    for task in tasks:
        task.result()


async def _all_of(tasks: list[asyncio.Task[None]]) -> None:
    """Wait for every task; cancelled, cancel them too (a cancelled claim must not go on
    creating a VM in a task of its own while it cleans up)."""
    try:
        await workflow.wait(tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        raise


@workflow.defn
class NodeClaimWorkflow:
    @workflow.init
    def __init__(self, input: NodeClaimInput) -> None:
        self._input = input
        self._claim = input.claim
        self._status = input.resume or NodeClaimStatus()
        self._node: NodeObservation | None = input.resume_node
        self._last_signal_at: datetime | None = None
        self._instance_id: str | None = input.resume_instance_id
        self._bootstrap: BootstrapRefs | None = None
        self._tried: list[Offering] = []
        self._scale_down: ScaleDownRequest | None = None
        self._permit: DisruptionPermit | None = None
        self._asked: str | None = None  # the reason a permit was asked for
        self._blocked_by: str | None = None
        self._drifted = False
        self._instance_gone = False
        # Bumped by every signal, so one wait can wake on "anything happened".
        self._signals = 0
        self._last_event = "started"
        # Claims started since deadlines became alarms (workflows/alarms.py) decide on time
        # only through them and wait on a dirty flag; older ones keep their recorded ways.
        self._alarmed = workflow.patched("deadline-alarms")
        self._alarms = Alarms(on_ring=self._wake)
        # Claims started since: steps that do not need each other's results run side by side
        # in one workflow task (fewer round trips before the create call and after Ready),
        # and a node cordoned to re-check it is empty is not cordoned again to delete it.
        self._side_by_side = workflow.patched("claim-steps-side-by-side")
        # Claims started since: the bootstrap Secrets and the mirror (short Kubernetes calls)
        # run as local activities, inside the workflow task that needs them — the create call
        # goes out in the claim's first workflow task instead of its second, with no trip
        # through the task queue for either (three history events fewer each).
        self._local_kube_calls = self._side_by_side and workflow.patched("kube-calls-local")
        self._cordoned = False
        # Set by every signal and alarm; cleared at the top of each round, before the round
        # looks at the state, so news that comes while the round awaits is never missed.
        self._dirty = True
        self._observations = 0  # observe_node signals so far (a poll yields to a newer one)
        self._next_poll_at: datetime | None = None
        self._launched_on: list[Offering] = []  # offerings create_instance was called for

    @workflow.run
    async def run(self, input: NodeClaimInput) -> NodeClaimStatus:
        try:
            if self._status.phase == NodeClaimPhase.READY:
                reason = await self._live()  # resumed after continue-as-new
            else:
                await self._provision()
                if await self._join():
                    await self._become_ready()
                    reason = await self._live()
                else:
                    reason = self._scale_requested_reason()
            # "Empty" was true when last observed; pods bound since then must not be evicted.
            while reason == "Empty" and (self._alarmed or workflow.patched("revalidate-empty")):
                if await self._still_empty_once_cordoned():
                    break
                reason = await self._live()
            await self._delete(reason)
        except ClaimFailed as failure:
            await self._fail(failure)
        except (asyncio.CancelledError, ActivityError) as err:
            if not is_cancelled_exception(err):
                raise
            # Cancelling a claim means "give the node back": the same cleanup, then cancelled.
            await self._delete("Cancelled")
            raise
        return self._status

    def _wake(self) -> None:
        self._dirty = True

    # --- what operators and the watcher can ask and say ------------------------------------

    @workflow.query
    def status(self) -> NodeClaimStatus:
        return self._status

    @workflow.signal
    def observe_node(self, observation: NodeObservation) -> None:
        # Order signals by the watcher's clock, never against our own polls: a clock skew
        # between the two must not make a fresh transition look stale.
        last = self._last_signal_at
        if last is not None and observation.observed_at < last:
            return  # an older snapshot overtaken by a newer one
        self._last_signal_at = observation.observed_at
        previous = self._node
        if (
            previous
            and previous.empty_since
            and observation.empty_since
            and previous.exists == observation.exists
        ):
            # Still empty: keep the earlier start, so a watcher restart never extends the TTL.
            observation = observation.model_copy(
                update={"empty_since": min(previous.empty_since, observation.empty_since)}
            )
        self._node = observation
        self._signals += 1
        self._observations += 1
        self._dirty = True

    @workflow.signal
    def scale_down(self, request: ScaleDownRequest) -> None:
        if self._status.phase.is_final:
            return
        if self._scale_down is None or (request.force and not self._scale_down.force):
            self._scale_down = request
            self._signals += 1
            self._dirty = True

    @workflow.signal
    def disruption_permitted(self, permit: DisruptionPermit) -> None:
        self._permit = permit
        self._signals += 1
        self._dirty = True

    @workflow.signal
    def mark_drifted(self, reason: str) -> None:
        if not self._drifted:
            self._drifted = True
            self._status.set_condition(
                ConditionType.DRIFTED, True, "Drifted", reason, workflow.now()
            )
            self._signals += 1
            self._dirty = True

    @workflow.update
    def request_scale_down(self, request: ScaleDownRequest) -> ScaleDownResult:
        if self._scale_down is not None and not request.force:
            return ScaleDownResult(
                accepted=False, reason=f"already scaling down: {self._scale_down.reason}"
            )
        self._scale_down = request
        self._signals += 1
        self._dirty = True
        if request.force or self._input.pool_workflow_id is None:
            return ScaleDownResult(accepted=True, reason=f"scale-down requested: {request.reason}")
        return ScaleDownResult(
            accepted=True,
            reason=f"scale-down requested: {request.reason}; waiting for the pool's "
            "disruption budget (--force skips it)",
        )

    @request_scale_down.validator
    def _validate_scale_down(self, request: ScaleDownRequest) -> None:
        if self._status.phase in (NodeClaimPhase.DELETING, *_FINAL_PHASES):
            raise ValueError(f"claim is already {self._status.phase.value}")

    # --- the lifecycle ---------------------------------------------------------------------

    async def _provision(self) -> None:
        # The run's start, a moment in history, dates the claim (deadlines count from it).
        born = workflow.info().start_time if self._alarmed else workflow.now()
        self._status.created_at = self._status.created_at or born
        self._set_phase(NodeClaimPhase.PROVISIONING, "preparing join token and first-boot script")
        if self._side_by_side:
            # The report and the mirror go beside the first bootstrap, and land before the
            # launch is reported (or the claim goes on to fail, if the bootstrap cannot be).
            # Only the mirror: the pool that started this claim counts it live already, and
            # 34 claims' signals at once would queue behind the pool's own child starts.
            reporting = asyncio.create_task(self._publish(to_pool=False, new=True))
            launching = asyncio.create_task(self._launch_first_that_works(reporting))
            await _all_of([reporting, launching])
            launching.result()
        else:
            await self._publish(new=True)
            await self._launch_first_that_works(None)

    async def _launch_first_that_works(self, reporting: asyncio.Task[None] | None) -> None:
        spec = self._claim.spec
        # Newer claims render the script per offering, so the node registers with its
        # provider/region/instance-type labels; the join token is reused across renders.
        per_offering = self._alarmed or workflow.patched("bootstrap-per-offering")
        if not per_offering:
            await self._prepare_bootstrap(None)
        failures: list[str] = []
        for offering in spec.offerings:
            if self._scale_down:
                return  # nothing launched yet; _join sees the request and the claim is deleted
            self._tried.append(offering)
            if per_offering:
                await self._prepare_bootstrap(offering)
            if reporting is not None and not reporting.done():
                await reporting  # PROVISIONING is shown before whatever the launch says
            self._launched_on.append(offering)
            try:
                instance = await self._create_instance(offering)
            except ActivityError as err:
                if is_cancelled_exception(err):
                    raise
                failures.append(f"{offering.key}: {_cause(err)}")
                self._event(f"create failed on {offering.key}: {_cause(err)}")
                if _error_type(err) == errors.CAPACITY_ERROR:
                    await self._publish(
                        failed_offering=offering.key,
                        reason=_cause(err),
                        events=[self._warning(events.FAILED_PROVISIONING, _cause(err))],
                    )
                if _error_type(err) == errors.INVALID_CONFIGURATION:
                    raise ClaimFailed(FailureReason.INVALID_CONFIG, _cause(err)) from err
                continue
            self._launched(offering, instance)
            await self._publish(
                offering=offering,
                events=[self._notice(events.LAUNCHED, f"Launched {offering.key}")],
            )
            return
        raise ClaimFailed(
            FailureReason.NO_CAPACITY, "no offering could be created: " + "; ".join(failures)
        )

    async def _prepare_bootstrap(self, offering: Offering | None) -> None:
        spec = self._claim.spec
        try:
            self._bootstrap = await self._kube_call(
                BootstrapActivities.prepare_bootstrap,
                BootstrapInput(
                    claim_name=self._name,
                    namespace=self._namespace,
                    node_pool=spec.node_pool,
                    node_class_name=self._input.node_class_name,
                    node_class=self._input.node_class,
                    labels={
                        **spec.labels,
                        **labels.ownership_labels(self._name, node_pool=spec.node_pool),
                    },
                    taints=spec.taints,
                    offering=offering,
                ),
                retry_policy=_RETRY,
                summary=f"bootstrap token + script Secret{f' for {offering.key}' if offering else ''}",
            )
        except ActivityError as err:
            fatal = isinstance(err.cause, ApplicationError) and err.cause.non_retryable
            if is_cancelled_exception(err) or not fatal:
                raise
            # A missing Secret, a script too large: the NodeClass needs fixing.
            raise ClaimFailed(FailureReason.INVALID_CONFIG, _cause(err)) from err
        self._event("token created, script stored in Secret " + self._bootstrap.script_secret)

    async def _create_instance(self, offering: Offering) -> InstanceInfo:
        assert self._bootstrap is not None
        return await workflow.execute_activity_method(
            ComputeActivities.create_instance,
            CreateInstanceInput(
                claim_name=self._name,
                namespace=self._namespace,
                node_pool=self._claim.spec.node_pool,
                node_class_name=self._input.node_class_name,
                node_class=self._input.node_class,
                offering=offering,
                cluster_id=self._input.cluster_id,
                bootstrap=self._bootstrap,
            ),
            start_to_close_timeout=VM_CALL,
            heartbeat_timeout=HEARTBEAT,
            retry_policy=_CREATE_RETRY,
            summary=f"create VM {offering.key}",
        )

    def _launched(self, offering: Offering, instance: InstanceInfo) -> None:
        status = self._status
        self._instance_id = instance.instance_id
        status.instance_id = instance.instance_id
        status.provider_id = instance.instance_id
        status.provider = offering.provider
        status.region = offering.region
        status.instance_type = offering.instance_type
        status.price_eur_per_hour = offering.price_eur_per_hour
        status.price_source = offering.price_source
        status.price_as_of = offering.price_as_of
        status.capacity_type = offering.capacity_type
        if offering.vcpu is not None:
            status.capacity["cpu"] = f"{offering.vcpu:g}"
        if offering.memory_gib is not None:
            status.capacity["memory"] = f"{offering.memory_gib:g}Gi"
        status.set_condition(
            ConditionType.LAUNCHED, True, "Launched", f"VM {instance.instance_id}", workflow.now()
        )
        workflow.upsert_search_attributes(
            [
                sa.PROVIDER.value_set(offering.provider),
                sa.REGION.value_set(offering.region),
                sa.INSTANCE_TYPE.value_set(offering.instance_type),
                # Known from the start (the claim names its node): searchable from launch.
                *([sa.NODE_NAME.value_set(self._name)] if self._side_by_side else []),
            ]
        )
        self._event(f"VM {instance.instance_id} created with the first-boot script")

    async def _join(self) -> bool:
        """Wait for the node to turn Ready (True), a scale-down (False), or fail at the timeout."""
        self._set_phase(NodeClaimPhase.JOINING, "waiting for the node to register")
        assert self._status.created_at is not None
        deadline = self._status.created_at + timedelta(
            seconds=self._input.timings.registration_timeout_s
        )
        if self._alarmed:
            return await self._join_by_alarms(deadline)
        while not (self._node and self._node.exists and self._node.ready):
            if self._scale_down:
                return False
            if self._node and self._node.exists:
                self._registered()
            remaining = (deadline - workflow.now()).total_seconds()
            if remaining <= 0:
                raise ClaimFailed(
                    FailureReason.REGISTRATION_TIMEOUT,
                    f"node did not become Ready within "
                    f"{self._input.timings.registration_timeout_s:g}s",
                )
            poll = min(remaining, self._input.timings.node_poll_interval_s)
            if not await self._wait_for_signal(poll, "node registration"):
                await self._poll_node()
        self._registered()
        return True

    async def _join_by_alarms(self, deadline: datetime) -> bool:
        timings = self._input.timings
        while not (self._node and self._node.exists and self._node.ready):
            self._dirty = False
            if self._scale_down:
                self._alarms.clear()
                return False
            if self._node and self._node.exists:
                self._registered()
            if self._next_poll_at is None:
                self._next_poll_at = workflow.now() + timedelta(
                    seconds=timings.node_poll_interval_s
                )
            timed_out = self._alarms.reached("registration timeout", deadline)
            poll_due = self._alarms.reached("poll the node", self._next_poll_at)
            self._alarms.settle()
            if timed_out:
                self._alarms.clear()
                raise ClaimFailed(
                    FailureReason.REGISTRATION_TIMEOUT,
                    f"node did not become Ready within {timings.registration_timeout_s:g}s",
                )
            if poll_due:
                self._next_poll_at = None
                await self._poll_node()
                continue
            self._update_details()
            await workflow.wait_condition(lambda: self._dirty)
        self._alarms.clear()
        self._next_poll_at = None
        self._registered()
        return True

    async def _become_ready(self) -> None:
        if self._side_by_side:
            # The watcher's word carries the kubelet's capacity; a look only when it did not.
            known = self._node is not None and bool(self._node.capacity)
            if known and self._node is not None:
                self._status.capacity = dict(self._node.capacity)
            looks = [] if known else [self._poll_node()]
            await _together(self._label_node(), self._delete_bootstrap(), *looks)
        else:
            await self._label_node()
            await self._delete_bootstrap()
            if self._alarmed or workflow.patched("record-node-capacity"):
                await self._poll_node()  # the kubelet's capacity, not the catalog's promise
        await self._ready()

    async def _label_node(self) -> None:
        spec = self._claim.spec
        status = self._status
        await workflow.execute_activity_method(
            KubeActivities.label_node,
            LabelNodeInput(
                node_name=self._name,
                labels={
                    **spec.labels,
                    **labels.ownership_labels(self._name, node_pool=spec.node_pool),
                    labels.PROVIDER: status.provider or "",
                    labels.REGION: status.region or "",
                    labels.INSTANCE_TYPE: status.instance_type or "",
                    labels.K8S_REGION: status.region or "",
                    labels.K8S_INSTANCE_TYPE: status.instance_type or "",
                    labels.CAPACITY_TYPE: status.capacity_type or ON_DEMAND,
                    labels.KARPENTER_CAPACITY_TYPE: status.capacity_type or ON_DEMAND,
                },
            ),
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=_RETRY,
            summary="label node",
        )

    async def _ready(self) -> None:
        status = self._status
        now = workflow.now()
        status.ready_at = now
        status.set_condition(ConditionType.INITIALIZED, True, "Initialized", "labels synced", now)
        status.set_condition(ConditionType.READY, True, "Ready", "node is Ready", now)
        self._set_phase(NodeClaimPhase.READY, "node Ready; join token and script deleted")
        await self._publish(
            events=[
                self._notice(events.REGISTERED, f"Node {self._name} registered"),
                self._notice(events.READY, f"Node {self._name} is Ready"),
            ]
        )

    async def _live(self) -> str:
        """Serve until something says the node should go; return why.

        Involuntary reasons (node lost, expired, a forced scale-down) end it at once.
        Voluntary ones (empty, drifted, a plain scale-down) of a pool's claim wait for the
        pool's disruption permit, and for do-not-disrupt pods to leave.
        """
        if self._alarmed:
            return await self._live_by_alarms()
        timings = self._input.timings
        next_poll = workflow.now() + timedelta(seconds=timings.ready_poll_interval_s)
        while True:
            now = workflow.now()
            wake = [next_poll]
            forced = self._involuntary_reason(now, wake)
            if forced:
                return forced
            self._update_empty_condition(now)
            wanted = self._voluntary_reason(now, wake)
            if wanted and await self._may_disrupt(wanted):
                return wanted
            if not wanted and self._asked is not None:
                await self._ask_pool("withdraw_disruption", self._asked)
                self._asked = None
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    self._input.model_copy(
                        update={
                            "resume": self._status,
                            "resume_node": self._node,
                            "resume_instance_id": self._instance_id,
                        }
                    )
                )
            self._update_details()
            timeout = max((min(wake) - now).total_seconds(), 0.001)
            signalled = await self._wait_for_signal(timeout, "empty TTL / expiry / poll")
            if not signalled and workflow.now() >= next_poll:
                await self._poll_node()
                if workflow.patched("poll-checks-instance"):
                    await self._check_instance()
                next_poll = workflow.now() + timedelta(seconds=timings.ready_poll_interval_s)

    async def _live_by_alarms(self) -> str:
        """`_live` deciding on time only through alarms, waiting on the dirty flag."""
        timings = self._input.timings
        while True:
            self._dirty = False
            if self._next_poll_at is None:
                self._next_poll_at = workflow.now() + timedelta(
                    seconds=timings.ready_poll_interval_s
                )
            forced = self._involuntary_by_alarms()
            if forced:
                self._alarms.clear()
                return forced
            self._update_empty_condition(workflow.now())
            wanted = self._voluntary_by_alarms()
            poll_due = self._alarms.reached("poll the node", self._next_poll_at)
            self._alarms.settle()
            if wanted and await self._may_disrupt(wanted):
                self._alarms.clear()
                return wanted
            if not wanted and self._asked is not None:
                await self._ask_pool("withdraw_disruption", self._asked)
                self._asked = None
            if workflow.info().is_continue_as_new_suggested():
                await self._continue_as_new()
            if poll_due:
                self._next_poll_at = None
                await self._safety_net_poll()
                continue
            self._update_details()
            await workflow.wait_condition(lambda: self._dirty)

    async def _safety_net_poll(self) -> None:
        """The node and the VM, looked at. Side by side, in one workflow task: an idle claim's
        poll is most of its history, and this saves a task (3 events) per poll."""
        if not workflow.patched("poll-side-by-side"):
            await self._poll_node()
            await self._check_instance()
            return
        node, instance = await asyncio.gather(
            self._poll_node(), self._check_instance(), return_exceptions=True
        )
        # As before: a failed node read fails the same way, once the other look is done.
        for outcome in (node, instance):
            if isinstance(outcome, BaseException):
                raise outcome

    def _involuntary_by_alarms(self) -> str | None:
        """Reasons no budget holds back, each deadline reached only by its alarm."""
        reason = disruption.involuntary_reason(self._view(), self._alarms.reached)
        if reason == disruption.EXPIRED:
            now = workflow.now()
            self._status.set_condition(ConditionType.EXPIRED, True, "Expired", "", now)
        return reason

    def _voluntary_by_alarms(self) -> str | None:
        return disruption.voluntary_reason(self._view(), self._alarms.reached)

    def _view(self) -> disruption.ClaimView:
        assert self._status.created_at is not None
        return disruption.ClaimView(
            disruption=self._claim.spec.disruption,
            created_at=self._status.created_at,
            node=self._node,
            scale_down=self._scale_down,
            permit=self._permit,
            budgeted=self._input.pool_workflow_id is not None,
            instance_gone=self._instance_gone,
        )

    async def _continue_as_new(self) -> None:
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(
            self._input.model_copy(
                update={
                    "resume": self._status,
                    "resume_node": self._node,
                    "resume_instance_id": self._instance_id,
                }
            )
        )

    async def _still_empty_once_cordoned(self) -> bool:
        """Cordon, then look again: pods the scheduler bound since the watcher last saw the
        node make it busy after all (as Karpenter validates a disruption after tainting).
        Busy: uncordon, give the permit back, and live on."""
        ref = NodeRef(node_name=self._name)
        if self._side_by_side:
            state = await self._look(KubeActivities.cordon_and_look, "taint + cordon, still empty?")
        else:
            await self._kube(KubeActivities.cordon_node, ref, "taint + cordon (still empty?)")
            state = await self._look(KubeActivities.get_node_state, "still empty?")
        self._cordoned = True
        if not state.exists or state.empty:
            return True
        await self._kube(
            KubeActivities.uncordon_node, ref, f"uncordon: {state.pod_count} pods arrived"
        )
        self._cordoned = False
        if self._node is not None:
            self._node = self._node.model_copy(
                update={"empty_since": None, "pod_count": state.pod_count}
            )
        self._permit = None
        if self._asked is not None and self._input.pool_workflow_id is not None:
            await self._ask_pool("withdraw_disruption", self._asked)
        self._asked = None
        self._event(f"empty scale-down called off: {state.pod_count} pods arrived")
        return False

    def _involuntary_reason(self, now: datetime, wake: list[datetime]) -> str | None:
        """Reasons no budget holds back; `wake` gets the moments one may become true."""
        disruption = self._claim.spec.disruption
        request = self._scale_down
        if request and (request.force or self._input.pool_workflow_id is None):
            return request.reason  # a forced request, or a claim no pool budgets
        node = self._node
        if self._instance_gone or (node and not node.exists):
            return "NodeLost"
        if node and node.not_ready_since:
            lost_at = node.not_ready_since + timedelta(
                seconds=disruption.node_unreachable_grace_period_seconds
            )
            if now >= lost_at:
                return "NodeLost"
            wake.append(lost_at)
        if disruption.ttl_seconds_until_expired is not None:
            assert self._status.created_at is not None
            expires = self._status.created_at + timedelta(
                seconds=disruption.ttl_seconds_until_expired
            )
            if now >= expires:
                self._status.set_condition(ConditionType.EXPIRED, True, "Expired", "", now)
                return "Expired"
            wake.append(expires)
        return None

    def _voluntary_reason(self, now: datetime, wake: list[datetime]) -> str | None:
        if self._permit is not None and self._permit.reason in _POOL_CHOSEN_REASONS:
            return self._permit.reason  # the pool chose this node (drift, consolidation)
        if self._scale_down:
            return self._scale_down.reason
        # Drifted alone is no reason to go: the pool sends the permit once a replacement runs.
        node = self._node
        ttl = self._claim.spec.disruption.ttl_seconds_after_empty
        if node and node.empty_since and ttl is not None:
            empty_deadline = node.empty_since + timedelta(seconds=ttl)
            if now >= empty_deadline:
                return "Empty"
            wake.append(empty_deadline)
        return None

    async def _may_disrupt(self, reason: str) -> bool:
        """True when the node may go now for `reason`: no do-not-disrupt pod, and a permit."""
        node = self._node
        blockers = node.do_not_disrupt if node else []
        if blockers:
            message = "do-not-disrupt pods: " + ", ".join(sorted(blockers))
            if self._blocked_by != message:
                self._blocked_by = message
                self._event(f"disruption ({reason}) blocked by {message}")
                await self._publish(
                    reason=f"DisruptionBlocked: {message}",
                    events=[self._notice(events.DISRUPTION_BLOCKED, message)],
                )
            if self._asked is not None:
                await self._ask_pool("withdraw_disruption", self._asked)
                self._asked = None
            self._permit = None
            return False
        self._blocked_by = None
        if self._input.pool_workflow_id is None:
            return True
        if self._permit is not None and self._permit.reason == reason:
            return True
        if self._asked != reason:
            await self._ask_pool("request_disruption", reason)
            self._asked = reason
            self._event(f"waiting for a disruption permit ({reason})")
        return False

    async def _ask_pool(self, signal: str, reason: str) -> None:
        pool_id = self._input.pool_workflow_id
        assert pool_id is not None
        request = DisruptionRequest(claim_name=self._name, reason=reason)
        try:
            await workflow.get_external_workflow_handle(pool_id).signal(signal, request)
        except Exception as err:  # no pool any more: nobody budgets this claim
            workflow.logger.warning("pool %s unreachable: %s", pool_id, err)
            self._permit = DisruptionPermit(reason=reason)

    async def _check_instance(self) -> None:
        """Is the VM still there? A VM deleted behind our back means the node is lost."""
        if self._status.provider is None:
            return
        if self._alarmed:
            try:
                await self._look_for_instance()
            except ActivityError as err:
                if is_cancelled_exception(err):
                    raise
                # An expired credential must not end a node that is fine: the next poll
                # looks again, and the node watcher still reports a node that goes.
                workflow.logger.warning("could not look for the VM: %s", _cause(err))
            return
        await self._look_for_instance()

    async def _look_for_instance(self) -> None:
        assert self._status.provider is not None
        found = await workflow.execute_activity_method(
            ComputeActivities.get_instance,
            self._instance_ref(self._status.provider, self._instance_id),
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=_RETRY,
            summary="is the VM still there?",
        )
        self._instance_gone = found is None or found.state == "terminated"

    def _update_empty_condition(self, now: datetime) -> None:
        node = self._node
        self._status.set_condition(
            ConditionType.EMPTY,
            bool(node and node.empty_since),
            "Empty" if node and node.empty_since else "Busy",
            f"{node.pod_count if node else 0} pods",
            node.empty_since if node and node.empty_since else now,
        )

    async def _delete(self, reason: str) -> None:
        """Taint + cordon, drain, delete the Node, delete the VM, confirm it is gone."""
        status = self._status
        now = workflow.now()
        status.deletion_reason = reason
        status.set_condition(ConditionType.DISRUPTING, True, reason, "", now)
        self._set_phase(NodeClaimPhase.DELETING, f"deleting: {reason}")
        interrupted = reason == disruption.INTERRUPTED
        if interrupted:
            notice = self._node.interruption if self._node else None
            status.set_condition(
                ConditionType.INTERRUPTED, True, "Interrupted", f"provider notice: {notice}", now
            )
        reporting = self._publish(
            reason=reason,
            events=[self._deletion_event(reason)],
            # Spot capacity of this type is being reclaimed: the pool plans elsewhere for a
            # while (its failed-offering cache), as Karpenter does after an interruption.
            failed_offering=self._offering_key() if interrupted else None,
        )
        if self._side_by_side:
            await _together(reporting, self._cordon_and_drain(reason, now))
        else:
            await reporting
            await self._cordon_and_drain(reason, now)
        deleting_node = self._kube(
            KubeActivities.delete_node, NodeRef(node_name=self._name), "delete Node"
        )
        if self._side_by_side:
            # Drained: the Node and the VM go together (a kubelet left running without its
            # Node object would register it again; Karpenter even ends the VM first).
            await _together(deleting_node, self._delete_instances())
        else:
            await deleting_node
            await self._delete_instances()
        if self._alarmed:
            await self._remove_tailnet_device()
        await self._delete_bootstrap()
        status.deleted_at = workflow.now()
        self._set_phase(NodeClaimPhase.DELETED, f"node and VM deleted ({reason})")
        await self._publish(reason=reason, remove=True)

    async def _cordon_and_drain(self, reason: str, now: datetime) -> None:
        if self._node is None or not self._node.exists or reason == "NodeLost":
            return  # no node to drain
        if not (self._side_by_side and self._cordoned):  # cordoned to re-check it is empty
            await self._kube(
                KubeActivities.cordon_node, NodeRef(node_name=self._name), "taint + cordon"
            )
        grace = self._claim.spec.disruption.termination_grace_period_seconds
        drained = await workflow.execute_activity_method(
            KubeActivities.drain_node,
            DrainInput(
                node_name=self._name,
                force_after=now + timedelta(seconds=grace),
                grace_s=grace,
                poll_interval_s=self._input.timings.drain_poll_interval_s,
                eviction_retry_s=self._input.timings.eviction_retry_s,
                hold_do_not_disrupt=not (self._scale_down and self._scale_down.force),
            ),
            start_to_close_timeout=timedelta(seconds=grace + 300),
            heartbeat_timeout=HEARTBEAT,
            retry_policy=_RETRY,
            summary="drain (Eviction API)",
        )
        self._event(
            f"drained: {drained.evicted} evicted, {drained.forced} forced, "
            f"{drained.left_alone} DaemonSet/mirror pods left"
        )

    async def _fail(self, failure: ClaimFailed) -> None:
        status = self._status
        status.failure_reason = failure.reason.value
        status.failure_message = failure.message
        if self._alarmed:
            await self._fail_visibly(failure)
            return
        # Whatever failed, no node or VM this claim may have started outlives it.
        await self._kube(KubeActivities.delete_node, NodeRef(node_name=self._name), "delete Node")
        await self._delete_instances()
        await self._delete_bootstrap()
        status.set_condition(
            ConditionType.READY, False, failure.reason.value, failure.message, workflow.now()
        )
        self._set_phase(NodeClaimPhase.FAILED, f"failed: {failure.message}")
        await self._publish(
            reason=failure.message,
            events=[self._warning(events.FAILED_PROVISIONING, failure.message)],
            remove=True,
        )
        raise ApplicationError(failure.message, type=failure.reason.value, non_retryable=True)

    async def _fail_visibly(self, failure: ClaimFailed) -> None:
        """Say so first — the NodeClaim (Ready=False, reason, message), an Event, the pool
        (which forgets the claim and plans its pods again) — then clean up. A cleanup step
        that fails is logged; the error the claim fails with is always the first cause."""
        status = self._status
        status.set_condition(
            ConditionType.READY, False, failure.reason.value, failure.message, workflow.now()
        )
        self._set_phase(NodeClaimPhase.FAILED, f"failed: {failure.message}")
        await self._publish(
            reason=failure.message,
            failure_reason=failure.reason,
            events=[self._warning(events.FAILED_PROVISIONING, failure.message)],
        )
        # Whatever failed, no node or VM this claim may have started outlives it.
        for step in (
            lambda: self._kube(
                KubeActivities.delete_node, NodeRef(node_name=self._name), "delete Node"
            ),
            self._delete_instances,  # retries every error until the VM is gone
            self._remove_tailnet_device,
            self._delete_bootstrap,
        ):
            try:
                await step()
            except ActivityError as err:
                if is_cancelled_exception(err):
                    raise
                workflow.logger.warning("cleanup after failure: %s", _cause(err))
        # The resource stays, Failed, for `kubectl get nodeclaims` to show why.
        await self._publish(
            reason=failure.message, failure_reason=failure.reason, remove=True, keep=True
        )
        raise ApplicationError(failure.message, type=failure.reason.value, non_retryable=True)

    # --- helpers -------------------------------------------------------------------------

    async def _publish(
        self,
        *,
        offering: Offering | None = None,
        failed_offering: str | None = None,
        reason: str = "",
        events: list[KubeEvent] | None = None,
        remove: bool = False,
        failure_reason: FailureReason | None = None,
        keep: bool = False,
        to_pool: bool = True,
        new: bool = False,
    ) -> None:
        """Show the change: to the pool that started the claim, on the NodeClaim resource
        (`new`: its first showing)."""
        pool_id = self._input.pool_workflow_id if to_pool else None
        report = None
        if pool_id is not None:
            report = ClaimReport(
                claim_name=self._name,
                phase=self._status.phase,
                offering=offering,
                failed_offering=failed_offering,
                reason=reason,
                at=workflow.now(),
                failure_reason=failure_reason.value if failure_reason else None,
            )
        # Both taken now: what the claim is at this moment, whatever arrives meanwhile.
        mirror = MirrorInput(
            claim=self._claim.model_copy(update={"status": self._status.model_copy(deep=True)}),
            events=events or [],
            remove=remove,
            keep=keep,
            new=new,
        )
        if self._side_by_side:
            await _together(self._report_to_pool(pool_id, report), self._mirror(mirror))
            return
        await self._report_to_pool(pool_id, report)
        if not workflow.patched("nodeclaim-mirror"):
            return  # a claim started before the mirror existed keeps its recorded steps
        await self._mirror(mirror)

    async def _report_to_pool(self, pool_id: str | None, report: ClaimReport | None) -> None:
        if pool_id is None or report is None:
            return
        try:
            await workflow.get_external_workflow_handle(pool_id).signal("claim_report", report)
        except Exception as err:  # the pool is gone: the claim's own life goes on
            workflow.logger.warning("could not report to pool %s: %s", pool_id, err)

    async def _mirror(self, mirror: MirrorInput) -> None:
        try:
            await self._kube_call(
                MirrorActivities.sync_nodeclaim,
                mirror,
                retry_policy=_MIRROR_RETRY,
                summary="mirror NodeClaim resource",
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            # A mirror that cannot be written must not stop the node's life.
            workflow.logger.warning("NodeClaim mirror not updated: %s", _cause(err))

    async def _kube_call(
        self,
        activity: Callable[[Any, Arg], Result],
        arg: Arg,
        *,
        retry_policy: RetryPolicy,
        summary: str,
    ) -> Result:
        """A short Kubernetes call: a local activity in claims since `kube-calls-local` (a
        dead worker's attempt is then retried with the workflow task, on another worker)."""
        if self._local_kube_calls:
            try:
                return await workflow.execute_local_activity_method(
                    activity,
                    arg,
                    start_to_close_timeout=KUBE_CALL,
                    retry_policy=retry_policy,
                    summary=summary,
                )
            except ActivityError:
                raise
            except FailureError as failure:
                # A local activity's non-retryable failure reaches the workflow as the
                # activity raised it, not as an ActivityError: the callers handle both ways
                # of calling alike (a missing Secret fails the claim visibly, a mirror write
                # that cannot be made is logged).
                raise ActivityError(
                    f"local activity {activity.__name__} failed",
                    scheduled_event_id=0,
                    started_event_id=0,
                    identity="",
                    activity_type=activity.__name__,
                    activity_id="",
                    retry_state=RetryState.NON_RETRYABLE_FAILURE,
                ) from failure
        return await workflow.execute_activity_method(
            activity,
            arg,
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=retry_policy,
            summary=summary,
        )

    def _deletion_event(self, reason: str) -> KubeEvent:
        event_reason = _DELETION_EVENTS.get(reason, "ScaleDown")
        message = f"Deleting node {self._name}: {reason}"
        if event_reason in (events.NODE_LOST, events.INTERRUPTED):
            return self._warning(event_reason, message)
        return self._notice(event_reason, message)

    def _notice(self, reason: str, message: str) -> KubeEvent:
        return KubeEvent(regarding=self._ref(), reason=reason, message=message)

    def _warning(self, reason: str, message: str) -> KubeEvent:
        return KubeEvent(regarding=self._ref(), reason=reason, message=message, type="Warning")

    def _ref(self) -> ObjectRef:
        return ObjectRef(
            kind="NodeClaim",
            name=self._name,
            namespace=self._namespace,
            api_version=API_VERSION,
        )

    def _offering_key(self) -> str | None:
        status = self._status
        if not status.provider or not status.region or not status.instance_type:
            return None
        return Offering(
            provider=status.provider,
            region=status.region,
            instance_type=status.instance_type,
            capacity_type=status.capacity_type or ON_DEMAND,
        ).key

    def _scale_requested_reason(self) -> str:
        return self._scale_down.reason if self._scale_down else "ScaleDown"

    async def _delete_instances(self) -> None:
        """Delete every VM this claim may have made, found by id or else by the claim label."""
        tried = self._launched_on if self._alarmed else self._tried
        providers = {o.provider for o in tried}
        if self._status.provider:
            providers.add(self._status.provider)
        for provider in sorted(providers):
            instance_id = self._instance_id if provider == self._status.provider else None
            await workflow.execute_activity_method(
                ComputeActivities.delete_instance,
                self._instance_ref(provider, instance_id),
                start_to_close_timeout=VM_CALL,
                heartbeat_timeout=HEARTBEAT,
                retry_policy=_DELETE_RETRY,
                summary=f"delete VM on {provider}",
            )
        self._event("VM deleted and confirmed gone")

    def _instance_ref(self, provider: str, instance_id: str | None) -> InstanceRef:
        return InstanceRef(
            claim_name=self._name,
            instance_id=instance_id,
            provider=provider,
            reason=self._status.deletion_reason or self._status.failure_reason,
            cluster_id=self._input.cluster_id,
            namespace=self._namespace,
            node_class_name=self._input.node_class_name,
            node_class=self._input.node_class,
        )

    async def _remove_tailnet_device(self) -> None:
        """With per-node keys (Tailscale OAuth), the node's device leaves the tailnet with it.
        A failure is logged, not raised: the device is ephemeral and ages out anyway."""
        tailscale = self._input.node_class.tailscale
        if tailscale is None or not tailscale.minted:
            return
        try:
            await workflow.execute_activity_method(
                TailscaleActivities.remove_tailnet_device,
                TailnetDeviceRef(
                    node_name=self._name,
                    namespace=self._namespace,
                    node_class_name=self._input.node_class_name,
                    node_class=self._input.node_class,
                ),
                start_to_close_timeout=KUBE_CALL,
                heartbeat_timeout=QUICK_HEARTBEAT,
                retry_policy=_MIRROR_RETRY,
                summary="remove the node from the tailnet",
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            workflow.logger.warning("tailnet device not removed: %s", _cause(err))

    async def _delete_bootstrap(self) -> None:
        if self._bootstrap is None:
            return
        await workflow.execute_activity_method(
            BootstrapActivities.delete_bootstrap_secrets,
            self._bootstrap,
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=_RETRY,
            summary="delete token + script Secrets",
        )
        self._bootstrap = None

    async def _poll_node(self) -> None:
        seen = self._observations
        state = await workflow.execute_activity_method(
            KubeActivities.get_node_state,
            NodeRef(node_name=self._name),
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=_RETRY,
            summary="poll node (safety net)",
        )
        now = workflow.now()
        if state.capacity:
            self._status.capacity = state.capacity
        if self._alarmed:
            if self._observations != seen:
                return  # the watcher spoke while we looked: its word is at least as new
            # Dated by the activity's clock, a value in history, not by ours.
            now = state.observed_at or now
        previous = self._node
        empty_since = None
        if state.exists and state.empty:
            empty_since = previous.empty_since if previous and previous.empty_since else now
        not_ready_since = None
        if state.exists and not state.ready:
            not_ready_since = previous.not_ready_since if previous else None
            not_ready_since = not_ready_since or now
        self._node = NodeObservation(
            node_name=self._name,
            exists=state.exists,
            ready=state.ready,
            not_ready_since=not_ready_since,
            empty_since=empty_since,
            pod_count=state.pod_count,
            do_not_disrupt=state.do_not_disrupt,
            observed_at=now,
            interruption=state.interruption,
        )

    async def _kube(
        self, activity: Callable[[KubeActivities, NodeRef], None], ref: NodeRef, summary: str
    ) -> None:
        """One call on the claim's node (cordon, uncordon, delete): the same options each."""
        await workflow.execute_activity_method(
            activity,
            ref,
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=_RETRY,
            summary=summary,
        )

    async def _look(
        self, activity: Callable[[KubeActivities, NodeRef], NodeState], summary: str
    ) -> NodeState:
        """The node's state now, as an activity reads it from the API server."""
        return await workflow.execute_activity_method(
            activity,
            NodeRef(node_name=self._name),
            start_to_close_timeout=KUBE_CALL,
            heartbeat_timeout=QUICK_HEARTBEAT,
            retry_policy=_RETRY,
            summary=summary,
        )

    async def _wait_for_signal(self, timeout_s: float, what: str) -> bool:
        """Wait for any signal; False when the timeout passed first."""
        seen = self._signals
        try:
            await workflow.wait_condition(
                lambda: self._signals != seen, timeout=timeout_s, timeout_summary=what
            )
        except TimeoutError:
            return False
        return True

    def _registered(self) -> None:
        if self._status.condition(ConditionType.REGISTERED) is None:
            self._status.node_name = self._name
            self._status.set_condition(
                ConditionType.REGISTERED, True, "Registered", "node joined", workflow.now()
            )
            if not self._side_by_side:
                workflow.upsert_search_attributes([sa.NODE_NAME.value_set(self._name)])
            self._event("node registered")

    def _set_phase(self, phase: NodeClaimPhase, event: str) -> None:
        self._status.phase = phase
        workflow.upsert_search_attributes([sa.PHASE.value_set(phase.value)])
        self._event(event)

    def _event(self, text: str) -> None:
        self._last_event = text
        self._update_details()

    def _update_details(self) -> None:
        """Current details in the Web UI: what the claim is doing now. Never a secret."""
        status = self._status
        rows = [
            ("Phase", status.phase.value),
            ("Last step", self._last_event),
            ("Pool", self._claim.spec.node_pool),
            ("Offering", _offering_text(status)),
            ("Instance", status.instance_id or "—"),
            ("Node", status.node_name or "—"),
        ]
        node = self._node
        if node and node.exists:
            state = "Ready" if node.ready else "NotReady"
            rows.append(("Node state", f"{state}, {node.pod_count} pods"))
            if node.empty_since:
                rows.append(("Empty since", _iso(node.empty_since)))
        if status.failure_message:
            rows.append(("Failure", status.failure_message))
        table = "\n".join(f"| {key} | {value} |" for key, value in rows)
        workflow.set_current_details(f"**NodeClaim {self._name}**\n\n| | |\n|---|---|\n{table}")

    @property
    def _name(self) -> str:
        return self._claim.metadata.name

    @property
    def _namespace(self) -> str:
        return self._claim.metadata.namespace


_FINAL_PHASES = (NodeClaimPhase.DELETED, NodeClaimPhase.FAILED)
# Disruptions the pool starts itself, within its budgets.
_POOL_CHOSEN_REASONS = disruption.POOL_CHOSEN_REASONS
# Reason the claim is deleted -> the Event reason users filter on.
_DELETION_EVENTS = {
    "Empty": "ScaleDownEmpty",
    "Expired": "Expired",
    "NodeLost": "NodeLost",
    disruption.INTERRUPTED: events.INTERRUPTED,
}


def _offering_text(status: NodeClaimStatus) -> str:
    if not status.provider:
        return "—"
    price = f" at €{status.price_eur_per_hour:.4f}/h" if status.price_eur_per_hour else ""
    return f"{status.provider}/{status.region}/{status.instance_type}{price}"


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _cause(err: ActivityError) -> str:
    cause = err.cause
    return str(cause.message if isinstance(cause, ApplicationError) else cause or err)


def _error_type(err: ActivityError) -> str | None:
    return err.cause.type if isinstance(err.cause, ApplicationError) else None
