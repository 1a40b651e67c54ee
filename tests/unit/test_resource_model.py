"""The resource model accepts the seed's manifests unchanged and explains every mistake."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from api import NodeClass, NodePool
from api.nodeclaim import NodeClaimStatus
from api.problems import summary
from api.quantity import cpu_millis, format_cpu, format_memory, memory_bytes
from cli.manifests import load_manifests

SEED_EXAMPLE = Path(__file__).parents[1] / "fixtures" / "dr-example.yaml"
FIXTURES = Path(__file__).parent / "manifests"


@pytest.fixture
def seed_example() -> Path:
    return SEED_EXAMPLE


def test_seed_disaster_recovery_manifests_load_unchanged(seed_example: Path) -> None:
    loaded = load_manifests(seed_example)
    assert loaded.problems == []
    assert loaded.skipped == 1  # the Deployment is not ours
    pool, node_class = loaded.resources
    assert isinstance(pool, NodePool) and isinstance(node_class, NodeClass)
    assert pool.spec.requirements.allowed_providers == ["hetzner", "scaleway"]
    assert pool.spec.requirements.max_price_eur_per_hour == 0.5
    assert pool.spec.limits.max_nodes == 2
    assert pool.spec.disruption.ttl_seconds_after_empty == 60
    assert pool.spec.disruption.ttl_seconds_until_expired == 3600
    assert node_class.spec.scaleway is not None
    assert node_class.spec.scaleway.project_id == "your-scaleway-project-id"
    assert node_class.spec.hetzner is not None
    assert node_class.spec.hetzner.api_token_secret_ref.key == "HETZNER_API_TOKEN"
    assert node_class.spec.join.token_ttl_minutes == 60
    assert node_class.spec.tailscale is not None
    assert node_class.spec.bootstrap.kubernetes_version == "1.34.3"
    assert node_class.spec.configured_providers() == ["hetzner", "scaleway"]


def test_models_write_back_the_seed_field_names(seed_example: Path) -> None:
    _, node_class = load_manifests(seed_example).resources
    dumped = node_class.model_dump(exclude_none=True)
    assert dumped["spec"]["scaleway"]["projectID"] == "your-scaleway-project-id"
    assert dumped["spec"]["join"]["hostApiServer"] == "https://100.64.0.1:6443"


def test_mistakes_name_the_field_and_the_problem() -> None:
    loaded = load_manifests(FIXTURES / "broken.yaml")
    messages = [str(problem) for problem in loaded.problems]
    assert loaded.resources == []

    def problem(path: str) -> str:
        found = [m for m in messages if f" {path}:" in m]
        assert found, f"no problem reported for {path}: {messages}"
        return found[0]

    assert "unknown field" in problem("spec.limits.maxNode")
    assert "greater than or equal to 0" in problem("spec.limits.minNodes")
    assert "sparc" in problem("spec.requirements.arch")
    assert "cheap" in problem("spec.requirements.maxPriceEurPerHour")
    assert "unknown provider" in problem("spec.requirements.allowedProviders")
    assert "required field is missing" in problem("spec.hetzner.apiTokenSecretRef")
    assert "required field is missing" in problem("spec.join")
    assert all("broken.yaml#" in m for m in messages)


def test_invalid_yaml_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: cloudburst.io/v1alpha1\nkind: NodePool\nspec: [unclosed\n")
    [problem] = load_manifests(path).problems
    assert "invalid YAML" in problem.message
    assert "line" in problem.message


def test_unknown_kind_of_our_group_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "kind.yaml"
    path.write_text("apiVersion: cloudburst.io/v1alpha1\nkind: NodeGroup\nmetadata: {name: x}\n")
    [problem] = load_manifests(path).problems
    assert "NodeGroup" in problem.message


def test_min_nodes_above_max_nodes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text(
        "apiVersion: cloudburst.io/v1alpha1\nkind: NodePool\nmetadata: {name: p}\n"
        "spec:\n  limits: {minNodes: 3, maxNodes: 1}\n"
    )
    [problem] = load_manifests(path).problems
    assert "minNodes (3) exceeds maxNodes (1)" in problem.message


def test_condition_transition_time_moves_only_on_status_change() -> None:
    from datetime import UTC, datetime, timedelta

    status = NodeClaimStatus()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    status.set_condition("Empty", True, "Empty", "0 pods", t0)
    status.set_condition("Empty", True, "Empty", "still 0 pods", t0 + timedelta(minutes=1))
    condition = status.condition("Empty")
    assert condition is not None and condition.last_transition_time == t0
    status.set_condition("Empty", False, "Busy", "1 pod", t0 + timedelta(minutes=2))
    condition = status.condition("Empty")
    assert condition is not None and condition.last_transition_time == t0 + timedelta(minutes=2)


@pytest.mark.parametrize(
    ("text", "millis"), [("1500m", 1500), ("2", 2000), ("0.5", 500), (1, 1000), ("100m", 100)]
)
def test_cpu_quantities(text: str | int, millis: int) -> None:
    assert cpu_millis(text) == millis


@pytest.mark.parametrize(
    ("text", "size"), [("2Gi", 2 * 2**30), ("512Mi", 512 * 2**20), ("1G", 10**9), ("100", 100)]
)
def test_memory_quantities(text: str, size: int) -> None:
    assert memory_bytes(text) == size


def test_quantities_format_back() -> None:
    assert format_cpu(1500) == "1500m" and format_cpu(2000) == "2"
    assert format_memory(2 * 2**30) == "2Gi" and format_memory(512 * 2**20) == "512Mi"


def test_nonsense_quantity_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        cpu_millis("two cores")


def test_a_node_class_reads_secrets_of_its_own_namespace_only() -> None:
    """A namespace is a trust boundary: a reference into another namespace is refused,
    naming the field (the CRD cannot see metadata.namespace: the model is the judge)."""

    def node_class(ref: dict[str, str]) -> dict[str, object]:
        return {
            "apiVersion": "cloudburst.io/v1alpha1",
            "kind": "NodeClass",
            "metadata": {"name": "c", "namespace": "team-a"},
            "spec": {
                "hetzner": {"location": "fsn1", "apiTokenSecretRef": ref},
                "join": {"hostApiServer": "https://10.0.0.1:6443"},
            },
        }

    own = {"name": "t", "key": "k", "namespace": "team-a"}
    assert NodeClass.model_validate(node_class(own)).spec.hetzner is not None
    with pytest.raises(ValidationError) as caught:
        NodeClass.model_validate(node_class({**own, "namespace": "kube-system"}))
    message = summary(caught.value)
    assert "spec.hetzner.apiTokenSecretRef.namespace: kube-system" in message
    assert "only reference Secrets in its own namespace" in message


def test_tailscale_takes_one_of_two_modes() -> None:
    from api.nodeclass import TailscaleSettings

    reusable = TailscaleSettings.model_validate({"authKeySecretRef": {"name": "t", "key": "k"}})
    assert not reusable.minted
    minted = TailscaleSettings.model_validate(
        {"oauthClientSecretRef": {"name": "ts-oauth"}, "tags": ["tag:cloudburst"]}
    )
    assert minted.minted and minted.oauth_client_secret_ref is not None
    assert minted.oauth_client_secret_ref.client_secret_key == "client_secret"
    for bad, words in (
        ({}, "exactly one"),
        ({"oauthClientSecretRef": {"name": "o"}}, "needs tags"),
        ({"oauthClientSecretRef": {"name": "o"}, "tags": ["cloudburst"]}, "Tailscale tag"),
        ({"authKeySecretRef": {"name": "t", "key": "k"}, "tags": ["tag:a"]}, "go with"),
    ):
        with pytest.raises(ValidationError) as caught:
            TailscaleSettings.model_validate(bad)
        assert words in summary(caught.value)
