"""Observability of one claim's life on the real dev server: one trace, the named metrics,
the Temporal SDK's metrics, and the health endpoints."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes import client as k8s
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.providers.base import CapacityError
from api.messages import claim_workflow_id
from api.nodeclaim import Offering
from api.nodepool.messages import pool_workflow_id
from observability import metrics
from sim.cluster import SimulatedCluster
from tests.e2e.harness import (
    CLUSTER_ID,
    Stack,
    activity_types,
    eventually,
    in_process_worker,
    in_thread,
    make_pool,
    new_task_queue,
    pool_pod,
    running_trigger,
    running_watcher,
)
from worker.client import connect_temporal
from worker.health import serving_health
from worker.settings import Settings
from worker.telemetry import Telemetry, reset_telemetry, setup_telemetry


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def samples(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def telemetry(spans: InMemorySpanExporter) -> Iterator[Telemetry]:
    # Non-global providers: the globals can be set once per process, and other tests run here.
    setup = setup_telemetry(
        service_name="cloudburst-test",
        metrics_port=free_port(),
        sdk_metrics_port=free_port(),
        span_exporter=spans,
        bind_address="127.0.0.1",
        set_globals=False,
    )
    try:
        yield setup
    finally:
        reset_telemetry()


@pytest_asyncio.fixture(loop_scope="session")
async def traced_stack(
    telemetry: Telemetry,
    temporal_address: str,
    kube: k8s.ApiClient,
    sim_cluster: SimulatedCluster,
    kubeconfig: Path,
) -> Stack:
    queue = new_task_queue()
    settings = Settings(
        temporal_address=temporal_address,
        kubeconfig=kubeconfig,
        task_queue=queue,
        cluster_id=CLUSTER_ID,
        allowed_endpoints=sim_cluster.endpoints(),
    )
    # Built like every process builds it: the tracing interceptor and the SDK runtime come
    # from the telemetry setup; the worker inherits both from this client.
    client = await connect_temporal(settings)
    return Stack(client, kube, sim_cluster, queue, settings)


async def test_one_claim_is_one_trace_and_fills_the_metrics(
    traced_stack: Stack, telemetry: Telemetry, spans: InMemorySpanExporter
) -> None:
    """A pending pod → the trigger's decision → the pool → its claim → every activity: one
    trace. Then the named metrics carry the claim's life and the pod's wait."""
    stack = traced_stack
    make_pool(stack.kube, "tele", empty_ttl=1, limits={"maxNodes": 4})
    async with (
        in_process_worker(stack),
        running_watcher(stack.temporal, stack.kube),
        running_trigger(stack),
    ):
        await in_thread(stack.core.create_namespaced_pod, "default", pool_pod("tele-0", "tele"))
        pod = await eventually(
            lambda: in_thread(stack.core.read_namespaced_pod, "tele-0", "default"),
            lambda p: p.status.phase == "Running",
            timeout_s=90,
        )
        claim_id = claim_workflow_id("default", str(pod.spec.node_name))
        await in_thread(stack.core.delete_namespaced_pod, "tele-0", "default")
        # Empty for a second: the claim drains and deletes its node.
        await stack.temporal.get_workflow_handle(claim_id).result()

    activities = await activity_types(stack.temporal, claim_id)
    assert {"create_instance", "delete_instance"} <= activities
    finished = list(spans.get_finished_spans())
    pool_id = pool_workflow_id("default", "tele")
    # Who started what, from the trigger's decision down to the claim.
    chain = [
        ("TriggerDemand", None),
        ("SignalWithStartWorkflow:NodePoolWorkflow", pool_id),
        ("RunWorkflow:NodePoolWorkflow", pool_id),
        ("StartActivity:plan_capacity", pool_id),
        # The pool's worker starts its claims (`start_claim_workflows`), in the same trace.
        ("StartActivity:start_claim_workflows", pool_id),
        ("RunActivity:start_claim_workflows", pool_id),
        ("StartWorkflow:NodeClaimWorkflow", claim_id),
        ("RunWorkflow:NodeClaimWorkflow", claim_id),
        *((f"StartActivity:{a}", claim_id) for a in sorted(activities)),
        *((f"RunActivity:{a}", claim_id) for a in sorted(activities)),
    ]
    # The trigger's decision for this pool's pod (a re-list also re-sends other pools of the
    # shared cluster their pending sets, each its own trace).
    root = [
        s
        for s in finished
        if s.name == "TriggerDemand"
        and (s.attributes or {}).get("cloudburst.nodepool") == "default/tele"
        and (s.attributes or {}).get("cloudburst.pending_pods")
    ]
    assert root, "the trigger made no span for the pool's pod"
    trace_id = root[0].context.trace_id
    in_trace = {
        (s.name, (s.attributes or {}).get("temporalWorkflowID"))
        for s in finished
        if s.context.trace_id == trace_id
    }
    missing = [
        name
        for name, workflow_id in chain
        if not any(n == name and workflow_id in (None, w) for n, w in in_trace)
    ]
    assert not missing, f"missing from the trigger's trace: {missing}"

    assert telemetry.metrics_port is not None
    text = scrape(telemetry.metrics_port)
    assert (
        'cloudburst_nodeclaims_created_total{namespace="default",nodepool="tele",'
        'provider="fake",reason="provisioning"} 1.0' in text
    ), samples(text, "cloudburst_nodeclaims_created_total")
    assert any(
        'namespace="default"' in line
        and 'nodepool="tele"' in line
        and 'provider="fake"' in line
        and 'reason="Empty"' in line
        for line in samples(text, "cloudburst_nodeclaims_terminated_total")
    ), samples(text, "cloudburst_nodeclaims_terminated_total")
    assert (
        'cloudburst_nodeclaims_disrupted_total{namespace="default",nodepool="tele",'
        'reason="Empty"} 1.0' in text
    ), samples(text, "cloudburst_nodeclaims_disrupted_total")
    durations = samples(text, "cloudburst_cloudprovider_duration_seconds_count")
    for method in ("create", "get", "delete"):
        assert any(f'method="{method}"' in s and 'provider="fake"' in s for s in durations), (
            method,
            durations,
        )
    # The pod waited for the node and was bound to it: one observation for its pool.
    assert (
        'cloudburst_pods_provisioning_bound_duration_seconds_count{namespace="default",'
        'nodepool="tele"} 1.0' in text
    ), samples(text, "cloudburst_pods_provisioning_bound_duration_seconds_count")
    assert any(
        'namespace="default"' in line and 'nodepool="tele"' in line
        for line in samples(text, "cloudburst_nodepools_plan_duration_seconds_count")
    ), samples(text, "cloudburst_nodepools_plan_duration_seconds_count")
    # The pool's gauges are not this process' to serve: the trigger's (tests/e2e/test_monitoring.py).
    assert "cloudburst_nodepools_usage" not in text

    assert telemetry.sdk_metrics_port is not None
    sdk = scrape(telemetry.sdk_metrics_port)
    assert "temporal_workflow_completed" in sdk or "temporal_workflow_task" in sdk, sdk[:2000]
    assert "temporal_activity_execution_latency" in sdk, sdk[:2000]


def test_the_facade_names_every_metric_like_karpenter(telemetry: Telemetry) -> None:
    """Every metric the facade records, by its Prometheus name and labels."""
    metrics.record_claim_created("ns", "p", "hetzner", "provisioning")
    metrics.record_claim_terminated("ns", "p", "hetzner", "Empty")
    metrics.record_claim_disrupted("ns", "p", "Expired")
    metrics.observe_pod_provisioning_bound_duration("ns", "p", 42.0)
    metrics.observe_instance_termination_duration("ns", "p", "hetzner", 12.0)
    metrics.observe_plan_duration("ns", "p", 0.2)
    metrics.set_prices_as_of({"hetzner": 1_700_000_000.0})
    with pytest.raises(ZeroDivisionError), metrics.cloud_call("hetzner", "create"):
        raise ZeroDivisionError
    offering = Offering(provider="hetzner", region="fsn1", instance_type="cx22")
    with pytest.raises(ApplicationError), metrics.offering_attempt("ns", "p", offering):
        # As `_classified` raises it: the provider's error under the Temporal one.
        raise ApplicationError("out of cx22") from CapacityError("hetzner", "out of cx22")

    assert telemetry.metrics_port is not None
    text = scrape(telemetry.metrics_port)
    labels = 'namespace="ns",nodepool="p"'
    for line in (
        f'cloudburst_nodeclaims_created_total{{{labels},provider="hetzner",reason="provisioning"}} 1.0',
        f'cloudburst_nodeclaims_terminated_total{{{labels},provider="hetzner",reason="Empty"}} 1.0',
        f'cloudburst_nodeclaims_disrupted_total{{{labels},reason="Expired"}} 1.0',
        f"cloudburst_pods_provisioning_bound_duration_seconds_count{{{labels}}} 1.0",
        # The name before Karpenter's, kept for one release (CHANGELOG "Deprecated").
        'cloudburst_pods_provisioning_latency_seconds_count{nodepool="p"} 1.0',
        f'cloudburst_nodeclaims_instance_termination_duration_seconds_count{{{labels},provider="hetzner"}} 1.0',
        f"cloudburst_nodepools_plan_duration_seconds_count{{{labels}}} 1.0",
        'cloudburst_prices_as_of_timestamp_seconds{provider="hetzner"} 1.7e+09',
        f'cloudburst_build_info{{version="{metrics.version()}"}} 1.0',
        'cloudburst_cloudprovider_duration_seconds_count{method="create",provider="hetzner"} 1.0',
        'cloudburst_cloudprovider_errors_total{error_class="ZeroDivisionError",method="create",provider="hetzner"} 1.0',
        f'cloudburst_offerings_launch_failures_total{{capacity_type="on-demand",error_class="CapacityError",instance_type="cx22",{labels},provider="hetzner",region="fsn1"}} 1.0',
    ):
        assert line in text, f"{line}\nnot in\n{text}"


async def test_health_endpoints(temporal_client: Client, kube: k8s.ApiClient) -> None:
    port = free_port()
    with serving_health(port, temporal_client, kube, host="127.0.0.1"):
        for path in ("/healthz", "/readyz"):
            status, body = await get(port, path)
            assert status == 200, body
        # Kubernetes unreachable: not ready, and the probe says which dependency failed.
        broken = k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9"))
    with serving_health(port, temporal_client, broken, host="127.0.0.1"):
        status, body = await get(port, "/readyz")
        assert status == 503 and "kubernetes" in body and '"temporal": "ok"' in body, body
        status, _ = await get(port, "/healthz")
        assert status == 200  # alive: a dependency being down is no reason to restart


async def get(port: int, path: str) -> tuple[int, str]:
    import asyncio

    def fetch() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    # The readiness checks run on this event loop: never block it while they do.
    return await asyncio.to_thread(fetch)


def one_span(spans: list[ReadableSpan], name: str, workflow_id: str) -> ReadableSpan:
    found = [
        s
        for s in spans
        if s.name == name and (s.attributes or {}).get("temporalWorkflowID") == workflow_id
    ]
    assert len(found) == 1, [(s.name, s.attributes) for s in spans if s.name == name]
    return found[0]
