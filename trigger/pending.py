"""The pending-pod trigger: unschedulable pods → the matching pool's workflow, batched.

Stateless in every way that matters: the pool workflow keys demand by pod UID, so a restart
(which re-lists and re-sends everything) or a second replica sending the same pods changes
nothing. Pods no pool can host get a `NoMatchingNodePool` Event saying why.

Only what the operator lets this Cloudburst serve is served (cluster/tenancy.py): a
NodePool or NodeClass outside the tenant namespaces, a NodeClass whose endpoint override
is not allowed, or a tenant's NodePool with a namespaceSelector, is refused like an invalid
one (condition, Event; its pods are told why) and never reaches a workflow, so nothing reads
its Secrets or calls its endpoint. A pod is matched only to the pools that serve its
namespace — its own namespace's and the shared pools whose namespaceSelector selects it — and
its Event names only those: another tenant's pools are neither used nor shown.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s
from opentelemetry.trace import SpanKind
from pydantic import BaseModel
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from api import NodeClass, NodePool, events
from api.events import KubeEvent, ObjectRef
from api.messages import ClaimTimings
from api.nodepool.messages import (
    PARTIAL_NODE_HOLD_S,
    DemandUpdate,
    NodePoolInput,
    PoolSignal,
    PoolSpecs,
    PoolState,
    pool_workflow_id,
)
from api.planning import PodDemand
from cluster.matching import ClusterSpecs, described, judge, match
from cluster.pods import is_unschedulable, pod_fields, pod_model
from cluster.requirements import pod_demand
from cluster.tenancy import Refusal, Tenancy
from observability import metrics
from observability.events import record_event
from trigger.verdicts import SpecVerdicts
from trigger.watch import Slim, start_watches
from worker.settings import BATCH_IDLE_S, BATCH_MAX_S, PENDING_RESEND_S, Settings
from worker.telemetry import tracer
from workflows.nodepool import NodePoolWorkflow

log = logging.getLogger(__name__)

GROUP, VERSION = "cloudburst.io", "v1alpha1"
PoolKey = tuple[str, str]  # (namespace, name)
_SPEC_KINDS = frozenset({"nodepool", "nodeclass"})


class BatchWindows(BaseModel):
    """Like Karpenter's batching: send once no new pod came for `idle_s`, or `max_s` after
    the first (the defaults and why: `worker/settings.py`)."""

    idle_s: float = BATCH_IDLE_S
    max_s: float = BATCH_MAX_S
    # What the pools it starts hold back for more of a burst (NodePoolInput).
    partial_node_hold_s: float = PARTIAL_NODE_HOLD_S
    # How often a pool with waiting pods hears all of them again (`Settings`).
    resend_s: float = PENDING_RESEND_S

    @classmethod
    def of(cls, settings: Settings) -> BatchWindows:
        return cls(
            idle_s=settings.batch_idle_s,
            max_s=settings.batch_max_s,
            partial_node_hold_s=settings.partial_node_hold_s,
            resend_s=settings.pending_resend_s,
        )


@dataclass
class _Batch:
    pods: dict[str, PodDemand] = field(default_factory=dict)
    resolved: set[str] = field(default_factory=set)
    full_resync: bool = False
    first_at: float = 0.0
    last_at: float = 0.0

    # The latest news about a pod wins: pending again, or resolved.
    def add(self, demand: PodDemand) -> None:
        self.pods[demand.uid] = demand
        self.resolved.discard(demand.uid)

    def resolve(self, uid: str) -> None:
        self.pods.pop(uid, None)
        self.resolved.add(uid)


# Pods read per loop for their provisioning latency (a burst's bindings arrive together).
_BOUND_READS = 50


class PendingPodTrigger:
    def __init__(
        self,
        temporal: Client,
        api_client: k8s.ApiClient,
        *,
        task_queue: str,
        cluster_id: str,
        windows: BatchWindows | None = None,
        claim_timings: ClaimTimings | None = None,
        tenancy: Tenancy | None = None,
        pool_task_timeout: timedelta | None = None,
        claim_task_timeout: timedelta | None = None,
        observes: Callable[[str], bool] | None = None,
    ) -> None:
        self._temporal = temporal
        self._tenancy = tenancy or Tenancy()
        self._core = k8s.CoreV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._task_queue = task_queue
        self._cluster_id = cluster_id
        self._windows = windows or BatchWindows()
        self._claim_timings = claim_timings
        self._pool_task_timeout = pool_task_timeout  # None: Temporal's default
        self._claim_task_timeout = claim_task_timeout  # the same, for the pools' claims
        # Whether this trigger observes a pod's provisioning duration (by the pod's uid): every
        # trigger sees every pending pod, and one of them counts it (trigger/peers.py).
        self._observes = observes or (lambda _uid: True)
        # The cluster's NodePools and NodeClasses as the watches show them.
        self._specs_seen = ClusterSpecs()
        self._pools = self._specs_seen.pools
        self._classes = self._specs_seen.classes
        # Namespace name -> its labels, which shared pools' namespaceSelectors match.
        self._namespace_labels: dict[str, dict[str, str]] = {}
        self._pending: dict[str, PoolKey] = {}  # pod uid -> pool it was sent to
        self._pending_demand: dict[str, PodDemand] = {}  # pod uid -> what was sent
        # pod uid -> since when it waits for capacity (epoch seconds), for the latency metric
        self._pending_since: dict[str, float] = {}
        # Pods that left the watch of unbound pods while waiting: (namespace, name, pool name,
        # since). Kubernetes' watch reports a pod leaving a field selector as DELETED with its
        # object *before* the change, so whether it was bound or deleted is read afterwards.
        self._left_waiting: list[tuple[str, str, PoolKey, float]] = []
        self._batches: dict[PoolKey, _Batch] = {}
        self._unmatched: dict[str, str] = {}  # pod uid -> reason already reported
        # Every pod waiting for capacity: one no pool could host is matched again when pools
        # or classes change, one whose pool is deleted is matched to another, or to none.
        self._waiting_pods: dict[str, Any] = {}
        self._pods_synced = False
        # Which of "nodepool" and "nodeclass" have been listed: until both have, a pod that
        # matches nothing may only be waiting for the rest of the list (no Event yet).
        self._specs_listed: set[str] = set()
        # kind -> (namespace, name) -> why it is not served: invalid (field paths) or refused.
        self._invalid: dict[str, dict[PoolKey, Refusal]] = {
            "nodepool": self._specs_seen.invalid_pools,
            "nodeclass": self._specs_seen.invalid_classes,
        }
        self._verdicts = SpecVerdicts(api_client)
        # What each pool was last told of its specs: a NodePool's own status writes (and
        # every other pool's) come back as events, which are no news for a pool.
        self._specs_told: dict[PoolKey, PoolSpecs] = {}  # `observed_at` left out
        self._resent_at = time.monotonic()
        self.updates_sent = 0

    async def run(self, stop: asyncio.Event) -> None:
        queue: asyncio.Queue[tuple[str, str, Any]] = asyncio.Queue()
        halt = threading.Event()
        start_watches(
            asyncio.get_running_loop(),
            queue,
            halt,
            [
                ("namespace", self._core.list_namespace, {}, None),
                ("nodepool", self._custom.list_cluster_custom_object, _crd("nodepools"), None),
                ("nodeclass", self._custom.list_cluster_custom_object, _crd("nodeclasses"), None),
                (
                    "pod",
                    self._core.list_pod_for_all_namespaces,
                    {"field_selector": "spec.nodeName="},
                    Slim(pod_fields, pod_model),
                ),
            ],
        )
        try:
            while not stop.is_set():
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=0.1)
                    await self._apply_logged(*item)
                    while not queue.empty():
                        await self._apply_logged(*queue.get_nowait())
                except TimeoutError:
                    pass
                self._resend_due()
                await self._flush_due()
                await self._observe_bound()
        finally:
            halt.set()

    # --- what the watches show -------------------------------------------------------------

    async def _apply_logged(self, kind: str, event: str, obj: Any) -> None:
        """One bad object or a failed call must not stop the trigger: log and go on."""
        try:
            await self._apply(kind, event, obj)
        except Exception:
            log.exception("could not handle %s %s", kind, event)

    async def _apply(self, kind: str, event: str, obj: Any) -> None:
        if kind == "namespace":
            self._apply_namespace(event, obj)
        elif kind == "nodepool":
            await self._apply_spec("nodepool", self._pools, NodePool, event, obj)
        elif kind == "nodeclass":
            await self._apply_spec("nodeclass", self._classes, NodeClass, event, obj)
        elif event == "SYNC":
            self._resync_pods(obj)
        else:
            self._apply_pod(event, obj)

    async def _apply_spec(
        self,
        kind: str,
        store: dict[PoolKey, Any],
        model: type[NodePool | NodeClass],
        event: str,
        obj: Any,
    ) -> None:
        listed = obj if event == "SYNC" else [obj]
        invalid = self._invalid[kind]
        known_before = set(store) | set(invalid)
        if event == "SYNC":
            store.clear()
            invalid.clear()
            self._specs_listed.add(kind)
            self._specs_told.clear()  # after a re-list every pool hears its specs again
        plural = f"{kind}s" if kind == "nodepool" else "nodeclasses"
        for raw in listed:
            # Each object on its own: one that cannot be read never hides the others.
            try:
                key = (raw["metadata"].get("namespace", "default"), raw["metadata"]["name"])
            except (KeyError, TypeError, AttributeError):
                log.warning("a %s without a name, ignored", kind)
                continue
            store.pop(key, None)
            invalid.pop(key, None)
            if event == "DELETED":
                continue
            judged = judge(raw, model, key[0], self._tenancy)
            if isinstance(judged, Refusal):
                invalid[key] = judged
            else:
                store[key] = judged
            await self._tell_verdict(plural, key, raw)
        if kind == "nodepool":
            node_specs = self._specs_seen.node_specs
            node_specs.clear()
            node_specs.update(
                (key, self._tenancy.node_spec(key[0], pool.spec))
                for key, pool in self._pools.items()
            )
            for key in known_before:
                if self._deleted(key):
                    # Its workflow outlives it: it must forget the pods it was told of, or
                    # plan them a node of a pool that no longer exists.
                    self._batch(key).full_resync = True
        if event == "SYNC" and kind == "nodepool":
            # Pools listed after the pods: each hears its full pending set now (the pods'
            # own re-list could not reach pools not yet known).
            self._resync_all_pools()
        self._match_waiting_again()
        await self._specs_changed()

    def _match_waiting_again(self, namespaces: set[str] | None = None) -> None:
        """A pod that matched nothing may match now (a pool created after it went pending, its
        namespace labelled for a shared pool); one of a deleted pool matches another, or
        none. `namespaces`: only pods of those."""
        for uid, pod in list(self._waiting_pods.items()):
            if namespaces is not None and pod.metadata.namespace not in namespaces:
                continue
            pool = self._pending.get(uid)
            if pool is None or self._deleted(pool):
                self._apply_pod_logged("MODIFIED", pod)

    def _apply_namespace(self, event: str, obj: Any) -> None:
        """Namespace labels, for shared pools' namespaceSelectors. A change re-matches the
        waiting pods of that namespace that no pool took."""
        listed = obj if event == "SYNC" else [obj]
        before = dict(self._namespace_labels)
        if event == "SYNC":
            self._namespace_labels.clear()
        for namespace in listed:
            name = namespace.metadata.name
            if event == "DELETED":
                self._namespace_labels.pop(name, None)
            else:
                self._namespace_labels[name] = dict(namespace.metadata.labels or {})
        changed = {
            name
            for name in set(before) | set(self._namespace_labels)
            if before.get(name) != self._namespace_labels.get(name)
        }
        if changed:
            self._match_waiting_again(changed)

    async def _tell_verdict(self, plural: str, key: PoolKey, raw: dict[str, Any]) -> None:
        """Condition and Event on the object itself; failures only logged (told again on the
        next event or re-list)."""
        kind = "nodepool" if plural == "nodepools" else "nodeclass"
        refusal = self._invalid[kind].get(key)
        try:
            if refusal is None:
                await asyncio.to_thread(self._verdicts.valid, plural, raw)
            else:
                log.warning("%s %s/%s is not served: %s", kind, *key, described(refusal))
                await asyncio.to_thread(
                    self._verdicts.invalid, plural, raw, refusal.message, refusal.reason
                )
        except Exception as err:
            log.warning("could not mark %s %s/%s: %s", kind, *key, err)

    def _resync_pods(self, pods: list[Any]) -> None:
        """After a (re)list: every pool gets its full set of pending pods."""
        previously = dict(self._pending)
        self._pending.clear()
        self._pending_demand.clear()
        self._waiting_pods.clear()
        for pod in pods:
            self._apply_pod_logged("ADDED", pod)
        for uid, pool in previously.items():
            if uid not in self._pending:
                self._batch(pool).resolve(uid)
        for pool in set(self._pending.values()) | set(previously.values()):
            self._batch(pool).full_resync = True
        for uid in [uid for uid in self._pending_since if uid not in self._pending]:
            del self._pending_since[uid]
        self._pods_synced = True
        self._resync_all_pools()

    def _resync_all_pools(self) -> None:
        """Every known pool hears its full set of pending pods, none for most: a pod deleted
        while no trigger ran (a restart, a crash) must not stay pending in its pool for good,
        where it would be planned a node again once its nomination lapsed."""
        if not self._pods_synced:
            return
        self._resync(set(self._pools))

    def _resync(self, pools: set[PoolKey]) -> None:
        for key in pools:
            self._batch(key).full_resync = True
        # A full resync replaces the pool's pending set: it carries every pod still pending.
        for uid, key in self._pending.items():
            if key in pools:
                self._batch(key).add(self._pending_demand[uid])

    def _resend_due(self) -> None:
        """Level-triggered, as an informer's resync period is: every `resend_s`, each pool
        with pods still waiting hears its whole pending set again. The trigger sends a pod
        when it changes; a pod its pool never heard of (its workflow terminated by hand and
        started anew by the next demand) would otherwise wait for the trigger's next
        re-list, which a healthy watch never needs."""
        now = time.monotonic()
        if now - self._resent_at < self._windows.resend_s:
            return
        self._resent_at = now
        if self._pods_synced:
            self._resync({key for key in self._pending.values() if key in self._pools})

    def _apply_pod_logged(self, event: str, pod: Any) -> None:
        """One pod the trigger cannot read (a malformed quantity the API server let through
        before) is skipped, never the others."""
        try:
            self._apply_pod(event, pod)
        except Exception as err:
            name = f"{pod.metadata.namespace}/{pod.metadata.name}" if pod.metadata else "?"
            log.warning("pod %s skipped: %s", name, err)

    def _apply_pod(self, event: str, pod: Any) -> None:
        uid = pod.metadata.uid
        if event == "DELETED" or not is_unschedulable(pod):
            pool = self._pending.pop(uid, None)
            self._pending_demand.pop(uid, None)
            since = self._pending_since.pop(uid, None)
            self._unmatched.pop(uid, None)
            self._waiting_pods.pop(uid, None)
            if pool is not None:
                self._batch(pool).resolve(uid)
                if since is not None and self._observes(uid):
                    if pod.spec.node_name:
                        metrics.observe_pod_provisioning_bound_duration(
                            pool[0], pool[1], time.time() - since
                        )
                    elif event == "DELETED":
                        # Bound or deleted: the event's object is the pod as it was unbound.
                        key = (pod.metadata.namespace, pod.metadata.name, pool, since)
                        self._left_waiting.append(key)
            return
        demand = pod_demand(pod)
        self._waiting_pods[uid] = pod
        previous = self._pending.get(uid)
        if previous in self._pools and self._pending_demand.get(uid) == demand:
            # Still pending as its pool heard (the scheduler re-wrote why it waits, say).
            return
        pool = self._match(pod, demand)
        if previous is not None and previous != pool:
            self._batch(previous).resolve(uid)
        if pool is None:
            self._pending.pop(uid, None)
            self._pending_demand.pop(uid, None)
            return
        self._pending[uid] = pool
        self._pending_demand[uid] = demand
        self._pending_since.setdefault(uid, _unschedulable_since(pod))
        self._batch(pool).add(demand)

    def pending_pods(self) -> list[tuple[str, str, PoolKey]]:
        """The unschedulable pods this trigger sent to a pool and holds pending, as (pod
        namespace, pod name, pool): `cloudburst_pods_state`, and each pool's count. Called
        from the metrics server's thread: one C-level copy of each dict under the GIL, so the
        loop's changes are never half-seen (a pod dropped between the two copies is left out).
        """
        pending = list(self._pending.items())
        demands = dict(self._pending_demand)
        return [
            (demand.namespace, demand.name, pool)
            for uid, pool in pending
            if (demand := demands.get(uid)) is not None
        ]

    async def _observe_bound(self) -> None:
        """The provisioning latency of the pods that left the unbound pods' watch bound: from
        when the scheduler found no room to when it bound them (their PodScheduled
        condition's times), read from the pod (a deleted one counts for nothing)."""
        left, self._left_waiting = (
            self._left_waiting[:_BOUND_READS],
            self._left_waiting[_BOUND_READS:],
        )
        for namespace, name, pool, since in left:
            try:
                pod = await asyncio.to_thread(self._core.read_namespaced_pod, name, namespace)
            except Exception as err:  # gone, or unreadable: no observation
                log.debug("pod %s/%s not read for its latency: %s", namespace, name, err)
                continue
            if pod.spec and pod.spec.node_name:
                metrics.observe_pod_provisioning_bound_duration(
                    pool[0], pool[1], _scheduled_at(pod) - since
                )

    def _match(self, pod: Any, demand: PodDemand) -> PoolKey | None:
        """The pool that takes the pod (`cluster/matching.py`), else None + an Event naming
        only the pools that serve the pod's namespace."""
        namespace = demand.namespace
        found = match(
            demand, self._specs_seen, self._tenancy, self._namespace_labels.get(namespace)
        )
        if found.chosen is not None:
            self._unmatched.pop(demand.uid, None)
            return found.chosen
        reason = found.reason(namespace, self._tenancy.worker_namespace)
        if self._unmatched.get(demand.uid) != reason and self._specs_listed >= _SPEC_KINDS:
            self._unmatched[demand.uid] = reason
            self._warn_unmatched(pod, reason)
        return None

    def _warn_unmatched(self, pod: Any, reason: str) -> None:
        event = KubeEvent(
            regarding=ObjectRef(
                kind="Pod",
                name=pod.metadata.name,
                namespace=pod.metadata.namespace,
                uid=pod.metadata.uid,
            ),
            reason=events.NO_MATCHING_NODEPOOL,
            message=f"No NodePool can host this pod: {reason}",
            type="Warning",
        )
        try:
            record_event(self._core, event)
        except Exception as err:  # an Event is a courtesy; never stop the trigger for one
            log.warning("could not record %s: %s", event.reason, err)

    # --- sending -----------------------------------------------------------------------------

    def _batch(self, pool: PoolKey) -> _Batch:
        now = time.monotonic()
        batch = self._batches.get(pool)
        if batch is None:
            batch = self._batches[pool] = _Batch(first_at=now)
        batch.last_at = now
        return batch

    async def _flush_due(self) -> None:
        now = time.monotonic()
        for pool, batch in list(self._batches.items()):
            idle = now - batch.last_at >= self._windows.idle_s
            overdue = now - batch.first_at >= self._windows.max_s
            if idle or overdue:
                del self._batches[pool]
                if not await self._send(pool, batch):
                    # Keep it for the next round; a newer batch may have started meanwhile.
                    self._merge_back(pool, batch)

    def _merge_back(self, pool: PoolKey, failed: _Batch) -> None:
        batch = self._batch(pool)
        # The failed batch is older than anything that arrived since: it only fills gaps.
        for uid, demand in failed.pods.items():
            if uid not in batch.pods and uid not in batch.resolved:
                batch.add(demand)
        for uid in failed.resolved:
            if uid not in batch.pods:
                batch.resolved.add(uid)
        batch.full_resync = batch.full_resync or failed.full_resync

    def _deleted(self, key: PoolKey) -> bool:
        """The NodePool is gone (not merely invalid: an invalid one keeps its pods)."""
        return key not in self._pools and key not in self._invalid["nodepool"]

    async def _send(self, key: PoolKey, batch: _Batch) -> bool:
        specs = self._specs(key)
        deleted = self._deleted(key)
        if specs is None and not deleted:
            return True  # invalid, or its class is missing: no pod is matched to it meanwhile
        update = DemandUpdate(
            pool_deleted=deleted,
            pods=[] if deleted else list(batch.pods.values()),
            resolved=sorted(batch.resolved),
            full_resync=batch.full_resync,
            sent_at=datetime.now(UTC),
            specs=specs,
        )
        # The root of the trace that follows this demand into the pool's workflow, the
        # claims it starts and their activities (the Temporal client propagates it).
        span = tracer().start_as_current_span(
            "TriggerDemand",
            kind=SpanKind.PRODUCER,
            attributes={
                "cloudburst.nodepool": f"{key[0]}/{key[1]}",
                "cloudburst.pending_pods": len(update.pods),
                "cloudburst.resolved_pods": len(update.resolved),
            },
        )
        try:
            with span:
                if specs is not None and (update.pods or not update.full_resync):
                    await self._start_or_signal(key, specs, update)
                else:
                    await self._signal_if_running(key, update)
        except Exception as err:  # kept and sent again with the next batch
            log.warning("demand for pool %s/%s not delivered: %s", *key, err)
            return False
        self.updates_sent += 1
        log.info(
            "pool %s/%s: %d pending pods, %d resolved", *key, len(update.pods), len(update.resolved)
        )
        return True

    async def _signal_if_running(self, key: PoolKey, update: DemandUpdate) -> None:
        """Nothing pending for a pool (or the pool deleted): tell it if it runs, never start
        it for that."""
        handle = self._temporal.get_workflow_handle(pool_workflow_id(*key))
        try:
            await handle.signal(PoolSignal.DEMAND, update)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise

    async def _start_or_signal(self, key: PoolKey, specs: PoolSpecs, update: DemandUpdate) -> None:
        namespace, name = key
        timings = self._claim_timings or ClaimTimings(
            registration_timeout_s=specs.node_class.join.registration_timeout_seconds
        )
        await self._temporal.start_workflow(
            NodePoolWorkflow.run,
            NodePoolInput(
                namespace=namespace,
                name=name,
                cluster_id=self._cluster_id,
                claim_timings=timings,
                partial_node_hold_s=self._windows.partial_node_hold_s,
                claim_task_timeout_s=(
                    None
                    if self._claim_task_timeout is None
                    else self._claim_task_timeout.total_seconds()
                ),
                state=PoolState(specs=specs),
            ),
            id=pool_workflow_id(namespace, name),
            task_queue=self._task_queue,
            # Its later runs keep it: continue-as-new inherits the run's task timeout.
            task_timeout=self._pool_task_timeout,
            # One workflow per pool: a start for a running pool just delivers the signal.
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal=PoolSignal.DEMAND,
            start_signal_args=[update],
            static_summary=f"NodePool {namespace}/{name}",
        )

    async def _specs_changed(self) -> None:
        """Pools hear about spec changes; a pool with a minNodes floor is started."""
        for key, pool in list(self._pools.items()):  # it awaits: a snapshot
            specs = self._specs(key)
            if specs is None:
                continue
            told = specs.model_copy(update={"observed_at": None})
            if self._specs_told.get(key) == told:
                continue
            if pool.spec.limits.min_nodes > 0:
                try:
                    await self._start_or_signal(key, specs, DemandUpdate(specs=specs))
                except Exception as err:  # retried on the next spec event or re-list
                    log.warning("starting pool %s/%s failed: %s", *key, err)
                    continue
                self._specs_told[key] = told
                continue
            handle = self._temporal.get_workflow_handle(pool_workflow_id(*key))
            try:
                await handle.signal(PoolSignal.UPDATE_SPECS, specs)
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    log.warning("spec update for pool %s/%s failed: %s", *key, err)
                    continue
            self._specs_told[key] = told

    def _specs(self, key: PoolKey) -> PoolSpecs | None:
        pool = self._pools.get(key)
        class_key = self._specs_seen.node_class_of(key)
        if pool is None or class_key is None:
            return None
        node_class = self._classes[class_key]
        return PoolSpecs(
            pool=self._specs_seen.node_specs[key],
            node_class_name=class_key[1],
            node_class=node_class.spec,
            pool_generation=pool.metadata.generation or 0,
            class_generation=node_class.metadata.generation or 0,
            pool_uid=pool.metadata.uid or "",
            class_uid=node_class.metadata.uid or "",
            observed_at=datetime.now(UTC),
        )


def _unschedulable_since(pod: Any) -> float:
    """When the scheduler found no room (its condition's time), else now (epoch seconds)."""
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "PodScheduled" and condition.last_transition_time is not None:
            return float(condition.last_transition_time.timestamp())
    return time.time()


def _scheduled_at(pod: Any) -> float:
    """When the pod was bound (its PodScheduled=True condition's time), else now."""
    for condition in (pod.status.conditions if pod.status else None) or []:
        if (
            condition.type == "PodScheduled"
            and condition.status == "True"
            and condition.last_transition_time is not None
        ):
            return float(condition.last_transition_time.timestamp())
    return time.time()


def _crd(plural: str) -> dict[str, Any]:
    return {"group": GROUP, "version": VERSION, "plural": plural}
