"""deploy/chart, linted and rendered by Helm itself (built from `helm.sh/helm/v4`, sim/helm.py):
its values refused at install where the processes would refuse them, its settings the ones
the processes read, and what is generated from it (the kustomize base, the values schema, the
settings reference) up to date."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from activities.planning.config import PriceSettings
from sim.controlplane.binaries import ControlPlaneUnavailable
from tests.deploy import generate
from tests.deploy.conftest import kustomize
from worker.settings import Settings

ROOT = generate.ROOT
CHART = generate.CHART
CLUSTER_ID = ["--set", "settings.clusterId=test-cluster"]
KUBERNETES_VERSION = "1.34.0"


@pytest.fixture(scope="session")
def helm() -> Path:
    from sim.helm import helm_binary

    try:
        return helm_binary()
    except ControlPlaneUnavailable as exc:
        pytest.fail(str(exc))


def run_helm(helm: Path, *args: str, chart: Path = CHART) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args, str(chart)] if args[0] == "lint" else [str(helm), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def template(helm: Path, *args: str, chart: Path = CHART) -> list[dict[str, Any]]:
    done = run_helm(
        helm, "template", "cloudburst", str(chart), "--namespace", "cloudburst-system", *args
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def config_data(objects: list[dict[str, Any]]) -> dict[str, str]:
    [config] = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "cloudburst-config"
    ]
    data: dict[str, str] = config["data"]
    return data


def test_helm_lints_the_chart(helm: Path) -> None:
    """`helm lint --strict` (every warning an error) with the one required value. Failed on
    the CRDs' kustomization.yaml before .helmignore left it out of the chart."""
    done = run_helm(helm, "lint", "--strict", *CLUSTER_ID)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_the_chart_renders_valid_kubernetes(helm: Path) -> None:
    """Every object, with the CRDs and with the optional parts on, is valid Kubernetes.
    Fails on a template that writes a field where the API has none (a topology constraint
    rendered as a map, say)."""
    objects = template(
        helm,
        "--include-crds",
        *CLUSTER_ID,
        "--set",
        "settings.tenantNamespaces={team-a,team-b}",
        "--set",
        "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/cb",
        "--set",
        "image.digest=sha256:" + "0" * 64,
    )
    kinds = {o["kind"] for o in objects}
    assert {"CustomResourceDefinition", "Deployment", "ClusterRole", "ConfigMap"} <= kinds
    for obj in objects:
        name = f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{name} is not valid Kubernetes {KUBERNETES_VERSION}: {err}")


def test_the_cluster_id_is_required_and_has_no_placeholder(helm: Path) -> None:
    """No cluster id, no install: two clusters on one cloud account sharing a default id
    would garbage-collect each other's VMs. Fails without `required` in the schema."""
    done = run_helm(helm, "template", "cloudburst", str(CHART))
    assert done.returncode != 0
    assert "clusterId" in done.stderr, done.stderr
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert "clusterId" not in values["settings"]
    assert config_data(template(helm, *CLUSTER_ID))["CLOUDBURST_CLUSTER_ID"] == "test-cluster"


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("settings.clusterId=Prod", "clusterId"),  # not a lowercase DNS label
        ("settings.batchIdleS=soon", "batchIdleS"),
        ("settings.logFormat=xml", "logFormat"),
        ("settings.triggerLeaseDurationS=1", "triggerLeaseDurationS"),  # under its minimum
        ("settings.clusterID=x", "clusterID"),  # not a setting
        ("settings.prices.providers={aws,linode}", "providers"),
        ("worker.replicas=two", "replicas"),
        ("imagePullPolicy=Sometimes", "imagePullPolicy"),
        ("replicas=3", "replicas"),  # per process here: worker.replicas, trigger.replicas
    ],
)
def test_a_wrong_value_fails_at_install_naming_it(helm: Path, value: str, field: str) -> None:
    """Refused by values.schema.json before anything reaches the cluster, naming the value
    (as a setting the processes would refuse at start). Fails without the schema."""
    flag = "--set-string" if value.endswith("=two") else "--set"
    done = run_helm(
        helm, "template", "cloudburst", str(CHART), "--set", "settings.clusterId=ok", flag, value
    )
    assert done.returncode != 0, f"{value} was accepted"
    assert field in done.stderr, done.stderr


