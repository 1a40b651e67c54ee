"""Nodes leave only when they should, never more at once than the pool allows."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest_asyncio
from kubernetes import client as k8s
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from api import NodeClaimPhase, NodeClaimStatus, labels
from api.limits import MIN_EXPIRY_S
from api.messages import ScaleDownRequest, claim_workflow_id
from api.nodepool.messages import PoolStatus, pool_workflow_id
from sim.cluster import SimulatedCluster
from tests.e2e.harness import (
    CLUSTER_ID,
    FAST,
    Stack,
    eventually,
    in_process_worker,
    in_thread,
    make_pool,
    new_task_queue,
    pool_pod,
    running_trigger,
    running_watcher,
    serving,
)
from tests.e2e.test_operator_cli import cloudburst
from worker.settings import Settings
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.nodepool import NodePoolWorkflow

# Claims of these tests poll their node and VM every second (the watcher is the fast path).
TIMINGS = FAST.model_copy(update={"ready_poll_interval_s": 1})


@pytest_asyncio.fixture(loop_scope="session")
async def stack(stack: Stack) -> AsyncIterator[Stack]:
    async with serving(stack, timings=TIMINGS):
        yield stack


@pytest_asyncio.fixture(loop_scope="session")
async def expiring(
    skipping_env: WorkflowEnvironment,
    kube: k8s.ApiClient,
    sim_cluster: SimulatedCluster,
    kubeconfig: Path,
) -> AsyncIterator[Stack]:
    """The same stack on a server where each workflow has its own virtual clock: a claim's
    expiry (ten minutes at least, the model's floor) comes when the test moves its clock on."""
    queue = new_task_queue()
    settings = Settings(
        kubeconfig=kubeconfig,
        task_queue=queue,
        cluster_id=CLUSTER_ID,
        allowed_endpoints=sim_cluster.endpoints(),
    )
    stack = Stack(skipping_env.client, kube, sim_cluster, queue, settings)
    # Rare safety-net polls: each is real work that stops the claim's clock from skipping.
    timings = FAST.model_copy(update={"ready_poll_interval_s": 1800})
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, kube),
        running_trigger(stack, timings=timings),
    ):
        yield stack


async def expire_the_claim_of(
    stack: Stack, env: WorkflowEnvironment, pool_name: str
) -> WorkflowHandle[NodeClaimWorkflow, NodeClaimStatus]:
    """Move the pool's one claim past its expiry (`MIN_EXPIRY_S`) on its own clock."""
    [claim] = (await status_of(stack, pool_name)).claims
    handle = stack.temporal.get_workflow_handle_for(
        NodeClaimWorkflow.run, claim_workflow_id("default", claim.name)
    )
    await env.fast_forward(handle, timedelta(seconds=MIN_EXPIRY_S + 60))
    return handle


def pool(kube: k8s.ApiClient, name: str, **disruption: Any) -> None:
    """A pool whose disruption block is the defaults of make_pool plus `disruption`."""
    make_pool(kube, name, empty_ttl=disruption.pop("empty_ttl", 3600))
    patch = {"spec": {"disruption": disruption}} if disruption else None
    if patch:
        k8s.CustomObjectsApi(kube).patch_namespaced_custom_object(
            "cloudburst.io", "v1alpha1", "default", "nodepools", name, patch
        )


async def status_of(stack: Stack, name: str) -> PoolStatus:
    handle = stack.temporal.get_workflow_handle_for(
        NodePoolWorkflow.run, pool_workflow_id("default", name)
    )
    return await handle.query(NodePoolWorkflow.status)


async def vms(stack: Stack, name: str) -> list[dict[str, Any]]:
    return stack.cluster.cloud.list_instances(label_selector={labels.NODEPOOL: name})


async def add_pods(stack: Stack, name: str, count: int, cpu: str = "20", **meta: Any) -> None:
    for index in range(count):
        pod = pool_pod(f"{name}-{index}", name, cpu=cpu, memory="1Gi")
        if meta.get("annotations"):
            pod.metadata.annotations = meta["annotations"]
        if meta.get("tolerations"):
            pod.spec.tolerations = meta["tolerations"]
        await in_thread(stack.core.create_namespaced_pod, "default", pod)


