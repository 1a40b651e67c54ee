"""The metrics each process records as it works: counters and histograms, named after
Karpenter's where the meaning is the same (`cloudburst_` where Karpenter has `karpenter_`).

Activities and watchers record through these functions only (it lives in `observability/`, below
both, so that activities and the trigger import it without importing sideways or upwards). They
are no-ops until `worker.telemetry.setup_telemetry` binds a meter provider (the CLI and unit
tests record nothing). Served as Prometheus text by the process' metrics endpoint. Every
process counts only what it did itself, so `sum()` over the replicas is the install's total.

The gauges of pools and claims are not here: they have one writer, computed from the
cluster's objects when scraped (`observability/cluster_gauges.py`). docs/monitoring.md lists every
series with its labels and meaning; `namespace` is always the NodePool's (or NodeClaim's).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata

from opentelemetry.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    NoOpMeterProvider,
    Observation,
)

from api.nodeclaim import DisruptionReason, Offering

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
# A plan is milliseconds for a few pods, seconds for thousands against a large catalog.
_PLAN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass(frozen=True)
class _Instruments:
    created: Counter
    terminated: Counter
    disrupted: Counter
    bound_duration: Histogram
    bound_duration_deprecated: Histogram
    instance_termination_duration: Histogram
    plan_duration: Histogram
    cloud_duration: Histogram
    cloud_errors: Counter
    offering_failures: Counter


def bind(provider: MeterProvider) -> None:
    """Record into `provider` from now on (telemetry setup; tests bind their own)."""
    global _instruments
    _instruments = _make_instruments(provider)


def unbind() -> None:
    bind(NoOpMeterProvider())


def version() -> str:
    """The installed release (`cloudburst_build_info`'s `version`)."""
    try:
        return metadata.version("cloudburst")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def record_claim_created(
    namespace: str, nodepool: str, provider: str, reason: str = "provisioning"
) -> None:
    """A VM was created for a claim (Karpenter's reasons: provisioning, disruption)."""
    _instruments.created.add(
        1, {"namespace": namespace, "nodepool": nodepool, "provider": provider, "reason": reason}
    )


def record_claim_terminated(namespace: str, nodepool: str, provider: str, reason: str) -> None:
    """A claim's VM is confirmed gone; `reason` is the claim's deletion reason."""
    _instruments.terminated.add(
        1, {"namespace": namespace, "nodepool": nodepool, "provider": provider, "reason": reason}
    )


def record_claim_disrupted(namespace: str, nodepool: str, reason: str) -> None:
    """A claim was taken down for a disruption reason (Empty, Expired, Drifted, NodeLost…)."""
    _instruments.disrupted.add(1, {"namespace": namespace, "nodepool": nodepool, "reason": reason})


def observe_pod_provisioning_bound_duration(namespace: str, nodepool: str, seconds: float) -> None:
    """From a pod first seen unschedulable to its binding to a burst node (Karpenter's
    `pods_provisioning_bound_duration_seconds`); `namespace` is the pool's."""
    _instruments.bound_duration.record(seconds, {"namespace": namespace, "nodepool": nodepool})
    _instruments.bound_duration_deprecated.record(seconds, {"nodepool": nodepool})


def observe_instance_termination_duration(
    namespace: str, nodepool: str, provider: str, seconds: float
) -> None:
    """From the first delete request to the provider saying the VM is gone."""
    _instruments.instance_termination_duration.record(
        seconds, {"namespace": namespace, "nodepool": nodepool, "provider": provider}
    )


def observe_plan_duration(namespace: str, nodepool: str, seconds: float) -> None:
    """One plan of a pool's pending pods (`plan_capacity`), catalog read included."""
    _instruments.plan_duration.record(seconds, {"namespace": namespace, "nodepool": nodepool})


def set_prices_as_of(as_of_by_provider: dict[str, float]) -> None:
    """The time (Unix seconds) of the oldest price a plan chose among, per provider."""
    _prices_as_of.update(as_of_by_provider)


@contextmanager
def offering_attempt(namespace: str, nodepool: str, offering: Offering) -> Iterator[None]:
    """One launch of a claim on one of its offerings: a failure (out of capacity, refused,
    the provider's error) is counted by offering and by the class of the provider's own
    error under the Temporal one (re-raised unchanged)."""
    try:
        yield
    except Exception as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
        _instruments.offering_failures.add(
            1,
            {
                "namespace": namespace,
                "nodepool": nodepool,
                "provider": offering.provider,
                "region": offering.region,
                "instance_type": offering.instance_type,
                "capacity_type": offering.capacity_type,
                "error_class": type(cause).__name__,
            },
        )
        raise


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


# The newest reading of each provider's price age in this process (set by planning, read at
# collection): a value of the process' own, like the build info.
_prices_as_of: dict[str, float] = {}


def _observe_prices(_options: object) -> Iterator[Observation]:
    for provider, as_of in sorted(_prices_as_of.items()):
        yield Observation(as_of, {"provider": provider})


def _observe_build(_options: object) -> Iterator[Observation]:
    yield Observation(1, {"version": version()})


def _make_instruments(provider: MeterProvider) -> _Instruments:
    meter = provider.get_meter(METER_NAME)
    meter.create_observable_gauge(
        "cloudburst_build_info",
        callbacks=[_observe_build],
        description="A constant 1 labeled by the version that runs",
    )
    meter.create_observable_gauge(
        "cloudburst_prices_as_of_timestamp_seconds",
        callbacks=[_observe_prices],
        unit="",
        description="When the oldest price a plan of this process chose among was read",
    )
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
        bound_duration=meter.create_histogram(
            "cloudburst_pods_provisioning_bound_duration",
            unit="s",
            description="Time from a pod pending for capacity to its binding to a burst node",
            explicit_bucket_boundaries_advisory=_PROVISIONING_BUCKETS,
        ),
        bound_duration_deprecated=meter.create_histogram(
            "cloudburst_pods_provisioning_latency",
            unit="s",
            description="Deprecated: cloudburst_pods_provisioning_bound_duration_seconds",
            explicit_bucket_boundaries_advisory=_PROVISIONING_BUCKETS,
        ),
        instance_termination_duration=meter.create_histogram(
            "cloudburst_nodeclaims_instance_termination_duration",
            unit="s",
            description="Time from a claim's first VM delete request to the VM gone",
            explicit_bucket_boundaries_advisory=_CLOUD_BUCKETS,
        ),
        plan_duration=meter.create_histogram(
            "cloudburst_nodepools_plan_duration",
            unit="s",
            description="Time to plan a pool's pending pods",
            explicit_bucket_boundaries_advisory=_PLAN_BUCKETS,
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
        offering_failures=meter.create_counter(
            "cloudburst_offerings_launch_failures",
            description="Launches of a claim on an offering that failed, by offering",
        ),
    )


_instruments = _make_instruments(NoOpMeterProvider())