def test_every_setting_reaches_the_environment_name_the_processes_read(helm: Path) -> None:
    """Each setting the schema offers, set in `settings`, lands in the ConfigMap under the
    name worker/settings.py (or PriceSettings) reads, and the processes read back the value
    given. Fails when a name is mangled on the way (camelCase to CLOUDBURST_SNAKE_CASE)."""
    sample: dict[str, Any] = {
        "string": "x",
        "integer": 30,
        "number": 2.5,
        "boolean": True,
    }
    schema = json.loads((CHART / "values.schema.json").read_text())
    settings_schema = schema["properties"]["settings"]["properties"]

    def value_for(name: str, prop: dict[str, Any]) -> Any:
        if name == "clusterId":
            return "test-cluster"
        if name == "machineWipeImageUrl":
            return "https://boot.internal/wipe.iso"
        if "enum" in prop:
            return prop["enum"][-1]
        options = [p for p in prop.get("anyOf", [prop]) if p.get("type") != "null"]
        kind = options[0].get("type")
        if kind == "array":
            return ["team-a", "team-b"] if name != "providers" else ["hetzner", "aws"]
        if kind == "object":
            return {} if name == "endpoints" else {"hetzner": ["https://proxy.internal/v1"]}
        if name.endswith("Port"):
            return 9000 + len(name)
        minimum = options[0].get("minimum", options[0].get("exclusiveMinimum", 0))
        maximum = options[0].get("maximum", 10**6)
        if kind in ("integer", "number"):
            return min(max(sample[kind], minimum + 1), maximum)
        return sample[kind]

    values = {
        "settings": {
            name: value_for(name, prop)
            for name, prop in settings_schema.items()
            if name != "prices"
        }
    }
    values["settings"]["prices"] = {
        name: value_for(name, prop)
        for name, prop in settings_schema["prices"]["properties"].items()
    }
    values["settings"]["temporalTls"] = True
    values_file = ROOT / ".pytest_cache" / "every-setting.yaml"
    values_file.parent.mkdir(exist_ok=True)
    values_file.write_text(yaml.safe_dump(values))
    data = config_data(template(helm, "--values", str(values_file)))

    expected = {
        f"CLOUDBURST_{name.upper()}"
        for name in Settings.model_fields
        if name not in generate.NOT_IN_CHART
    } | {f"CLOUDBURST_PRICES_{name.upper()}" for name in PriceSettings.model_fields}
    expected.add("CLOUDBURST_WORKER_NAMESPACE")  # the release's
    assert set(data) == expected

    env = dict(data)
    for name, given in values["settings"].items():
        if name == "prices":
            continue
        snake = next(f for f in Settings.model_fields if generate.camel(f) == name)
        got = _read_setting(Settings, env, "CLOUDBURST_", snake)
        assert got == given or str(got) == str(given), (name, got, given)
    for name, given in values["settings"]["prices"].items():
        snake = next(f for f in PriceSettings.model_fields if generate.camel(f) == name)
        got = _read_setting(PriceSettings, env, "CLOUDBURST_PRICES_", snake)
        assert got == given or str(got) == str(given), (name, got, given)


def _read_setting(model: Any, env: dict[str, str], prefix: str, name: str) -> Any:
    """`name` as the process reads it from this environment (its own settings source)."""
    import os

    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        value = getattr(model(), name)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if hasattr(value, "value"):  # an enum
        return value.value
    if isinstance(value, Path):
        return str(value)
    return value


