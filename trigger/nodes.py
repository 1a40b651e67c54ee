"""The node watcher: claim-owned Nodes and the pods on them → `observe_node` signals to each
claim, and `workload_left` to its pool when pods leave a node that still runs some (news for
consolidation, which otherwise looks only on its periodic safety net). While a node is new
(on its way, or Ready for less than `USAGE_WINDOW_S`) the scheduler fills it with whatever is
pending, not only the pods the pool nominated there: its pool hears what the pods bound to
it request (`node_usage`, at most every `USAGE_EVERY_S`), so that it plans into the room
really left and plans again at once the pods that were left out.

It holds no state that matters. On start (and after any watch error) it re-lists and re-sends
every claim's current observation; the workflow treats repeats as no-ops, so a restart, a
second replica or a lost signal costs nothing. A node deleted while no watcher ran has no
DELETED event to send: a NodeClaim resource that says Ready with no Node in the list is
looked up once more (a direct read, so a list older than the claim cannot mislead it) and its
claim told the node is gone, instead of learning it at its next slow poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from api import labels
from api.messages import ClaimSignal, NodeObservation, ScaleDownRequest, claim_workflow_id
from api.nodepool.messages import NodeUsage, pool_workflow_id
from api.planning import Resources
from cluster.interruption import interruption_notice
from cluster.pods import bound_pod_fields, is_do_not_disrupt, is_left_alone, pod_model
from cluster.requirements import pod_demand
from trigger.peers import TriggerPeers
from trigger.watch import Slim, start_watches
from workflows.nodepool import NodePoolWorkflow

log = logging.getLogger(__name__)

# A node is "new" this long after it became Ready (more than the pool's nomination grace):
# its pool hears what is bound to it. After that the scheduler has had its turn, and pods
# coming and going on a node are no news for the pool's planning.
USAGE_WINDOW_S = 30.0
# How often at most a pool hears about its new nodes.
USAGE_EVERY_S = 0.25


ClaimKey = tuple[str, str]  # (namespace, name) of a NodeClaim


@dataclass
class _NodeView:
    claim: ClaimKey
    ready: bool
    not_ready_since: datetime | None
    ready_since: datetime | None = None
    interruption: str | None = None
    # What the kubelet reports: the claim records it, without a read of its own.
    capacity: dict[str, str] = field(default_factory=dict)
    # spec.providerID: the claim trusts the node only when it names the claim's VM.
    provider_id: str | None = None


@dataclass(frozen=True)
class _PodView:
    workload: bool  # not DaemonSet, mirror or finished: it keeps the node busy
    do_not_disrupt: str | None  # "namespace/name" when annotated do-not-disrupt
    requests: Resources = field(default_factory=Resources)  # a workload pod's


@dataclass
class _ClusterView:
    """What the watches have shown so far: claim nodes and the workload pods per node."""

    nodes: dict[str, _NodeView] = field(default_factory=dict)
    # node name -> pod uid -> what the pod means for disruption
    pods: dict[str, dict[str, _PodView]] = field(default_factory=dict)
    pod_nodes: dict[str, str] = field(default_factory=dict)


_SHARE = "share"  # a queue item: the running triggers changed
# What a claim was last told of its node: exists, ready, empty, do-not-disrupt pods,
# interruption, providerID.
_Sent = tuple[bool, bool, bool, tuple[str, ...], str | None, str | None]
_GONE: _Sent = (False, False, True, (), None, None)


class NodeWatcher:
    def __init__(
        self, temporal: Client, api_client: k8s.ApiClient, peers: TriggerPeers | None = None
    ) -> None:
        self._temporal = temporal
        self._core = k8s.CoreV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._view = _ClusterView()
        # Per node: the last (exists, ready, empty) sent and when the node became empty.
        # node -> (exists, ready, empty, do-not-disrupt pods) last sent: a change is a transition
        self._sent: dict[str, _Sent] = {}
        # node -> the claim it was last seen labelled for: told when the node goes.
        self._node_claims: dict[str, ClaimKey] = {}
        self._empty_since: dict[str, datetime] = {}
        # NodeClaim resource (namespace, name) -> its uid and status.phase, and its pool's
        # (namespace, name): a claim's namespace is its pool's.
        self._claim_phases: dict[ClaimKey, tuple[str, str]] = {}
        self._claim_pools: dict[ClaimKey, tuple[str, str]] = {}
        # node -> workload pods last counted: fewer is news for the pool's consolidation.
        self._workload: dict[str, int] = {}
        self._nodes_listed = False
        # Read directly and found since the last Node list (not looked up again until then).
        self._found_by_reading: set[str] = set()
        # New nodes whose pods changed, and pods bound to them, not yet told to their pools.
        self._usage_changed: set[str] = set()
        self._newly_bound: dict[str, list[str]] = {}  # node -> pod UIDs
        self._usage_told_at = 0.0  # loop time
        self._usage_told: dict[str, Resources] = {}  # node -> what its pool was last told
        # Other triggers beside this one (trigger/peers.py): each tells the claims and pools
        # about its share of the nodes (by name). None: this trigger tells about every node.
        self._peers = peers
        if peers is not None:
            peers.on_change(self._share_anew)
        self._queue: asyncio.Queue[tuple[str, str, Any]] = asyncio.Queue()
        self.signals_sent = 0

    async def run(self, stop: asyncio.Event) -> None:
        queue = self._queue
        halt = threading.Event()
        start_watches(
            asyncio.get_running_loop(),
            queue,
            halt,
            [
                ("node", self._core.list_node, {"label_selector": labels.NODECLAIM}, None),
                (
                    "pod",
                    self._core.list_pod_for_all_namespaces,
                    {"field_selector": "spec.nodeName!="},
                    Slim(bound_pod_fields, pod_model),
                ),
                (
                    "nodeclaim",
                    self._custom.list_cluster_custom_object,
                    {"group": "cloudburst.io", "version": "v1alpha1", "plural": "nodeclaims"},
                    None,
                ),
            ],
        )
        stopper = asyncio.ensure_future(stop.wait())
        loop = asyncio.get_running_loop()
        try:
            while not stop.is_set():
                getter = asyncio.ensure_future(queue.get())
                due = self._usage_told_at + USAGE_EVERY_S - loop.time()
                await asyncio.wait(
                    {getter, stopper},
                    timeout=max(due, 0.0) if self._usage_changed else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if stop.is_set():
                    getter.cancel()
                    break
                if not getter.done():
                    getter.cancel()
                    await self._tell_usage()
                    continue
                items = [getter.result()]
                # Drain whatever else arrived, then signal once per touched node.
                while not queue.empty():
                    items.append(queue.get_nowait())
                touched: set[str] = set()
                for kind, event, obj in items:
                    if kind == "nodeclaim":
                        self._note_claim_phases(event, obj)
                        await self._claim_resource(event, obj)
                    elif kind == _SHARE:
                        touched |= self._take_new_share()
                    else:
                        touched |= self._apply(kind, event, obj)
                await self._signal(touched)
                self._usage_changed |= {n for n in touched if self._is_new(n)}
                if self._usage_changed and loop.time() >= self._usage_told_at + USAGE_EVERY_S:
                    await self._tell_usage()
                await self._tell_nodes_gone_unseen()
        finally:
            halt.set()
            stopper.cancel()

    def _share_anew(self) -> None:
        self._queue.put_nowait((_SHARE, "CHANGED", None))

    def _take_new_share(self) -> set[str]:
        """The running triggers changed: every node of this trigger's new share is told
        about again (what was sent, or left to another, is forgotten)."""
        self._sent.clear()
        self._usage_told.clear()
        return set(self._view.nodes)

    def _mine(self, node: str) -> bool:
        return self._peers is None or self._peers.mine(node)

    async def _claim_resource(self, event: str, obj: Any) -> None:
        """`kubectl delete nodeclaim X` sets a deletion timestamp (our finalizer holds the
        resource): ask the claim's workflow to scale down, which removes the finalizer last.
        The workflow is the one of that namespace and name, so deleting a NodeClaim reaches
        only the claim of the namespace it was deleted in."""
        for claim in obj if event == "SYNC" else [obj]:
            metadata = claim.get("metadata", {})
            if event == "DELETED" or not metadata.get("deletionTimestamp"):
                continue
            phase = claim.get("status", {}).get("phase")
            if phase in ("Deleting", "Deleted", "Failed"):
                continue
            key = _claim_key(metadata)
            if key is None:
                continue
            handle = self._temporal.get_workflow_handle(claim_workflow_id(*key))
            try:
                await handle.signal(
                    ClaimSignal.SCALE_DOWN,
                    ScaleDownRequest(
                        reason="NodeClaim deleted",
                        requested_by="kubectl",
                        resource_uid=str(metadata.get("uid") or "") or None,
                    ),
                )
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    # No live workflow will ever release it: let the resource go.
                    await asyncio.to_thread(self._release, metadata)
                else:
                    log.warning("scale-down of %s/%s failed: %s", *key, err)

    def _note_claim_phases(self, event: str, obj: Any) -> None:
        if event == "SYNC":
            self._claim_phases.clear()
            self._claim_pools.clear()
        for claim in obj if event == "SYNC" else [obj]:
            metadata = claim.get("metadata") or {}
            key = _claim_key(metadata)
            if key is None:
                continue
            uid = str(metadata.get("uid") or "")
            if event == "DELETED":
                # An older object's deletion never forgets the one now under its name.
                if self._claim_phases.get(key, (uid, ""))[0] == uid:
                    self._claim_phases.pop(key, None)
                    self._claim_pools.pop(key, None)
                continue
            self._claim_phases[key] = (uid, str((claim.get("status") or {}).get("phase") or ""))
            pool = (claim.get("spec") or {}).get("nodePool")
            if pool:
                self._claim_pools[key] = (key[0], str(pool))

    async def _tell_nodes_gone_unseen(self) -> None:
        """Ready claims whose Node the list does not have, confirmed by a direct read."""
        if not self._nodes_listed:
            return
        for key, (_uid, phase) in sorted(self._claim_phases.items()):
            name = key[1]  # its node's name
            node = self._view.nodes.get(name)
            if phase != "Ready" or (node is not None and node.claim == key):
                continue
            if name in self._found_by_reading:
                continue
            if not self._mine(name):
                continue  # another trigger's to look up and tell
            if name in self._sent and not self._sent[name][0]:
                continue  # already told
            try:
                read = await asyncio.to_thread(self._core.read_node, name)
            except k8s.ApiException as err:
                if err.status != 404:
                    log.warning("could not look up node %s: %s", name, err.reason)
                    continue
                read = None
            found = _node_view(read) if read is not None else None
            if found is not None and found.claim == key:
                self._found_by_reading.add(name)  # it exists: its watch event is on its way
                continue
            observation = NodeObservation(
                node_name=name, exists=False, observed_at=datetime.now(UTC)
            )
            if await self._send(key, observation):
                self._sent[name] = _GONE

    def _release(self, metadata: dict[str, Any]) -> None:
        finalizers = [
            f for f in metadata.get("finalizers", []) if f != labels.TERMINATION_FINALIZER
        ]
        with contextlib.suppress(k8s.ApiException):
            self._custom.patch_namespaced_custom_object(
                "cloudburst.io",
                "v1alpha1",
                metadata.get("namespace", "default"),
                "nodeclaims",
                metadata["name"],
                {"metadata": {"finalizers": finalizers}},
            )

    def _apply(self, kind: str, event: str, obj: Any) -> set[str]:
        view = self._view
        if kind == "node":
            if event == "SYNC":
                listed = {n.metadata.name: _node_view(n) for n in obj}
                self._nodes_listed = True
                self._found_by_reading.clear()
                touched = set(view.nodes) | set(listed)
                view.nodes = {k: v for k, v in listed.items() if v is not None}
                # `_sent` is kept: a signal Temporal accepted is durable, so only what changed
                # while the watch was down is sent (and a node gone meanwhile is still told).
                return touched
            name = obj.metadata.name
            node = _node_view(obj)
            if event == "DELETED" or node is None:
                view.nodes.pop(name, None)
            else:
                view.nodes[name] = node
            return {name}
        if event == "SYNC":
            touched = set(view.pods)
            view.pods.clear()
            view.pod_nodes.clear()
            for pod in obj:
                self._put_pod(pod)
            return touched | set(view.pods)
        uid = obj.metadata.uid
        old_node = view.pod_nodes.pop(uid, None)
        if old_node:
            view.pods.get(old_node, {}).pop(uid, None)
        if event != "DELETED":
            self._put_pod(obj)
            node = obj.spec.node_name
            if node and node != old_node and node in view.nodes:
                self._newly_bound.setdefault(node, []).append(uid)
        return {n for n in (old_node, obj.spec.node_name) if n}

    def _put_pod(self, pod: Any) -> None:
        node = pod.spec.node_name
        if not node:
            return
        protected = is_do_not_disrupt(pod)
        workload = not is_left_alone(pod)
        self._view.pods.setdefault(node, {})[pod.metadata.uid] = _PodView(
            workload=workload,
            do_not_disrupt=f"{pod.metadata.namespace}/{pod.metadata.name}" if protected else None,
            # DaemonSet pods are in the allocatable the pool plans with already.
            requests=pod_demand(pod).requests if workload else Resources(),
        )
        self._view.pod_nodes[pod.metadata.uid] = node

    async def _signal(self, touched: set[str]) -> None:
        now = datetime.now(UTC)
        for name in sorted(touched):
            node = self._view.nodes.get(name)
            if node is None:
                self._workload.pop(name, None)
                claim = self._node_claims.pop(name, None)
                if claim is not None and name in self._sent and self._sent[name][0]:
                    await self._send(
                        claim, NodeObservation(node_name=name, exists=False, observed_at=now)
                    )
                    self._sent[name] = _GONE
                self._empty_since.pop(name, None)
                continue
            pods = self._view.pods.get(name, {}).values()
            workload = sum(1 for p in pods if p.workload)
            if 0 < workload < self._workload.get(name, 0) and self._mine(name):
                await self._tell_pool_workload_left(node.claim)
            self._workload[name] = workload
            protected = tuple(sorted(p.do_not_disrupt for p in pods if p.do_not_disrupt))
            empty = workload == 0
            if empty:
                self._empty_since.setdefault(name, now)
            else:
                self._empty_since.pop(name, None)
            self._node_claims[name] = node.claim
            key = (True, node.ready, empty, protected, node.interruption, node.provider_id)
            if self._sent.get(name) == key:
                continue
            observation = NodeObservation(
                node_name=name,
                exists=True,
                ready=node.ready,
                not_ready_since=node.not_ready_since,
                empty_since=self._empty_since.get(name),
                pod_count=workload,
                do_not_disrupt=list(protected),
                observed_at=now,
                interruption=node.interruption,
                capacity=node.capacity,
                provider_id=node.provider_id,
            )
            if await self._send(node.claim, observation):
                self._sent[name] = key

    def _is_new(self, name: str) -> bool:
        node = self._view.nodes.get(name)
        if node is None:
            return False
        if not node.ready:
            return True  # on its way: the scheduler may bind to it as soon as it is Ready
        if node.ready_since is None:
            return False
        return (datetime.now(UTC) - node.ready_since).total_seconds() < USAGE_WINDOW_S

    async def _tell_usage(self) -> None:
        """Each pool hears what the pods bound to its new nodes request. Best effort: a
        lost report costs a pod the nominations' grace, as before there were any."""
        self._usage_told_at = asyncio.get_running_loop().time()
        by_pool: dict[tuple[str, str], NodeUsage] = {}
        telling: dict[tuple[str, str], dict[str, Resources]] = {}  # pool -> node -> requested
        unclaimed: set[str] = set()
        for name in sorted(self._usage_changed):
            node = self._view.nodes.get(name)
            if node is None or not self._mine(name):
                continue
            pool = self._claim_pools.get(node.claim)
            if pool is None:
                if node.claim and node.ready and self._is_new(name):
                    # Its NodeClaim is not listed yet (a restarted watcher lists the kinds
                    # in any order): told once it is, while the node is new (a node not
                    # Ready holds no pods; its turning Ready is news again).
                    unclaimed.add(name)
                continue
            on_node = self._view.pods.get(name, {})
            requested = sum((p.requests for p in on_node.values()), Resources())
            newly_bound = self._newly_bound.get(name)
            if requested == self._usage_told.get(name, Resources()) and not newly_bound:
                continue  # nothing new (a node that took no pod yet is not news either)
            usage = by_pool.setdefault(pool, NodeUsage(observed_at=datetime.now(UTC)))
            usage.requested[node.claim[1]] = requested
            # Every pod on the node, not only those bound since the last report: after a
            # re-list (a restarted trigger) none is newly bound, and a pod its pool still
            # holds as pending would count twice there (in `requested` and as nominated to
            # the node), so the pool would plan it a second node.
            usage.bound += list(on_node)
            telling.setdefault(pool, {})[name] = requested
        self._usage_changed = unclaimed
        self._newly_bound.clear()
        self._usage_told = {n: r for n, r in self._usage_told.items() if n in self._view.nodes}
        for pool, usage in by_pool.items():
            if await self._tell_pool(pool, NodePoolWorkflow.node_usage, usage, "its nodes' usage"):
                self._usage_told.update(telling[pool])

    async def _tell_pool_workload_left(self, claim: ClaimKey) -> None:
        """Pods left a node that still runs some: the pool may consolidate it (an empty node
        is its claim's business). Best effort: the pool's periodic look covers a lost one."""
        pool = self._claim_pools.get(claim)
        if pool is not None:
            name = claim[1]
            await self._tell_pool(pool, NodePoolWorkflow.workload_left, name, f"pods left {name}")

    async def _tell_pool(
        self,
        pool: tuple[str, str],
        signal: Callable[[NodePoolWorkflow, Any], None],
        arg: Any,
        what: str,
    ) -> bool:
        """Signal a pool's workflow; False (logged) when it could not be told. A pool that
        does not run has nothing to be told: that counts as told."""
        handle = self._temporal.get_workflow_handle_for(
            NodePoolWorkflow.run, pool_workflow_id(*pool)
        )
        try:
            await handle.signal(signal, arg)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                log.warning("could not tell pool %s/%s %s: %s", *pool, what, err)
                return False
        return True

    async def _send(self, claim: ClaimKey, observation: NodeObservation) -> bool:
        """Tell the claim about its node (named as the claim), if the node is in this
        trigger's share; True once told, or when it is another trigger's to tell."""
        if not self._mine(observation.node_name):
            return True
        handle = self._temporal.get_workflow_handle(claim_workflow_id(*claim))
        try:
            await handle.signal(ClaimSignal.OBSERVE_NODE, observation)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return True  # the claim's workflow is closed: nothing to tell it
            log.warning("signal to %s/%s failed: %s", *claim, err)
            return False
        self.signals_sent += 1
        log.info(
            "claim %s/%s: node exists=%s ready=%s pods=%d",
            *claim,
            observation.exists,
            observation.ready,
            observation.pod_count,
        )
        return True


