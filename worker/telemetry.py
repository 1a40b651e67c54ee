"""Traces and metrics for one process: set up once at start, read by the Temporal client.

- Tracing: Temporal's `TracingInterceptor` on the client (workers built on it inherit it), so
  one trace runs from a workflow start through its workflows and every activity. Spans go to
  OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (the exporter reads the standard
  `OTEL_EXPORTER_OTLP_*` variables itself), or to an exporter a test passes.
- Metrics: the OpenTelemetry SDK, read by a Prometheus reader on `metrics_port` (our own
  `cloudburst_*` metrics, see `observability/metrics.py`); the Temporal SDK's own metrics come from
  its Rust core on `sdk_metrics_port` through a `Runtime`.

OpenTelemetry's global providers can be set only once per process, so nothing here depends on
them: the interceptor gets our tracer and the metrics facade our meter provider explicitly.
The globals are set too (once) for other libraries' sake. `reset_telemetry()` undoes a setup,
which is what tests call between runs.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from prometheus_client import CollectorRegistry, start_http_server
from temporalio.client import Interceptor
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from observability import metrics

log = logging.getLogger(__name__)

OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACER_NAME = "cloudburst"


@dataclass
class Telemetry:
    """What `setup_telemetry` made; `reset_telemetry` shuts all of it down."""

    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    runtime: Runtime | None = None
    registry: CollectorRegistry | None = None
    metrics_port: int | None = None
    sdk_metrics_port: int | None = None
    _servers: list[Any] = field(default_factory=list)

    def shutdown(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


_current: Telemetry | None = None
_globals_set = False


def setup_telemetry(
    *,
    service_name: str,
    metrics_port: int = 0,
    sdk_metrics_port: int = 0,
    tracing: bool = False,
    span_exporter: SpanExporter | None = None,
    metric_readers: list[MetricReader] | None = None,
    bind_address: str = "0.0.0.0",
    set_globals: bool = True,
) -> Telemetry:
    """Set up this process' telemetry (once; a second call replaces the first).

    Ports of 0 disable that endpoint. Tracing is on when asked, when a test passes an
    exporter, or when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
    """
    global _current
    reset_telemetry()
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)})
    telemetry = Telemetry()

    if tracing or span_exporter is not None or os.environ.get(OTLP_ENDPOINT_ENV):
        telemetry.tracer_provider = TracerProvider(resource=resource)
        if span_exporter is not None:
            telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
        if os.environ.get(OTLP_ENDPOINT_ENV):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            telemetry.tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))

    readers = list(metric_readers or [])
    if metrics_port:
        registry = CollectorRegistry()
        try:
            server, _thread = start_http_server(metrics_port, addr=bind_address, registry=registry)
        except OSError as err:
            # A busy port (two processes on one machine) costs the endpoint, not the process.
            log.warning("metrics not served on :%d: %s", metrics_port, err)
        else:
            telemetry.registry = registry
            telemetry._servers.append(server)
            telemetry.metrics_port = server.server_port
            # No otel_scope_* labels: the series read like the Karpenter ones they parallel.
            readers.append(PrometheusMetricReader(scope_info_enabled=False, registry=registry))
    telemetry.meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    metrics.bind(telemetry.meter_provider)

    if sdk_metrics_port:
        try:
            telemetry.runtime = Runtime(
                telemetry=TelemetryConfig(
                    metrics=PrometheusConfig(
                        bind_address=f"{bind_address}:{sdk_metrics_port}",
                        counters_total_suffix=True,
                        durations_as_seconds=True,
                    ),
                )
            )
            telemetry.sdk_metrics_port = sdk_metrics_port
        except Exception as err:  # the core reports a busy port as a plain runtime error
            log.warning("Temporal SDK metrics not served on :%d: %s", sdk_metrics_port, err)

    if set_globals:
        _set_globals(telemetry)
    _current = telemetry
    log.info(
        "telemetry: tracing %s, metrics on :%s, Temporal SDK metrics on :%s",
        "on" if telemetry.tracer_provider else "off",
        telemetry.metrics_port or "-",
        sdk_metrics_port or "-",
    )
    return telemetry


def reset_telemetry() -> None:
    """Shut down the current setup and record nothing until the next one."""
    global _current
    if _current is not None:
        _current.shutdown()
        _current = None
    metrics.unbind()


def current_telemetry() -> Telemetry | None:
    return _current


def client_interceptors() -> list[Interceptor]:
    """Interceptors for every Temporal client this process makes (tracing, when on)."""
    if _current is None or _current.tracer_provider is None:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(_current.tracer_provider.get_tracer(TRACER_NAME))]


def tracer() -> trace.Tracer:
    """This process' tracer for its own spans (a no-op one while tracing is off)."""
    if _current is None or _current.tracer_provider is None:
        return trace.NoOpTracer()
    return _current.tracer_provider.get_tracer(TRACER_NAME)


def current_runtime() -> Runtime | None:
    return _current.runtime if _current is not None else None


def _set_globals(telemetry: Telemetry) -> None:
    # Only the first setup of a process may set them (OpenTelemetry refuses later ones).
    global _globals_set
    if _globals_set:
        return
    if telemetry.tracer_provider is not None:
        trace.set_tracer_provider(telemetry.tracer_provider)
    if telemetry.meter_provider is not None:
        otel_metrics.set_meter_provider(telemetry.meter_provider)
    _globals_set = True
