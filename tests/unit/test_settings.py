"""Temporal connection settings: env, the settings file, and what reaches the client."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from temporalio.service import TLSConfig

from tests.tls_material import make_tls_files
from worker.client import TemporalConfigError, client_options
from worker.settings import Settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("CLOUDBURST_"):
            monkeypatch.delenv(name)


def test_defaults_are_a_local_plaintext_server() -> None:
    settings = Settings()
    options = client_options(settings)
    assert settings.temporal_address == "127.0.0.1:7233"
    assert options["namespace"] == "default"
    assert options["tls"] is False
    assert options["api_key"] is None


def test_env_sets_address_namespace_and_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDBURST_TEMPORAL_ADDRESS", "prod.a1b2c.tmprl.cloud:7233")
    monkeypatch.setenv("CLOUDBURST_TEMPORAL_NAMESPACE", "prod.a1b2c")
    monkeypatch.setenv("CLOUDBURST_TEMPORAL_API_KEY", "secret-key")
    monkeypatch.setenv("CLOUDBURST_TASK_QUEUE", "burst")
    settings = Settings()
    options = client_options(settings)
    assert settings.temporal_address == "prod.a1b2c.tmprl.cloud:7233"
    assert settings.task_queue == "burst"
    assert options["namespace"] == "prod.a1b2c"
    assert options["api_key"] == "secret-key"
    # An API key means Temporal Cloud: TLS with the system roots.
    assert isinstance(options["tls"], TLSConfig)
    assert options["tls"].client_cert is None and options["tls"].server_root_ca_cert is None
    assert "secret-key" not in repr(settings)  # never in a log line


def test_settings_file_with_env_winning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tls = make_tls_files(tmp_path)
    (tmp_path / "api-key").write_text("key-from-file\n")
    config = tmp_path / "cloudburst.yaml"
    config.write_text(
        f"""
