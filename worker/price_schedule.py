"""The live-price Schedule, created (or brought up to date) by the worker at start.

Every `CLOUDBURST_PRICES_INTERVAL_HOURS` (6) it starts a PriceRefreshWorkflow over the
configured providers (activities/planning/config.py `PriceSettings`). Overlap is SKIP: a run
still waiting on a slow price API makes the next tick a no-op. The first run starts at once
when the schedule is created, so a new installation does not plan with the shipped snapshot
for hours.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
)

from activities.planning.config import PriceSettings
from api.prices import PRICE_SCHEDULE_ID, PRICE_WORKFLOW_ID, PriceRefreshInput
from worker.schedules import ensure_schedule, every
from worker.settings import Settings
from workflows.prices import PriceRefreshWorkflow

log = logging.getLogger(__name__)


def price_schedule(settings: Settings, prices: PriceSettings) -> Schedule:
    return every(
        timedelta(hours=prices.interval_hours),
        ScheduleActionStartWorkflow(
            PriceRefreshWorkflow.run,
            PriceRefreshInput(
                providers=prices.providers,
                endpoints=prices.endpoints,
                exchange_rate_url=prices.exchange_rate_url,
            ),
            id=PRICE_WORKFLOW_ID,
            task_queue=settings.task_queue,
            execution_timeout=timedelta(minutes=30),
        ),
        f"prices of {', '.join(prices.providers)}",
    )


async def ensure_price_schedule(
    client: Client, settings: Settings, prices: PriceSettings | None = None
) -> None:
    """Create the price Schedule (first run at once), or update it to these settings."""
    prices = prices or PriceSettings()
    if not prices.enabled or not prices.providers:
        log.info("price schedule not managed (CLOUDBURST_PRICES_ENABLED=false or no providers)")
        return
    await ensure_schedule(
        client,
        PRICE_SCHEDULE_ID,
        lambda: price_schedule(settings, prices),
        "prices stay as last refreshed",
        trigger_when_created=True,
    )
