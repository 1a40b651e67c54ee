"""`cli.connect.answered`: a query refused during a worker takeover is asked again."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowQueryFailedError

from api.errors import QUERY_REFUSED_DURING_TAKEOVER as REFUSAL
from cli.connect import answered


class Workflow:
    """Answers a query after refusing it `refusals` times, as a worker taking over does."""

    def __init__(self, refusals: int, failure: str = REFUSAL) -> None:
        self.refusals = refusals
        self.failure = failure
        self.asked = 0

    async def status(self) -> str:
        self.asked += 1
        if self.asked <= self.refusals:
            raise WorkflowQueryFailedError(self.failure)
        return "Ready"


async def test_a_refused_query_is_asked_again_until_answered() -> None:
    workflow = Workflow(refusals=2)
    assert await answered(workflow.status, within_s=10) == "Ready"
    assert workflow.asked == 3


async def test_a_query_that_failed_for_another_reason_is_not_asked_again() -> None:
    workflow = Workflow(refusals=1, failure="status: no such query")
    with pytest.raises(WorkflowQueryFailedError, match="no such query"):
        await answered(workflow.status, within_s=10)
    assert workflow.asked == 1


async def test_refusals_past_the_deadline_reach_the_caller() -> None:
    workflow = Workflow(refusals=100)
    with pytest.raises(WorkflowQueryFailedError, match="ask again"):
        await answered(workflow.status, within_s=1.5)
    assert workflow.asked == 2
