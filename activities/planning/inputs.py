"""What a pool's plan is made with: the offerings, and each node's overhead (kube-reserved
and DaemonSets). The worker's `plan_capacity` activity plans with these, and `cloudburst
plan` with the same, launching nothing; Temporal's SDK is loaded only to raise a failure
(`api.errors.application_error`), not by the command that plans.

DaemonSet overhead: every DaemonSet whose pods would land on the pool's nodes (its node
selector and required affinity against the node's labels — per offering, since arch and
region are offering labels — and its tolerations against the pool's taints) takes its
requests from each node, on top of `kube_reserved`.
Offerings: from the recommender (the catalog, or CloudBroker when configured) for the public
clouds, and from the provider itself for those whose catalog is live (`LIVE_CATALOG_PROVIDERS`:
the fake cloud, on-premises machines, plug-ins): its `instance_types()` now, with how many of
each can still be made (`available`) and the price it reports (on premises: the operator's,
from the NodeClass block).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from activities.credentials import read_provider_credential, read_secret_value
from activities.kube_reads import KubeReads
from activities.machine_ledger import tenant_provider
from activities.planning.cloudbroker import (
    CloudBrokerClient,
    CloudBrokerFatal,
    CloudBrokerRecommender,
    CloudBrokerUnavailable,
)
from activities.planning.config import PlanningConfig
from activities.prices.price_store import LiveCatalog
from activities.providers import provider_class
from activities.providers.base import FatalError, Provider, ProviderError
from api.errors import INVALID_CONFIGURATION, RECOMMENDER_UNAVAILABLE, application_error
from api.limits import MAX_NODES
from api.nodeclaim import Offering
from api.nodeclass import ProviderBlock
from api.nodepool import LIVE_CATALOG_PROVIDERS, NodePoolSpec
from api.planning import NodeSelectorTerm, PlanRequest, Resources
from cluster.pod_view import pod_view
from cluster.requirements import (
    node_labels_match,
    offering_labels,
    pod_demand,
    static_labels,
    tolerates,
)
from cluster.tenancy import Tenancy
from planner.catalog import Catalog
from planner.node_size import OverheadFn, kube_reserved
from planner.recommend import OFFERING_LIMIT, CatalogRecommender, Recommender

log = logging.getLogger(__name__)

RecommenderFactory = Callable[[], Recommender]


class PlanningInputs:
    """The offerings and each node's overhead for a pool's plan, read now from the cluster
    (through `reads`), the recommender and the providers whose catalog is live."""

    def __init__(
        self,
        reads: KubeReads,
        recommender_factory: RecommenderFactory | None = None,
        config: PlanningConfig | None = None,
        tenancy: Tenancy | None = None,
    ) -> None:
        self._reads = reads
        self._tenancy = tenancy or Tenancy()
        self._config = config or PlanningConfig.from_env()
        self._factory = recommender_factory or self._default_recommender
        # The shipped (or configured) catalog with the scheduled refreshes laid over it.
        self._catalog = LiveCatalog(
            self._reads, self._tenancy.worker_namespace, Catalog.load(self._config.catalog_path)
        )

    @property
    def config(self) -> PlanningConfig:
        return self._config

    def planning_inputs(self, request: PlanRequest) -> tuple[list[Offering], OverheadFn]:
        """What a plan of `request` is made with: the offerings, and each node's overhead
        (kube-reserved and DaemonSets)."""
        daemonsets = self._daemonset_overheads(request.pool_name, request.pool)

        def per_node_overhead(offering: Offering) -> Resources:
            return kube_reserved(offering) + daemonsets(offering)

        return self._offerings(request), per_node_overhead

    # ---- offerings ------------------------------------------------------------------------

    def _offerings(self, request: PlanRequest) -> list[Offering]:
        real = [p for p in request.class_providers if p not in LIVE_CATALOG_PROVIDERS]
        out: list[Offering] = []
        if real:
            smallest = _smallest_shape(request)
            try:
                out += self._factory().recommend(
                    smallest, request.pool.requirements, real, OFFERING_LIMIT
                )
            except CloudBrokerFatal as err:
                raise application_error(
                    str(err), type=INVALID_CONFIGURATION, non_retryable=True
                ) from None
            except CloudBrokerUnavailable as err:
                raise application_error(str(err), type=RECOMMENDER_UNAVAILABLE) from None
        for name in request.class_providers:
            if name in LIVE_CATALOG_PROVIDERS:
                out += self._live_offerings(request, name)
        return out

    def _live_offerings(self, request: PlanRequest, name: str) -> list[Offering]:
        """The provider's own catalog, read now: one offering per instance type and region,
        with the count it can still make and its price (the operator's, for machines of
        their own: a price the NodeClass block sets, 0 when it sets none)."""
        try:
            block = request.node_class.provider_block(name) if request.node_class else None
        except KeyError:
            block = None
        if block is None:
            raise application_error(
                f"the pool lists the {name} provider but PlanRequest.node_class has no "
                f"`{name}` block",
                type=INVALID_CONFIGURATION,
                non_retryable=True,
            )
        try:
            cls = provider_class(name)
        except (KeyError, ImportError) as err:
            log.warning("no offerings from %s: no provider module (%s)", name, err)
            return []
        # The catalog is a call to the provider with its credential: allowed or not, first.
        self._tenancy.require(request.namespace, request.node_class, services=(name,))
        credential = read_provider_credential(self._reads, request.namespace, block)
        provider: Provider | None = None
        try:
            provider = tenant_provider(
                cls, block, credential, request.namespace, self._tenancy, self._reads
            )
            types = provider.instance_types()
        except FatalError as err:
            raise application_error(
                str(err), type=INVALID_CONFIGURATION, non_retryable=True
            ) from None
        except ProviderError as err:
            raise application_error(str(err), type=RECOMMENDER_UNAVAILABLE) from None
        finally:
            close = getattr(provider, "close", None)
            if callable(close):
                close()
        read_at = datetime.now(UTC).isoformat(timespec="seconds")
        set_by_operator = _price_field(name, block)
        offerings: list[Offering] = []
        for t in types:
            price, source = _live_price(name, t.price_eur_per_hour, block, set_by_operator)
            # More than a pool can ever have is as good as unbounded; below 0 is none.
            count = None if t.available is None else min(max(t.available, 0), MAX_NODES)
            offerings += [
                Offering(
                    provider=name,
                    region=region,
                    instance_type=t.name,
                    vcpu=t.vcpu,
                    memory_gib=t.memory_gib,
                    arch=t.arch,
                    price_eur_per_hour=price,
                    price_source=source,
                    price_as_of=read_at,
                    available=count,
                )
                for region in t.regions
            ]
        return offerings

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
                self._reads, ref.namespace or self._tenancy.worker_namespace, ref
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
        for ds in self._reads.list_daemon_set_for_all_namespaces():
            meta = ds.get("metadata") or {}
            name = f"{meta.get('namespace')}/{meta.get('name')}"
            template = (ds.get("spec") or {}).get("template") or {}
            if not template.get("spec"):
                continue
            try:
                demand = pod_demand(pod_view(template))
            except ValueError as err:  # PodUnreadable, or a quantity or operator we cannot read
                # The API server took it, so our reading is the stricter: left out, said.
                log.warning("DaemonSet %s left out of node overhead: %s", name, err)
                continue
            if not all(tolerates(demand.tolerations, taint) for taint in blocking):
                continue
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


def _price_field(name: str, block: ProviderBlock) -> str | None:
    """The manifest path of the price a block sets for its machines (an operator's amortized
    EUR/h), if the block has one."""
    field = type(block).model_fields.get("price_eur_per_hour")
    if field is None:
        return None
    return f"NodeClass spec.{name}.{field.alias or 'price_eur_per_hour'}"


def _live_price(
    name: str, reported: float | None, block: ProviderBlock, set_by_operator: str | None
) -> tuple[float, str]:
    """An offering's price and its source: the provider's own, else the block's, else 0 (an
    operator's machines cost nothing more by default)."""
    if reported is not None:
        if set_by_operator:
            return reported, f"{set_by_operator} (the operator's price), as {name} reports it"
        return reported, f"{name}: the provider's live catalog"
    value = getattr(block, "price_eur_per_hour", None)
    if set_by_operator and isinstance(value, int | float):
        return float(value), set_by_operator
    return 0.0, f"{name}: no price set, counted as 0"


def _smallest_shape(request: PlanRequest) -> Resources:
    """The smallest pending pod: every offering that holds it is a packing candidate."""
    if not request.pods:
        return Resources()
    return Resources(
        cpu_m=min(p.requests.cpu_m for p in request.pods),
        memory_bytes=min(p.requests.memory_bytes for p in request.pods),
    )
