"""Workflow histories: free of secrets, and replayable by today's workflow code.

Sees every history of the end-to-end tests: those of its own session (pytest orders
`tests/e2e` before `tests/replay`) and those the end-to-end sessions handed over
(`CLOUDBURST_E2E_HISTORIES`, tests/histories.py: `make test` runs them on several workers
first). It also runs one claim of its own with Tailscale configured, so that it has something
to check when run alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from api import NodeClaimPhase
from api.messages import ScaleDownRequest, claim_key_of
from api.nodepool.messages import pool_key_of
from sim.cluster import SimulatedCluster
from tests.conftest import SecretRecorder
from tests.e2e.harness import (
    CLUSTER_ID,
    Stack,
    in_process_worker,
    in_thread,
    new_task_queue,
    running_watcher,
    start_test_claim,
    wait_for_phase,
)
from tests.histories import EXPORT_DIR_ENV, export_dir, exported, history_text, session_histories
from tests.payload_keys import REPLAY_CONVERTER
from worker.main import workflow_runner
from worker.settings import Settings
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.registry import WORKFLOWS

RECORDED = Path(__file__).parent / "histories"
# Pools whose histories the corpus keeps: a burst in parts, limits, a floor, failover, drift,
# consolidation, a configuration failure, a pool deleted and created again.
RECORDED_POOLS = {
    "grow",
    "capped",
    "floor",
    "failover",
    "drift",
    "consol",
    "misconf",
    "reborn",
}


async def test_no_secret_in_any_history(
    temporal_client: Client,
    kube: k8s.ApiClient,
    sim_cluster: SimulatedCluster,
    kubeconfig: Path,
    secret_recorder: SecretRecorder,
) -> None:
    # The seed's reusable key, made in the (simulated) tailnet's admin console.
    assert sim_cluster.tailnet is not None
    auth_key = sim_cluster.tailnet.admin_key(reusable=True, tags=["tag:cloudburst"])
    await in_thread(_tailnet_pool, kube, auth_key)
    try:
        await _a_tailnet_claims_life(temporal_client, kube, sim_cluster, kubeconfig)
    finally:
        # The cluster is the session's: a `tailscale-auth` Secret left behind would make
        # the e2e tests' NodeClass whose Secret is missing find it.
        await in_thread(_remove_tailnet_pool, kube)

    await asyncio.sleep(0.5)  # let the recorder see the last Secret events
    handed_over, handed_over_values = handed_over_histories()
    values = secret_recorder.values | handed_over_values
    forbidden = {value for value in values if len(value) >= 16}
    assert auth_key in secret_recorder.values, "the Tailscale key Secret was never observed"
    assert any("kubeadm join" in value for value in forbidden), "no script was ever recorded"

    histories = await session_histories(temporal_client) + handed_over
    assert histories, "no workflow history to scan"
    texts = {history.workflow_id: history_text(history) for history in histories}
    # The decoding works: the script Secret's *name* is in history, as it should be.
    assert any("-bootstrap" in text for text in texts.values())
    for workflow_id, text in texts.items():
        for value in forbidden:
            assert value not in text, f"a secret value reached the history of {workflow_id}"


async def _a_tailnet_claims_life(
    temporal_client: Client, kube: k8s.ApiClient, sim_cluster: SimulatedCluster, kubeconfig: Path
) -> None:
    queue = new_task_queue()
    stack = Stack(
        temporal_client,
        kube,
        sim_cluster,
        queue,
        Settings(
            kubeconfig=kubeconfig,
            task_queue=queue,
            cluster_id=CLUSTER_ID,
            allowed_endpoints=sim_cluster.endpoints(),
        ),
    )
    async with in_process_worker(stack), running_watcher(temporal_client, kube):
        _, handle = await start_test_claim(stack, "tailnet")
        await wait_for_phase(handle, NodeClaimPhase.READY)
        await handle.signal(NodeClaimWorkflow.scale_down, ScaleDownRequest(reason="done"))
        await asyncio.wait_for(handle.result(), timeout=60)


async def test_histories_replay_with_current_code(temporal_client: Client) -> None:
    own = await session_histories(temporal_client)
    session = [h for h in own + handed_over_histories()[0] if h.events]
    histories = session + recorded_histories()
    if not histories:
        pytest.skip("no histories recorded in this session")
    # The workers' own runner: the histories replay as the deployed workers would run them.
    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=REPLAY_CONVERTER,
        workflow_runner=workflow_runner(REPLAY_CONVERTER),
    )
    results = await replayer.replay_workflows(_iterate(histories), raise_on_replay_failure=False)
    failures = {
        run_id: str(failure) for run_id, failure in results.replay_failures.items() if failure
    }
    assert failures == {}
    if os.environ.get("CLOUDBURST_RECORD_HISTORIES"):
        record_corpus(session)


def record_corpus(session: list[WorkflowHistory]) -> None:
    """Add to the committed corpus: `CLOUDBURST_RECORD_HISTORIES=1 pytest tests/e2e
    tests/replay`. One claim of each pool the session ran (a pool is a scenario: its name says
    which) and the pools named in `RECORDED_POOLS`. Never overwrites: an old recording is what
    proves today's code replays old runs."""
    RECORDED.mkdir(exist_ok=True)
    for history in session:
        claim = claim_key_of(history.workflow_id)
        pool = pool_key_of(history.workflow_id)
        if claim is not None:
            scenario = claim[1].rsplit("-", 1)[0]  # the pool's name: drop the claim's suffix
            _record(RECORDED / f"nodeclaim-{scenario}.json", history)
        elif pool is not None and pool[1] in RECORDED_POOLS:
            _record(RECORDED / f"nodepool-{pool[1]}.json", history)