async def running_pods(stack: Stack, name: str) -> list[k8s.V1Pod]:
    listing = await in_thread(
        stack.core.list_namespaced_pod, "default", label_selector=f"pool={name}"
    )
    return [p for p in listing.items if p.status.phase == "Running"]


async def delete_pods(stack: Stack, name: str) -> None:
    await in_thread(
        stack.core.delete_collection_namespaced_pod, "default", label_selector=f"pool={name}"
    )


def disrupting(status: PoolStatus) -> set[str]:
    deleting = {c.name for c in status.claims if c.phase == NodeClaimPhase.DELETING}
    return deleting | set(status.permits)


async def test_a_budget_of_one_drains_empty_nodes_one_at_a_time(stack: Stack) -> None:
    count = 10
    # The TTL outlasts kube-scheduler's back-off before it binds each pod to its new node: the
    # budget is judged on nodes emptied together, not on nodes still waiting for their pods.
    pool(stack.kube, "budget1", empty_ttl=15, budgets=[{"nodes": "1"}])
    # One 20-CPU pod per node: ten nodes.
    await add_pods(stack, "budget1", count)
    await eventually(lambda: running_pods(stack, "budget1"), lambda p: len(p) == count, 120)
    assert len(await vms(stack, "budget1")) == count

    await delete_pods(stack, "budget1")
    most = 0
    for _ in range(600):
        status = await status_of(stack, "budget1")
        most = max(most, len(disrupting(status)))
        if status.nodes == 0:
            break
        await asyncio.sleep(0.1)
    assert most == 1, f"{most} nodes were disrupted at once"
    await eventually(lambda: vms(stack, "budget1"), lambda v: v == [], 30)


async def test_a_cron_budget_blocks_during_its_window(stack: Stack) -> None:
    always = {"nodes": "0", "schedule": "* * * * *", "duration": "1h"}
    pool(stack.kube, "window", empty_ttl=1, budgets=[always])
    await add_pods(stack, "window", 1, cpu="500m")
    await eventually(lambda: running_pods(stack, "window"), lambda p: len(p) == 1, 60)
    await delete_pods(stack, "window")
    status = await eventually(
        lambda: status_of(stack, "window"), lambda s: bool(s.disruption_queue), 30
    )
    assert status.disruptions_allowed["Empty"] == 0
    await asyncio.sleep(2)  # the window holds: the empty node stays
    status = await status_of(stack, "window")
    assert status.nodes == 1 and status.claims[0].phase == NodeClaimPhase.READY

    # The window is lifted (the budget is changed): the node goes.
    k8s.CustomObjectsApi(stack.kube).patch_namespaced_custom_object(
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodepools",
        "window",
        {"spec": {"disruption": {"budgets": [{"nodes": "1"}]}}},
    )
    await eventually(lambda: vms(stack, "window"), lambda v: v == [], 60)


async def test_expiry_ignores_budgets(expiring: Stack, skipping_env: WorkflowEnvironment) -> None:
    stack = expiring
    never = {"nodes": "0"}
    pool(stack.kube, "expiry", budgets=[never], ttlSecondsUntilExpired=MIN_EXPIRY_S)
    await add_pods(stack, "expiry", 1, cpu="500m")
    await eventually(lambda: running_pods(stack, "expiry"), lambda p: len(p) == 1, 60)
    handle = await expire_the_claim_of(stack, skipping_env, "expiry")
    final = await asyncio.wait_for(handle.result(), timeout=60)
    assert final.phase == NodeClaimPhase.DELETED
    assert final.deletion_reason == "Expired"
    await delete_pods(stack, "expiry")


