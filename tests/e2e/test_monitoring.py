"""A real Prometheus (Debian's `prometheus`, which `make test` installs) scrapes two workers
and two triggers, as the shipped ServiceMonitor has it, through a pool's life: the pool
gauges have one writer, a deleted pool's series go, and every dashboard query and alert
expression runs there and returns the series it should."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import (
    Stack,
    TriggerProcess,
    WorkerProcess,
    delete_cloudburst_object,
    eventually,
    in_thread,
    make_pool,
    pool_pod,
)
from tests.e2e.test_telemetry import free_port

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "chart" / "files" / "prometheus-rules.yaml"
DASHBOARD = ROOT / "deploy" / "chart" / "files" / "grafana-dashboard.json"
LEASE_S = 6
# Dashboard panels with no series after a lifecycle without a failure: a counter (ours or
# the Temporal SDK's) appears on its first increment.
EMPTY_WITHOUT_FAILURES = {
    "Cloud call errors",
    "Offering launch failures",
    "Workflow task and activity failures",
}


@contextlib.contextmanager
def running_prometheus(targets: dict[str, list[int]]) -> Iterator[str]:
    """Prometheus on a free 127.0.0.1 port scraping `targets` (job -> ports) every second with
    the shipped rules, as prometheus-operator scrapes a ServiceMonitor's endpoints: the job
    named after the Service, the target's `namespace` the pods' (kept under the series' own,
    honorLabels)."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus not installed (`make test` installs Debian's package)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="cloudburst-prometheus-") as tmp:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {
                    "job_name": job,
                    "honor_labels": True,
                    "static_configs": [
                        {
                            "targets": [f"127.0.0.1:{p}" for p in ports],
                            "labels": {"namespace": "cloudburst-system"},
                        }
                    ],
                }
                for job, ports in targets.items()
            ],
        }
        (Path(tmp) / "prometheus.yml").write_text(yaml.safe_dump(config))
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp}/prometheus.yml",
                f"--storage.tsdb.path={tmp}/data",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


def api(base: str, path: str, **params: str) -> Any:
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


async def query(base: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    """An instant query's series (now, or `at`); a query Prometheus refuses fails the test."""
    params = {"query": expr} if at is None else {"query": expr, "time": str(at)}
    try:
        data = await in_thread(api, base, "query", **params)
    except urllib.error.HTTPError as err:
        pytest.fail(f"{expr}\n{err.read().decode()}")
    assert data["resultType"] == "vector", (expr, data)
    return list(data["result"])


async def ready(base: str) -> bool:
    try:
        await in_thread(api, base, "query", query="up")
        return True
    except OSError:
        return False


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every panel, the dashboard's variables as Grafana fills
    them for "All"."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (
            panel["title"],
            target["expr"].replace("$namespace", ".*").replace("$__rate_interval", "1m"),
        )
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


