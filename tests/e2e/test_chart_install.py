"""deploy/chart installed for real (`helm install`) into Kubernetes' own control plane, and
its RBAC proven: `cloudburst worker` and `cloudburst trigger` run as local processes with
the settings of the chart's ConfigMap and, for Kubernetes, nothing but a token of the chart's
ServiceAccount each (TokenRequest), and a pending pod gets a node through them."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from cli.commands.tenant_rbac import tenant_objects
from sim.helm import helm_binary
from tests.e2e.harness import (
    CLUSTER_ID,
    Stack,
    eventually,
    in_thread,
    make_pool,
    nodeclaims,
    pool_pod,
)
from tests.payload_keys import KEYRING_FILE

CHART = Path(__file__).resolve().parents[2] / "deploy" / "chart"


def helm(kubeconfig: Path, *args: str) -> str:
    done = subprocess.run(
        [str(helm_binary()), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def service_account_kubeconfig(
    core: k8s.CoreV1Api, admin: Path, namespace: str, account: str, into: Path
) -> Path:
    """A kubeconfig whose only credential is a token of `account` (TokenRequest, the API
    server's own audience): what a pod of the chart's Deployment mounts."""
    request = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = core.create_namespaced_service_account_token(account, namespace, request)
    config = yaml.safe_load(admin.read_text())
    [cluster] = config["clusters"]
    path = into / f"{account}.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "chart", "cluster": cluster["cluster"]}],
                "users": [{"name": account, "user": {"token": token.status.token}}],
                "contexts": [{"name": "chart", "context": {"cluster": "chart", "user": account}}],
                "current-context": "chart",
            }
        )
    )
    return path


async def serve_tenant(stack: Stack, tenant: str) -> None:
    """What an operator does beside the chart for a namespace it serves: the Namespace with
    the annotations `cloudburst tenant-rbac` prints (the chart binds its Role), and a NodeClass
    there on the (simulated) cloud, the sample's, with copies of the Secrets it names."""
    [namespace] = [o for o in tenant_objects([tenant]) if o["kind"] == "Namespace"]
    await in_thread(stack.core.create_namespace, namespace)
    sample = await in_thread(
        stack.custom.get_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodeclasses",
        "sample",
    )
    for name in sorted(_secret_names(sample["spec"])):
        secret = await in_thread(stack.core.read_namespaced_secret, name, "default")
        copy = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=name), data=secret.data)
        await in_thread(stack.core.create_namespaced_secret, tenant, copy)
    body = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodeClass",
        "metadata": {"name": "sample", "namespace": tenant},
        "spec": sample["spec"],
    }
    await in_thread(
        stack.custom.create_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        tenant,
        "nodeclasses",
        body,
    )


def _secret_names(spec: Any) -> set[str]:
    """The Secrets a NodeClass spec names (every `...SecretRef`'s name)."""
    if isinstance(spec, dict):
        names = {
            ref["name"]
            for key, ref in spec.items()
            if key.endswith("SecretRef") and isinstance(ref, dict) and "name" in ref
        }
        return names.union(*(_secret_names(value) for value in spec.values()))
    if isinstance(spec, list):
        return set().union(*(_secret_names(item) for item in spec))
    return set()


