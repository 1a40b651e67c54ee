"""Workers for a pool under test, laid out as `worker.main.build_workers` lays them out."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.claim_workflows import ClaimWorkflowActivities
from api.messages import claim_task_queue


@contextlib.asynccontextmanager
async def pool_workers(
    client: Client,
    queue: str,
    workflows: Sequence[type],
    activities: Sequence[Callable[..., Any]],
) -> AsyncIterator[None]:
    """One worker on the pool's task queue and one on its claims' (where the pool starts
    them), both with these workflows and activities, and the one that starts the claims."""
    activities = [*activities, *ClaimWorkflowActivities().activities()]
    async with contextlib.AsyncExitStack() as running:
        for task_queue in (queue, claim_task_queue(queue)):
            worker = Worker(
                client, task_queue=task_queue, workflows=workflows, activities=activities
            )
            await running.enter_async_context(worker)
        yield
