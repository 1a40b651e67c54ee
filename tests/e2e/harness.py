"""Helpers for end-to-end tests: workers (in-process or as a killable process), claims, pods."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client as k8s
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from api import NodeClaimPhase, NodeClaimStatus, Offering, labels
from api.messages import ClaimTimings
from cli.manual_claims import build_claim, load_pool, new_claim_name, start_claim
from sim.cluster import SimulatedCluster
from trigger.nodes import NodeWatcher
from trigger.peers import TriggerPeers
from trigger.pending import BatchWindows, PendingPodTrigger
from worker.main import build_workers
from worker.settings import Settings
from workflows.nodeclaim import NodeClaimWorkflow

T = TypeVar("T")
CLUSTER_ID = "cloudburst-test"
FAST = ClaimTimings(
    registration_timeout_s=30,
    node_poll_interval_s=5,
    ready_poll_interval_s=10,
    instance_boot_poll_s=0.5,
    drain_poll_interval_s=0.3,
    eviction_retry_s=0.3,
)


@dataclass
class Stack:
    temporal: Client
    kube: k8s.ApiClient
    cluster: SimulatedCluster
    task_queue: str
    settings: Settings

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.kube)

    @property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.kube)


@contextlib.asynccontextmanager
async def running_watcher(
    temporal: Client, kube: k8s.ApiClient, peers: TriggerPeers | None = None
) -> AsyncIterator[NodeWatcher]:
    """The node watcher; with `peers` (run here too), sharing the nodes with the other
    triggers of its group."""
    stop = asyncio.Event()
    watcher = NodeWatcher(temporal, kube, peers)
    tasks = [asyncio.create_task(watcher.run(stop))]
    if peers is not None:
        tasks.append(asyncio.create_task(peers.run(stop)))
    try:
        yield watcher
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)


@contextlib.asynccontextmanager
async def in_process_worker(stack: Stack) -> AsyncIterator[None]:
    """The worker's two task queues' workers (`build_workers`), as `cloudburst worker` runs
    them, in this process."""
    with ThreadPoolExecutor(max_workers=stack.settings.activity_threads()) as executor:
        async with contextlib.AsyncExitStack() as running:
            for worker in build_workers(stack.temporal, stack.settings, stack.kube, executor):
                await running.enter_async_context(worker)
            yield


class WorkerProcess:
    """`cloudburst worker` as a real OS process, so a test can SIGKILL it mid-activity."""

    command = "worker"

    def __init__(
        self,
        temporal_address: str,
        kubeconfig: Path,
        task_queue: str,
        allowed_endpoints: dict[str, list[str]] | None = None,
        queues: str = "all",
        *,
        metrics_port: int = 0,
        sdk_metrics_port: int = 0,
    ) -> None:
        self._env = {
            **os.environ,
            "CLOUDBURST_TEMPORAL_ADDRESS": temporal_address,
            "CLOUDBURST_KUBECONFIG": str(kubeconfig),
            "CLOUDBURST_TASK_QUEUE": task_queue,
            "CLOUDBURST_WORKER_QUEUES": queues,
            # Several may run at once: no two on the same probe and metrics ports (none
            # unless a test gives it free ones).
            "CLOUDBURST_HEALTH_PORT": "0",
            "CLOUDBURST_METRICS_PORT": str(metrics_port),
            "CLOUDBURST_SDK_METRICS_PORT": str(sdk_metrics_port),
            "CLOUDBURST_CLUSTER_ID": CLUSTER_ID,
            # The operator allows the simulated clouds (as the ConfigMap would).
            "CLOUDBURST_ALLOWED_ENDPOINTS": json.dumps(allowed_endpoints or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cli = Path(sys.executable).parent / "cloudburst"
        self.process = subprocess.Popen(
            [str(cli), self.command],
            env=self._env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()


class TriggerProcess(WorkerProcess):
    """`cloudburst trigger` as a real OS process: `identity` names its Lease, which others
    see expire `lease_s` after a SIGKILL."""

    command = "trigger"

    def __init__(
        self,
        temporal_address: str,
        kubeconfig: Path,
        task_queue: str,
        allowed_endpoints: dict[str, list[str]],
        *,
        identity: str,
        lease_s: int,
        metrics_port: int = 0,
        sdk_metrics_port: int = 0,
    ) -> None:
        super().__init__(
            temporal_address,
            kubeconfig,
            task_queue,
            allowed_endpoints,
            metrics_port=metrics_port,
            sdk_metrics_port=sdk_metrics_port,
        )
        self._env["CLOUDBURST_TRIGGER_ID"] = identity
        self._env["CLOUDBURST_TRIGGER_LEASE_DURATION_S"] = str(lease_s)


def make_pool(
    kube: k8s.ApiClient,
    name: str,
    *,
    empty_ttl: int = 2,
    grace: int = 30,
    namespace: str = "default",
    limits: dict[str, Any] | None = None,
) -> None:
    """A NodePool on the sample NodeClass (the fake cloud), created or updated."""
    custom = k8s.CustomObjectsApi(kube)
    body = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeClassRef": "sample",
            "requirements": {"allowedProviders": ["fake"]},
            "limits": limits or {},
            "template": {"labels": {"test-pool": name}},
            "disruption": {
                "ttlSecondsAfterEmpty": empty_ttl,
                "terminationGracePeriodSeconds": grace,
            },
        },
    }
    try:
        custom.create_namespaced_custom_object(
            "cloudburst.io", "v1alpha1", namespace, "nodepools", body
        )
    except k8s.ApiException as err:
        if err.status != 409:
            raise
        custom.patch_namespaced_custom_object(
            "cloudburst.io", "v1alpha1", namespace, "nodepools", name, body
        )


async def nodeclaims(stack: Stack, pool: str, namespace: str = "default") -> list[dict[str, Any]]:
    """The pool's NodeClaim resources, as `kubectl get nodeclaims -l` lists them."""
    listing = await in_thread(
        stack.custom.list_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        namespace,
        "nodeclaims",
        label_selector=f"{labels.NODEPOOL}={pool}",
    )
    return list(listing["items"])


