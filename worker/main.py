"""The worker process: registers the workflows and the activities, sync ones in a thread pool."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from kubernetes import client as k8s
from temporalio.client import Client
from temporalio.common import VersioningBehavior
from temporalio.converter import DataConverter
from temporalio.worker import (
    PollerBehaviorSimpleMaximum,
    Worker,
    WorkerDeploymentConfig,
    WorkerDeploymentVersion,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.bootstrap import BootstrapActivities, ScriptHandoff
from activities.claim_workflows import ClaimWorkflowActivities
from activities.compute import ComputeActivities
from activities.events import EventActivities
from activities.gc import GcActivities
from activities.heartbeat import HeartbeatInterceptor
from activities.kube import KubeActivities
from activities.mirror import MirrorActivities
from activities.planning.activity import PlanningActivities
from activities.planning.config import PriceSettings
from activities.planning.consolidation import ConsolidationActivities
from activities.prices.activity import PriceActivities
from activities.tailscale import TailscaleActivities
from cluster.tenancy import Tenancy
from worker.client import (
    announce_payload_keys,
    client_options,
    connect_temporal,
    register_search_attributes,
)
from worker.context_free import runner_for
from worker.gc_schedule import ensure_gc_schedule
from worker.health import serving_health
from worker.kube_client import kube_api_client
from worker.price_schedule import ensure_price_schedule
from worker.release_guard import check_release
from worker.settings import Settings
from worker.untaken_events import TakenEventsOnlyRunner
from workflows.registry import WORKFLOWS

log = logging.getLogger(__name__)


def build_activities(api_client: k8s.ApiClient, tenancy: Tenancy) -> list[Callable[..., Any]]:
    """Every activity; those that read a NodeClass's Secrets or call out keep to `tenancy`."""
    planning = PlanningActivities(api_client, tenancy=tenancy)
    prices = PriceActivities(api_client, tenancy.worker_namespace)
    scripts = ScriptHandoff()  # from a claim's bootstrap to its create call, on one worker
    return [
        *BootstrapActivities(api_client, tenancy, handoff=scripts).activities(),
        *ClaimWorkflowActivities(api_client, tenancy).activities(),
        *KubeActivities(api_client, tenancy).activities(),
        *ComputeActivities(api_client, tenancy, handoff=scripts).activities(),
        *EventActivities(api_client).activities(),
        *GcActivities(api_client, tenancy).activities(),
        *MirrorActivities(api_client).activities(),
        *TailscaleActivities(api_client, tenancy).activities(),
        *planning.activities(),
        *ConsolidationActivities(api_client, planning.inputs).activities(),
        *prices.activities(),
    ]


def workflow_runner(converter: DataConverter) -> WorkflowRunner:
    """How the workers run workflows (and the replay test replays them): the SDK's sandbox,
    spared its per-payload context answers when `converter` takes none
    (`worker/context_free.py`), refusing events no workflow task has taken
    (`worker/untaken_events.py`)."""
    return TakenEventsOnlyRunner(runner_for(converter, SandboxedWorkflowRunner()))


# Of a worker's workflow task polls (`Settings.workflow_task_pollers`), the share on the
# queue every worker polls, where new workflows' first tasks arrive; the rest poll its
# sticky queue, where the tasks of the workflows it has cached arrive.
SHARED_QUEUE_POLL_SHARE = 0.5


def build_workers(
    client: Client, settings: Settings, api_client: k8s.ApiClient, executor: ThreadPoolExecutor
) -> list[Worker]:
    """One worker for the task queue of pools, garbage collection and prices, one for the
    claims' (`claim_task_queue`), or one of them (`Settings.worker_queues`): each keeps its
    own workflow cache, so a thousand claims waking together never evict a pool. Both
    register everything: a claim made by hand (`cloudburst claims create`) runs on the claims'
    queue, the garbage collector's and the prices' workflows on the first.
    """
    activities = build_activities(api_client, settings.tenancy())
    deployment = deployment_config(settings)
    return [
        Worker(
            client,
            task_queue=queue,
            workflows=WORKFLOWS,
            activities=activities,
            activity_executor=executor,
            max_concurrent_workflow_tasks=settings.max_concurrent_workflow_tasks,
            workflow_task_poller_behavior=PollerBehaviorSimpleMaximum(
                maximum=settings.workflow_task_pollers
            ),
            nonsticky_to_sticky_poll_ratio=SHARED_QUEUE_POLL_SHARE,
            max_concurrent_activities=settings.max_concurrent_activities,
            max_concurrent_local_activities=settings.max_concurrent_local_activities,
            max_eager_activity_reservations_per_workflow_task=(
                settings.eager_activities_per_workflow_task
            ),
            max_cached_workflows=settings.max_cached_workflows,
            interceptors=[HeartbeatInterceptor()],
            sticky_queue_schedule_to_start_timeout=timedelta(
                seconds=settings.sticky_queue_timeout_s
            ),
            workflow_runner=workflow_runner(client.data_converter),
            deployment_config=deployment,
        )
        for queue in settings.polled_task_queues()
    ]


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """A versioned worker of `settings.worker_deployment` (docs/upgrades.md), else None.

    Every workflow auto-upgrades: a pool lives forever and a claim as long as its node
    (weeks, without an expiry), so pinning either to the version that started it would keep
    old workers running without end. A change that alters a workflow's commands therefore
    goes behind `workflow.patched` (CHANGELOG.md), whatever the versioning; what versioning
    adds is that one workflow's tasks never alternate between two releases mid-roll."""
    if settings.worker_deployment is None:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(
            deployment_name=settings.worker_deployment, build_id=settings.worker_build_id
        ),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
    )


async def run_worker(
    settings: Settings, stop: asyncio.Event | None = None, prices: PriceSettings | None = None
) -> None:
    # Settings that cannot work are refused first, before any connection is opened (an API
    # key without TLS would cross the network in cleartext).
    client_options(settings)
    announce_payload_keys(settings)
    api_client = kube_api_client(settings)
    # Before anything reaches Temporal: a release older than one that already ran here would
    # fail the workflow tasks the newer one advanced, without end (worker/release_guard.py).
    await asyncio.to_thread(check_release, api_client, settings)
    client = await connect_temporal(settings)
    await register_search_attributes(client, settings.temporal_namespace)
    await ensure_gc_schedule(client, settings)
    await ensure_price_schedule(client, settings, prices)
    with (
        ThreadPoolExecutor(max_workers=settings.activity_threads()) as executor,
        serving_health(settings.health_port, client, api_client),
    ):
        workers = build_workers(client, settings, api_client, executor)
        log.info(
            "worker polling task queues %s on %s",
            ", ".join(repr(worker.task_queue) for worker in workers),
            settings.temporal_address,
        )
        # A worker that fails fatally ends the process (through the group), not just its half.
        async with asyncio.TaskGroup() as group:
            for worker in workers:
                group.create_task(worker.run())
            await (stop or asyncio.Event()).wait()
            await asyncio.gather(*(worker.shutdown() for worker in workers))
