"""The e2e `stack`: one per test, on the shared simulated cluster, with its own task queue.

A module that needs the stack at work overrides `stack` with this one as its base, e.g.
`async def stack(stack: Stack)` yielding inside `serving(stack)`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from kubernetes import client as k8s
from temporalio.client import Client

from sim.cluster import SimulatedCluster
from tests.conftest import SecretRecorder
from tests.e2e.harness import Stack, stack_on
from tests.histories import export, export_dir, session_histories


@pytest_asyncio.fixture(scope="session", loop_scope="session", autouse=True)
async def secrets_recorded(secret_recorder: SecretRecorder) -> SecretRecorder:
    """Every Secret of the session's stacks, from the first end-to-end test on: the replay
    tests look for each value in every history."""
    return secret_recorder


@pytest_asyncio.fixture(scope="session", loop_scope="session", autouse=True)
async def histories_handed_over(
    temporal_client: Client, secrets_recorded: SecretRecorder
) -> AsyncIterator[None]:
    """At the session's end, its histories and Secret values for the replay tests' own
    session (tests/histories.py), when `make test` names a directory for them."""
    yield
    directory = export_dir()
    if directory is not None:
        session = os.environ.get("PYTEST_XDIST_WORKER", "main")
        histories = await session_histories(temporal_client)
        export(directory, session, histories, secrets_recorded.values)


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    temporal_client: Client, kube: k8s.ApiClient, sim_cluster: SimulatedCluster, kubeconfig: Path
) -> Stack:
    return stack_on(temporal_client, kube, sim_cluster, kubeconfig)
