"""A spot node is interrupted and its workload comes back on a replacement, end to end.

A NodePool that allows spot and on-demand on AWS gets a spot node for a pending pod (the
real SDK asks moto, behind the EC2 stand-in, for InstanceMarketOptions spot). The stand-in
then reclaims the VM as EC2 does: a `spot/instance-action` notice first, which the
simulated kubelet (playing aws-node-termination-handler) turns into the node's interruption
taint, and the instance terminated with `Server.SpotInstanceTermination` once the notice
runs out. The claim ends `Interrupted`, the Deployment's pod runs again on another node, and
no VM is left behind once the workload is gone.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes import client as k8s
from temporalio.client import Client

from api import labels as L
from api.messages import claim_workflow_id
from api.nodeclaim import ConditionType
from sim.cluster import SimulatedCluster
from sim.dev.stack import CREDENTIAL_KEY, credential_secret
from tests.e2e.harness import (
    Stack,
    eventually,
    in_process_worker,
    in_thread,
    pool_pod,
    running_trigger,
    running_watcher,
    stack_on,
)
from workflows.decisions.claim_disruption import INTERRUPTED
from workflows.nodeclaim import NodeClaimWorkflow

POOL = "e2e-spot"
NOTICE_S = 3.0


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    temporal_client: Client,
    multicloud_kube: k8s.ApiClient,
    multicloud_cluster: SimulatedCluster,
    multicloud_kubeconfig: Path,
) -> Stack:
    if "aws" not in multicloud_cluster.standins:
        pytest.skip("no AWS stand-in in this environment")
    return stack_on(temporal_client, multicloud_kube, multicloud_cluster, multicloud_kubeconfig)


def _apply(create: Any, replace: Any) -> None:
    try:
        create()
    except k8s.ApiException as err:
        if err.status != 409:
            raise
        replace()


def spot_pool(stack: Stack) -> None:
    """Secret + NodeClass + NodePool `e2e-spot`: AWS only, spot first, on-demand allowed."""
    core, custom = stack.core, stack.custom
    aws = stack.cluster.standins["aws"]
    secret_name = credential_secret("aws")
    secret = k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(name=secret_name),
        string_data={CREDENTIAL_KEY: aws.credential},
    )
    _apply(
        lambda: core.create_namespaced_secret("default", secret),
        lambda: core.replace_namespaced_secret(secret_name, "default", secret),
    )
    node_class = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodeClass",
        "metadata": {"name": POOL, "namespace": "default"},
        "spec": {
            "aws": aws.nodeclass_block(secret_name, CREDENTIAL_KEY),
            "join": {
                "hostApiServer": stack.cluster.kube_url.replace("http://", "https://"),
                "kindClusterName": "cloudburst-test",
                "tokenTtlMinutes": 30,
                "registrationTimeoutSeconds": 120,
            },
        },
    }
    pool = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": POOL, "namespace": "default"},
        "spec": {
            "nodeClassRef": POOL,
            "requirements": {"allowedProviders": ["aws"], "capacityType": ["spot", "on-demand"]},
            "template": {"labels": {"test-pool": POOL}},
            "disruption": {"ttlSecondsAfterEmpty": 2, "terminationGracePeriodSeconds": 20},
        },
    }
    for plural, body in (("nodeclasses", node_class), ("nodepools", pool)):
        _apply(
            lambda p=plural, b=body: custom.create_namespaced_custom_object(
                "cloudburst.io", "v1alpha1", "default", p, b
            ),
            lambda p=plural, b=body: custom.patch_namespaced_custom_object(
                "cloudburst.io", "v1alpha1", "default", p, POOL, b
            ),
        )


async def running_pods(stack: Stack) -> list[k8s.V1Pod]:
    listing = await in_thread(
        stack.core.list_namespaced_pod, "default", label_selector=f"pool={POOL}"
    )
    return [
        p
        for p in listing.items
        if p.status.phase == "Running" and not p.metadata.deletion_timestamp
    ]


def live_vms(stack: Stack) -> dict[str, dict[str, Any]]:
    """The pool's VMs the EC2 stand-in still has (not terminated), by instance id."""
    cloud = stack.cluster.standins["aws"].cloud
    out: dict[str, dict[str, Any]] = {}
    for native in cloud.instance_states():
        vm = cloud.peek(native)
        if vm is not None and vm["labels"].get(L.NODEPOOL) == POOL:
            out[native] = vm
    return out