def delete_cloudburst_object(
    kube: k8s.ApiClient, plural: str, name: str, namespace: str = "default"
) -> None:
    """Delete a NodePool, NodeClass or NodeClaim (`plural`) as `kubectl delete` would."""
    k8s.CustomObjectsApi(kube).delete_namespaced_custom_object(
        "cloudburst.io", "v1alpha1", namespace, plural, name
    )


def fake_offering(instance_type: str = "fk-small", region: str = "sim-1") -> Offering:
    return Offering(provider="fake", region=region, instance_type=instance_type)


async def start_test_claim(
    stack: Stack,
    pool: str,
    offerings: list[Offering] | None = None,
    timings: ClaimTimings = FAST,
    task_timeout: timedelta | None = None,
) -> tuple[str, WorkflowHandle[NodeClaimWorkflow, Any]]:
    context = load_pool(stack.kube, "default", pool, stack.settings.tenancy())
    claim = build_claim(context, offerings or [fake_offering()], new_claim_name(pool))
    handle = await start_claim(
        stack.temporal,
        stack.kube,
        context,
        claim,
        task_queue=stack.task_queue,
        cluster_id=CLUSTER_ID,
        timings=timings,
        task_timeout=task_timeout,
    )
    return claim.metadata.name, handle


async def wait_for_phase(
    handle: WorkflowHandle[NodeClaimWorkflow, Any], phase: NodeClaimPhase, timeout_s: float = 60
) -> NodeClaimStatus:
    status = await eventually(
        lambda: handle.query(NodeClaimWorkflow.status),
        lambda s: s.phase == phase,
        timeout_s=timeout_s,
    )
    return status