async def test_do_not_disrupt_blocks_a_voluntary_scale_down_until_forced(stack: Stack) -> None:
    pool(stack.kube, "guarded")
    await add_pods(
        stack, "guarded", 1, cpu="500m", annotations={"karpenter.sh/do-not-disrupt": "true"}
    )
    await eventually(lambda: running_pods(stack, "guarded"), lambda p: len(p) == 1, 60)
    [claim] = (await status_of(stack, "guarded")).claims
    handle = stack.temporal.get_workflow_handle_for(
        NodeClaimWorkflow.run, claim_workflow_id("default", claim.name)
    )
    answer = await handle.execute_update(
        NodeClaimWorkflow.request_scale_down, ScaleDownRequest(reason="tidy up")
    )
    assert answer.accepted and "budget" in answer.reason
    status = await eventually(
        lambda: status_of(stack, "guarded"), lambda s: claim.name in s.disruption_blocked, 30
    )
    assert "default/guarded-0" in status.disruption_blocked[claim.name]
    assert (await handle.query(NodeClaimWorkflow.status)).phase == NodeClaimPhase.READY
    # The Event is recorded by an activity after the status changed: it follows shortly.
    await eventually(
        lambda: in_thread(
            stack.core.list_namespaced_event, "default", field_selector="reason=DisruptionBlocked"
        ),
        lambda events: any(e.involved_object.name == claim.name for e in events.items),
        30,
    )

    await handle.signal(
        NodeClaimWorkflow.scale_down, ScaleDownRequest(reason="operator", force=True)
    )
    final = await asyncio.wait_for(handle.result(), timeout=60)
    assert final.phase == NodeClaimPhase.DELETED and final.deletion_reason == "operator"
    await delete_pods(stack, "guarded")


async def seconds_from_drain_start_to_pod_gone(
    stack: Stack, env: WorkflowEnvironment, pool_name: str, pod_name: str
) -> tuple[float, NodeClaimStatus]:
    """Expire the pool's one claim and time its pod's departure from the start of its drain,
    in real time (the drain counts its grace period by the worker's clock; the claim's own
    clock is moved on by the test)."""
    [claim] = (await status_of(stack, pool_name)).claims
    handle = stack.temporal.get_workflow_handle_for(
        NodeClaimWorkflow.run, claim_workflow_id("default", claim.name)
    )

    async def drain_start() -> float:
        while True:
            for event in (await handle.fetch_history()).events:
                scheduled = event.activity_task_scheduled_event_attributes
                if scheduled.activity_type.name == "drain_node":
                    return time.time()
            await asyncio.sleep(0.05)

    async def first_gone() -> float:
        while True:
            try:
                pod = await in_thread(stack.core.read_namespaced_pod, pod_name, "default")
            except k8s.ApiException as err:
                if err.status == 404:
                    return time.time()
                raise
            if pod.metadata.deletion_timestamp is not None:
                return time.time()
            await asyncio.sleep(0.05)

    started = asyncio.create_task(drain_start())
    gone = asyncio.create_task(first_gone())
    fast_forward = asyncio.create_task(
        env.fast_forward(handle, timedelta(seconds=MIN_EXPIRY_S + 60))
    )
    final = await asyncio.wait_for(handle.result(), timeout=90)
    drained_from = await asyncio.wait_for(started, timeout=5)
    gone_at = await asyncio.wait_for(gone, timeout=30)
    await asyncio.wait_for(fast_forward, timeout=30)
    return gone_at - drained_from, final


async def test_expiry_lets_do_not_disrupt_pods_finish_within_the_grace_period(
    expiring: Stack, skipping_env: WorkflowEnvironment
) -> None:
    stack = expiring
    grace = 6
    pool(
        stack.kube,
        "patient",
        ttlSecondsUntilExpired=MIN_EXPIRY_S,
        terminationGracePeriodSeconds=grace,
    )
    await add_pods(
        stack, "patient", 1, cpu="500m", annotations={"cloudburst.io/do-not-disrupt": "true"}
    )
    await eventually(lambda: running_pods(stack, "patient"), lambda p: len(p) == 1, 60)
    waited, final = await seconds_from_drain_start_to_pod_gone(
        stack, skipping_env, "patient", "patient-0"
    )
    assert final.deletion_reason == "Expired"
    # Not evicted with the rest: it had the whole grace period, then it was deleted. (The
    # drain's start is seen by polling the claim's history, up to a second late on a loaded
    # machine; an eviction at the start would show as about 0.)
    assert waited >= grace - 1, waited
    assert final.phase == NodeClaimPhase.DELETED


