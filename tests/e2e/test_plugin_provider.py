"""A NodeClaim's whole life on a plug-in provider: a NodeClass with only a `plugin` block,
the reference plug-in of examples/plugin-provider behind it.

The real provider module asks the plug-in over HTTP; its create hook writes the machine's
NoCloud seed (the first-boot script, the providerID's vendor-data); the simulated kubelets
boot the machine from that seed as the machine would, and its node registers as
`plugin:///<region>/<instance id>`; a pod runs there; the empty node is scaled down and
the plug-in's delete hook lets the machine go.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from kubernetes import client as k8s
from temporalio.client import Client

from api import NodeClaimPhase, Offering, labels
from sim.cluster import SimulatedCluster
from tests.e2e.harness import (
    CLUSTER_ID,
    Stack,
    eventually,
    in_process_worker,
    in_thread,
    new_task_queue,
    running_watcher,
    start_test_claim,
    wait_for_phase,
    workload_pod,
)
from tests.providers.harness_plugin import (
    INSTANCE_TYPE,
    REGION,
    ReferencePlugin,
    running_reference,
)
from worker.settings import Settings

POOL = "e2e-plugin"
SECRET = "e2e-plugin-token"


@pytest_asyncio.fixture(loop_scope="session")
async def plugin() -> AsyncIterator[ReferencePlugin]:
    with running_reference(machines=2) as running:
        yield running


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    temporal_client: Client,
    kube: k8s.ApiClient,
    sim_cluster: SimulatedCluster,
    kubeconfig: Path,
    plugin: ReferencePlugin,
) -> AsyncIterator[Stack]:
    """The shared cluster, its kubelets booting the plug-in's machines too, and a worker the
    operator lets call the plug-in."""
    kubelets = sim_cluster.kubelets
    assert kubelets is not None
    kubelets.add_cloud(plugin)
    settings = Settings(
        kubeconfig=kubeconfig,
        task_queue=new_task_queue(),
        cluster_id=CLUSTER_ID,
        allowed_endpoints={**sim_cluster.endpoints(), "plugin": [plugin.endpoint]},
    )
    try:
        yield Stack(temporal_client, kube, sim_cluster, settings.task_queue, settings)
    finally:
        kubelets.clouds = [c for c in kubelets.clouds if c is not plugin]


def plugin_pool(cluster: SimulatedCluster, kube: k8s.ApiClient, plugin: ReferencePlugin) -> None:
    """Secret, NodeClass (a `plugin` block, nothing else) and NodePool `e2e-plugin`."""
    core = k8s.CoreV1Api(kube)
    custom = k8s.CustomObjectsApi(kube)
    secret = k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(name=SECRET), string_data={"token": plugin.credential}
    )
    core.create_namespaced_secret("default", secret)
    bodies: list[tuple[str, dict[str, Any]]] = [
        (
            "nodeclasses",
            {
                "apiVersion": "cloudburst.io/v1alpha1",
                "kind": "NodeClass",
                "metadata": {"name": POOL, "namespace": "default"},
                "spec": {
                    "plugin": plugin.block(SECRET, "token"),
                    "join": {
                        "hostApiServer": cluster.kube_url.replace("http://", "https://"),
                        "kindClusterName": "cloudburst-test",
                        "tokenTtlMinutes": 30,
                        "registrationTimeoutSeconds": 60,
                    },
                },
            },
        ),
        (
            "nodepools",
            {
                "apiVersion": "cloudburst.io/v1alpha1",
                "kind": "NodePool",
                "metadata": {"name": POOL, "namespace": "default"},
                "spec": {
                    "nodeClassRef": POOL,
                    "requirements": {"allowedProviders": ["plugin"]},
                    "template": {"labels": {"test-pool": POOL}},
                    "disruption": {"ttlSecondsAfterEmpty": 2, "terminationGracePeriodSeconds": 30},
                },
            },
        ),
    ]
    for plural, body in bodies:
        custom.create_namespaced_custom_object("cloudburst.io", "v1alpha1", "default", plural, body)


def remove_plugin_pool(kube: k8s.ApiClient) -> None:
    custom = k8s.CustomObjectsApi(kube)
    for plural in ("nodepools", "nodeclasses"):
        with contextlib.suppress(k8s.ApiException):
            custom.delete_namespaced_custom_object(
                "cloudburst.io", "v1alpha1", "default", plural, POOL
            )
    with contextlib.suppress(k8s.ApiException):
        k8s.CoreV1Api(kube).delete_namespaced_secret(SECRET, "default")


async def test_a_claim_lives_its_whole_life_on_a_plugin(
    stack: Stack, plugin: ReferencePlugin
) -> None:
    await in_thread(plugin_pool, stack.cluster, stack.kube, plugin)
    try:
        await claim_on_plugin(stack, plugin)
    finally:
        await in_thread(remove_plugin_pool, stack.kube)


async def claim_on_plugin(stack: Stack, plugin: ReferencePlugin) -> None:
    offering = Offering(provider="plugin", region=REGION, instance_type=INSTANCE_TYPE)
    core = stack.core
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        name, handle = await start_test_claim(stack, POOL, [offering])
        app = f"{POOL}-app"
        await in_thread(core.create_namespaced_pod, "default", workload_pod(app, name))
        await eventually(
            lambda: in_thread(core.read_namespaced_pod, app, "default"),
            lambda p: p.spec.node_name == name and p.status.phase == "Running",
            timeout_s=40,
        )
        status = await wait_for_phase(handle, NodeClaimPhase.READY, timeout_s=20)
        assert status.instance_id is not None
        _, region, native = status.instance_id.split("/", 2)
        assert status.instance_id.startswith(f"plugin/{REGION}/")
        # The node is the machine's: the providerID the plug-in's seed gave it.
        node = await in_thread(core.read_node, name)
        assert node.spec.provider_id == f"plugin:///{region}/{native}"
        seeded = plugin.peek(native)
        assert seeded is not None and seeded["provider_id"] == node.spec.provider_id
        assert node.metadata.labels[labels.PROVIDER] == "plugin"
        assert node.metadata.labels["node.kubernetes.io/instance-type"] == INSTANCE_TYPE
        machine = plugin.record(native).machine
        await in_thread(core.delete_namespaced_pod, app, "default")

        final = await asyncio.wait_for(handle.result(), timeout=60)
        assert final.phase == NodeClaimPhase.DELETED
        assert final.deletion_reason == "Empty"

    assert plugin.record(native) is None
    assert plugin.created_count(name) == 1
    assert not (plugin.seeds / machine).exists()  # the script left with the machine
    history = (await handle.fetch_history()).to_json()
    assert plugin.credential not in history