async def eventually(
    fetch: Callable[[], Awaitable[T]], check: Callable[[T], bool], timeout_s: float = 60
) -> T:
    """Poll until `check` holds; fail with the last value seen (never a fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            last = await fetch()
            if check(last):
                return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"condition not reached within {timeout_s}s; last value: {last!r}")


def workload_pod(name: str, node: str, cpu: str = "250m") -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, namespace="default", labels={"app": name}),
        spec=k8s.V1PodSpec(
            node_selector={labels.NODECLAIM: node},
            termination_grace_period_seconds=0,
            containers=[
                k8s.V1Container(
                    name="app",
                    image="busybox:1.36",
                    resources=k8s.V1ResourceRequirements(requests={"cpu": cpu, "memory": "64Mi"}),
                )
            ],
        ),
    )


def new_task_queue() -> str:
    return f"test-{uuid.uuid4()}"


def stack_on(
    client: Client,
    kube: k8s.ApiClient,
    cluster: SimulatedCluster,
    kubeconfig: Path,
    *,
    cluster_id: str = CLUSTER_ID,
) -> Stack:
    """A stack on this Temporal client (e.g. a test's own server), with its own task queue."""
    queue = new_task_queue()
    settings = Settings(
        kubeconfig=kubeconfig,
        task_queue=queue,
        cluster_id=cluster_id,
        allowed_endpoints=cluster.endpoints(),
    )
    return Stack(client, kube, cluster, queue, settings)


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    # The sync kubernetes client must not block the loop that runs the worker and the watcher.
    return await asyncio.to_thread(fn, *args, **kwargs)


@contextlib.asynccontextmanager
async def running_trigger(
    stack: Stack,
    timings: ClaimTimings = FAST,
    idle_s: float = 0.3,
    max_s: float = 2.0,
    hold_s: float = 0.3,
    pool_task_timeout: timedelta | None = None,
    claim_task_timeout: timedelta | None = None,
    resend_s: float = 300.0,
) -> AsyncIterator[PendingPodTrigger]:
    """The pending-pod trigger with short batching windows (and pools holding partly
    filled nodes back briefly), feeding this test's task queue."""
    stop = asyncio.Event()
    trigger = PendingPodTrigger(
        stack.temporal,
        stack.kube,
        task_queue=stack.task_queue,
        cluster_id=CLUSTER_ID,
        windows=BatchWindows(
            idle_s=idle_s, max_s=max_s, partial_node_hold_s=hold_s, resend_s=resend_s
        ),
        claim_timings=timings,
        tenancy=stack.settings.tenancy(),
        pool_task_timeout=pool_task_timeout,
        claim_task_timeout=claim_task_timeout,
    )
    task = asyncio.create_task(trigger.run(stop))
    try:
        yield trigger
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


@contextlib.asynccontextmanager
async def serving(stack: Stack, timings: ClaimTimings = FAST) -> AsyncIterator[Stack]:
    """The stack at work: a worker in this process, the node watcher and the trigger."""
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, stack.kube),
        running_trigger(stack, timings=timings),
    ):
        yield stack


def pool_pod(name: str, pool: str, cpu: str = "500m", memory: str = "256Mi") -> k8s.V1Pod:
    """A pod only the test's pool can host (it selects the pool's template label)."""
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, namespace="default", labels={"pool": pool}),
        spec=k8s.V1PodSpec(
            node_selector={"test-pool": pool},
            termination_grace_period_seconds=0,
            containers=[
                k8s.V1Container(
                    name="app",
                    image="busybox:1.36",
                    resources=k8s.V1ResourceRequirements(requests={"cpu": cpu, "memory": memory}),
                )
            ],
        ),
    )


async def activity_types(client: Client, workflow_id: str) -> set[str]:
    """The activities a workflow has scheduled so far, by type name (from its history)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return {
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