async def test_a_pdb_allowing_no_disruption_holds_the_drain_until_the_grace_period(
    expiring: Stack, skipping_env: WorkflowEnvironment
) -> None:
    stack = expiring
    grace = 6
    pool(
        stack.kube,
        "guardedpdb",
        ttlSecondsUntilExpired=MIN_EXPIRY_S,
        terminationGracePeriodSeconds=grace,
    )
    policy = k8s.PolicyV1Api(stack.kube)
    budget = k8s.V1PodDisruptionBudget(
        metadata=k8s.V1ObjectMeta(name="guardedpdb", namespace="default"),
        spec=k8s.V1PodDisruptionBudgetSpec(
            min_available=1, selector=k8s.V1LabelSelector(match_labels={"pool": "guardedpdb"})
        ),
    )
    await in_thread(policy.create_namespaced_pod_disruption_budget, "default", budget)
    try:
        await add_pods(stack, "guardedpdb", 1, cpu="500m")
        await eventually(lambda: running_pods(stack, "guardedpdb"), lambda p: len(p) == 1, 60)
        waited, final = await seconds_from_drain_start_to_pod_gone(
            stack, skipping_env, "guardedpdb", "guardedpdb-0"
        )
        assert final.deletion_reason == "Expired"
        # Every eviction was refused (429) until the grace period was over; then forced (the
        # drain's start is seen up to a second late, as above).
        assert waited >= grace - 1, waited
        assert final.phase == NodeClaimPhase.DELETED
    finally:
        await in_thread(policy.delete_namespaced_pod_disruption_budget, "guardedpdb", "default")
        await delete_pods(stack, "guardedpdb")


async def test_a_vm_deleted_behind_our_back_is_a_lost_node_and_is_replaced(stack: Stack) -> None:
    pool(stack.kube, "lost", nodeUnreachableGracePeriodSeconds=2)
    apps = k8s.AppsV1Api(stack.kube)
    deployment = k8s.V1Deployment(
        metadata=k8s.V1ObjectMeta(name="lost-app", namespace="default"),
        spec=k8s.V1DeploymentSpec(
            replicas=1,
            selector=k8s.V1LabelSelector(match_labels={"pool": "lost"}),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels={"pool": "lost"}),
                spec=pool_pod("x", "lost").spec,
            ),
        ),
    )
    await in_thread(apps.create_namespaced_deployment, "default", deployment)
    try:
        [pod] = await eventually(lambda: running_pods(stack, "lost"), lambda p: len(p) == 1, 60)
        first_node = pod.spec.node_name
        [vm] = await vms(stack, "lost")
        stack.cluster.cloud.delete_behind_our_back(vm["id"])

        handle = stack.temporal.get_workflow_handle_for(
            NodeClaimWorkflow.run, claim_workflow_id("default", str(first_node))
        )
        final = await asyncio.wait_for(handle.result(), timeout=60)
        assert final.deletion_reason == "NodeLost"
        # The workload comes back on a new node, with nobody touching anything.
        [pod] = await eventually(
            lambda: running_pods(stack, "lost"),
            lambda p: len(p) == 1 and p[0].spec.node_name != first_node,
            90,
        )
        events = await in_thread(
            stack.core.list_namespaced_event, "default", field_selector="reason=NodeLost"
        )
        assert any(e.involved_object.name == first_node for e in events.items)
    finally:
        await in_thread(apps.delete_namespaced_deployment, "lost-app", "default")
        await delete_pods(stack, "lost")


