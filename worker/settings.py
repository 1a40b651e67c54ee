"""One settings model for the worker, the watcher and the CLI (env `CLOUDBURST_*` or flags)."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

from api.messages import TASK_QUEUE


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CLOUDBURST_", extra="ignore")

    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    temporal_api_key: str | None = None
    temporal_tls: bool = False
    task_queue: str = TASK_QUEUE
    # None: $KUBECONFIG / ~/.kube/config, or the in-cluster service account.
    kubeconfig: Path | None = None
    # Written on every VM so that garbage collection never touches another cluster's VMs.
    cluster_id: str = "cloudburst"
    max_concurrent_activities: int = 64
