"""The pool and claim gauges on this trigger's metrics endpoint, while it is the one of the
running triggers that serves them (`reporting/cluster_gauges.py`)."""

from __future__ import annotations

from kubernetes import client as k8s

from reporting.cluster_gauges import GAUGES_KEY, ClusterGauges
from trigger.peers import TriggerPeers
from trigger.pending import PendingPodTrigger
from worker.telemetry import current_telemetry


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