async def test_a_deleted_node_object_is_a_lost_node(stack: Stack) -> None:
    pool(stack.kube, "nodegone")
    await add_pods(stack, "nodegone", 1, cpu="500m")
    [pod] = await eventually(lambda: running_pods(stack, "nodegone"), lambda p: len(p) == 1, 60)
    node = pod.spec.node_name
    await in_thread(stack.core.delete_node, node)
    handle = stack.temporal.get_workflow_handle_for(
        NodeClaimWorkflow.run, claim_workflow_id("default", str(node))
    )
    final = await asyncio.wait_for(handle.result(), timeout=60)
    assert final.deletion_reason == "NodeLost"
    assert [vm for vm in await vms(stack, "nodegone") if vm["name"] == node] == []
    await delete_pods(stack, "nodegone")


async def test_a_vm_gone_at_the_provider_is_found_by_the_claims_poll(stack: Stack) -> None:
    # A long unreachable grace: only the claim's own look at its VM can notice.
    pool(stack.kube, "vmgone", nodeUnreachableGracePeriodSeconds=3600)
    await add_pods(stack, "vmgone", 1, cpu="500m")
    [pod] = await eventually(lambda: running_pods(stack, "vmgone"), lambda p: len(p) == 1, 60)
    node = pod.spec.node_name
    [vm] = await vms(stack, "vmgone")
    stack.cluster.cloud.terminate(vm["id"])
    handle = stack.temporal.get_workflow_handle_for(
        NodeClaimWorkflow.run, claim_workflow_id("default", str(node))
    )
    final = await asyncio.wait_for(handle.result(), timeout=60)
    assert final.deletion_reason == "NodeLost"
    await delete_pods(stack, "vmgone")


async def test_drift_replaces_nodes_within_budgets_replacement_first(stack: Stack) -> None:
    pool(stack.kube, "drift", budgets=[{"nodes": "1"}])
    # Nodes with a taint (as a tenant pool's all are): the replacement is planned for pods
    # that tolerate it, as the node's do.
    taint = {"key": "dedicated", "value": "drift", "effect": "NoSchedule"}
    k8s.CustomObjectsApi(stack.kube).patch_namespaced_custom_object(
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodepools",
        "drift",
        {"spec": {"template": {"labels": {"test-pool": "drift"}, "taints": [taint]}}},
    )
    toleration = k8s.V1Toleration(key="dedicated", value="drift", effect="NoSchedule")
    await add_pods(stack, "drift", 2, tolerations=[toleration])
    await eventually(lambda: running_pods(stack, "drift"), lambda p: len(p) == 2, 90)
    old = {c.name for c in (await status_of(stack, "drift")).claims}

    # The template changes: every existing node has drifted.
    k8s.CustomObjectsApi(stack.kube).patch_namespaced_custom_object(
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodepools",
        "drift",
        {"spec": {"template": {"labels": {"test-pool": "drift", "tier": "v2"}, "taints": [taint]}}},
    )
    most = 0
    replaced_first = True
    for _ in range(900):
        status = await status_of(stack, "drift")
        claims = {c.name: c for c in status.claims}
        most = max(most, len(disrupting(status)))
        for name in disrupting(status) & old:
            replacement = claims[name].replaced_by if name in claims else None
            ready = replacement in claims and claims[replacement].phase == NodeClaimPhase.READY
            replaced_first = replaced_first and (replacement is None or ready)
        if not (set(claims) & old):
            break
        await asyncio.sleep(0.1)
    assert not (set(claims) & old), "drifted nodes were not replaced"
    assert most <= 1
    assert replaced_first, "a drifted node was drained before its replacement was Ready"
    for vm in await vms(stack, "drift"):
        node = await in_thread(stack.core.read_node, vm["name"])
        assert node.metadata.labels.get("tier") == "v2"
    await delete_pods(stack, "drift")


# --- consolidation ---------------------------------------------------------------------------


def consolidating_pool(stack: Stack, name: str, **disruption: Any) -> None:
    pool(
        stack.kube,
        name,
        consolidationPolicy="WhenEmptyOrUnderutilized",
        consolidateAfter="1s",
        **disruption,
    )