def test_the_chart_and_image_versions_are_the_package_version(helm: Path) -> None:
    """appVersion is the package's version, which is the image's tag by default; the chart's
    own version is the same in SemVer. Fails when pyproject.toml's version moves alone (the
    manifests named 0.1.0 while the package was 0.2.0.dev0)."""
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == package
    assert chart["version"] == _semver(package)
    deployments = [o for o in template(helm, *CLUSTER_ID) if o["kind"] == "Deployment"]
    images = {c["image"] for d in deployments for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {f"cloudburst:{package}"}


def _semver(pep440: str) -> str:
    """0.2.0.dev0 -> 0.2.0-dev.0; 0.2.0rc1 -> 0.2.0-rc.1; 0.2.0 -> 0.2.0."""
    from packaging.version import Version

    version = Version(pep440)
    base = ".".join(str(part) for part in version.release)
    if version.dev is not None:
        return f"{base}-dev.{version.dev}"
    if version.pre is not None:
        return f"{base}-{version.pre[0]}.{version.pre[1]}"
    return base


def test_the_chart_serves_tenant_namespaces_as_cloudburst_tenant_rbac_does(helm: Path) -> None:
    """settings.tenantNamespaces both tells the processes which namespaces they serve and
    binds the worker's credential Role in each: the same Role and RoleBinding
    `cloudburst tenant-rbac` prints (its Namespace annotations are the namespace owner's).
    Fails without the template's Roles, or when the two drift apart."""
    from cli.commands.tenant_rbac import tenant_objects

    objects = template(helm, *CLUSTER_ID, "--set", "settings.tenantNamespaces={team-a,team-b}")
    assert config_data(objects)["CLOUDBURST_TENANT_NAMESPACES"] == "team-a,team-b"
    chart = {
        (o["kind"], o["metadata"]["namespace"]): _without_labels(o)
        for o in objects
        if o["metadata"]["name"] == "cloudburst-worker-credentials"
    }
    printed = {
        (o["kind"], o["metadata"]["namespace"]): o
        for o in tenant_objects(["team-a", "team-b"], "cloudburst-system")
        if o["kind"] != "Namespace"
    }
    assert chart == printed


def _without_labels(obj: dict[str, Any]) -> dict[str, Any]:
    obj = json.loads(json.dumps(obj))
    obj["metadata"].pop("labels", None)
    return obj


def test_values_follow_karpenters_chart_where_they_mean_the_same(helm: Path) -> None:
    """An operator's Karpenter values carry over: priorityClassName, nodeSelector,
    tolerations, affinity, topology spread (a labelSelector filled in per Deployment), PDB,
    serviceAccount annotations (the worker's: its cloud identity), resources, replicas.
    Fails when a template ignores one of them (its value rendered nowhere)."""
    objects = template(
        helm,
        *CLUSTER_ID,
        "--set",
        "priorityClassName=infra-critical",
        "--set",
        "tolerations[0].key=CriticalAddonsOnly,tolerations[0].operator=Exists",
        "--set",
        "nodeSelector.role=infra",
        "--set",
        "podDisruptionBudget.maxUnavailable=null,podDisruptionBudget.minAvailable=1",
        "--set",
        "serviceAccount.annotations.iam\\.gke\\.io/gcp-service-account=cb@p.iam.gserviceaccount.com",
        "--set",
        "worker.replicas=3,trigger.replicas=1",
        "--set",
        "worker.resources.limits.memory=2Gi",
    )
    by = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    for name in ("cloudburst-worker", "cloudburst-trigger"):
        pod = by[("Deployment", name)]["spec"]["template"]["spec"]
        assert pod["priorityClassName"] == "infra-critical"
        assert pod["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
        assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "role": "infra"}
        for constraint in pod["topologySpreadConstraints"]:
            assert constraint["labelSelector"] == {"matchLabels": {"app.kubernetes.io/name": name}}
        assert by[("PodDisruptionBudget", name)]["spec"] == {
            "minAvailable": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
        }
    assert by[("Deployment", "cloudburst-worker")]["spec"]["replicas"] == 3
    assert by[("Deployment", "cloudburst-trigger")]["spec"]["replicas"] == 1
    worker = by[("Deployment", "cloudburst-worker")]["spec"]["template"]["spec"]
    assert worker["containers"][0]["resources"]["limits"]["memory"] == "2Gi"
    assert by[("ServiceAccount", "cloudburst-worker")]["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "cb@p.iam.gserviceaccount.com"
    }
    assert "annotations" not in by[("ServiceAccount", "cloudburst-trigger")]["metadata"]


def test_monitoring_is_off_by_default_and_renders_the_shipped_rules_and_dashboard(
    helm: Path, tmp_path: Path
) -> None:
    """serviceMonitor, prometheusRule and dashboard are off by default; on, they scrape both
    metrics ports of both processes and carry files/prometheus-rules.yaml and
    files/grafana-dashboard.json as they are; on without those files, they render nothing.
    Fails when a template renders a PrometheusRule or a dashboard with no file behind it, or
    drops what the file says."""
    on = [
        "--set",
        "serviceMonitor.enabled=true,prometheusRule.enabled=true,dashboard.enabled=true",
    ]
    monitoring = {"ServiceMonitor", "PrometheusRule"}

    def kinds(objects: list[dict[str, Any]]) -> set[str]:
        return {o["kind"] for o in objects} | {
            "dashboard" for o in objects if o["metadata"].get("labels", {}).get("grafana_dashboard")
        }

    assert not kinds(template(helm, *CLUSTER_ID)) & (monitoring | {"dashboard"})

    bare = tmp_path / "bare"
    shutil.copytree(CHART, bare)
    for name in ("prometheus-rules.yaml", "grafana-dashboard.json"):
        (bare / "files" / name).unlink(missing_ok=True)
    assert kinds(template(helm, *CLUSTER_ID, *on, chart=bare)) & (monitoring | {"dashboard"}) == {
        "ServiceMonitor"
    }
    done = run_helm(helm, "lint", "--strict", *CLUSTER_ID, *on, chart=bare)
    assert done.returncode == 0, done.stdout

    shipped = tmp_path / "shipped"
    shutil.copytree(bare, shipped)
    rules = {
        "groups": [
            {
                "name": "cloudburst",
                "rules": [{"alert": "CloudburstDown", "expr": "up == 0", "for": "5m"}],
            }
        ]
    }
    dashboard = {"title": "Cloudburst", "panels": []}
    if (CHART / "files" / "prometheus-rules.yaml").exists():
        rules = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    if (CHART / "files" / "grafana-dashboard.json").exists():
        dashboard = json.loads((CHART / "files" / "grafana-dashboard.json").read_text())
    (shipped / "files").mkdir(exist_ok=True)
    (shipped / "files" / "prometheus-rules.yaml").write_text(yaml.safe_dump(rules))
    (shipped / "files" / "grafana-dashboard.json").write_text(json.dumps(dashboard))
    objects = template(helm, *CLUSTER_ID, *on, chart=shipped)
    by_kind = {o["kind"]: o for o in objects if o["kind"] in monitoring}
    assert by_kind["PrometheusRule"]["spec"]["groups"] == rules["groups"]
    [board] = [o for o in objects if o["metadata"].get("labels", {}).get("grafana_dashboard")]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["cloudburst.json"]) == dashboard
    monitor = by_kind["ServiceMonitor"]["spec"]
    assert [e["port"] for e in monitor["endpoints"]] == ["metrics", "sdk-metrics"]
    services = [o for o in objects if o["kind"] == "Service"]
    selected = monitor["selector"]["matchExpressions"][0]["values"]
    assert sorted(s["metadata"]["labels"]["app.kubernetes.io/name"] for s in services) == sorted(
        selected
    )
    for service in services:
        assert {p["name"] for p in service["spec"]["ports"]} == {"metrics", "sdk-metrics"}