def _claim_key(metadata: dict[str, Any]) -> ClaimKey | None:
    """(namespace, name) of a NodeClaim resource's metadata; None without a name."""
    name = metadata.get("name")
    if not name:
        return None
    return str(metadata.get("namespace") or "default"), str(name)


def _node_view(node: Any) -> _NodeView | None:
    """A Node as the watcher tells its claim about it; None unless it is labelled as the node
    of the claim it is named after (a node name is its claim's name) and that claim's
    namespace. Whether it is really that claim's VM is the claim's to judge (providerID)."""
    node_labels = node.metadata.labels or {}
    claim = node_labels.get(labels.NODECLAIM)
    namespace = node_labels.get(labels.NODEPOOL_NAMESPACE)
    if not claim or not namespace or claim != node.metadata.name:
        return None
    conditions = (node.status.conditions if node.status else None) or []
    ready = next((c for c in conditions if c.type == "Ready"), None)
    is_ready = ready is not None and ready.status == "True"
    since = None if is_ready or ready is None else ready.last_transition_time
    return _NodeView(
        claim=(namespace, claim),
        ready=is_ready,
        not_ready_since=since,
        ready_since=ready.last_transition_time if is_ready and ready else None,
        interruption=interruption_notice(node),
        capacity=dict((node.status.capacity if node.status else None) or {}),
        provider_id=(node.spec.provider_id if node.spec else None) or None,
    )
