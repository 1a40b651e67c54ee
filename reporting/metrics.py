"""The metrics operators read, named in parallel with Karpenter's where the meaning is the same.

Activities and watchers record through these functions only (it lives in `reporting/`, below
both, so that activities and the trigger import it without importing sideways or upwards). They
are no-ops until `worker.telemetry.setup_telemetry` binds a meter provider (the CLI and unit
tests record nothing). Served as Prometheus text by the process' metrics endpoint:

| Prometheus name                                   | labels                        |
|---------------------------------------------------|-------------------------------|
| cloudburst_nodeclaims_created_total               | nodepool, provider, reason    |
| cloudburst_nodeclaims_terminated_total            | nodepool, provider, reason    |
| cloudburst_nodeclaims_disrupted_total             | nodepool, reason              |
| cloudburst_pods_provisioning_latency_seconds      | nodepool (histogram)          |
| cloudburst_cloudprovider_duration_seconds         | provider, method (histogram)  |
| cloudburst_cloudprovider_errors_total             | provider, method, error_class |
| cloudburst_nodepool_usage                         | nodepool, resource            |
| cloudburst_nodepool_limit                         | nodepool, resource            |
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    NoOpMeterProvider,
)
from opentelemetry.metrics import (
    _Gauge as Gauge,  # the synchronous gauge; public name still pending upstream
)

from api.nodeclaim import DisruptionReason

METER_NAME = "cloudburst"
# Voluntary and involuntary reasons that count as a disruption (Karpenter's reasons, ours).
DISRUPTION_REASONS = frozenset(
    {
        DisruptionReason.EMPTY,
        DisruptionReason.EXPIRED,
        DisruptionReason.DRIFTED,
        DisruptionReason.UNDERUTILIZED,
        DisruptionReason.NODE_LOST,
    }
)

# Seconds: cloud calls take from tens of milliseconds (get) to minutes (create and wait).
_CLOUD_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_PROVISIONING_BUCKETS = (1, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900)


@dataclass(frozen=True)
class _Instruments:
    created: Counter
    terminated: Counter
    disrupted: Counter
    provisioning_latency: Histogram
    cloud_duration: Histogram
    cloud_errors: Counter
    pool_usage: Gauge
    pool_limit: Gauge


def bind(provider: MeterProvider) -> None:
    """Record into `provider` from now on (telemetry setup; tests bind their own)."""
    global _instruments
    _instruments = _make_instruments(provider)


def unbind() -> None:
    bind(NoOpMeterProvider())


def record_claim_created(nodepool: str, provider: str, reason: str = "provisioning") -> None:
    """A VM was created for a claim (Karpenter's reasons: provisioning, disruption)."""
    _instruments.created.add(1, {"nodepool": nodepool, "provider": provider, "reason": reason})


def record_claim_terminated(nodepool: str, provider: str, reason: str) -> None:
    """A claim's VM is confirmed gone; `reason` is the claim's deletion reason."""
    _instruments.terminated.add(1, {"nodepool": nodepool, "provider": provider, "reason": reason})


def record_claim_disrupted(nodepool: str, reason: str) -> None:
    """A claim was taken down for a disruption reason (Empty, Expired, Drifted, NodeLost…)."""
    _instruments.disrupted.add(1, {"nodepool": nodepool, "reason": reason})


def observe_pod_provisioning_latency(nodepool: str, seconds: float) -> None:
    """From a pod first seen unschedulable to its binding to a burst node."""
    _instruments.provisioning_latency.record(seconds, {"nodepool": nodepool})


def set_nodepool_usage(nodepool: str, resource: str, value: float) -> None:
    """What the pool's claims hold now: resource is `nodes`, `cpu` (cores), `memory` (bytes)."""
    _instruments.pool_usage.set(value, {"nodepool": nodepool, "resource": resource})


def set_nodepool_limit(nodepool: str, resource: str, value: float) -> None:
    """The pool's limit for the same resources as `set_nodepool_usage`."""
    _instruments.pool_limit.set(value, {"nodepool": nodepool, "resource": resource})


@contextmanager
def cloud_call(provider: str, method: str) -> Iterator[None]:
    """Time one provider call; count its failure by exception class (re-raised unchanged)."""
    started = time.monotonic()
    try:
        yield
    except Exception as exc:
        _instruments.cloud_errors.add(
            1, {"provider": provider, "method": method, "error_class": type(exc).__name__}
        )
        raise
    finally:
        _instruments.cloud_duration.record(
            time.monotonic() - started, {"provider": provider, "method": method}
        )


def _make_instruments(provider: MeterProvider) -> _Instruments:
    meter = provider.get_meter(METER_NAME)
    return _Instruments(
        created=meter.create_counter(
            "cloudburst_nodeclaims_created", description="NodeClaims whose VM was created"
        ),
        terminated=meter.create_counter(
            "cloudburst_nodeclaims_terminated", description="NodeClaims whose VM was deleted"
        ),
        disrupted=meter.create_counter(
            "cloudburst_nodeclaims_disrupted", description="NodeClaims disrupted, by reason"
        ),
        provisioning_latency=meter.create_histogram(
            "cloudburst_pods_provisioning_latency",
            unit="s",
            description="Time from a pod pending for capacity to its binding to a burst node",
            explicit_bucket_boundaries_advisory=_PROVISIONING_BUCKETS,
        ),
        cloud_duration=meter.create_histogram(
            "cloudburst_cloudprovider_duration",
            unit="s",
            description="Duration of cloud provider calls",
            explicit_bucket_boundaries_advisory=_CLOUD_BUCKETS,
        ),
        cloud_errors=meter.create_counter(
            "cloudburst_cloudprovider_errors", description="Failed cloud provider calls"
        ),
        pool_usage=meter.create_gauge(
            "cloudburst_nodepool_usage", description="Resources held by a NodePool's claims"
        ),
        pool_limit=meter.create_gauge(
            "cloudburst_nodepool_limit", description="A NodePool's resource limits"
        ),
    )


_instruments = _make_instruments(NoOpMeterProvider())