@contextlib.contextmanager
def running(command: str, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    cli = Path(sys.executable).parent / "cloudburst"
    process = subprocess.Popen([str(cli), command], env=env, stdout=subprocess.DEVNULL)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def test_the_chart_installed_gives_a_pending_pod_a_node_with_its_own_rbac(
    stack: Stack, temporal_address: str, kubeconfig: Path, tmp_path: Path
) -> None:
    """Fails when the chart's RBAC lacks a grant the worker or the trigger needs on the way
    from a pending pod to a Ready node (e.g. without the worker's `create` on nodeclaims the
    pool's claims never start), when its ConfigMap names a setting wrongly, or when it does
    not install."""
    namespace = f"cb-chart-{uuid.uuid4().hex[:6]}"
    tenant = f"{namespace}-tenant"
    release = "cloudburst"
    values = {
        "settings": {
            "clusterId": CLUSTER_ID,
            "temporalAddress": temporal_address,
            "taskQueue": stack.task_queue,
            "tenantNamespaces": [tenant],
            "allowedEndpoints": stack.settings.allowed_endpoints,
        },
        # The processes run here, with the chart's identities: no pods (no image to run).
        "worker": {"replicas": 0},
        "trigger": {"replicas": 0},
    }
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    # The namespace served exists before the chart binds the worker's Role in it.
    await serve_tenant(stack, tenant)
    helm(
        kubeconfig,
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--create-namespace",
        "--values",
        str(values_file),
    )
    pool = f"chart-{uuid.uuid4().hex[:6]}"
    try:
        listed = json.loads(helm(kubeconfig, "list", "--namespace", namespace, "-o", "json"))
        assert [(r["name"], r["status"]) for r in listed] == [(release, "deployed")]

        config = await in_thread(
            stack.core.read_namespaced_config_map, "cloudburst-config", namespace
        )
        data: dict[str, str] = dict(config.data or {})
        assert data.get("CLOUDBURST_WORKER_NAMESPACE") == namespace, data
        assert data["CLOUDBURST_CLUSTER_ID"] == CLUSTER_ID
        base = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CLOUDBURST_")},
            "CLOUDBURST_PRICES_ENABLED": "false",  # no real cloud's price API from a test
            **data,
            # What differs outside a pod: the keyring's path, and ports two processes share.
            "CLOUDBURST_PAYLOAD_KEYRING_FILE": str(KEYRING_FILE),
            "CLOUDBURST_HEALTH_PORT": "0",
            "CLOUDBURST_METRICS_PORT": "0",
            "CLOUDBURST_SDK_METRICS_PORT": "0",
        }
        env = {}
        for process, account in (
            ("worker", "cloudburst-worker"),
            ("trigger", "cloudburst-trigger"),
        ):
            own = service_account_kubeconfig(stack.core, kubeconfig, namespace, account, tmp_path)
            env[process] = {**base, "CLOUDBURST_KUBECONFIG": str(own), "KUBECONFIG": str(own)}
        env["trigger"]["CLOUDBURST_TRIGGER_ID"] = f"{namespace}-trigger"

        with running("worker", env["worker"]), running("trigger", env["trigger"]):
            make_pool(stack.kube, pool, namespace=tenant)
            pod_body = pool_pod(f"{pool}-pod", pool)
            pod_body.metadata.namespace = tenant
            await in_thread(stack.core.create_namespaced_pod, tenant, pod_body)
            try:
                pod = await eventually(
                    lambda: in_thread(stack.core.read_namespaced_pod, f"{pool}-pod", tenant),
                    lambda p: p.status.phase == "Running" and bool(p.spec.node_name),
                    timeout_s=180,
                )
            except AssertionError:
                why = await _why(stack, tenant, pool)
                raise AssertionError(f"no node for the pod: {why}") from None
            # Its NodeClaim, written by the worker with its own token, names that node.
            await eventually(
                lambda: nodeclaims(stack, pool, tenant),
                lambda claims: (
                    [c.get("status", {}).get("nodeName") for c in claims] == [pod.spec.node_name]
                ),
                60,
            )
            # The way down too: the empty node is drained and deleted, its claim gone.
            await in_thread(stack.core.delete_namespaced_pod, f"{pool}-pod", tenant)
            await eventually(
                lambda: nodeclaims(stack, pool, tenant), lambda claims: claims == [], 120
            )
    finally:
        with contextlib.suppress(k8s.ApiException):
            await in_thread(
                stack.custom.delete_namespaced_custom_object,
                "cloudburst.io",
                "v1alpha1",
                tenant,
                "nodepools",
                pool,
            )
        helm(kubeconfig, "uninstall", release, "--namespace", namespace)
        for created in (namespace, tenant):
            with contextlib.suppress(k8s.ApiException):
                await in_thread(stack.core.delete_namespace, created)


async def _why(stack: Stack, namespace: str, pool: str) -> str:
    """What the cluster says about the pool and its pod: their Events and the pool's status."""
    events = await in_thread(stack.core.list_namespaced_event, namespace)
    said = [
        f"{e.involved_object.kind}/{e.involved_object.name} {e.reason}: {e.message}"
        for e in events.items
        if e.involved_object.name in (pool, f"{pool}-pod")
    ]
    pool_object: Any = await in_thread(
        stack.custom.get_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        namespace,
        "nodepools",
        pool,
    )
    return f"events {said}, pool status {pool_object.get('status')}"