def test_what_is_generated_from_the_chart_is_up_to_date(helm: Path) -> None:
    """values.schema.json, the chart README's settings reference and deploy/base are what
    `python -m tests.deploy.generate` writes: a setting added to worker/settings.py, or a
    template changed, without regenerating them fails here."""
    assert json.loads(generate.SCHEMA.read_text()) == generate.values_schema()
    readme = generate.CHART_README.read_text()
    assert readme == generate.chart_readme(readme)
    for name, text in generate.base_files(helm).items():
        assert (generate.BASE / name).read_text() == text, f"deploy/base/{name} is stale"
    assert generate.POOL_WORKER.read_text() == generate.pool_worker_file(helm)


def test_the_base_leaves_the_cluster_id_to_each_overlay(tmp_path: Path) -> None:
    """No overlay ships a placeholder id: the base has none, overlays/dev sets `dev`, and
    overlays/temporal-cloud does not build until the operator writes cluster.env."""
    base = config_data(kustomize("base"))
    assert "CLOUDBURST_CLUSTER_ID" not in base
    assert config_data(kustomize("overlays/dev"))["CLOUDBURST_CLUSTER_ID"] == "dev"
    from tests.deploy.conftest import DEPLOY, kubectl

    binary = kubectl()
    assert binary is not None
    done = subprocess.run(
        [binary, "kustomize", str(DEPLOY / "overlays/temporal-cloud")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0 and "cluster.env" in done.stderr, done.stderr