async def deployment(
    stack: Stack, name: str, pool_name: str, cpu: str, annotations: dict[str, str] | None = None
) -> None:
    """One replica that only the pool's nodes can host; recreated elsewhere when evicted."""
    body = k8s.V1Deployment(
        metadata=k8s.V1ObjectMeta(name=name, namespace="default"),
        spec=k8s.V1DeploymentSpec(
            replicas=1,
            selector=k8s.V1LabelSelector(match_labels={"app": name}),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(
                    labels={"app": name, "pool": pool_name}, annotations=annotations
                ),
                spec=pool_pod("x", pool_name, cpu=cpu, memory="256Mi").spec,
            ),
        ),
    )
    await in_thread(k8s.AppsV1Api(stack.kube).create_namespaced_deployment, "default", body)


async def node_of(stack: Stack, app: str, not_on: str | None = None) -> str:
    """The node of the app's one Running pod (waiting for it, elsewhere than `not_on`)."""
    listing = await eventually(
        lambda: in_thread(stack.core.list_namespaced_pod, "default", label_selector=f"app={app}"),
        lambda found: (
            len(found.items) == 1
            and found.items[0].status.phase == "Running"
            and found.items[0].spec.node_name != not_on
        ),
        90,
    )
    return str(listing.items[0].spec.node_name)


async def two_nodes_one_underutilized(
    stack: Stack, name: str, small_annotations: dict[str, str] | None = None
) -> tuple[str, str]:
    """A small app alone on one node, a big one on a second node that has room for the small
    one: the first node is underutilized. Returns (small's node, big's node)."""
    await deployment(stack, f"{name}-small", name, cpu="300m", annotations=small_annotations)
    small_node = await node_of(stack, f"{name}-small")
    # Too big for the small app's node: a second, bigger node, with room to spare.
    await deployment(stack, f"{name}-big", name, cpu="2500m")
    big_node = await node_of(stack, f"{name}-big")
    assert small_node != big_node
    return small_node, big_node


async def delete_apps(stack: Stack, name: str) -> None:
    apps = k8s.AppsV1Api(stack.kube)
    for app in (f"{name}-small", f"{name}-big"):
        await in_thread(apps.delete_namespaced_deployment, app, "default")
    await in_thread(
        stack.core.delete_collection_namespaced_pod, "default", label_selector=f"pool={name}"
    )


async def test_consolidation_removes_an_underutilized_node(stack: Stack) -> None:
    consolidating_pool(stack, "consol")
    try:
        small_node, big_node = await two_nodes_one_underutilized(stack, "consol")
        handle = stack.temporal.get_workflow_handle_for(
            NodeClaimWorkflow.run, claim_workflow_id("default", small_node)
        )
        final = await asyncio.wait_for(handle.result(), timeout=90)
        assert final.deletion_reason == "Underutilized"
        # The small app moved onto the node that had room; the pool is one node now.
        assert await node_of(stack, "consol-small", not_on=small_node) == big_node
        assert [vm["name"] for vm in await vms(stack, "consol")] == [big_node]
        status = await status_of(stack, "consol")
        assert [c.name for c in status.claims] == [big_node]
    finally:
        await delete_apps(stack, "consol")


async def test_consolidation_never_disrupts_below_the_savings_threshold(stack: Stack) -> None:
    consolidating_pool(stack, "frugal", consolidationMinSavingsEurPerHour=1.0)
    try:
        small_node, big_node = await two_nodes_one_underutilized(stack, "frugal")
        status = await eventually(
            lambda: status_of(stack, "frugal"),
            lambda s: "below the threshold" in s.consolidation,
            60,
        )
        assert f"delete {small_node}" in status.consolidation, status.consolidation
        assert {c.name for c in status.claims} == {small_node, big_node}
        assert not disrupting(status)
    finally:
        await delete_apps(stack, "frugal")


