"""The `plan_capacity` activity: reads the world (`PlanningInputs`: DaemonSets, offerings),
then plans purely (`planner/plan.py`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s
from temporalio import activity

from activities.kube_reads import KubeReads
from activities.planning.config import PlanningConfig
from activities.planning.inputs import PlanningInputs, RecommenderFactory
from activities.planning.pending import PendingInCluster
from api.planning import Plan, PlanRequest
from cluster.tenancy import Tenancy
from observability import metrics
from planner.catalog import oldest_prices, stale_price_notes
from planner.plan import plan_capacity

log = logging.getLogger(__name__)


class PlanningActivities:
    def __init__(
        self,
        api_client: k8s.ApiClient,
        recommender_factory: RecommenderFactory | None = None,
        config: PlanningConfig | None = None,
        tenancy: Tenancy | None = None,
    ) -> None:
        # Reads only (a Secret, the price ConfigMap, the DaemonSets), without the generated
        # API classes, whose import `cloudburst plan` would pay (activities/kube_reads.py).
        reads = KubeReads(api_client)
        self._inputs = PlanningInputs(reads, recommender_factory, config, tenancy)
        self._pending = PendingInCluster(reads, tenancy or Tenancy())

    @property
    def inputs(self) -> PlanningInputs:
        """What a plan reads of the world (offerings, overheads): consolidation reads the same."""
        return self._inputs

    def activities(self) -> list[Callable[..., Any]]:
        return [self.plan_capacity]

    @activity.defn(name="plan_capacity")
    def plan_capacity(self, request: PlanRequest) -> Plan:
        """Plan the request's pods as the cluster has them (`activities/planning/pending.py`);
        those it has not pending for this pool come back in `not_pending`, to be forgotten."""
        pods, not_pending = self._pending.of(request)
        if not_pending:
            log.info(
                "pool %s/%s: %d of the pods asked are not pending in the cluster, not planned",
                request.namespace,
                request.pool_name,
                len(not_pending),
            )
        plan = self.plan(request.model_copy(update={"pods": pods}))
        plan.not_pending = not_pending
        return plan

    def plan(self, request: PlanRequest) -> Plan:
        """Plan `request` as it is (consolidation's request: the pods of a node it read)."""
        started = time.monotonic()
        offerings, overhead = self._inputs.planning_inputs(request)
        plan = plan_capacity(request, offerings, overhead)
        metrics.observe_plan_duration(
            request.namespace, request.pool_name, time.monotonic() - started
        )
        metrics.set_prices_as_of(
            {provider: at.timestamp() for provider, at in oldest_prices(offerings).items()}
        )
        plan.stale_prices = stale_price_notes(
            [node.offerings[0] for node in plan.new_nodes if node.offerings],
            datetime.now(UTC),
            timedelta(hours=self._inputs.config.price_max_age_h),
        )
        log.info(
            "pool %s: %d pods -> %d on in-flight nodes, %d new nodes (EUR %.4f/h), "
            "%d unschedulable, %d held by limits, from %d offerings",
            request.pool_name,
            len(request.pods),
            len(plan.assignments),
            len(plan.new_nodes),
            plan.cost_eur_per_hour,
            len(plan.unschedulable),
            len(plan.limited),
            len(offerings),
        )
        return plan
