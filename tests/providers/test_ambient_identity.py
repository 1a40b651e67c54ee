"""No credential Secret: the hyperscalers use the worker's own identity through their SDK's
default chain, and say what to configure when there is none.

Offline, against the stand-ins: AWS's chain picks up environment credentials (what IRSA and
Pod Identity also feed it); GCP's Application Default Credentials read
GOOGLE_APPLICATION_CREDENTIALS (a service-account key whose token endpoint is the stand-in,
served over HTTPS with a test CA: the worker's own token never goes to plain HTTP); Azure's
DefaultAzureCredential, limited to its environment step, finds nothing. Each process
environment is the test's own (monkeypatch.setenv), as a Pod's would be.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from temporalio.exceptions import ApplicationError

from activities.compute import ComputeActivities
from activities.providers.aws import AwsProvider
from activities.providers.azure import AzureProvider
from activities.providers.base import NoIdentityError
from activities.providers.gcp import GcpProvider
from api.messages import InstanceRef
from api.nodeclass import AwsClass, AzureClass, GcpClass, NodeClassSpec
from cluster.tenancy import Tenancy
from sim.clouds.aws import AwsStandin
from sim.clouds.gcp import GcpStandin
from tests.activities.claims import claims_env
from tests.tls_material import make_tls_files

JOIN = {"hostApiServer": "https://10.0.0.1:6443"}


def without_secret(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "credentialsSecretRef"}


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """A process with no cloud identity at all: no variables, no config files, no metadata."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "AZURE_", "GOOGLE_", "GCE_", "CLOUDSDK_", "IDENTITY_")):
            monkeypatch.delenv(name)
    missing = str(tmp_path / "none")
    monkeypatch.setenv("AWS_CONFIG_FILE", missing)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", missing)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    # The metadata server, where nothing listens: "not on GCE", at once.
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    # DefaultAzureCredential's environment step only (no IMDS probe, no az CLI).
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "EnvironmentCredential")
    return monkeypatch


# --- AWS ---------------------------------------------------------------------------------


def test_aws_without_a_secret_signs_with_the_default_chain(bare_env: pytest.MonkeyPatch) -> None:
    with AwsStandin(boot_delay_s=0.1) as cloud:
        bare_env.setenv("AWS_ACCESS_KEY_ID", "AKIAAMBIENTWORKER001")
        bare_env.setenv("AWS_SECRET_ACCESS_KEY", "ambient-secret-of-the-worker-pod")
        block = AwsClass.model_validate(without_secret(cloud.nodeclass_block("x", "y")))
        provider = AwsProvider(block, None)
        assert provider.list_owned("ambient") == []
        assert cloud.access_keys_seen() == {"AKIAAMBIENTWORKER001"}


def test_aws_without_any_identity_says_what_to_configure(bare_env: pytest.MonkeyPatch) -> None:
    with AwsStandin(boot_delay_s=0.1) as cloud:
        block = AwsClass.model_validate(without_secret(cloud.nodeclass_block("x", "y")))
        with pytest.raises(NoIdentityError) as caught:
            AwsProvider(block, None).list_owned("ambient")
        assert "credentialsSecretRef" in caught.value.fix
        assert "eks.amazonaws.com/role-arn" in caught.value.fix
        assert cloud.requests_seen() == []  # nothing unsigned was sent


def test_no_identity_fails_the_claim_as_invalid_configuration(
    bare_env: pytest.MonkeyPatch,
) -> None:
    """Through the activity: non-retryable InvalidConfiguration (every offering of the
    provider would fail alike), not a provider error to try the next offering with."""
    with AwsStandin(boot_delay_s=0.1) as cloud:
        spec = NodeClassSpec.model_validate(
            {"aws": without_secret(cloud.nodeclass_block("x", "y")), "join": JOIN}
        )
        acts = ComputeActivities(k8s.ApiClient(), Tenancy(allowed_endpoints={"aws": (cloud.url,)}))
        ref = InstanceRef(
            claim_name="burst-ambient",
            provider="aws",
            cluster_id="ambient",
            namespace="default",
            node_class_name="default",
            node_class=spec,
        )
        with pytest.raises(ApplicationError) as caught:
            claims_env(ref.namespace, ref.claim_name).run(acts.get_instance, ref)
        assert caught.value.type == "InvalidConfiguration" and caught.value.non_retryable
        assert "IRSA" in str(caught.value)


# --- GCP ---------------------------------------------------------------------------------


def test_gcp_without_a_secret_uses_application_default_credentials(
    bare_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tls = make_tls_files(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.server_cert, tls.server_key)
    with GcpStandin(boot_delay_s=0.1, op_delay_s=0.1, tls=context) as cloud:
        assert cloud.endpoint.startswith("https://")
        adc = tmp_path / "application_default_credentials.json"
        adc.write_text(cloud.credential)
        bare_env.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
        bare_env.setenv("REQUESTS_CA_BUNDLE", str(tls.ca))
        block = GcpClass.model_validate(without_secret(cloud.nodeclass_block("x", "y")))
        provider = GcpProvider(block, None, poll_interval_s=0.05)
        # The stand-in refuses unauthenticated requests: this list went signed.
        assert cloud.require_auth
        assert provider.list_owned("ambient") == []


def test_gcp_without_any_identity_says_what_to_configure(bare_env: pytest.MonkeyPatch) -> None:
    block = GcpClass.model_validate(
        {"project": "p", "zone": "europe-west1-b", "endpoint": "https://127.0.0.1:9"}
    )
    with pytest.raises(NoIdentityError) as caught:
        GcpProvider(block, None)
    assert "credentialsSecretRef" in caught.value.fix
    assert "iam.gke.io/gcp-service-account" in caught.value.fix


def test_gcp_sends_no_identity_to_a_plain_http_stand_in(
    bare_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Even with ADC at hand, a plain-HTTP endpoint gets anonymous requests."""
    with GcpStandin(boot_delay_s=0.1, require_auth=False) as cloud:
        adc = tmp_path / "adc.json"
        adc.write_text(cloud.credential)
        bare_env.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
        block = GcpClass.model_validate(without_secret(cloud.nodeclass_block("x", "y")))
        assert GcpProvider(block, None).list_owned("ambient") == []
        assert cloud.stats()["tokens_issued"] == 0


# --- Azure -------------------------------------------------------------------------------


def test_azure_without_any_identity_says_what_to_configure(bare_env: pytest.MonkeyPatch) -> None:
    block = AzureClass.model_validate(
        {
            "subscriptionId": "00000000-0000-0000-0000-000000000001",
            "resourceGroup": "rg",
            "location": "westeurope",
            "endpoint": "https://127.0.0.1:9",
        }
    )
    with pytest.raises(NoIdentityError) as caught:
        AzureProvider(block, None, polling_interval_s=0.05).list_owned("ambient")
    assert "credentialsSecretRef" in caught.value.fix
    assert "azure.workload.identity/client-id" in caught.value.fix


def test_azure_sends_no_identity_to_a_plain_http_endpoint(bare_env: pytest.MonkeyPatch) -> None:
    block = AzureClass.model_validate(
        {
            "subscriptionId": "00000000-0000-0000-0000-000000000001",
            "resourceGroup": "rg",
            "location": "westeurope",
            "endpoint": "http://127.0.0.1:9",
        }
    )
    with pytest.raises(Exception) as caught:
        AzureProvider(block, None)
    assert "plain-HTTP" in str(caught.value)
