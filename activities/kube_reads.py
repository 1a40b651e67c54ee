"""The reads planning makes — a Secret, a ConfigMap, a Namespace, the DaemonSets, the pending
pods, the NodePool — through the Kubernetes client's own machinery, without `CoreV1Api` and `AppsV1Api`.

Each read is what the generated method does (`ApiClient.param_serialize`, `call_api`,
`response_deserialize`): the same path, authentication, models and `ApiException`s. The two
generated classes wrap each of their ~1,000 methods in pydantic argument validation, built
when their module is imported: a third of a second of every `cloudburst plan` that reads
the cluster, for five GETs. The worker's planning activity reads through the same class, so
the command and the worker read alike.
"""

from __future__ import annotations

from typing import Any, Protocol

from kubernetes import client as k8s


class SecretReader(Protocol):
    def read_namespaced_secret(self, name: str, namespace: str) -> k8s.V1Secret: ...


class ConfigMapReader(Protocol):
    def read_namespaced_config_map(self, name: str, namespace: str) -> k8s.V1ConfigMap: ...


class NamespaceReader(Protocol):
    def read_namespace(self, name: str) -> k8s.V1Namespace: ...


class KubeReads:
    """A `SecretReader`, `ConfigMapReader` and `NamespaceReader`, as `CoreV1Api` is one."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._api = api_client

    def read_namespaced_secret(self, name: str, namespace: str) -> k8s.V1Secret:
        path = "/api/v1/namespaces/{namespace}/secrets/{name}"
        found: k8s.V1Secret = self._get(path, "V1Secret", name=name, namespace=namespace)
        return found

    def read_namespaced_config_map(self, name: str, namespace: str) -> k8s.V1ConfigMap:
        path = "/api/v1/namespaces/{namespace}/configmaps/{name}"
        found: k8s.V1ConfigMap = self._get(path, "V1ConfigMap", name=name, namespace=namespace)
        return found

    def read_namespace(self, name: str) -> k8s.V1Namespace:
        found: k8s.V1Namespace = self._get("/api/v1/namespaces/{name}", "V1Namespace", name=name)
        return found

    def list_daemon_set_for_all_namespaces(self) -> list[dict[str, Any]]:
        """Every DaemonSet — as its JSON, unlike the generated method's `V1DaemonSetList`: the
        planner reads their pod templates through `cluster.pod_view`, without the client's
        models of a whole pod."""
        found = self._get("/apis/apps/v1/daemonsets", "object")
        items = found.get("items") if isinstance(found, dict) else None
        return [item for item in items or [] if isinstance(item, dict)]

    def list_pod_for_all_namespaces(self, field_selector: str | None = None) -> k8s.V1PodList:
        query = [("fieldSelector", field_selector)] if field_selector else []
        found: k8s.V1PodList = self._get("/api/v1/pods", "V1PodList", query=query)
        return found

    def list_namespaced_pod(
        self, namespace: str, field_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """The namespace's pods (of `field_selector`) as their JSON, unlike the generated
        method's `V1PodList`: the planner reads them as the trigger does (`cluster.pods`
        `pod_fields`, `pod_model`), a burst's hundreds without the client's slow models."""
        query = [("fieldSelector", field_selector)] if field_selector else []
        found = self._get(
            "/api/v1/namespaces/{namespace}/pods", "object", query=query, namespace=namespace
        )
        items = found.get("items") if isinstance(found, dict) else None
        return [item for item in items or [] if isinstance(item, dict)]

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> dict[str, Any]:
        found: dict[str, Any] = self._get(
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}",
            "object",
            group=group,
            version=version,
            namespace=namespace,
            plural=plural,
            name=name,
        )
        return found

    def _get(
        self, path: str, model: str, query: list[tuple[str, str]] | None = None, **names: str
    ) -> Any:
        request = self._api.param_serialize(
            method="GET",
            resource_path=path,
            path_params=names,
            query_params=query or [],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(*request)
        response.read()
        # Raises the client's ApiException for any status but 200, as the generated one does.
        return self._api.response_deserialize(response, {"200": model}).data
