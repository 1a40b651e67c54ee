"""The node loop: list and watch Nodes; forget a claim's Node whose NodeClaim is gone, and evict
the pods of other namespaces bound to a tenant's node before its taint was there
(`cluster/node_guard.py` judges both)."""

from __future__ import annotations

import logging
import threading

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from api import labels
from api.events import KubeEvent, ObjectRef
from api.planning import Toleration
from approver.watching import Obj, json_body, list_and_watch
from cluster.node_guard import (
    FORGOTTEN_TAINT,
    MIRROR_ANNOTATION,
    PodOnNode,
    claim_ended,
    claim_of_node,
    eviction_message,
    forgotten_message,
    strangers_on_tenant_node,
)
from cluster.responses import discard
from observability.events import record_event

log = logging.getLogger(__name__)

GROUP, VERSION, NODECLAIMS = "cloudburst.io", "v1alpha1", "nodeclaims"


class NodeGuard:
    def __init__(self, api_client: k8s.ApiClient, *, resync_s: float = 30.0) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._resync_s = resync_s

    def run(self, stop: threading.Event) -> None:
        list_and_watch(
            self._core.list_node, self.consider, stop, resync_s=self._resync_s, what="node"
        )

    def consider(self, node: Obj) -> None:
        metadata = node.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            return
        name = str(metadata.get("name", ""))
        node_labels: dict[str, str] = metadata.get("labels") or {}
        claim = claim_of_node(name, node_labels)
        if claim is not None and not self._claim_lives(*claim):
            self.forget(node, claim)
            return
        tenant = node_labels.get(labels.TENANT_LABEL)
        if tenant:
            self.evict_strangers(node, tenant)

    def forget(self, node: Obj, claim: tuple[str, str]) -> None:
        metadata = node["metadata"]
        name = metadata["name"]
        message = forgotten_message(name, claim)
        log.warning("%s", message)
        record_event(
            self._core,
            KubeEvent(
                regarding=ObjectRef(kind="Node", name=name, uid=metadata.get("uid")),
                reason="NodeForgotten",
                message=message,
                type="Warning",
            ),
        )
        taints = [
            t
            for t in (node.get("spec") or {}).get("taints") or []
            if t.get("key") != FORGOTTEN_TAINT
        ]
        try:
            discard(
                self._core.patch_node(
                    name,
                    {
                        "spec": {
                            "unschedulable": True,
                            "taints": [
                                *taints,
                                {"key": FORGOTTEN_TAINT, "value": "true", "effect": "NoExecute"},
                            ],
                        }
                    },
                    _preload_content=False,
                )
            )
            # Only the Node that was judged: one registered anew under the name meanwhile is
            # judged by its own event.
            discard(
                self._core.delete_node(
                    name,
                    body=k8s.V1DeleteOptions(
                        preconditions=k8s.V1Preconditions(uid=metadata.get("uid"))
                    ),
                    _preload_content=False,
                )
            )
        except ApiException as err:
            if err.status not in (404, 409):
                raise

    def evict_strangers(self, node: Obj, tenant: str) -> None:
        name = node["metadata"]["name"]
        taint = next(
            (
                t
                for t in (node.get("spec") or {}).get("taints") or []
                if t.get("key") == labels.TENANT_TAINT
            ),
            None,
        )
        if taint is None:
            return  # the worker puts it back at Ready; until then pods may still come
        pods = json_body(
            self._core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={name}", _preload_content=False
            )
        )
        for pod in strangers_on_tenant_node(
            tenant, taint.get("value"), (_pod_on_node(item) for item in pods.get("items", []))
        ):
            message = eviction_message(pod, name, tenant)
            log.warning("%s", message)
            try:
                discard(
                    self._core.create_namespaced_pod_eviction(
                        pod.name,
                        pod.namespace,
                        k8s.V1Eviction(
                            metadata=k8s.V1ObjectMeta(name=pod.name, namespace=pod.namespace)
                        ),
                        _preload_content=False,
                    )
                )
            except ApiException as err:
                if err.status == 404:
                    continue
                if err.status == 429:  # a disruption budget holds it: the next look tries again
                    log.info("eviction of %s/%s waits for its budget", pod.namespace, pod.name)
                    continue
                raise
            record_event(
                self._core,
                KubeEvent(
                    regarding=ObjectRef(kind="Node", name=name, uid=node["metadata"].get("uid")),
                    reason="PodNotOfTenantEvicted",
                    message=message,
                    type="Warning",
                ),
            )

    def _claim_lives(self, namespace: str, name: str) -> bool:
        """Whether the NodeClaim exists and has not ended (a Failed one stays to say why)."""
        try:
            found = json_body(
                self._custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, NODECLAIMS, name, _preload_content=False
                )
            )
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return not claim_ended((found.get("status") or {}).get("phase"))


def _pod_on_node(item: Obj) -> PodOnNode:
    metadata = item.get("metadata") or {}
    spec = item.get("spec") or {}
    return PodOnNode(
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        tolerations=tuple(
            Toleration(
                key=t.get("key"),
                operator=t.get("operator") or "Equal",
                value=t.get("value"),
                effect=t.get("effect"),
            )
            for t in spec.get("tolerations") or []
        ),
        owner_kinds=tuple(str(o.get("kind")) for o in metadata.get("ownerReferences") or []),
        mirror=MIRROR_ANNOTATION in (metadata.get("annotations") or {}),
        terminating=bool(metadata.get("deletionTimestamp")),
    )