temporal_address: temporal.internal:7233
temporal_namespace: from-file
temporal_tls_cert: {tls.client_cert}
temporal_tls_key: {tls.client_key}
temporal_tls_ca: {tls.ca}
temporal_tls_server_name: temporal.test
temporal_api_key_file: {tmp_path / "api-key"}
cluster_id: from-file
"""
    )
    monkeypatch.setenv("CLOUDBURST_CONFIG_FILE", str(config))
    monkeypatch.setenv("CLOUDBURST_TEMPORAL_NAMESPACE", "from-env")
    settings = Settings()
    assert settings.temporal_address == "temporal.internal:7233"
    assert settings.temporal_namespace == "from-env"  # env wins over the file
    assert settings.cluster_id == "from-file"
    options = client_options(settings)
    assert options["namespace"] == "from-env"
    assert options["api_key"] == "key-from-file"
    tls_config = options["tls"]
    assert isinstance(tls_config, TLSConfig)
    assert tls_config.client_cert == tls.client_cert.read_bytes()
    assert tls_config.client_private_key == tls.client_key.read_bytes()
    assert tls_config.server_root_ca_cert == tls.ca.read_bytes()
    assert tls_config.domain == "temporal.test"


def test_tls_can_be_forced_off_and_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDBURST_TEMPORAL_TLS", "true")
    assert isinstance(client_options(Settings())["tls"], TLSConfig)
    monkeypatch.setenv("CLOUDBURST_TEMPORAL_TLS", "false")
    monkeypatch.setenv("CLOUDBURST_TEMPORAL_TLS_CA", "/nowhere/ca.pem")  # unused without TLS
    assert client_options(Settings())["tls"] is False
    # An empty key (a ConfigMap's placeholder) is no key: plaintext stays allowed.
    monkeypatch.setenv("CLOUDBURST_TEMPORAL_API_KEY", "")
    assert client_options(Settings())["api_key"] is None


@pytest.mark.parametrize("key_from", ["value", "file"])
def test_an_api_key_is_never_sent_without_tls(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key_from: str
) -> None:
    """TLS off by hand and an API key: every process that builds a client (worker, trigger,
    CLI) goes through `client_options`, which refuses before any connection, naming both
    settings and the way out, never the key itself."""
    monkeypatch.setenv("CLOUDBURST_TEMPORAL_TLS", "false")
    if key_from == "value":
        monkeypatch.setenv("CLOUDBURST_TEMPORAL_API_KEY", "secret-key")
    else:
        (tmp_path / "api-key").write_text("secret-key\n")
        monkeypatch.setenv("CLOUDBURST_TEMPORAL_API_KEY_FILE", str(tmp_path / "api-key"))
    with pytest.raises(TemporalConfigError) as refused:
        client_options(Settings())
    message = str(refused.value)
    assert "CLOUDBURST_TEMPORAL_TLS is false but an API key is configured" in message
    assert "CLOUDBURST_TEMPORAL_API_KEY / CLOUDBURST_TEMPORAL_API_KEY_FILE" in message
    assert "set CLOUDBURST_TEMPORAL_TLS=true" in message and "remove the API key" in message
    assert "secret-key" not in message
    # A key file that is not there yet is refused for the same reason, not for its absence.
    monkeypatch.setenv("CLOUDBURST_TEMPORAL_API_KEY_FILE", str(tmp_path / "absent"))
    with pytest.raises(TemporalConfigError, match="in cleartext"):
        client_options(Settings())
    # What was right stays right: TLS left unset turns on with the key.
    monkeypatch.delenv("CLOUDBURST_TEMPORAL_TLS")
    monkeypatch.setenv("CLOUDBURST_TEMPORAL_API_KEY_FILE", str(tmp_path / "api-key"))
    (tmp_path / "api-key").write_text("secret-key\n")
    options = client_options(Settings())
    assert isinstance(options["tls"], TLSConfig) and options["api_key"] == "secret-key"


def test_a_client_certificate_without_tls_is_refused(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path)
    settings = Settings(
        temporal_tls=False, temporal_tls_cert=tls.client_cert, temporal_tls_key=tls.client_key
    )
    with pytest.raises(TemporalConfigError, match="set CLOUDBURST_TEMPORAL_TLS=true, or remove"):
        client_options(settings)


def test_wrong_tls_settings_name_the_setting(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path)
    with pytest.raises(TemporalConfigError, match="TLS_CERT and CLOUDBURST_TEMPORAL_TLS_KEY"):
        client_options(Settings(temporal_tls_cert=tls.client_cert))
    with pytest.raises(TemporalConfigError, match=r"CLOUDBURST_TEMPORAL_TLS_CA=.*missing\.pem"):
        client_options(Settings(temporal_tls_ca=tmp_path / "missing.pem"))
    with pytest.raises(TemporalConfigError, match="API_KEY_FILE"):
        client_options(Settings(temporal_api_key_file=tmp_path / "nope"))


def test_missing_settings_file_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLOUDBURST_CONFIG_FILE", str(tmp_path / "absent.yaml"))
    with pytest.raises(FileNotFoundError, match="CLOUDBURST_CONFIG_FILE"):
        Settings()


def test_who_may_reach_what_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDBURST_TENANT_NAMESPACES", "team-a, team-b")
    monkeypatch.setenv(
        "CLOUDBURST_ALLOWED_ENDPOINTS", '{"hetzner": ["https://hcloud-proxy.internal/v1"]}'
    )
    tenancy = Settings().tenancy()
    assert tenancy.worker_namespace == "cloudburst-system"
    assert tenancy.namespaces == frozenset({"team-a", "team-b"})
    assert tenancy.endpoint_allowed("hetzner", "https://hcloud-proxy.internal/v1")
    assert not tenancy.endpoint_allowed("scaleway", "https://hcloud-proxy.internal/v1")
    # As the base ConfigMap sets them: no namespace served, no endpoint override allowed.
    monkeypatch.setenv("CLOUDBURST_TENANT_NAMESPACES", "")
    monkeypatch.setenv("CLOUDBURST_ALLOWED_ENDPOINTS", "{}")
    tenancy = Settings().tenancy()
    assert tenancy.namespaces == frozenset() and not tenancy.serves("default")
    assert dict(tenancy.allowed_endpoints) == {}


def test_inventory_owners_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "CLOUDBURST_INVENTORY_OWNERS", '{"team-a": ["rack1-07", "https://10.0.9.21/redfish/v1"]}'
    )
    tenancy = Settings().tenancy()
    assert tenancy.machine_owners("rack1-07", "https://10.0.9.99") == {"team-a"}
    assert tenancy.machine_owners("other", "https://10.0.9.21:8443/x") == {"team-a"}
    assert tenancy.machine_owners("other", "https://10.0.9.99") == frozenset()


def test_unset_tenant_namespaces_serve_every_namespace() -> None:
    """A single-tenant cluster (and the dev stack); the shipped manifests always set it."""
    assert Settings().tenancy().serves("anything")
    assert dict(Settings().tenancy().allowed_endpoints) == {}


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CLOUDBURST_TENANT_NAMESPACES", "team-a,Not_A_Namespace", "not a namespace name"),
        ("CLOUDBURST_ALLOWED_ENDPOINTS", '{"hetznr": ["https://x"]}', "is not one of"),
        ("CLOUDBURST_ALLOWED_ENDPOINTS", '{"aws": ["https://u:p@x"]}', "no user info"),
        ("CLOUDBURST_ALLOWED_ENDPOINTS", '{"aws": ["x.example.com"]}', "plain http(s) URL"),
        ("CLOUDBURST_INVENTORY_OWNERS", '{"Team_A": ["m1"]}', "not a namespace name"),
        ("CLOUDBURST_INVENTORY_OWNERS", '{"a": ["m1"], "b": ["m1"]}', "two namespaces"),
    ],
)
def test_bad_reach_settings_are_refused_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        Settings()


@pytest.mark.parametrize("value", ["-1", "1e20"])
def test_a_hold_no_pool_timer_could_keep_is_refused_here(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """The hold becomes a timer in each pool the trigger starts: refused when the process
    starts, with the setting's name, not as a failing workflow task in every pool."""
    monkeypatch.setenv("CLOUDBURST_PARTIAL_NODE_HOLD_S", value)
    with pytest.raises(ValueError, match="partial_node_hold_s"):
        Settings()


