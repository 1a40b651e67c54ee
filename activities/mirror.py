"""The custom resources mirror their workflows, so `kubectl get nodeclaims,nodepools` works.

The workflows stay the source of truth of the status; the resource itself is made by whoever
started the claim (the pool's `start_claim_workflows`, an operator's `cloudburst claims
create`), never here. It carries a finalizer, so that a
`kubectl delete nodeclaim` becomes a scale-down request (the node watcher sees the deletion
timestamp and signals the workflow) instead of losing track of a running VM.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.claim_authority import own_claim, refused
from api import labels
from api.errors import KUBE_CONFLICT
from api.events import ObjectRef
from api.messages import MirrorInput, MirrorResult
from api.nodeclaim import NodeClaimStatus
from api.nodepool import READY, VALIDATION_SUCCEEDED
from api.nodepool.messages import NodePoolStatusUpdate
from observability.events import record_event

log = logging.getLogger(__name__)

_CONFLICT_RETRIES = 5

GROUP, VERSION, PLURAL = "cloudburst.io", "v1alpha1", "nodeclaims"


class MirrorActivities:
    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._custom = k8s.CustomObjectsApi(api_client)
        self._core = k8s.CoreV1Api(api_client)

    def activities(self) -> list[Callable[..., Any]]:
        return [self.sync_nodeclaim, self.sync_nodepool_status]

    @activity.defn(name="sync_nodeclaim")
    def sync_nodeclaim(self, input: MirrorInput) -> MirrorResult:
        """Create-or-update the resource and its status; record Events; remove when done.
        Answers the resource's uid (a `kubectl delete` of another object of its name is no
        scale-down of this claim)."""
        claim = input.claim
        name, namespace = claim.metadata.name, claim.metadata.namespace
        # Its own NodeClaim only: a workflow of another id writes no status, Event or
        # finalizer of this claim's (activities/claim_authority.py).
        if own_claim(name) != (namespace, name):
            raise refused(f"the activity runs for another claim than {namespace}/{name}")
        if input.remove:
            current = self._read(namespace, name)
            if current is not None:
                self._release(namespace, name, current, delete=not input.keep)
                # Only a claim with its NodeClaim replaces its pool's last failure: one the
                # cluster has not (started by whoever reaches Temporal) touches no other.
                if input.keep:
                    self._forget_older_failures(namespace, claim.spec.node_pool, name)
        else:
            # No read first: a claim shows itself at every step of its life, and a burst
            # starts hundreds of claims at once. The status write answers with the resource,
            # or 404 if it is not there: the mirror never creates one (who made the claim
            # did, and that object is what authorises it: activities/claim_authority.py).
            current = self._patch_status(namespace, name, claim.status)
        uid = current.get("metadata", {}).get("uid") if current else None
        if uid is None:
            # No NodeClaim in the cluster to say it of: a claim nothing authorised (whoever
            # reaches Temporal may start one in any namespace) writes no Events there.
            if input.events:
                log.warning(
                    "NodeClaim %s/%s is not in the cluster: its Events go unwritten",
                    namespace,
                    name,
                )
            return MirrorResult()
        for event in input.events:
            regarding = ObjectRef(
                kind="NodeClaim",
                name=name,
                namespace=namespace,
                api_version=f"{GROUP}/{VERSION}",
                uid=uid,
            )
            record_event(self._core, event.model_copy(update={"regarding": regarding}))
        return MirrorResult(uid=uid)

    @activity.defn(name="sync_nodepool_status")
    def sync_nodepool_status(self, update: NodePoolStatusUpdate) -> None:
        """The pool's status subresource (`kubectl get nodepools`): what the pool's gauges
        are read from at scrape time (`observability/cluster_gauges.py`)."""
        pool = update.name
        status = update.status.model_dump(mode="json", by_alias=True, exclude_none=True)
        for _ in range(_CONFLICT_RETRIES):
            current = self._read_pool(update.namespace, pool)
            if current is None:
                log.info(
                    "NodePool %s/%s is gone; its status is not written", update.namespace, pool
                )
                return
            # A merge patch of the whole status (conditions is a list, replaced as one),
            # keeping the trigger's verdict on the spec, guarded by the resourceVersion.
            body = {
                "metadata": {"resourceVersion": current["metadata"].get("resourceVersion")},
                "status": {**status, "conditions": _with_verdict(status, current)},
            }
            try:
                self._custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, update.namespace, "nodepools", pool, body
                )
                return
            except ApiException as err:
                if err.status == 404:
                    return
                if err.status != 409:
                    raise
        raise ApplicationError(f"NodePool {pool} kept changing", type=KUBE_CONFLICT)

    def _read_pool(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self._custom.get_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, namespace, "nodepools", name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    def _read(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self._custom.get_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, namespace, PLURAL, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    def _patch_status(
        self, namespace: str, name: str, status: NodeClaimStatus
    ) -> dict[str, Any] | None:
        body = {"status": status.model_dump(mode="json", exclude_none=True)}
        try:
            patched: dict[str, Any] = self._custom.patch_namespaced_custom_object_status(  # type: ignore[assignment]
                GROUP, VERSION, namespace, PLURAL, name, body
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return patched

    def _release(self, namespace: str, name: str, current: dict[str, Any], *, delete: bool) -> None:
        finalizers = [
            f
            for f in current.get("metadata", {}).get("finalizers", [])
            if f != labels.TERMINATION_FINALIZER
        ]
        try:
            self._custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"finalizers": finalizers}}
            )
            if delete:
                self._custom.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name
                )
        except ApiException as err:
            if err.status != 404:
                raise

    def _forget_older_failures(self, namespace: str, pool: str, latest: str) -> None:
        """One failed NodeClaim a pool: a pool failing for an hour shows its last failure,
        not sixty."""
        listing: dict[str, Any] = self._custom.list_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, namespace, PLURAL, label_selector=f"{labels.NODEPOOL}={pool}"
        )
        for item in listing.get("items", []):
            name = item["metadata"]["name"]
            if name != latest and item.get("status", {}).get("phase") == "Failed":
                try:
                    self._custom.delete_namespaced_custom_object(
                        GROUP, VERSION, namespace, PLURAL, name
                    )
                except ApiException as err:
                    if err.status != 404:
                        raise


def _with_verdict(status: dict[str, Any], current: dict[str, Any]) -> list[dict[str, Any]]:
    """The workflow's conditions plus the trigger's ValidationSucceeded; while that is False
    (the spec now in the cluster is invalid), the trigger's Ready=False stays."""
    listed = (current.get("status") or {}).get("conditions") or []
    theirs = {c.get("type"): c for c in listed if isinstance(c, dict)}
    verdict = theirs.get(VALIDATION_SUCCEEDED)
    ours = list(status.get("conditions", []))
    if verdict is None:
        return ours
    if verdict.get("status") == "False" and READY in theirs:
        ours = [theirs[READY] if c.get("type") == READY else c for c in ours]
    return [*ours, verdict]
