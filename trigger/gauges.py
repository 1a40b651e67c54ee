"""The pool and claim gauges on this trigger's metrics endpoint, while it is the one of the
running triggers that serves them: the NodePools and NodeClaims listed at each scrape, turned
into series by `observability/cluster_gauges.py`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from kubernetes import client as k8s
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from observability.cluster_gauges import GAUGES_KEY, PendingPod, cluster_families
from trigger.peers import TriggerPeers
from trigger.pending import PendingPodTrigger
from worker.telemetry import current_telemetry

log = logging.getLogger(__name__)

GROUP, VERSION = "cloudburst.io", "v1alpha1"


class ClusterGauges(Collector):
    """Lists NodePools and NodeClaims (all namespaces) when scraped, while `serving()` says
    this process is the one that serves them; nothing otherwise, or when the API server does
    not answer (the series then go missing rather than stale: `absent()` alerts on them).

    A listing is reused for `reuse_s`: however often the endpoint is scraped (two
    Prometheus replicas, a curl loop), the API server is listed at most that often."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        serving: Callable[[], bool],
        pending_pods: Callable[[], Iterable[PendingPod]],
        timeout_s: float = 10.0,
        reuse_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._custom = k8s.CustomObjectsApi(api_client)
        self._serving = serving
        self._pending_pods = pending_pods
        self._timeout_s = timeout_s
        self._reuse_s = reuse_s
        self._clock = clock
        self._lock = threading.Lock()  # the metrics server scrapes on a thread per request
        self._listed: tuple[float, list[dict[str, Any]], list[dict[str, Any]]] | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if not self._serving():
            return
        try:
            pools, claims = self._objects()
        except Exception as err:  # the scrape goes on with the process' own series
            log.warning("pool and claim gauges not served: %s", err)
            return
        yield from cluster_families(pools, claims, self._pending_pods())

    def _objects(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        with self._lock:
            now = self._clock()
            if self._listed is not None and now - self._listed[0] < self._reuse_s:
                return self._listed[1], self._listed[2]
            pools = _items(
                self._custom.list_cluster_custom_object(
                    GROUP, VERSION, "nodepools", _request_timeout=self._timeout_s
                )
            )
            claims = _items(
                self._custom.list_cluster_custom_object(
                    GROUP, VERSION, "nodeclaims", _request_timeout=self._timeout_s
                )
            )
            self._listed = (now, pools, claims)
            return pools, claims


def _items(listing: object) -> list[dict[str, Any]]:
    return list(cast("dict[str, Any]", listing).get("items") or [])


def cluster_gauges(
    api_client: k8s.ApiClient, peers: TriggerPeers, pending: PendingPodTrigger
) -> ClusterGauges:
    """Served by the trigger `trigger_for(GAUGES_KEY, running)` names (a lone one, or one
    that cannot read the Leases, serves them itself)."""
    return ClusterGauges(
        api_client,
        serving=lambda: peers.mine(GAUGES_KEY),
        pending_pods=pending.pending_pods,
    )


def serve_cluster_gauges(
    api_client: k8s.ApiClient, peers: TriggerPeers, pending: PendingPodTrigger
) -> None:
    """Add them to this process' metrics endpoint (none when metrics are off)."""
    telemetry = current_telemetry()
    if telemetry is not None and telemetry.registry is not None:
        telemetry.registry.register(cluster_gauges(api_client, peers, pending))