def handed_over_histories() -> tuple[list[WorkflowHistory], set[str]]:
    """The end-to-end sessions' histories and Secret values, when `make test` ran them apart."""
    directory = export_dir()
    if directory is None:
        return [], set()
    histories, values = exported(directory)
    assert histories, f"{EXPORT_DIR_ENV}={directory}: the end-to-end sessions handed over none"
    return histories, values


def recorded_histories() -> list[WorkflowHistory]:
    """The committed corpus: JSON, or gzipped JSON for a run too large to keep plain."""
    paths = sorted([*RECORDED.glob("*.json"), *RECORDED.glob("*.json.gz")])
    return [
        WorkflowHistory.from_json(
            path.name.removesuffix(".gz").removesuffix(".json"),
            gzip.decompress(path.read_bytes()).decode()
            if path.suffix == ".gz"
            else path.read_text(),
        )
        for path in paths
    ]


def _record(path: Path, history: WorkflowHistory) -> None:
    if not path.exists():
        path.write_text(history.to_json())


async def _iterate(histories: list[WorkflowHistory]) -> AsyncIterator[WorkflowHistory]:
    for history in histories:
        yield history


def _remove_tailnet_pool(kube: k8s.ApiClient) -> None:
    custom = k8s.CustomObjectsApi(kube)
    for plural in ("nodepools", "nodeclasses"):
        with contextlib.suppress(ApiException):
            custom.delete_namespaced_custom_object(
                "cloudburst.io", "v1alpha1", "default", plural, "tailnet"
            )
    with contextlib.suppress(ApiException):
        k8s.CoreV1Api(kube).delete_namespaced_secret("tailscale-auth", "default")


def _tailnet_pool(kube: k8s.ApiClient, auth_key: str) -> None:
    core = k8s.CoreV1Api(kube)
    custom = k8s.CustomObjectsApi(kube)
    core.create_namespaced_secret(
        "default",
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name="tailscale-auth"), string_data={"authkey": auth_key}
        ),
    )
    sample = custom.get_namespaced_custom_object(
        "cloudburst.io", "v1alpha1", "default", "nodeclasses", "sample"
    )
    spec = dict(sample["spec"])
    spec["tailscale"] = {"authKeySecretRef": {"name": "tailscale-auth", "key": "authkey"}}
    custom.create_namespaced_custom_object(
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodeclasses",
        {
            "apiVersion": "cloudburst.io/v1alpha1",
            "kind": "NodeClass",
            "metadata": {"name": "tailnet", "namespace": "default"},
            "spec": spec,
        },
    )
    custom.create_namespaced_custom_object(
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodepools",
        {
            "apiVersion": "cloudburst.io/v1alpha1",
            "kind": "NodePool",
            "metadata": {"name": "tailnet", "namespace": "default"},
            "spec": {
                "nodeClassRef": "tailnet",
                "disruption": {"ttlSecondsAfterEmpty": 3600},
            },
        },
    )
