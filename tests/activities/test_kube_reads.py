"""The planner's reads without the generated API classes answer as those classes do."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from activities.kube_reads import KubeReads


def test_each_read_answers_what_the_generated_api_answers(
    kube_api_client: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="token"), string_data={"token": "s3cr3t"}
        ),
    )
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="prices"), data={"a": "1"}),
    )
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"app": "agent"}),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="agent",
                    image="agent",
                    resources=client.V1ResourceRequirements(requests={"cpu": "100m"}),
                )
            ]
        ),
    )
    client.AppsV1Api(kube_api_client).create_namespaced_daemon_set(
        namespace,
        client.V1DaemonSet(
            metadata=client.V1ObjectMeta(name="agent"),
            spec=client.V1DaemonSetSpec(
                selector=client.V1LabelSelector(match_labels={"app": "agent"}), template=template
            ),
        ),
    )
    reads = KubeReads(kube_api_client)

    secret = reads.read_namespaced_secret("token", namespace)
    assert secret.to_dict() == core.read_namespaced_secret("token", namespace).to_dict()
    assert secret.data == {"token": "czNjcjN0"}
    config_map = reads.read_namespaced_config_map("prices", namespace)
    assert config_map.data == {"a": "1"}
    assert reads.read_namespace(namespace).metadata.name == namespace
    [agent] = [
        d
        for d in reads.list_daemon_set_for_all_namespaces()
        if d["metadata"]["namespace"] == namespace
    ]
    generated = client.AppsV1Api(kube_api_client).read_namespaced_daemon_set("agent", namespace)
    assert agent["spec"] == kube_api_client.sanitize_for_serialization(generated.spec)
    assert agent["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "100m"}
    }


def test_a_pending_pod_listing_keeps_the_field_selector(
    kube_api_client: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="waiting"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="c")]),
    )
    core.create_namespaced_pod(namespace, pod)
    reads = KubeReads(kube_api_client)
    pending = reads.list_pod_for_all_namespaces(field_selector="status.phase=Pending").items
    assert namespace in {p.metadata.namespace for p in pending}
    running = reads.list_pod_for_all_namespaces(field_selector="status.phase=Running").items
    assert namespace not in {p.metadata.namespace for p in running}


def test_a_missing_object_raises_the_clients_not_found(
    kube_api_client: client.ApiClient, namespace: str
) -> None:
    with pytest.raises(ApiException) as missing:
        KubeReads(kube_api_client).read_namespaced_secret("nowhere", namespace)
    assert missing.value.status == 404
