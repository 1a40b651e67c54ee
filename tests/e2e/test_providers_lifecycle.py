"""A NodeClaim's whole life through each real provider module and its local stand-in.

The real SDK creates the VM at the stand-in, the simulated kubelets boot it with the real
bootstrap script, a pod runs on the node, the empty node is scaled down and the SDK deletes
the VM. One NodeClass per provider (fake block + that provider's block), so that one
cloud's block cannot break another's run. Providers whose stand-in does not exist here
(yet) are skipped, saying why.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes import client as k8s
from temporalio.client import Client

from activities.providers import supported_providers
from api import NodeClaimPhase, labels
from sim.clouds import KNOWN_STANDINS
from sim.cluster import SimulatedCluster
from sim.dev.stack import CREDENTIAL_KEY, credential_secret, standin_offering
from tests.e2e.harness import (
    Stack,
    eventually,
    in_process_worker,
    in_thread,
    running_watcher,
    stack_on,
    start_test_claim,
    wait_for_phase,
    workload_pod,
)
from tests.histories import payload_data

PROVIDERS = ["fake", *KNOWN_STANDINS]
REPO = Path(__file__).resolve().parents[2]


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    temporal_client: Client,
    multicloud_kube: k8s.ApiClient,
    multicloud_cluster: SimulatedCluster,
    multicloud_kubeconfig: Path,
) -> Stack:
    return stack_on(temporal_client, multicloud_kube, multicloud_cluster, multicloud_kubeconfig)


def _upsert(create: Any, patch: Any) -> None:
    try:
        create()
    except k8s.ApiException as err:
        if err.status != 409:
            raise
        patch()


def provider_pool(cluster: SimulatedCluster, kube: k8s.ApiClient, provider: str) -> str:
    """Secret + NodeClass `e2e-<provider>` + NodePool `e2e-<provider>` on that cloud."""
    core = k8s.CoreV1Api(kube)
    custom = k8s.CustomObjectsApi(kube)
    fake = cluster.standins["fake"]
    blocks = {"fake": fake.nodeclass_block(credential_secret("fake"), "token")}
    secrets = {credential_secret("fake"): {"token": fake.credential}}
    if provider != "fake":
        handle = cluster.standins[provider]
        secrets[credential_secret(provider)] = {CREDENTIAL_KEY: handle.credential}
        blocks[provider] = handle.nodeclass_block(credential_secret(provider), CREDENTIAL_KEY)
    for name, data in secrets.items():
        secret = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=name), string_data=data)
        _upsert(
            lambda b=secret: core.create_namespaced_secret("default", b),
            lambda b=secret, n=name: core.replace_namespaced_secret(n, "default", b),
        )
    name = f"e2e-{provider}"
    node_class = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodeClass",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            **blocks,
            "join": {
                "hostApiServer": cluster.kube_url.replace("http://", "https://"),
                "kindClusterName": "cloudburst-test",
                "tokenTtlMinutes": 30,
                "registrationTimeoutSeconds": 120,
            },
        },
    }
    pool = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeClassRef": name,
            "requirements": {"allowedProviders": [provider]},
            "template": {"labels": {"test-pool": name}},
            # Long enough for kube-scheduler to bind the waiting workload once the node is
            # Ready: it retries a pod it found no room for after a back-off that doubles with
            # each try (1, 2, 4, 8 s...), and one it binds to a node deleted meanwhile stays
            # Pending.
            "disruption": {"ttlSecondsAfterEmpty": 20, "terminationGracePeriodSeconds": 30},
        },
    }
    for plural, body in (("nodeclasses", node_class), ("nodepools", pool)):
        _upsert(
            lambda p=plural, b=body: custom.create_namespaced_custom_object(
                "cloudburst.io", "v1alpha1", "default", p, b
            ),
            lambda p=plural, b=body: custom.patch_namespaced_custom_object(
                "cloudburst.io", "v1alpha1", "default", p, name, b
            ),
        )
    return name


def vms_of(cluster: SimulatedCluster, provider: str, claim: str) -> tuple[int, int]:
    """(VMs ever created for the claim, VMs of it the cloud still has)."""
    if provider == "fake":
        created = int(cluster.cloud.stats()["created_by_name"].get(claim, 0))
        return created, sum(
            1
            for vm in cluster.cloud.list_instances()
            if vm["labels"].get(labels.NODECLAIM) == claim
        )
    cloud = cluster.standins[provider].cloud
    created = sum(int(n) for k, n in cloud.stats()["created_by_name"].items() if claim in str(k))
    live = 0
    for native in cloud.instance_states():
        vm = cloud.peek(native) or {}
        if (
            claim in str(vm.get("name") or "")
            or (vm.get("labels") or {}).get(labels.NODECLAIM) == claim
        ):
            live += 1
    return created, live


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_claim_lives_its_whole_life_on_each_provider(stack: Stack, provider: str) -> None:
    cluster = stack.cluster
    if provider not in cluster.standins:
        pytest.skip(cluster.missing_standins.get(provider, f"no {provider} stand-in"))
    if provider not in supported_providers():
        pytest.skip(f"no provider module is registered for {provider}")
    pool = await in_thread(provider_pool, cluster, stack.kube, provider)
    offering = await in_thread(standin_offering, cluster, provider)
    core = stack.core
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        name, handle = await start_test_claim(stack, pool, [offering])
        # The workload waits for the node from the start: a slow cloud cannot let the empty
        # TTL take the node before the test has looked at it.
        app = f"{pool}-app"
        await in_thread(core.create_namespaced_pod, "default", workload_pod(app, name))
        await eventually(
            lambda: in_thread(core.read_namespaced_pod, app, "default"),
            lambda p: p.spec.node_name == name and p.status.phase == "Running",
            timeout_s=150,
        )
        status = await wait_for_phase(handle, NodeClaimPhase.READY, timeout_s=30)
        assert status.instance_id and status.instance_id.startswith(f"{provider}/")
        node = await in_thread(core.read_node, name)
        assert node.spec.provider_id.startswith(f"{provider}:///")
        assert node.metadata.labels[labels.PROVIDER] == provider
        assert node.metadata.labels[labels.INSTANCE_TYPE] == offering.instance_type
        assert node.metadata.labels["node.kubernetes.io/instance-type"] == offering.instance_type
        if provider == "proxmox":  # its seed ISO (the join script) went at Ready, detached
            pve = cluster.standins["proxmox"].cloud
            assert not [f for n in pve.nodes for f in pve.storage_files(n) if "seed" in f]
        await in_thread(core.delete_namespaced_pod, app, "default")

        final = await asyncio.wait_for(handle.result(), timeout=120)
        assert final.phase == NodeClaimPhase.DELETED
        assert final.deletion_reason == "Empty"

    assert vms_of(cluster, provider, name) == (1, 0)
    if provider == "scaleway":  # block volumes deleted with the server
        assert cluster.standins["scaleway"].cloud.volumes() == []
    # The cloud credential never enters the workflow history.
    credential = cluster.standins[provider].credential
    fetched = await handle.fetch_history()
    history = fetched.to_json()
    assert credential and credential not in history
    # What the history shows for each step (the Web UI's view): the short Kubernetes calls
    # ran inside the claim's workflow tasks, as local activities (a dead worker's are retried
    # with its workflow task); a VM call is an activity of its own, given up on a dead worker
    # after 5 s without a heartbeat (it beats all along, every beat billed).
    heartbeat_timeouts = {
        e.activity_task_scheduled_event_attributes.activity_type.name: (
            e.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta()
        )
        for e in fetched.events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    assert heartbeat_timeouts["create_instance"] == timedelta(seconds=5)
    assert "sync_nodeclaim" not in heartbeat_timeouts
    assert "prepare_bootstrap" not in heartbeat_timeouts
    local = [
        json.loads(payload_data(e.marker_recorded_event_attributes.details["data"].payloads[0]))
        for e in fetched.events
        if e.HasField("marker_recorded_event_attributes")
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    assert {"sync_nodeclaim", "prepare_bootstrap"} <= {m["activity_type"] for m in local}


def test_demo_lifecycle_through_hetzner_exits_0() -> None:
    """`cloudburst demo --scenario lifecycle --provider hetzner --json` (a subprocess)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "demo",
            "--scenario",
            "lifecycle",
            "--provider",
            "hetzner",
            "--json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["ok"] and report["provider"] == "hetzner"
    assert report["offering"].startswith("hetzner/") and report["vms_created"] == 1
    assert report["vms_leaked"] == 0 and report["pods_bound"] == 1
    # What the claim's life costs in history: 180 events before the quiet-by-default work,
    # 142 before its steps ran side by side, 120 with the fake cloud since. Side-by-side
    # activities share a workflow task only when they finish close together: some slack.
    assert 0 < report["history_events"] <= 126
