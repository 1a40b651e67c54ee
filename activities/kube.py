"""Cluster operations on a claim's node, through the `kubernetes` client (and, once the node
has joined, the release of its VM's first-boot material through the claim's provider).

Every activity here is sync (the client blocks; the worker runs it in its thread pool) and
idempotent: a retry after a crash finds the world half-changed and finishes the job.

A Node is the claim's only if its providerID names the claim's VM
(`cluster/node_identity.py`): a Node of the claim's name that is not is never labelled,
cordoned, drained or deleted here — it is treated as no node at all, and logged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.claim_authority import ClaimAuthority, own_claim
from activities.claim_provider import release_first_boot
from activities.heartbeat import (
    heartbeating,
    heartbeats_itself,
    raise_if_cancelled,
    sleep_heartbeating,
)
from api import labels
from api.errors import KUBE_CONFLICT, NODE_NOT_FOUND
from api.messages import DrainInput, DrainResult, LabelNodeInput, NodeRef, NodeState
from cluster.interruption import interruption_notice
from cluster.node_identity import is_claims_node, stranger_message
from cluster.pods import is_do_not_disrupt, is_left_alone
from cluster.responses import discard
from cluster.tenancy import Tenancy

log = logging.getLogger(__name__)

STRATEGIC_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
# The taint a new node registers with (see activities/bootstrap.sh.tmpl) until its claim has
# synced its labels; `label_node` lifts it.
STARTUP_TAINT = labels.STARTUP_TAINT
_CONFLICT_RETRIES = 5
# kube-scheduler binds a pod after its scheduling cycle, asynchronously, on the snapshot it
# took before: a pod placed on a node just before the scheduler saw its cordon is bound a
# moment after it. The look that decides "still empty" waits that moment out, or the node is
# deleted under a pod that has just arrived (and the pod garbage collector then deletes it).
BINDS_IN_FLIGHT_S = 2.0


def is_not_found(err: ApiException) -> bool:
    return err.status == 404


def _pod_name(pod: Any) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


def _node_not_found(name: str) -> ApplicationError:
    return ApplicationError(f"node {name} not found", type=NODE_NOT_FOUND, non_retryable=True)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Two patches as one: their top-level sections (metadata, spec) merged."""
    merged = {key: dict(value) for key, value in base.items()}
    for key, value in extra.items():
        merged.setdefault(key, {}).update(value)
    return merged


def _is_terminating(pod: client.V1Pod) -> bool:
    return bool(pod.metadata and pod.metadata.deletion_timestamp)


