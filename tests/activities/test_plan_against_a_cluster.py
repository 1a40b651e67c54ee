"""`cloudburst plan` against a cluster (Kubernetes' own API server, with the kubeconfig of its
administrator: TLS and a client certificate): the cluster's pool takes the file's pods, each node carries the DaemonSets that would
run on it, nothing is created, and the command loads neither Temporal's SDK nor the client's
models of a whole pod (issue #45: a plan answers well under a second; what is asserted is
what it loaded, never how long it took)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from sim.controlplane.cluster import KubernetesControlPlane
from tests.activities.test_planning_activity import daemonset
from tests.unit.test_plan_imports import run_plan

GROUP, VERSION = "cloudburst.io", "v1alpha1"
# Loaded by a plan against a cluster, these would be a tenth of a second or more each.
NOT_LOADED = (
    "temporalio",  # the SDK and its gRPC: the worker's errors are raised only on failure
    "kubernetes.client.models.v1_pod",  # the file's pods and the DaemonSets are read as JSON
    "kubernetes.client.models.v1_pod_spec",
    "kubernetes.client.api.core_v1_api",
    "kubernetes.client.api.apps_v1_api",
)


def test_a_plan_against_the_cluster_takes_its_pool_and_its_daemonsets_and_starts_nothing(
    cluster: KubernetesControlPlane,
    kube_api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    custom = client.CustomObjectsApi(kube_api_client)
    taint = {"key": "team", "value": namespace, "effect": "NoSchedule"}
    toleration = {"key": "team", "operator": "Equal", "value": namespace, "effect": "NoSchedule"}
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "nodeclasses",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeClass",
            "metadata": {"name": "burst"},
            "spec": {
                "hetzner": {"location": "fsn1", "apiTokenSecretRef": {"name": "h", "key": "t"}},
                "join": {"hostApiServer": "https://10.0.0.1:6443"},
            },
        },
    )
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "nodepools",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodePool",
            "metadata": {"name": "burst"},
            "spec": {
                "nodeClassRef": "burst",
                "requirements": {"allowedProviders": ["hetzner"]},
                # Only this test's DaemonSet tolerates it: other tests' DaemonSets stay off.
                "template": {"taints": [taint]},
            },
        },
    )
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump(_deployment(namespace, toleration)))
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")

    def plan(report: str) -> tuple[dict[str, Any], list[str]]:
        done, ran = run_plan(
            ["-f", str(pods), "-o", "json"], tmp_path / report, {"KUBECONFIG": str(kubeconfig)}
        )
        assert ran["code"] in (0, None), done.stderr
        return json.loads(done.stdout), ran["modules"]

    alone, _ = plan("before.json")
    apps = client.AppsV1Api(kube_api_client)
    agent = f"agent-{namespace}"
    apps.create_namespaced_daemon_set(
        "kube-system",
        daemonset(agent, "300m", tolerations=[client.V1Toleration(**toleration)]),
    )
    try:
        with_agent, modules = plan("after.json")
    finally:
        apps.delete_namespaced_daemon_set(agent, "kube-system")

    assert with_agent["pool"] == f"{namespace}/burst"
    assert with_agent["pods"] == 6 and with_agent["nodes"]
    assert all(node["offering"].startswith("hetzner/") for node in with_agent["nodes"])
    # The DaemonSet's 300m and 128Mi come off every node the pool would launch.
    by_offering = {node["offering"]: node["allocatable"] for node in alone["nodes"]}
    for node in with_agent["nodes"]:
        before = by_offering[node["offering"]]
        assert before["cpu_m"] - node["allocatable"]["cpu_m"] == 300
        assert before["memory_bytes"] - node["allocatable"]["memory_bytes"] == 128 * 2**20
    loaded = [m for m in modules if any(m == p or m.startswith(p + ".") for p in NOT_LOADED)]
    assert loaded == []
    claims = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "nodeclaims")
    assert claims["items"] == []


def _deployment(namespace: str, toleration: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 6,
            "template": {
                "spec": {
                    "tolerations": [toleration],
                    "containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
                    ],
                }
            },
        },
    }
