"""How the workers poll: a burst's new claims must not reach a worker one poll at a time."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from kubernetes import client as k8s
from temporalio.client import Client
from temporalio.worker import PollerBehaviorSimpleMaximum

from worker.main import build_workers
from worker.settings import Settings, WorkerQueues


async def test_half_of_each_workers_polls_wait_on_the_queue_new_workflows_arrive_on(
    temporal_client: Client,
) -> None:
    settings = Settings(workflow_task_pollers=12, worker_queues=WorkerQueues.ALL)
    with ThreadPoolExecutor(max_workers=settings.activity_threads()) as executor:
        workers = build_workers(temporal_client, settings, k8s.ApiClient(), executor)
        assert len(workers) == 2  # the pools' queue and the claims'
        for worker in workers:
            config = worker.config()
            polls = config.get("workflow_task_poller_behavior")
            assert isinstance(polls, PollerBehaviorSimpleMaximum)
            # Without a share of its own, the SDK's (a fifth) of its default 5 polls: one.
            shared = int(polls.maximum * config.get("nonsticky_to_sticky_poll_ratio", 0.2))
            assert (polls.maximum, shared) == (12, 6)