def _pod_key(pod: client.V1Pod) -> str:
    meta = pod.metadata
    assert meta is not None
    return meta.uid or f"{meta.namespace}/{meta.name}"


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class KubeActivities:
    """Activities on Nodes and their pods. One instance per worker; thread-safe."""

    def __init__(self, api_client: client.ApiClient, tenancy: Tenancy) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self._tenancy = tenancy
        self._authority = ClaimAuthority(api_client, tenancy)

    def activities(self) -> list[Callable[..., Any]]:
        return [
            self.label_node,
            self.cordon_node,
            self.cordon_and_look,
            self.uncordon_node,
            self.drain_node,
            self.delete_node,
            self.get_node_state,
        ]

    # --- helpers ----------------------------------------------------------------------------

    def _read_node(self, name: str) -> client.V1Node | None:
        try:
            return self.core.read_node(name)
        except ApiException as err:
            if is_not_found(err):
                return None
            raise

    def _read_claims_node(self, name: str, instance_id: str | None) -> client.V1Node | None:
        """The Node `name` if it is the VM `instance_id` of the claim the activity runs for;
        None if it is not there, or is another machine's, or another namespace's claim's
        (logged). Refused unless the activity runs for claim `name`'s own workflow."""
        namespace, _ = own_claim(name)
        node = self._read_node(name)
        if node is None:
            return None
        provider_id = node.spec.provider_id if node.spec else None
        if not is_claims_node(provider_id, instance_id):
            log.warning("%s", stranger_message(name, provider_id, instance_id))
            return None
        marked = ((node.metadata.labels if node.metadata else None) or {}).get(
            labels.NODEPOOL_NAMESPACE
        )
        if marked is not None and marked != namespace:
            log.warning("Node %s is namespace %s's claim's, not %s's", name, marked, namespace)
            return None
        return node

    def _pods_on(self, node_name: str) -> list[client.V1Pod]:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node_name}")
        return list(pods.items or [])

    # --- activities -------------------------------------------------------------------------

    @activity.defn(name="label_node")
    def label_node(self, input: LabelNodeInput) -> None:
        """Merge `input.labels` into the node's labels, make sure it has the claim's taints,
        and lift the startup taint.

        The first-boot script registers the node with `STARTUP_TAINT` (NoSchedule:
        `registration_taints` says why not NoExecute) so nothing is scheduled there before its
        labels are synced; once they are, the taint goes, in the same patch (Karpenter does the
        same with its unregistered taint). It is lifted whatever its effect (an earlier
        release's script registered it NoExecute). A kubelet registers its
        own taints, so a claim taint it left out (a tenant's, which keeps other namespaces'
        pods away) is put back here. Other labels and taints are kept; running it again
        changes nothing.

        What it applies is what the cluster authorises (`activities/claim_authority.py`): the
        NodeClaim's labels and taints, a tenant's marks those of the claim's own namespace;
        a label or taint asked beyond them refuses the whole call, and nothing is applied.

        Labelled, the node has joined: first-boot material its provider keeps outside the VM
        (Proxmox's seed ISO) is released then, best effort (`release_first_boot`).
        """
        if input.namespace is None:
            raise self._authority.refused(
                f"labelling node {input.node_name} was asked without its claim's namespace"
            )
        warrant = self._authority.warrant(input.namespace, input.node_name, input.claim_uid)
        wanted_labels, wanted_taints = warrant.node_marks(input.labels, input.taints)

        def patch(node: client.V1Node) -> dict[str, Any]:
            taints = list((node.spec.taints if node.spec else None) or [])
            kept = [t for t in taints if t.key != STARTUP_TAINT]
            present = {(t.key, t.effect) for t in kept}
            missing = [
                client.V1Taint(key=t.key, value=t.value, effect=t.effect)
                for t in wanted_taints
                if (t.key, t.effect) not in present and t.key != STARTUP_TAINT
            ]
            body: dict[str, Any] = {"metadata": {"labels": wanted_labels}}
            if len(kept) != len(taints) or missing:
                body = _merge(body, self._taints_patch(node, [*kept, *missing]))
            return body

        self._patch_node(input.node_name, input.instance_id, "labelling", patch, missing_ok=False)
        # The claim's VM has booted and its node joined: what its first boot read outside the
        # VM (Proxmox's seed ISO, holding the join script) is no longer needed.
        release_first_boot(self.core, self._tenancy, warrant, input.instance_id)

    @activity.defn(name="cordon_node")
    def cordon_node(self, input: NodeRef) -> None:
        """Taint the node `cloudburst.io/disrupted:NoSchedule` and mark it unschedulable."""

        def patch(node: client.V1Node) -> dict[str, Any] | None:
            spec = node.spec or client.V1NodeSpec()
            taints = list(spec.taints or [])
            tainted = any(
                t.key == labels.DISRUPTED_TAINT and t.effect == "NoSchedule" for t in taints
            )
            if tainted and spec.unschedulable:
                return None
            body: dict[str, Any] = {"spec": {"unschedulable": True}}
            if not tainted:
                disrupted = client.V1Taint(key=labels.DISRUPTED_TAINT, effect="NoSchedule")
                body = _merge(body, self._taints_patch(node, [*taints, disrupted]))
            return body

        self._patch_node(input.node_name, input.instance_id, "cordoning", patch, missing_ok=True)

    @activity.defn(name="cordon_and_look")
    def cordon_and_look(self, input: NodeRef) -> NodeState:
        """Cordon, let binds already under way land, then look at the node again: one call for
        the check Karpenter makes after tainting a node it means to take away (pods bound
        meanwhile keep it)."""
        self.cordon_node(input)
        sleep_heartbeating(BINDS_IN_FLIGHT_S)
        return self.get_node_state(input)

    @activity.defn(name="uncordon_node")
    def uncordon_node(self, input: NodeRef) -> None:
        """Undo `cordon_node`: a scale-down found pods on a node it thought empty."""

        def patch(node: client.V1Node) -> dict[str, Any] | None:
            spec = node.spec or client.V1NodeSpec()
            taints = list(spec.taints or [])
            kept = [t for t in taints if t.key != labels.DISRUPTED_TAINT]
            if len(kept) == len(taints) and not spec.unschedulable:
                return None
            return _merge({"spec": {"unschedulable": False}}, self._taints_patch(node, kept))

        self._patch_node(input.node_name, input.instance_id, "uncordoning", patch, missing_ok=True)

    def _taints_patch(self, node: client.V1Node, taints: list[client.V1Taint]) -> dict[str, Any]:
        """Node taints are an atomic list for the API server (no merge key): the whole list is
        sent, guarded by the resourceVersion, so a taint added meanwhile is never lost."""
        return {
            "metadata": {
                "resourceVersion": node.metadata.resource_version if node.metadata else None
            },
            "spec": {"taints": [self.api_client.sanitize_for_serialization(t) for t in taints]},
        }

    def _patch_node(
        self,
        name: str,
        instance_id: str | None,
        doing: str,
        patch_for: Callable[[client.V1Node], dict[str, Any] | None],
        *,
        missing_ok: bool,
    ) -> None:
        """Read, build the merge patch (None: nothing to do), send guarded by the
        resourceVersion read (so the node judged the claim's is the one patched); again on a
        409 conflict. Another machine's Node of that name counts as missing."""
        for _ in range(_CONFLICT_RETRIES):
            node = self._read_claims_node(name, instance_id)
            body = patch_for(node) if node is not None else None
            if node is None or body is None:
                if node is None and not missing_ok:
                    raise _node_not_found(name)
                return
            version = node.metadata.resource_version if node.metadata else None
            body = _merge(body, {"metadata": {"resourceVersion": version}})
            try:
                self.core.patch_node(name, body, _content_type=MERGE_PATCH)
                return
            except ApiException as err:
                if is_not_found(err):
                    if missing_ok:
                        return
                    raise _node_not_found(name) from None
                if err.status != 409:
                    raise
                log.info("node %s changed while %s it; trying again", name, doing)
        raise ApplicationError(f"node {name} kept changing while {doing} it", type=KUBE_CONFLICT)

    @activity.defn(name="delete_node")
    def delete_node(self, input: NodeRef) -> None:
        """Delete the claim's Node, and only it: the uid read with its providerID is the
        delete's precondition (a Node deleted and registered anew meanwhile is kept)."""
        node = self._read_claims_node(input.node_name, input.instance_id)
        if node is None or node.metadata is None:
            return
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=node.metadata.uid))
        try:
            # Raw reply: a Status or the Node, depending on finalizers; we need neither.
            discard(self.core.delete_node(input.node_name, body=body, _preload_content=False))
        except ApiException as err:
            if err.status == 409:
                log.warning("node %s was replaced before its deletion: kept", input.node_name)
            elif not is_not_found(err):
                raise

    @activity.defn(name="get_node_state")
    def get_node_state(self, input: NodeRef) -> NodeState:
        """Exists, Ready, and how many pods keep it busy (`pod_count`: all but DaemonSet,
        mirror and finished pods; `empty` is `pod_count == 0`)."""
        observed_at = datetime.now(UTC)
        node = self._read_node(input.node_name)
        if node is None:
            return NodeState(
                exists=False, ready=False, empty=True, pod_count=0, observed_at=observed_at
            )
        conditions = (node.status.conditions if node.status else None) or []
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        busy = [p for p in self._pods_on(input.node_name) if not is_left_alone(p)]
        status = node.status
        return NodeState(
            exists=True,
            ready=ready,
            empty=not busy,
            pod_count=len(busy),
            do_not_disrupt=sorted(_pod_name(p) for p in busy if is_do_not_disrupt(p)),
            capacity=dict(status.capacity or {}) if status else {},
            allocatable=dict(status.allocatable or {}) if status else {},
            observed_at=observed_at,
            interruption=interruption_notice(node),
            provider_id=(node.spec.provider_id if node.spec else None) or None,
        )

    @activity.defn(name="drain_node")
    @heartbeats_itself
    def drain_node(self, input: DrainInput) -> DrainResult:
        """Evict every pod that needs it, respecting PDBs until `force_after`, then delete.

        do-not-disrupt pods are not evicted at all before `force_after` (unless the input
        says not to hold them): the grace period is theirs to finish their work.

        Progress (uids evicted/forced) is the heartbeat detail, so a retried attempt carries
        on with the same counts instead of starting from zero.
        """
        evicted: set[str] = set()
        forced: set[str] = set()
        # The heartbeat thread reads the progress while this thread updates it.
        lock = threading.Lock()
        prior = activity.info().heartbeat_details
        began = time.time()
        if prior and isinstance(prior[0], dict):
            evicted.update(prior[0].get("evicted", []))
            forced.update(prior[0].get("forced", []))
            began = float(prior[0].get("began", began))
        left_alone = 0
        remaining = 0
        # Pods the PDB refused, by key: monotonic time of the next attempt.
        retry_at: dict[str, float] = {}
        force_after = (
            datetime.fromtimestamp(began + input.grace_s, UTC)
            if input.grace_s is not None
            else _aware(input.force_after)
        )

        def progress() -> dict[str, Any]:
            with lock:
                return {
                    "evicted": sorted(evicted),
                    "forced": sorted(forced),
                    "remaining": remaining,
                    "began": began,
                }

        def result() -> DrainResult:
            return DrainResult(evicted=len(evicted), forced=len(forced), left_alone=left_alone)

        with heartbeating(interval_s=max(0.5, min(input.poll_interval_s, 5.0)), details=progress):
            while True:
                raise_if_cancelled()
                if self._read_claims_node(input.node_name, input.instance_id) is None:
                    return result()
                pods = self._pods_on(input.node_name)
                left_alone = sum(1 for p in pods if is_left_alone(p))
                to_drain = [p for p in pods if not is_left_alone(p)]
                with lock:
                    remaining = len(to_drain)
                if not to_drain:
                    return result()
                forcing = datetime.now(UTC) >= force_after
                now = time.monotonic()
                for pod in to_drain:
                    raise_if_cancelled()
                    key = _pod_key(pod)
                    if forcing:
                        if self._force_delete(pod) and key not in evicted:
                            with lock:
                                forced.add(key)
                    elif _is_terminating(pod):
                        continue  # already on its way out: wait for it
                    elif input.hold_do_not_disrupt and is_do_not_disrupt(pod):
                        continue  # deleted once the grace period is over
                    elif retry_at.get(key, 0.0) <= now:
                        outcome = self._evict(pod)
                        if outcome == "evicted":
                            with lock:
                                evicted.add(key)
                            retry_at.pop(key, None)
                        elif outcome == "blocked":
                            retry_at[key] = now + input.eviction_retry_s
                activity.heartbeat(progress())
                # Wakes early on cancellation; the loop top then raises.
                activity.wait_for_cancelled_sync(input.poll_interval_s)

    def _evict(self, pod: client.V1Pod) -> str:
        """Ask the Eviction API; 'evicted', 'blocked' (PDB: 429) or 'gone' (404)."""
        meta = pod.metadata
        assert meta is not None and meta.name and meta.namespace
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=meta.name, namespace=meta.namespace)
        )
        try:
            # The reply is a Status, which the client cannot deserialise as an Eviction.
            response = self.core.create_namespaced_pod_eviction(
                meta.name, meta.namespace, body, _preload_content=False
            )
        except ApiException as err:
            if err.status == 429:
                log.info(
                    "eviction of %s/%s blocked by a disruption budget", meta.namespace, meta.name
                )
                return "blocked"
            if is_not_found(err):
                return "gone"
            raise
        discard(response)
        return "evicted"

    def _force_delete(self, pod: client.V1Pod) -> bool:
        """Delete without a grace period (the grace was spent before `force_after`)."""
        meta = pod.metadata
        assert meta is not None and meta.name and meta.namespace
        try:
            discard(
                self.core.delete_namespaced_pod(
                    meta.name, meta.namespace, grace_period_seconds=0, _preload_content=False
                )
            )
        except ApiException as err:
            if is_not_found(err):
                return False
            raise
        log.info("force-deleted pod %s/%s after the drain deadline", meta.namespace, meta.name)
        return True
