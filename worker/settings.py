"""One settings model for the worker, the watcher and the CLI.

Sources, strongest first: keyword arguments (CLI flags), environment `CLOUDBURST_*`, then the
YAML file named by `CLOUDBURST_CONFIG_FILE` (keys are the field names below, without the
prefix: `temporal_address: ns.acct.tmprl.cloud:7233`). In a cluster the ConfigMap feeds the
environment and the Secret is mounted as files (`temporal_api_key_file`, `temporal_tls_cert`,
`temporal_tls_key`), so no secret sits in an environment variable or a manifest.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from api.messages import TASK_QUEUE

CONFIG_FILE_ENV = "CLOUDBURST_CONFIG_FILE"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CLOUDBURST_", extra="ignore")

    # --- Temporal -------------------------------------------------------------------------
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    task_queue: str = TASK_QUEUE
    # None: on when a client certificate or an API key is configured (Temporal Cloud needs it).
    temporal_tls: bool | None = None
    # mTLS client certificate and key (PEM files); both or neither.
    temporal_tls_cert: Path | None = None
    temporal_tls_key: Path | None = None
    # CA of a self-hosted server's certificate; None trusts the system roots.
    temporal_tls_ca: Path | None = None
    # Server name to verify, when it differs from the address' host (e.g. via a proxy).
    temporal_tls_server_name: str | None = None
    # API key (Temporal Cloud); the file wins so a mounted Secret can rotate it.
    temporal_api_key: SecretStr | None = None
    temporal_api_key_file: Path | None = None

    # --- Kubernetes -----------------------------------------------------------------------
    # None: $KUBECONFIG / ~/.kube/config, or the in-cluster service account.
    kubeconfig: Path | None = None
    # Written on every VM so that garbage collection never touches another cluster's VMs.
    cluster_id: str = "cloudburst"
    max_concurrent_activities: int = 64
    # A workflow task waits this long on a dead worker's sticky queue before any worker may
    # take it: part of how long a claim or a pool stalls when a worker is killed.
    sticky_queue_timeout_s: float = 5.0

    # --- operations -----------------------------------------------------------------------
    # /healthz and /readyz for the kubelet's probes; 0 disables.
    health_port: int = 8081
    # Our OpenTelemetry metrics as Prometheus text (/metrics); 0 disables.
    metrics_port: int = 9464
    # The Temporal SDK's own metrics (Rust core), on their own Prometheus endpoint; 0 disables.
    sdk_metrics_port: int = 9465
    # Spans through Temporal's TracingInterceptor; also on whenever OTEL_EXPORTER_OTLP_ENDPOINT
    # is set (then exported by OTLP/HTTP).
    tracing: bool = False
    log_format: Literal["text", "json"] = "text"
    log_level: str = "INFO"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources = [init_settings, env_settings, dotenv_settings, file_secret_settings]
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if config_file:
            path = Path(config_file)
            if not path.is_file():
                raise FileNotFoundError(f"{CONFIG_FILE_ENV}={config_file}: no such file")
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

    def api_key(self) -> str | None:
        """The API key from its file (re-read on every connect) or from the value."""
        if self.temporal_api_key_file is not None:
            return self.temporal_api_key_file.read_text().strip() or None
        return self.temporal_api_key.get_secret_value() if self.temporal_api_key else None

    def tls_enabled(self) -> bool:
        if self.temporal_tls is not None:
            return self.temporal_tls
        return bool(
            self.temporal_tls_cert
            or self.temporal_tls_ca
            or self.temporal_api_key
            or self.temporal_api_key_file
        )
