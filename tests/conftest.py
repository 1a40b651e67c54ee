"""Shared fixtures: one real Temporal dev server and one simulated cluster per test session."""

from __future__ import annotations

import secrets
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes import client as k8s
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from api import search_attributes
from cli.devstack import seed_sample_resources
from sim.cluster import SimulatedCluster

TEMPORAL_CLI = Path(sys.executable).parent / "temporal"


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL_CLI),
        search_attributes=list(search_attributes.ALL),
        data_converter=pydantic_data_converter,
        dev_server_log_level="error",
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
def temporal_client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture(scope="session")
def temporal_address(temporal_env: WorkflowEnvironment) -> str:
    return temporal_env.client.service_client.config.target_host


@pytest.fixture(scope="session")
def sim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatedCluster]:
    cluster = SimulatedCluster(
        boot_delay_s=0.3, ready_delay_s=0.3, cloud_token=secrets.token_hex(16)
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kubeconfig(sim_cluster: SimulatedCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kube") / "kubeconfig"
    sim_cluster.write_kubeconfig(path)
    return path


@pytest.fixture(scope="session")
def kube(sim_cluster: SimulatedCluster, kubeconfig: Path) -> k8s.ApiClient:
    from worker.client import kube_api_client
    from worker.settings import Settings

    api_client = kube_api_client(Settings(kubeconfig=kubeconfig))
    seed_sample_resources(api_client, sim_cluster, ttl=3)
    return api_client
