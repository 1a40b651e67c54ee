"""The calls several of the pool's phases make: the planner (`plan_capacity`, an activity: the
planner is a library the worker runs) and the request it plans, for the pods no claim covers
(planning) and for a drifted node's replacement (disruption)."""

from __future__ import annotations

from temporalio import workflow

from activities.planning.activity import PlanningActivities
from api.planning import Plan, PlanRequest, PodDemand
from workflows.decisions import pool as pool_rules
from workflows.nodepool.state import PoolRun
from workflows.retries import POOL_CALL
from workflows.timeouts import PLANNING, QUICK_HEARTBEAT


async def plan(run: PoolRun, planned: PlanRequest, summary: str) -> Plan:
    return await workflow.execute_activity_method(
        PlanningActivities.plan_capacity,
        planned,
        start_to_close_timeout=PLANNING,
        heartbeat_timeout=QUICK_HEARTBEAT,
        retry_policy=POOL_CALL,
        summary=summary,
    )


def request(run: PoolRun, uncovered: list[PodDemand], missing_floor: int) -> PlanRequest:
    return pool_rules.plan_request(
        run.name, run.namespace, run.state, run.live_claims(), uncovered, missing_floor
    )