def ec2_instance(stack: Stack, provider_id: str) -> dict[str, Any]:
    _, _, rest = provider_id.partition(":///")
    region, _, native = rest.partition("/")
    found = stack.cluster.standins["aws"].cloud.ec2(region).describe_instances(InstanceIds=[native])
    raw: dict[str, Any] = found["Reservations"][0]["Instances"][0]
    return raw


def pool_conditions(stack: Stack) -> dict[str, dict[str, Any]]:
    """The NodePool's status conditions, by type."""
    pool: Any = stack.custom.get_namespaced_custom_object(
        "cloudburst.io", "v1alpha1", "default", "nodepools", POOL
    )
    return {c["type"]: c for c in (pool.get("status") or {}).get("conditions") or []}


async def test_an_interrupted_spot_node_is_replaced_and_nothing_leaks(stack: Stack) -> None:
    spot_pool(stack)
    apps = k8s.AppsV1Api(stack.kube)
    deployment = k8s.V1Deployment(
        metadata=k8s.V1ObjectMeta(name=f"{POOL}-app", namespace="default"),
        spec=k8s.V1DeploymentSpec(
            replicas=1,
            selector=k8s.V1LabelSelector(match_labels={"pool": POOL}),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels={"pool": POOL}),
                spec=pool_pod("x", POOL).spec,
            ),
        ),
    )
    aws = stack.cluster.standins["aws"].cloud
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, stack.kube),
        running_trigger(stack),
    ):
        await in_thread(apps.create_namespaced_deployment, "default", deployment)
        try:
            [pod] = await eventually(lambda: running_pods(stack), lambda p: len(p) == 1, 60)
            first = pod.spec.node_name
            node = await in_thread(stack.core.read_node, first)
            assert node.metadata.labels[L.KARPENTER_CAPACITY_TYPE] == "spot"
            provider_id = str(node.spec.provider_id)
            first_vm = ec2_instance(stack, provider_id)
            assert first_vm.get("InstanceLifecycle") == "spot"
            native = first_vm["InstanceId"]
            # The shipped catalog's AWS prices are dated 2024-25: the pool says it planned
            # with old prices, where `kubectl describe nodepool` shows it.
            conditions = await eventually(
                lambda: in_thread(pool_conditions, stack), lambda c: "PricesStale" in c, 30
            )
            stale = conditions["PricesStale"]
            assert stale["status"] == "True" and "aws prices as of" in stale["message"]

            aws.interrupt(native, notice_s=NOTICE_S)
            assert aws.instance_action(native)["action"] == "terminate"
            interrupted_at = asyncio.get_running_loop().time()

            handle = stack.temporal.get_workflow_handle_for(
                NodeClaimWorkflow.run, claim_workflow_id("default", str(first))
            )
            final = await asyncio.wait_for(handle.result(), timeout=45)
            assert final.deletion_reason == INTERRUPTED
            interrupted = next(c for c in final.conditions if c.type == ConditionType.INTERRUPTED)
            assert "spot-itn" in interrupted.message

            [pod] = await eventually(
                lambda: running_pods(stack),
                lambda p: len(p) == 1 and p[0].spec.node_name != first,
                45,
            )
            rebound_s = asyncio.get_running_loop().time() - interrupted_at
            replacement = pod.spec.node_name
            # The interrupted VM is gone (reclaimed by EC2 or deleted by the claim, whichever
            # came first); the only VM left is the replacement's.
            await eventually(
                lambda: asyncio.sleep(0, live_vms(stack)),
                lambda vms: native not in vms and len(vms) == 1,
                30,
            )
            assert ec2_instance(stack, provider_id)["State"]["Name"] == "terminated"
            [left] = live_vms(stack).values()
            assert left["name"] == replacement
            assert rebound_s < 45, rebound_s
            events = await in_thread(
                stack.core.list_namespaced_event, "default", field_selector="reason=Interrupted"
            )
            assert any(e.involved_object.name == first for e in events.items), events.items
        finally:
            await in_thread(apps.delete_namespaced_deployment, f"{POOL}-app", "default")
            await in_thread(
                stack.core.delete_collection_namespaced_pod,
                "default",
                label_selector=f"pool={POOL}",
            )
        # Once the workload is gone, the empty replacement is scaled down: no VM leaked.
        await eventually(lambda: asyncio.sleep(0, live_vms(stack)), lambda vms: vms == {}, 45)
