"""Every overlay builds, and every object is valid Kubernetes 1.34 and safe to run."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.conftest import OVERLAYS

KUBERNETES_VERSION = "1.34.0"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_objects_validate_against_kubernetes_schemas(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    objects = rendered[overlay]
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "CustomResourceDefinition", "Deployment", "ClusterRole"} <= kinds
    for obj in objects:
        name = f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{overlay}: {name} is not valid Kubernetes {KUBERNETES_VERSION}: {err}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_are_unprivileged_probed_and_never_on_burst_nodes(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    deployments = [o for o in rendered[overlay] if o["kind"] == "Deployment"]
    assert {"cloudburst-worker", "cloudburst-trigger"} <= {
        d["metadata"]["name"] for d in deployments
    }
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        expressions = terms["nodeSelectorTerms"][0]["matchExpressions"]
        assert {"key": "cloudburst.io/nodepool", "operator": "DoesNotExist"} in expressions, name
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            assert container["resources"]["requests"] and container["resources"]["limits"], name
            if name.startswith("cloudburst-"):
                assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
                assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_trigger_runs_two_replicas_and_the_worker_scales(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    by_name = {o["metadata"]["name"]: o for o in rendered["base"] if o["kind"] == "Deployment"}
    assert by_name["cloudburst-trigger"]["spec"]["replicas"] == 2
    assert by_name["cloudburst-worker"]["spec"]["replicas"] >= 2


def test_overlays_point_at_their_temporal(rendered: dict[str, list[dict[str, Any]]]) -> None:
    def config(overlay: str) -> dict[str, str]:
        maps = [o for o in rendered[overlay] if o["kind"] == "ConfigMap"]
        return next(m["data"] for m in maps if m["metadata"]["name"] == "cloudburst-config")

    dev = config("overlays/dev")
    assert dev["CLOUDBURST_TEMPORAL_ADDRESS"] == "temporal-dev.cloudburst-system.svc:7233"
    assert any(o["metadata"]["name"] == "temporal-dev" for o in rendered["overlays/dev"])
    cloud = config("overlays/temporal-cloud")
    assert cloud["CLOUDBURST_TEMPORAL_ADDRESS"].endswith(".tmprl.cloud:7233")
    assert cloud["CLOUDBURST_TEMPORAL_TLS"] == "true"
    assert cloud["CLOUDBURST_TEMPORAL_API_KEY_FILE"].startswith("/etc/cloudburst/temporal/")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_shipped_setting_is_one_the_processes_read(
    rendered: dict[str, list[dict[str, Any]]], overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settings ignore keys they do not know: a misspelt key in the ConfigMap would be
    dropped without a word. Each must name a field, and its value must validate."""
    from activities.planning.config import PriceSettings
    from worker.settings import Settings

    maps = [o for o in rendered[overlay] if o["kind"] == "ConfigMap"]
    data = next(m["data"] for m in maps if m["metadata"]["name"] == "cloudburst-config")
    known = {f"CLOUDBURST_{name.upper()}" for name in Settings.model_fields} | {
        f"CLOUDBURST_PRICES_{name.upper()}" for name in PriceSettings.model_fields
    }
    assert sorted(set(data) - known) == []
    for key, value in data.items():
        monkeypatch.setenv(key, value)
    Settings()
    PriceSettings()
