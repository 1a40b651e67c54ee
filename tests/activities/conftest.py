"""Fixtures for activity tests that talk to the Kubernetes API emulator over HTTP."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from sim.kubeapi import KubeApiServer

WORKER_NAMESPACE = "cloudburst-system"


@pytest.fixture(scope="session")
def kubeapi() -> Iterator[KubeApiServer]:
    server = KubeApiServer(port=0)
    server.start()
    # Installed as deploy/ installs it: the worker's namespace, for its script Secrets.
    server.ensure_namespace(WORKER_NAMESPACE)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kube_api_client(kubeapi: KubeApiServer) -> Iterator[client.ApiClient]:
    api = kubeapi.api_client()
    yield api
    api.close()


@pytest.fixture
def core(kube_api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api_client)


@pytest.fixture
def namespace(core: client.CoreV1Api) -> str:
    """A fresh namespace per test, so PDBs and Secrets of one test never meet another's."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:8]