@pytest.mark.parametrize("value", ["0", "0.5", "600"])
@pytest.mark.parametrize("whose", ["pool", "claim"])
def test_a_task_timeout_temporal_would_refuse_is_refused_here(
    monkeypatch: pytest.MonkeyPatch, whose: str, value: str
) -> None:
    """Under a second every busy pool or claim would time its tasks out; Temporal caps the
    timeout at two minutes. Refused with the setting's name when the trigger starts."""
    monkeypatch.setenv(f"CLOUDBURST_{whose.upper()}_TASK_TIMEOUT_S", value)
    with pytest.raises(ValueError, match=f"{whose}_task_timeout_s"):
        Settings()


def test_worker_queues_choose_the_task_queues_a_worker_polls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLOUDBURST_TASK_QUEUE", "burst")
    assert Settings().polled_task_queues() == ["burst", "burst-claims"]
    monkeypatch.setenv("CLOUDBURST_WORKER_QUEUES", "claims")
    assert Settings().polled_task_queues() == ["burst-claims"]
    monkeypatch.setenv("CLOUDBURST_WORKER_QUEUES", "pools")
    # One queue's worker: its activity threads are one worker's slots, not two.
    settings = Settings()
    assert settings.polled_task_queues() == ["burst"]
    assert settings.activity_threads() == (
        settings.max_concurrent_activities + settings.max_concurrent_local_activities
    )
    monkeypatch.setenv("CLOUDBURST_WORKER_QUEUES", "pool")
    with pytest.raises(ValueError, match="'all', 'pools' or 'claims'"):
        Settings()
