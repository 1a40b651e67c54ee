"""Every overlay builds, and every object is valid Kubernetes 1.34 and safe to run."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.conftest import COMPOSED, OVERLAYS

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
    shared = next(m["data"] for m in maps if m["metadata"]["name"] == "cloudburst-config")
    known = {f"CLOUDBURST_{name.upper()}" for name in Settings.model_fields} | {
        f"CLOUDBURST_PRICES_{name.upper()}" for name in PriceSettings.model_fields
    }
    # Each process's: the ConfigMap and what its Deployment sets itself (a worker's queues).
    for deployment in _deployments(rendered[overlay]).values():
        own = {k: v for k, v in _env(deployment).items() if k.startswith("CLOUDBURST_")}
        data = shared | own
        assert sorted(set(data) - known) == [], deployment["metadata"]["name"]
        with monkeypatch.context() as env:
            for key, value in data.items():
                env.setenv(key, value)
            Settings()
            PriceSettings()


def _deployments(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}


def _env(deployment: dict[str, Any]) -> dict[str, str]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container.get("env", [])}


def test_split_workers_poll_one_queue_each_and_are_otherwise_the_same(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """The component copies the worker's Deployment: a change made to one and not the other
    (a probe, a limit, a volume) would make the pools' worker the odd one out."""
    assert "CLOUDBURST_WORKER_QUEUES" not in _env(
        _deployments(rendered["base"])["cloudburst-worker"]
    )
    for overlay in COMPOSED:
        by_name = _deployments(rendered[overlay])
        claims, pools = by_name["cloudburst-worker"], by_name["cloudburst-pool-worker"]
        assert _env(claims)["CLOUDBURST_WORKER_QUEUES"] == "claims"
        assert _env(pools)["CLOUDBURST_WORKER_QUEUES"] == "pools"

        def shape(deployment: dict[str, Any]) -> str:
            spec = json.loads(json.dumps(deployment["spec"]))
            container = spec["template"]["spec"]["containers"][0]
            container["env"] = [
                e for e in container["env"] if e["name"] != "CLOUDBURST_WORKER_QUEUES"
            ]
            text = json.dumps(spec, sort_keys=True)
            return text.replace("cloudburst-pool-worker", "cloudburst-worker").replace(
                '"pool-worker"', '"worker"'
            )

        assert shape(pools) == shape(claims), overlay
        # The same identity: Secrets and RBAC are the worker's (tests/deploy/test_rbac.py).
        assert pools["spec"]["template"]["spec"]["serviceAccountName"] == "cloudburst-worker"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_cloudburst_pod_runs_the_same_image(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    images = {
        name: container["image"]
        for name, deployment in _deployments(rendered[overlay]).items()
        if name.startswith("cloudburst-")
        for container in deployment["spec"]["template"]["spec"]["containers"]
    }
    assert len(set(images.values())) == 1, images
    assert next(iter(images.values())).startswith("cloudburst:"), images


def test_temporal_cloud_credentials_go_to_every_worker_and_not_the_codec_server(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    by_name = _deployments(rendered["overlays/temporal-cloud+components"])
    for name in ("cloudburst-worker", "cloudburst-pool-worker", "cloudburst-trigger"):
        volumes = {v["name"]: v for v in by_name[name]["spec"]["template"]["spec"]["volumes"]}
        assert volumes["temporal"]["secret"]["optional"] is False, name
    codec = by_name["cloudburst-codec-server"]["spec"]["template"]["spec"]
    assert codec["automountServiceAccountToken"] is False
    # Its Secrets are its own optional token's and the payload keys, never Temporal's
    # credentials.
    secrets = [v["secret"] for v in codec.get("volumes", []) if "secret" in v]
    assert sorted((s["secretName"], s["optional"]) for s in secrets) == [
        ("cloudburst-codec-server-token", True),
        ("cloudburst-payload-keys", False),
    ]
    assert "--cors-origin" in codec["containers"][0]["args"]


@pytest.mark.parametrize("overlay", ["overlays/dev", *COMPOSED])
def test_the_codec_server_admits_its_clients_only_and_its_work_fits_its_memory(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    """Ingress only from the pods the operator labels, on the codec port, no egress; the
    token file the process reads is the optional Secret's; the memory limit holds the
    requests the server works on at once at their worst (worker/codec_server.py)."""
    from worker.codec_server import IDLE_BYTES, MAX_CONCURRENT, REQUEST_PEAK_BYTES

    deployment = _deployments(rendered[overlay])["cloudburst-codec-server"]
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    [policy] = [
        o
        for o in rendered[overlay]
        if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "cloudburst-codec-server"
    ]
    spec = policy["spec"]
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert spec["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"]
    assert not spec.get("egress")
    [rule] = spec["ingress"]
    assert rule["from"] == [
        {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": deployment["metadata"]["namespace"]}
            },
            "podSelector": {"matchLabels": {"cloudburst.io/codec-server-client": "true"}},
        }
    ]
    [port] = rule["ports"]
    assert port["port"] in {p["name"] for p in container["ports"]}

    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    [token] = [v for v in pod["spec"]["volumes"] if v["name"] == "token"]
    assert token["secret"]["optional"] is True
    [item] = token["secret"]["items"]
    assert _env(deployment)["CLOUDBURST_CODEC_TOKEN_FILE"] == f"{mounts['token']}/{item['path']}"

    limit = _bytes(container["resources"]["limits"]["memory"])
    assert limit >= IDLE_BYTES + MAX_CONCURRENT * REQUEST_PEAK_BYTES


def _bytes(quantity: str) -> int:
    for suffix, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if quantity.endswith(suffix):
            return int(quantity.removesuffix(suffix)) * factor
    return int(quantity)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_process_holding_temporal_payloads_mounts_the_required_payload_keys(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    """The worker(s), the trigger and the codec server seal and open with the keyring the
    Secret `cloudburst-payload-keys` holds (docs/security.md "Payload keys"): mounted, not
    optional (no process runs without sealing), where `CLOUDBURST_PAYLOAD_KEYRING_FILE` says."""
    [config] = [
        o
        for o in rendered[overlay]
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "cloudburst-config"
    ]
    holders = ("cloudburst-worker", "cloudburst-pool-worker", "cloudburst-trigger")
    for name, deployment in _deployments(rendered[overlay]).items():
        if name not in (*holders, "cloudburst-codec-server"):
            continue
        pod = deployment["spec"]["template"]["spec"]
        path = _env(deployment).get("CLOUDBURST_PAYLOAD_KEYRING_FILE") or config["data"].get(
            "CLOUDBURST_PAYLOAD_KEYRING_FILE"
        )
        assert path, name
        [volume] = [
            v
            for v in pod["volumes"]
            if v.get("secret", {}).get("secretName") == ("cloudburst-payload-keys")
        ]
        assert volume["secret"]["optional"] is False, name
        [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
        assert mount["readOnly"] is True
        [item] = volume["secret"]["items"]
        assert f"{mount['mountPath']}/{item['path']}" == path, name