async def test_do_not_disrupt_blocks_consolidation(stack: Stack) -> None:
    consolidating_pool(stack, "pinned")
    try:
        small_node, big_node = await two_nodes_one_underutilized(
            stack, "pinned", small_annotations={"cloudburst.io/do-not-disrupt": "true"}
        )
        status = await eventually(
            lambda: status_of(stack, "pinned"),
            lambda s: "do-not-disrupt" in s.consolidation,
            60,
        )
        assert small_node in status.consolidation, status.consolidation
        assert {c.name for c in status.claims} == {small_node, big_node}
        assert not disrupting(status)
        # Where users look: the node's verdict names the pod, in the pool's status, an
        # Unconsolidatable Event on the Node, and `cloudburst explain node`.
        [pinned] = (
            await in_thread(
                stack.core.list_namespaced_pod, "default", label_selector="app=pinned-small"
            )
        ).items
        pinned_name = f"default/{pinned.metadata.name}"
        assert status.consolidation_verdicts[small_node] == f"do-not-disrupt pods: {pinned_name}"
        # A verdict of its own on the node (an earlier one may say it was too young then).
        await eventually(
            lambda: in_thread(
                stack.core.list_namespaced_event,
                "default",
                field_selector=f"involvedObject.kind=Node,involvedObject.name={small_node},"
                "reason=Unconsolidatable",
            ),
            lambda found: f"do-not-disrupt pods: {pinned_name}" in {e.message for e in found.items},
            30,
        )
        result = await cloudburst(stack, "explain", "node", small_node, "-o", "json")
        assert result.exit_code == 0, result.output
        answer = json.loads(result.stdout)
        assert answer["summary"] == f"do-not-disrupt pods: {pinned_name}"
        assert answer["do_not_disrupt"] == [pinned_name]
        assert answer["consolidation"] == f"do-not-disrupt pods: {pinned_name}"
    finally:
        await delete_apps(stack, "pinned")


async def test_consolidation_replaces_a_node_with_a_cheaper_one_replacement_first(
    stack: Stack,
) -> None:
    consolidating_pool(stack, "shrink")
    apps = k8s.AppsV1Api(stack.kube)
    try:
        await deployment(stack, "shrink-big", "shrink", cpu="2500m")
        node = await node_of(stack, "shrink-big")
        await deployment(stack, "shrink-small", "shrink", cpu="300m")
        assert await node_of(stack, "shrink-small") == node
        # The pool has looked with both apps there and found nothing to do; it then sleeps
        # (no timer of its own): the big app leaving must be what wakes it.
        status = await eventually(
            lambda: status_of(stack, "shrink"),
            lambda s: "no node is underutilized" in s.consolidation,
            60,
        )
        [before] = status.claims
        await asyncio.sleep(2)  # past consolidateAfter: any look already due has been had
        # The big app leaves: a node sized for it now carries 300m.
        await in_thread(apps.delete_namespaced_deployment, "shrink-big", "default")

        handle = stack.temporal.get_workflow_handle_for(
            NodeClaimWorkflow.run, claim_workflow_id("default", str(node))
        )
        final = await asyncio.wait_for(handle.result(), timeout=90)
        assert final.deletion_reason == "Underutilized"
        new_node = await node_of(stack, "shrink-small", not_on=node)
        [after] = (await status_of(stack, "shrink")).claims
        assert after.name == new_node
        assert (after.offering.price_eur_per_hour or 0) < (before.offering.price_eur_per_hour or 0)
        # The replacement was Ready before the old node began to drain.
        replacement = await stack.temporal.get_workflow_handle_for(
            NodeClaimWorkflow.run, claim_workflow_id("default", new_node)
        ).query(NodeClaimWorkflow.status)
        disrupting_since = final.condition("Disrupting")
        assert replacement.ready_at is not None and disrupting_since is not None
        assert replacement.ready_at <= disrupting_since.last_transition_time
    finally:
        await in_thread(apps.delete_namespaced_deployment, "shrink-small", "default")
        await delete_pods(stack, "shrink")
