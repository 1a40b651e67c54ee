"""PriceRefreshWorkflow: every configured provider's prices fetched anew, side by side.

Run every few hours by the Schedule `cloudburst-price-refresh` (see `worker/price_schedule.py`,
overlap SKIP). First the ECB's USD → EUR reference rate (`refresh_exchange_rate`), which
every USD price is converted with; then each provider is its own `refresh_prices` activity,
so one slow or broken price API neither delays nor spoils another's; each records its
outcome in the catalog ConfigMap and keeps the last good data on failure. The report (returned, queryable with
`report`, summarised in the Web UI's current details) lists each provider's outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.prices.activity import PriceActivities
    from api.prices import (
        EXCHANGE_RATE,
        ExchangeRateRefresh,
        PriceRefreshInput,
        PriceRefreshReport,
        ProviderPriceRefresh,
        ProviderPriceStatus,
    )
    from workflows.retries import SCHEDULED_RUN
    from workflows.timeouts import PLANNING, QUICK_HEARTBEAT


_Request = TypeVar("_Request", ProviderPriceRefresh, ExchangeRateRefresh)


@workflow.defn(name="PriceRefreshWorkflow")
class PriceRefreshWorkflow:
    def __init__(self) -> None:
        self._report = PriceRefreshReport()

    @workflow.query
    def report(self) -> PriceRefreshReport:
        return self._report

    @workflow.run
    async def run(self, input: PriceRefreshInput) -> PriceRefreshReport:
        workflow.set_current_details(f"refreshing prices of {', '.join(input.providers)}")
        # The rate first: the providers' USD prices are converted with it as they are read.
        rate = await self._activity(
            PriceActivities.refresh_exchange_rate,
            ExchangeRateRefresh(url=input.exchange_rate_url),
            "the USD to EUR rate",
        )
        providers = await asyncio.gather(
            *(
                self._activity(
                    PriceActivities.refresh_prices,
                    ProviderPriceRefresh(provider=p, endpoint=input.endpoints.get(p)),
                    f"{p} prices",
                )
                for p in input.providers
            )
        )
        statuses = [rate, *providers]
        self._report = PriceRefreshReport(statuses=statuses)
        lines = [f"{s.provider}: {s.outcome}{f' ({s.error})' if s.error else ''}" for s in statuses]
        workflow.set_current_details("\n".join(lines))
        return self._report

    async def _activity(
        self,
        refresh: Callable[[PriceActivities, _Request], ProviderPriceStatus],
        request: _Request,
        what: str,
    ) -> ProviderPriceStatus:
        try:
            return await workflow.execute_activity_method(
                refresh,
                request,
                start_to_close_timeout=PLANNING,
                heartbeat_timeout=QUICK_HEARTBEAT,
                retry_policy=SCHEDULED_RUN,
                summary=f"refresh {what}",
            )
        except ActivityError as err:
            cause = err.cause or err
            return ProviderPriceStatus(
                provider=getattr(request, "provider", EXCHANGE_RATE),
                outcome="failed",
                attempted_at=workflow.now(),
                error=f"not recorded: {cause}",
            )
