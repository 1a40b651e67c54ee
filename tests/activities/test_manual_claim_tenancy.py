"""`cloudburst claims create` judges a claim by the deployed tenancy (the ConfigMap the worker
and the trigger read), against the real API server, before it reaches Temporal."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from typer.testing import CliRunner

from cli.cluster_reads import deployed_tenancy
from cli.commands.claims import claims_app
from sim.controlplane.cluster import KubernetesControlPlane
from tests.activities.claims import authorise_claim
from tests.activities.conftest import WORKER_NAMESPACE
from worker.settings import CONFIG_MAP, Settings

runner = CliRunner()
# Nothing listens there: a command that got as far as Temporal fails on it.
NO_TEMPORAL = "127.0.0.1:9"


@pytest.fixture
def deployed_config(core: client.CoreV1Api) -> Iterator[dict[str, str]]:
    """The deployed settings' ConfigMap, as the test writes it; removed afterwards."""
    data: dict[str, str] = {}
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=CONFIG_MAP), data=data)
    core.create_namespaced_config_map(WORKER_NAMESPACE, body)
    try:
        yield data
    finally:
        core.delete_namespaced_config_map(CONFIG_MAP, WORKER_NAMESPACE)


def create_claim(cluster: KubernetesControlPlane, namespace: str, **env: str | None) -> str:
    result = runner.invoke(
        claims_app,
        [
            "create",
            "--pool",
            "manual",
            "--offering",
            "fake/sim-1/fk-small",
            "--namespace",
            namespace,
        ],
        env={
            "CLOUDBURST_KUBECONFIG": str(cluster.admin_kubeconfig),
            "CLOUDBURST_TEMPORAL_ADDRESS": NO_TEMPORAL,
            "CLOUDBURST_WORKER_NAMESPACE": WORKER_NAMESPACE,
            "CLOUDBURST_TENANT_NAMESPACES": None,
            "CLOUDBURST_ALLOWED_ENDPOINTS": None,
            **env,
        },
    )
    assert result.exit_code != 0
    return " ".join(result.output.split())  # as one line, however the console wrapped it


def test_claims_create_is_judged_by_the_deployed_tenancy_not_the_shell(
    cluster: KubernetesControlPlane,
    kube_api_client: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    unique: str,
    deployed_config: dict[str, str],
) -> None:
    """Issue #55: the command judged a claim by the operator's shell environment (here: every
    namespace served), not by the settings the worker and the trigger run with (here:
    another namespace only). Fails on that: the claim passes, and the command goes on to
    price its offering and reach Temporal."""
    authorise_claim(kube_api_client, namespace, f"held-{unique}", pool="manual")
    deployed_config["CLOUDBURST_TENANT_NAMESPACES"] = f"only-{unique}"
    core.replace_namespaced_config_map(
        CONFIG_MAP,
        WORKER_NAMESPACE,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name=CONFIG_MAP), data=deployed_config),
    )
    said = create_claim(cluster, namespace)
    assert f"NodePool {namespace}/manual is not served" in said
    assert "not one this Cloudburst serves" in said
    # The shell's own list is not the deployment's: serving the namespace there changes
    # nothing.
    said = create_claim(cluster, namespace, CLOUDBURST_TENANT_NAMESPACES=namespace)
    assert f"NodePool {namespace}/manual is not served" in said
    assert f"only-{unique}" not in said  # the refusal names no other tenant
    # The deployment serving it, the claim passes (and fails later, on no Temporal).
    deployed_config["CLOUDBURST_TENANT_NAMESPACES"] = f"only-{unique},{namespace}"
    core.replace_namespaced_config_map(
        CONFIG_MAP,
        WORKER_NAMESPACE,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name=CONFIG_MAP), data=deployed_config),
    )
    assert "is not served" not in create_claim(cluster, namespace)


def test_a_key_the_deployment_leaves_out_is_not_filled_from_the_shell(
    core: client.CoreV1Api,
    deployed_config: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ConfigMap without `CLOUDBURST_ALLOWED_ENDPOINTS` allows no override, whatever this
    shell's environment says (fails on reading the ConfigMap through `Settings()`, which
    took the missing key from the environment)."""
    monkeypatch.setenv("CLOUDBURST_ALLOWED_ENDPOINTS", '{"plugin": ["https://gw.example"]}')
    monkeypatch.setenv("CLOUDBURST_TENANT_NAMESPACES", "team-a")
    tenancy, judged_by = deployed_tenancy(core, Settings(worker_namespace=WORKER_NAMESPACE))
    assert judged_by.startswith("the deployed settings")
    assert tenancy.allowed_endpoints == {}
    assert tenancy.namespaces is None