async def test_prometheus_scrapes_one_pool_gauge_writer_and_runs_every_query(
    stack: Stack, temporal_address: str, kubeconfig: Path
) -> None:
    """Two workers and two triggers: `sum(cloudburst_nodepools_usage)` is what the pool holds
    (fails without one writer: with each trigger serving the gauges, as each worker replica
    did, the sum is twice the pool's nodes); the deleted pool's series go; every dashboard
    query and alert expression evaluates, and those the lifecycle feeds return series."""
    ports = {name: (free_port(), free_port()) for name in ("w1", "w2", "t1", "t2")}
    processes = [
        *(
            WorkerProcess(
                temporal_address,
                kubeconfig,
                stack.task_queue,
                stack.settings.allowed_endpoints,
                metrics_port=ports[name][0],
                sdk_metrics_port=ports[name][1],
            )
            for name in ("w1", "w2")
        ),
        *(
            TriggerProcess(
                temporal_address,
                kubeconfig,
                stack.task_queue,
                stack.settings.allowed_endpoints,
                identity=f"monitoring-{name}",
                lease_s=LEASE_S,
                metrics_port=ports[name][0],
                sdk_metrics_port=ports[name][1],
            )
            for name in ("t1", "t2")
        ),
    ]
    targets = {
        "cloudburst-worker-metrics": [*ports["w1"], *ports["w2"]],
        "cloudburst-trigger-metrics": [*ports["t1"], *ports["t2"]],
    }
    # One pool with room, one at its limit (no node allowed) with a pod waiting.
    make_pool(stack.kube, "mon", empty_ttl=2, limits={"maxNodes": 2})
    make_pool(stack.kube, "mon-full", limits={"maxNodes": 0})
    for process in processes:
        process.start()
    try:
        with running_prometheus(targets) as prom:
            await eventually(lambda: ready(prom), bool, 60)
            await eventually(
                lambda: query(prom, "up == 1"), lambda up: len(up) == len(ports) * 2, 90
            )
            await in_thread(
                stack.core.create_namespaced_pod, "default", pool_pod("mon-0", "mon", cpu="250m")
            )
            await in_thread(
                stack.core.create_namespaced_pod,
                "default",
                pool_pod("mon-full-0", "mon-full", cpu="250m"),
            )
            await eventually(
                lambda: in_thread(stack.core.read_namespaced_pod, "mon-0", "default"),
                lambda pod: pod.status.phase == "Running",
                120,
            )
            held = 'cloudburst_nodepools_usage{namespace="default",nodepool="mon",resource="nodes"}'
            # One series (one writer among two triggers and two workers), the pool's namespace
            # kept over the target's, and its sum the pool's one node.
            series = await eventually(
                lambda: query(prom, held),
                lambda found: bool(found) and found[0]["value"][1] == "1",
                60,
            )
            assert len(series) == 1, series
            [total] = await query(prom, f"sum({held})")
            assert total["value"][1] == "1", total
            [ready_claim] = await eventually(
                lambda: query(prom, 'cloudburst_nodeclaims_state{nodepool="mon",phase="Ready"}'),
                lambda found: len(found) == 1,
                60,
            )
            while_ready = float(ready_claim["value"][0])
            at_limit = next(
                r for r in alert_rules() if r["alert"] == "CloudburstNodePoolAtLimitWithPodsWaiting"
            )
            await eventually(
                lambda: query(prom, at_limit["expr"]),
                lambda found: [s["metric"]["nodepool"] for s in found] == ["mon-full"],
                60,
            )
            [waiting] = await query(prom, 'cloudburst_pods_state{nodepool="mon-full"}')
            assert waiting["metric"]["name"] == "mon-full-0", waiting

            # The node empties: its claim ends (terminated, disrupted as Empty), scraped a few
            # times (a rate needs two samples), and then the pools are deleted.
            await in_thread(stack.core.delete_namespaced_pod, "mon-0", "default")
            terminated = 'cloudburst_nodeclaims_terminated_total{nodepool="mon",reason="Empty"}'
            await eventually(
                lambda: query(prom, f"count_over_time({terminated}[1m]) >= 3"),
                lambda found: len(found) == 1,
                120,
            )
            await eventually(lambda: query(prom, held), lambda f: f[0]["value"][1] == "0", 60)
            # The claim's own series goes when its deletion ends: until then it is Deleting and
            # the stuck-terminating expression holds (its `for: 1h` is what keeps it quiet).
            await eventually(
                lambda: query(prom, 'cloudburst_nodeclaims_state{nodepool="mon"}'),
                lambda found: found == [],
                120,
            )

            # Each panel's query, while the node was Ready (the claim's state) or now (what
            # its end counted).
            for title, expr in dashboard_queries():
                found = await query(prom, expr, while_ready) + await query(prom, expr)
                if title not in EMPTY_WITHOUT_FAILURES and not found:
                    names = await query(prom, 'count by (__name__) ({__name__=~".+"})')
                    known = sorted(n["metric"]["__name__"] for n in names)
                    pytest.fail(f"dashboard panel {title!r}: no series for {expr}; have {known}")
            firing_now = {"CloudburstNodePoolAtLimitWithPodsWaiting"}
            for rule in alert_rules():
                # The cluster is the session's: what other tests' pools left in it (a claim
                # still deleting, say) is theirs; a series of no pool is judged as ours.
                found = [
                    series
                    for series in await query(prom, rule["expr"])
                    if series["metric"].get("nodepool", "mon") in ("mon", "mon-full")
                ]
                assert bool(found) == (rule["alert"] in firing_now), (rule["alert"], found)
            # Prometheus itself evaluated every rule without an error.
            groups = (await in_thread(api, prom, "rules"))["groups"]
            health = {
                r["name"]: (r["health"], r.get("lastError")) for g in groups for r in g["rules"]
            }
            assert set(health) == {r["alert"] for r in alert_rules()}, health
            assert all(h == "ok" for h, _ in health.values()), health

            await in_thread(stack.core.delete_namespaced_pod, "mon-full-0", "default")
            for pool in ("mon", "mon-full"):
                await in_thread(delete_cloudburst_object, stack.kube, "nodepools", pool)
            gone = 'cloudburst_nodepools_usage{nodepool=~"mon|mon-full"} or cloudburst_nodepools_pending_pods{nodepool=~"mon|mon-full"}'
            await eventually(lambda: query(prom, gone), lambda found: found == [], 60)
    finally:
        for process in processes:
            process.stop()
        for pool in ("mon", "mon-full"):
            with contextlib.suppress(Exception):
                await in_thread(delete_cloudburst_object, stack.kube, "nodepools", pool)
        await in_thread(
            stack.core.delete_collection_namespaced_pod,
            "default",
            label_selector="pool in (mon,mon-full)",
        )
