"""The `plan_capacity` activity: reads the world (DaemonSets, offerings), then plans purely.

DaemonSet overhead: every DaemonSet whose pods would land on the pool's nodes (its node
selector and required affinity against the node's labels — per offering, since arch and
region are offering labels — and its tolerations against the pool's taints) takes its
requests from each node, on top of `kube_reserved`.
Offerings: from the recommender (the catalog, or CloudBroker when configured) for real
providers, and from the fake cloud's own catalog endpoint for `fake`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.kube import read_secret_value
from activities.planning.catalog import Catalog, stale_price_notes
from activities.planning.cloudbroker import (
    CloudBrokerClient,
    CloudBrokerFatal,
    CloudBrokerRecommender,
    CloudBrokerUnavailable,
)
from activities.planning.config import PlanningConfig
from activities.planning.plan import kube_reserved, plan_capacity
from activities.planning.price_store import LiveCatalog
from activities.planning.recommend import CatalogRecommender, Recommender
from activities.providers.base import FatalError, ProviderError
from activities.providers.fake import FakeProvider
from api.errors import INVALID_CONFIGURATION, RECOMMENDER_UNAVAILABLE
from api.nodeclaim import Offering
from api.nodepool import NodePoolSpec
from api.planning import NodeSelectorTerm, Plan, PlanRequest, Resources
from cluster.requirements import (
    node_labels_match,
    offering_labels,
    pod_demand,
    static_labels,
    tolerates,
)
from cluster.tenancy import Tenancy

log = logging.getLogger(__name__)

# How many offerings to ask a recommender for: enough for packing and for failover lists.
OFFERING_LIMIT = 500

RecommenderFactory = Callable[[], Recommender]


class PlanningActivities:
    def __init__(
        self,
        api_client: k8s.ApiClient,
        recommender_factory: RecommenderFactory | None = None,
        config: PlanningConfig | None = None,
        tenancy: Tenancy | None = None,
    ) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._tenancy = tenancy or Tenancy()
        self._apps = k8s.AppsV1Api(api_client)
        self._config = config or PlanningConfig.from_env()
        self._factory = recommender_factory or self._default_recommender
        # The shipped (or configured) catalog with the scheduled refreshes laid over it.
        self._catalog = LiveCatalog(
            self._core, self._tenancy.worker_namespace, Catalog.load(self._config.catalog_path)
        )

    def activities(self) -> list[Callable[..., Any]]:
        return [self.plan_capacity]

    @activity.defn(name="plan_capacity")
    def plan_capacity(self, request: PlanRequest) -> Plan:
        daemonsets = self._daemonset_overheads(request.pool_name, request.pool)
        offerings = self._offerings(request)

        def per_node_overhead(offering: Offering) -> Resources:
            return kube_reserved(offering) + daemonsets(offering)

        plan = plan_capacity(request, offerings, per_node_overhead)
        plan.stale_prices = stale_price_notes(
            [node.offerings[0] for node in plan.new_nodes if node.offerings],
            datetime.now(UTC),
            timedelta(hours=self._config.price_max_age_h),
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

    # ---- offerings ------------------------------------------------------------------------

    def _offerings(self, request: PlanRequest) -> list[Offering]:
        real = [p for p in request.class_providers if p != "fake"]
        out: list[Offering] = []
        if real:
            smallest = _smallest_shape(request)
            try:
                out += self._factory().recommend(
                    smallest, request.pool.requirements, real, OFFERING_LIMIT
                )
            except CloudBrokerFatal as err:
                raise ApplicationError(
                    str(err), type=INVALID_CONFIGURATION, non_retryable=True
                ) from None
            except CloudBrokerUnavailable as err:
                raise ApplicationError(str(err), type=RECOMMENDER_UNAVAILABLE) from None
        if "fake" in request.class_providers:
            out += self._fake_offerings(request)
        return out

    def _fake_offerings(self, request: PlanRequest) -> list[Offering]:
        block = request.node_class.fake if request.node_class else None
        if block is None:
            raise ApplicationError(
                "the pool lists the fake provider but PlanRequest.node_class has no `fake` block",
                type=INVALID_CONFIGURATION,
                non_retryable=True,
            )
        # The fake cloud's catalog is a call to its endpoint, with its token: allowed or not.
        self._tenancy.require(request.namespace, request.node_class, services=("fake",))
        ref = block.credential_ref()
        token = read_secret_value(self._core, request.namespace, ref) if ref else None
        provider = FakeProvider(block, token)
        try:
            types = provider.instance_types()
        except FatalError as err:
            raise ApplicationError(
                str(err), type=INVALID_CONFIGURATION, non_retryable=True
            ) from None
        except ProviderError as err:
            raise ApplicationError(str(err), type=RECOMMENDER_UNAVAILABLE) from None
        finally:
            provider.close()
        return [
            Offering(
                provider="fake",
                region=region,
                instance_type=t.name,
                vcpu=t.vcpu,
                memory_gib=t.memory_gib,
                arch=t.arch,
                price_eur_per_hour=t.price_eur_per_hour,
            )
            for t in types
            for region in t.regions
        ]

    def _default_recommender(self) -> Recommender:
        catalog = CatalogRecommender(self._catalog.get())
        cfg = self._config
        if not cfg.cloudbroker_url:
            return catalog
        key = cfg.cloudbroker_api_key.get_secret_value() if cfg.cloudbroker_api_key else None
        if cfg.cloudbroker_api_key_secret is not None:
            # An operator's setting, not a NodeClass's: the Secret it names (the worker may
            # read its own namespace's) is read where it says.
            ref = cfg.cloudbroker_api_key_secret
            key = read_secret_value(
                self._core, ref.namespace or self._tenancy.worker_namespace, ref
            )
        client = CloudBrokerClient(cfg.cloudbroker_url, key, timeout_s=cfg.timeout_s)
        return CloudBrokerRecommender(client, catalog if cfg.fallback_to_catalog else None)

    # ---- DaemonSet overhead ---------------------------------------------------------------

    def _daemonset_overheads(
        self, pool_name: str, pool: NodePoolSpec
    ) -> Callable[[Offering], Resources]:
        """Per offering: the summed requests of the DaemonSets that would run on its node."""
        static = static_labels(pool_name, pool)
        blocking = [t for t in pool.template.taints if t.effect in ("NoSchedule", "NoExecute")]
        candidates: list[tuple[dict[str, str], list[NodeSelectorTerm], Resources, str]] = []
        for ds in self._apps.list_daemon_set_for_all_namespaces().items:
            template = ds.spec.template if ds.spec else None
            if template is None or template.spec is None:
                continue
            demand = pod_demand(k8s.V1Pod(metadata=template.metadata, spec=template.spec))
            if not all(tolerates(demand.tolerations, taint) for taint in blocking):
                continue
            meta = ds.metadata or k8s.V1ObjectMeta()
            name = f"{meta.namespace}/{meta.name}"
            candidates.append(
                (demand.node_selector, demand.required_affinity, demand.requests, name)
            )
        cache: dict[tuple[str, str, str, str | None, str, str], Resources] = {}

        def overhead(offering: Offering) -> Resources:
            key = (
                offering.provider,
                offering.region,
                offering.instance_type,
                offering.zone,
                offering.arch,
                offering.capacity_type,
            )
            if key not in cache:
                labels = {**static, **offering_labels(offering)}
                total = Resources()
                for selector, terms, requests, _ in candidates:
                    if node_labels_match(selector, terms, labels):
                        total += requests
                cache[key] = total
            return cache[key]

        return overhead


def _smallest_shape(request: PlanRequest) -> Resources:
    """The smallest pending pod: every offering that holds it is a packing candidate."""
    if not request.pods:
        return Resources()
    return Resources(
        cpu_m=min(p.requests.cpu_m for p in request.pods),
        memory_bytes=min(p.requests.memory_bytes for p in request.pods),
    )
