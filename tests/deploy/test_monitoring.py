"""The monitoring files: one source of alert rules, a ServiceMonitor that scrapes every
metrics Service as the alerts expect, and every series they and the dashboard read is one
docs/monitoring.md lists and the code exports."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.conftest import DEPLOY, ROOT, kustomize

RULES = DEPLOY / "chart" / "files" / "prometheus-rules.yaml"
DASHBOARD = DEPLOY / "chart" / "files" / "grafana-dashboard.json"
COMPONENT = DEPLOY / "components" / "monitoring"
MONITORING_DOC = ROOT / "docs" / "monitoring.md"
# Where the series are named: the facade's instruments and the scrape-time gauges.
EXPORTERS = [ROOT / "observability" / "metrics.py", ROOT / "observability" / "cluster_gauges.py"]
SERIES = re.compile(r"\bcloudburst_[a-z_]+")
# Suffixes Prometheus adds to an OpenTelemetry instrument's name (unit, counter, histogram).
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_seconds")


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def documented_series() -> set[str]:
    """The series docs/monitoring.md's table lists (first column)."""
    return {
        match.group(1)
        for match in re.finditer(r"^\| `(cloudburst_[a-z_]+)` \|", MONITORING_DOC.read_text(), re.M)
    }


def instrument_name(series: str) -> str:
    while series.endswith(SUFFIXES):
        series = next(series.removesuffix(s) for s in SUFFIXES if series.endswith(s))
    return series


def test_the_components_prometheus_rule_carries_the_chart_files_groups() -> None:
    """One source: the component's PrometheusRule is the rules file's groups (regenerate it
    as its header says when this fails)."""
    rule = yaml.safe_load((COMPONENT / "prometheus-rule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def test_the_service_monitor_scrapes_every_metrics_service_keeping_the_series_namespace(
    tmp_path: Path,
) -> None:
    """Composed with the base and split-workers: every Service with a `metrics` port is
    selected, on both ports, with honorLabels (the series' `namespace` is a NodePool's), and
    every job the alerts name is one of those Services (prometheus-operator's job name)."""
    components = [COMPONENT, DEPLOY / "components" / "split-workers"]
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY / "base", tmp_path)],
                "components": [os.path.relpath(c, tmp_path) for c in components],
            }
        )
    )
    objects = kustomize(tmp_path)
    [monitor] = [o for o in objects if o["kind"] == "ServiceMonitor"]
    [expression] = monitor["spec"]["selector"]["matchExpressions"]
    services = {
        o["metadata"]["name"]: o
        for o in objects
        if o["kind"] == "Service"
        and any(p["name"] == "metrics" for p in o["spec"]["ports"])
        and o["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    }
    assert services, "no metrics Service"
    for name, service in services.items():
        assert service["metadata"]["labels"][expression["key"]] in expression["values"], name
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {"metrics", "sdk-metrics"}
    assert all(e.get("honorLabels") is True for e in monitor["spec"]["endpoints"])
    jobs = {job for rule in alerts() for job in re.findall(r'job=~?"([^"]+)"', rule["expr"])}
    for job in jobs:
        assert any(re.fullmatch(job, name) for name in services), (job, sorted(services))


def test_every_alert_has_a_runbook_section() -> None:
    doc = MONITORING_DOC.read_text()
    for rule in alerts():
        name = rule["alert"]
        assert rule["annotations"]["runbook"] == f"docs/monitoring.md#{name.lower()}", name
        assert f"\n### {name}\n" in doc, f"docs/monitoring.md has no runbook for {name}"
        assert rule["labels"]["severity"] in ("critical", "warning"), name


def test_every_series_the_alerts_and_dashboard_read_is_documented_and_exported() -> None:
    """A renamed series breaks the alerts and panels that read it: here, not in production."""
    documented = documented_series()
    read = {
        series
        for expr in [*(r["expr"] for r in alerts()), *dashboard_exprs()]
        for series in SERIES.findall(expr)
    }
    undocumented = {
        s
        for s in read
        if s not in documented
        and instrument_name(s) not in {instrument_name(d) for d in documented}
    }
    assert not undocumented, f"read but not in docs/monitoring.md: {sorted(undocumented)}"
    source = "\n".join(path.read_text() for path in EXPORTERS)
    unexported = {s for s in documented if f'"{instrument_name(s)}' not in source}
    assert not unexported, f"documented but named nowhere in observability/: {sorted(unexported)}"


def test_the_dashboard_asks_for_its_data_source_and_has_unique_panels() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]
