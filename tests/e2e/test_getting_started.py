"""docs/getting-started.md, its steps that need no real cloud, as written: the blocks marked
`<!-- tested: NAME -->` are run line by line in a shell (the namespace, its Secret and
`tenant-rbac`; the Hetzner example made the user's NodeClass and NodePool with `sed`,
`cloudburst validate` and `kubectl apply`; the workload, `cloudburst plan` and its apply)
against Kubernetes' own control plane, with the worker and the trigger serving, and a pod of
the workload gets a Hetzner node from the Hetzner stand-in.

What the simulation changes, after the doc's `sed` wrote burst.yaml: the NodeClass's Hetzner
endpoint is the stand-in's (an override the worker here allows) and its `tailscale` block is
dropped (the simulated machines join the control plane directly; there is no tailnet); the
shell has the operator's settings `cloudburst plan` reads (the namespace served, the stand-in's
address allowed), which a real install keeps in its ConfigMap.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest_asyncio
import yaml
from kubernetes import client as k8s
from temporalio.client import Client

from api import labels
from sim.cluster import SimulatedCluster
from tests.e2e.harness import Stack, eventually, in_thread, serving, stack_on

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "getting-started.md"
BLOCK = re.compile(r"<!-- tested: (\S+) -->\n```(\w+)\n(.*?)```", re.DOTALL)


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    temporal_client: Client,
    multicloud_kube: k8s.ApiClient,
    multicloud_cluster: SimulatedCluster,
    multicloud_kubeconfig: Path,
) -> Stack:
    return stack_on(temporal_client, multicloud_kube, multicloud_cluster, multicloud_kubeconfig)


def marked_blocks() -> dict[str, str]:
    return {name: body for name, _, body in BLOCK.findall(DOC.read_text())}


def commands(block: str) -> list[str]:
    """A shell block's commands, continued lines joined."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def run(command: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def simulated(burst: Path, cluster: SimulatedCluster) -> None:
    """The user's burst.yaml, pointed at the stand-in and without a tailnet (module doc)."""
    documents: list[dict[str, Any]] = [d for d in yaml.safe_load_all(burst.read_text()) if d]
    for doc in documents:
        if doc["kind"] == "NodeClass":
            doc["spec"]["hetzner"]["endpoint"] = cluster.standins["hetzner"].endpoint
            del doc["spec"]["tailscale"]
    burst.write_text(yaml.safe_dump_all(documents))


async def test_the_getting_started_gives_a_pending_pod_a_hetzner_node(
    stack: Stack, tmp_path: Path
) -> None:
    """Fails when a tested block of the doc fails (a command, flag or file it names changed),
    or when what it sets up gives the workload no Hetzner node."""
    cluster = stack.cluster
    namespace = f"gs-{uuid.uuid4().hex[:8]}"
    blocks = marked_blocks()
    assert set(blocks) == {"namespace", "nodeclass", "workload", "burst"}, set(blocks)
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # the doc runs in a checkout
    tools = [str(Path(sys.executable).parent), str(cluster.kube.kubectl.parent)]
    env = {
        "PATH": os.pathsep.join([*tools, os.environ["PATH"]]),
        "HOME": str(tmp_path),
        "KUBECONFIG": str(stack.settings.kubeconfig),
        "NS": namespace,
        "HCLOUD_TOKEN": cluster.standins["hetzner"].credential,
        "API_SERVER": cluster.kube_url.replace("http://", "https://"),
        # What the operator's install says, as `cloudburst plan` reads it from this shell
        # (the simulated cluster has no cloudburst-config): the namespace served, and the
        # stand-in's address allowed.
        "CLOUDBURST_TENANT_NAMESPACES": namespace,
        "CLOUDBURST_ALLOWED_ENDPOINTS": json.dumps(stack.settings.allowed_endpoints),
    }
    for command in commands(blocks["namespace"]):
        run(command, tmp_path, env)
    for command in commands(blocks["nodeclass"]):
        run(command, tmp_path, env)
        if command.endswith("> burst.yaml"):
            simulated(tmp_path / "burst.yaml", cluster)
    (tmp_path / "web.yaml").write_text(blocks["workload"])

    # The worker and the trigger as the doc installs them: serving the namespace.
    tenancy = stack.settings.model_copy(update={"tenant_namespaces": [namespace]})
    serving_stack = dataclasses.replace(stack, settings=tenancy)
    core = stack.core
    async with serving(serving_stack):
        planned, applied, listed = commands(blocks["burst"])
        assert "hetzner/" in await in_thread(run, planned, tmp_path, env)
        await in_thread(run, applied, tmp_path, env)

        def web_pods() -> list[k8s.V1Pod]:
            found = core.list_namespaced_pod(namespace, label_selector="app=web").items
            return [p for p in found if p.status.phase == "Running" and p.spec.node_name]

        running = await eventually(lambda: in_thread(web_pods), lambda pods: len(pods) == 2, 240)
        for pod in running:
            node = await in_thread(core.read_node, pod.spec.node_name)
            assert node.metadata.labels[labels.PROVIDER] == "hetzner"
            assert node.spec.provider_id.startswith("hetzner:///")
        assert "Ready" in await in_thread(run, listed, tmp_path, env)
        await in_thread(k8s.AppsV1Api(stack.kube).delete_namespaced_deployment, "web", namespace)
        # The doc's last step: the empty node goes after the pool's empty TTL.
        await eventually(
            lambda: in_thread(
                stack.custom.list_namespaced_custom_object,
                "cloudburst.io", "v1alpha1", namespace, "nodeclaims",
            ),
            lambda found: not found["items"],
            timeout_s=180,
        )  # fmt: skip
