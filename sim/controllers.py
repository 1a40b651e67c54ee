"""The kube-controller-manager loops the scenarios need: Deployments and pod GC.

A Deployment keeps `replicas` pods of its template alive (enough of the Deployment ->
ReplicaSet -> Pod chain for a workload to come back after its node is lost), and pod GC deletes
pods bound to a node that no longer exists, as the real pod garbage collector does, and the
pods of a deleted Deployment, as the garbage collector's background deletion does.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


# The ReplicaSet a Deployment's pods name as owner (there is no ReplicaSet object here).
_RS_SUFFIX = "-sim"


class Controllers:
    """Both loops on one thread, polling: cheap at the scale of the simulated cluster."""

    def __init__(self, api_client: client.ApiClient, *, poll_s: float = 0.5) -> None:
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: dict[str, Any] = {}  # deployments logged as failing -> resourceVersion

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="controllers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def tick(self) -> None:
        pods = self.core.list_pod_for_all_namespaces(_preload_content=False)
        items: list[dict[str, Any]] = _json(pods)["items"]
        nodes = {
            n["metadata"]["name"]
            for n in _json(self.core.list_node(_preload_content=False))["items"]
        }
        self._collect_orphans(items, nodes)
        deployments = _json(self.apps.list_deployment_for_all_namespaces(_preload_content=False))
        for deployment in deployments["items"]:
            try:
                self._reconcile_deployment(deployment, items)
            except (ApiException, ValueError, TypeError, KeyError, AttributeError) as exc:
                # One Deployment we cannot act on (a template the API server refuses, a
                # field of the wrong type) must not stop the others, nor pod GC.
                meta = deployment.get("metadata") or {}
                key = f"{meta.get('namespace')}/{meta.get('name')}"
                if self._failing.get(key) != meta.get("resourceVersion"):  # once a version
                    self._failing[key] = meta.get("resourceVersion")
                    log.warning("deployment %s not reconciled: %s", key, _short(exc))
        self._collect_deleted_deployments(
            items, {d["metadata"]["uid"] for d in deployments["items"]}
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("controllers tick failed")
            self._stop.wait(self.poll_s)

    def _collect_orphans(self, pods: list[dict[str, Any]], nodes: set[str]) -> None:
        for pod in pods:
            node = pod.get("spec", {}).get("nodeName")
            if node and node not in nodes:
                meta = pod["metadata"]
                log.info(
                    "pod GC: %s/%s was bound to deleted node %s",
                    meta["namespace"],
                    meta["name"],
                    node,
                )
                self._delete_pod(meta["namespace"], meta["name"])

    def _collect_deleted_deployments(self, pods: list[dict[str, Any]], alive: set[str]) -> None:
        """A deleted Deployment's pods go too (the garbage collector's background deletion)."""
        for pod in pods:
            meta = pod["metadata"]
            owners = [
                ref
                for ref in meta.get("ownerReferences") or []
                if ref.get("kind") == "ReplicaSet" and ref.get("name", "").endswith(_RS_SUFFIX)
            ]
            orphaned = owners and all(ref.get("uid") not in alive for ref in owners)
            if orphaned and not meta.get("deletionTimestamp"):
                self._delete_pod(meta["namespace"], meta["name"])

    def _reconcile_deployment(self, deployment: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta, spec = deployment["metadata"], deployment.get("spec", {})
        namespace = meta["namespace"]
        wanted = int(spec.get("replicas", 1))
        selector = spec.get("selector", {}).get("matchLabels", {})
        owned = [
            pod
            for pod in pods
            if pod["metadata"]["namespace"] == namespace
            and not pod["metadata"].get("deletionTimestamp")
            and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            and all(pod["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())
        ]
        for _ in range(wanted - len(owned)):
            self._create_pod(deployment)
        for pod in sorted(owned, key=lambda p: p["metadata"]["creationTimestamp"])[wanted:]:
            self._delete_pod(namespace, pod["metadata"]["name"])

    def _create_pod(self, deployment: dict[str, Any]) -> None:
        meta = deployment["metadata"]
        template = deployment["spec"]["template"]
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": template.get("metadata", {}).get("labels", {}),
                "annotations": template.get("metadata", {}).get("annotations", {}),
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": f"{meta['name']}{_RS_SUFFIX}",
                        "uid": meta["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": template["spec"],
        }
        # Raw call and read: the typed client would validate the dict body against V1Pod.
        api = self.core.api_client
        url = f"{api.configuration.host}/api/v1/namespaces/{meta['namespace']}/pods"
        api.call_api(
            "POST",
            url,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=body,
        ).read()

    def _delete_pod(self, namespace: str, name: str) -> None:
        try:
            response: Any = self.core.delete_namespaced_pod(name, namespace, _preload_content=False)
            response.read()
        except ApiException as err:
            if err.status != 404:
                raise


def _short(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        try:
            return f"{exc.status} {json.loads(exc.body or '{}').get('message', exc.reason)}"
        except ValueError:
            return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def _json(response: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(response.data)
    return data
