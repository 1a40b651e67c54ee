"""Shared fixtures: one real Temporal dev server and one simulated cluster per test session.

The cluster runs Kubernetes' own control plane (`sim/controlplane/`: kube-apiserver, etcd,
kube-controller-manager, kube-scheduler built from their Go modules, machines joining through
bootstrap tokens and CSRs, KWOK keeping them), at the release `simulator/controlplane/
kubernetes/go.mod` pins, which the session checks. Tests of what talks to the API server
without a whole cluster take `kube_control_plane`: the control plane alone.

The fast lane (`make unit`: CLOUDBURST_FAST_LANE=1) starts no simulated cluster: a test
that asks for one fails there, saying so, which is how the lane is kept to what needs no
running stack. Tests marked `slow` (real process kills, hundreds of claims) run only in the
full suite.
"""

from __future__ import annotations

import base64
import os
import secrets
import shlex
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import hypothesis  # noqa: F401 - see below
import pytest
import pytest_asyncio
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from temporalio.client import Client
from temporalio.testing import TimeSkippingConfig, WorkflowEnvironment

from api import search_attributes
from sim.cluster import SimulatedCluster
from sim.controlplane import pinned_release
from sim.controlplane.binaries import ControlPlaneUnavailable
from sim.controlplane.cluster import KubernetesControlPlane
from sim.dev.stack import seed_sample_resources
from tests.payload_keys import KEYRING_FILE, SEALED_CONVERTER

TEMPORAL_CLI = Path(sys.executable).parent / "temporal"
# Workers started by tests (in-process or as `cloudburst worker`) must not fetch the real
# clouds' prices when their schedule is created; the tests of the price schedule opt in.
os.environ.setdefault("CLOUDBURST_PRICES_ENABLED", "false")
# Every process of the suite seals its payloads, as a deployment does (tests/payload_keys.py).
os.environ.setdefault("CLOUDBURST_PAYLOAD_KEYRING_FILE", str(KEYRING_FILE))
# hypothesis is imported up front: otherwise its pytest plugin imports it while printing the
# summary of a run that never used it, which trips a CPython 3.11.7 bug in `ast.parse`.


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL_CLI),
        search_attributes=list(search_attributes.ALL),
        data_converter=SEALED_CONVERTER,
        dev_server_log_level="error",
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """Its own server: virtual clocks are a server feature no other test should see."""
    env = await WorkflowEnvironment.start_time_skipping_v2(
        # Real time until the test fast-forwards: provisioning waits on a real kubelet.
        ts_config=TimeSkippingConfig(enabled=False),
        dev_server_existing_path=str(TEMPORAL_CLI),
        search_attributes=list(search_attributes.ALL),
        data_converter=SEALED_CONVERTER,
        dev_server_log_level="error",
        dev_server_extra_args=[
            "--dynamic-config-value",
            "frontend.WorkflowTimeSkippingEnabled=true",
        ],
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


FAST_LANE = "CLOUDBURST_FAST_LANE"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: takes seconds of real time (process kills, hundreds of claims)"
    )


def no_cluster_in_the_fast_lane() -> None:
    if os.environ.get(FAST_LANE):
        pytest.fail(
            "the fast lane starts no simulated cluster: this test belongs to the full suite "
            "(tests/e2e, tests/activities, tests/sim, ...), not to tests/unit or tests/workflows"
        )


def started(cluster: SimulatedCluster) -> SimulatedCluster:
    """Start a session's cluster; on the real control plane, fail unless it is the pinned
    release (a stale binary cache or a wrong build must not pass for it)."""
    try:
        cluster.start()
    except ControlPlaneUnavailable as exc:
        pytest.fail(str(exc))
    if isinstance(cluster.kube, KubernetesControlPlane):
        served = cluster.kube.version()["gitVersion"]
        if served != pinned_release():
            cluster.stop()
            pytest.fail(f"the API server is {served}, the pinned release is {pinned_release()}")
    return cluster


def started_control_plane(plane: KubernetesControlPlane) -> KubernetesControlPlane:
    """Start Kubernetes' own control plane; fail unless it is the pinned release."""
    try:
        plane.start()
    except ControlPlaneUnavailable as exc:
        pytest.fail(str(exc))
    served = plane.version()["gitVersion"]
    if served != pinned_release():
        plane.stop()
        pytest.fail(f"the API server is {served}, the pinned release is {pinned_release()}")
    return plane


@pytest.fixture(scope="session")
def kube_control_plane() -> Iterator[KubernetesControlPlane]:
    """Kubernetes' own control plane alone — no clouds, no machines, no Temporal — for the
    tests of what talks to the API server (activities, the providers' Secret reads, the
    trigger's watches), one a test session (an xdist worker)."""
    no_cluster_in_the_fast_lane()
    plane = started_control_plane(KubernetesControlPlane())
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def sim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatedCluster]:
    no_cluster_in_the_fast_lane()
    cluster = started(
        SimulatedCluster(
            boot_delay_s=0.3,
            ready_delay_s=0.3,
            cloud_token=secrets.token_hex(16),
            tailscale=True,
        )
    )
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
    from worker.kube_client import kube_api_client
    from worker.settings import Settings

    api_client = kube_api_client(Settings(kubeconfig=kubeconfig))
    seed_sample_resources(api_client, sim_cluster, ttl=3)
    return api_client


class SecretRecorder:
    """Remembers every secret value the cluster ever held, to look for it where it must not be.

    Join tokens and scripts live only minutes (deleted once the node is Ready), so a watch
    sees them all for the later scan of every workflow history.
    """

    SECRET_KEYS = ("token-secret", "userdata", "token", "authkey", "client_secret")

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.values: set[str] = set()
        # namespace -> the values its Secrets held: where each secret ever lived.
        self.by_namespace: dict[str, set[str]] = {}
        self._core = k8s.CoreV1Api(api_client)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="secret-recorder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        version = None
        while not self._stop.is_set():
            try:
                stream = k8s_watch.Watch().stream(
                    self._core.list_secret_for_all_namespaces,
                    resource_version=version,
                    timeout_seconds=2,
                )
                for event in stream:
                    secret = event["object"]
                    version = secret.metadata.resource_version
                    self._record(secret)
            except Exception:  # expired version, or the API server stopping: list again
                version = None
                self._stop.wait(0.1)

    def _record(self, secret: k8s.V1Secret) -> None:
        data = secret.data or {}
        found: set[str] = set()
        for key in self.SECRET_KEYS:
            if key in data:
                found.add(base64.b64decode(data[key]).decode())
        if "userdata" in data:
            # The Tailscale key a script carries (a per-node one exists nowhere else).
            script = base64.b64decode(data["userdata"]).decode()
            for line in script.splitlines():
                if line.startswith("TAILSCALE_AUTHKEY=") and len(line) > len("TAILSCALE_AUTHKEY="):
                    found.add(shlex.split(line.partition("=")[2])[0])
        if "token-id" in data and "token-secret" in data:
            token_id = base64.b64decode(data["token-id"]).decode()
            found.add(f"{token_id}.{base64.b64decode(data['token-secret']).decode()}")
        self.values |= found
        namespace = secret.metadata.namespace if secret.metadata else None
        self.by_namespace.setdefault(namespace or "", set()).update(found)


@pytest.fixture(scope="session")
def secret_recorder(kube: k8s.ApiClient) -> Iterator[SecretRecorder]:
    """Started by the first end-to-end test (tests/e2e/conftest.py), so it sees every Secret
    of the session's stacks."""
    recorder = SecretRecorder(kube)
    recorder.start()
    yield recorder
    recorder.stop()


@pytest.fixture(scope="session")
def multicloud_cluster() -> Iterator[SimulatedCluster]:
    """A second simulated cluster whose kubelets also boot every existing cloud stand-in.

    Clouds whose stand-in does not exist (yet) are left out: see `missing_standins`.
    """
    from sim.clouds import KNOWN_STANDINS

    no_cluster_in_the_fast_lane()
    cluster = started(
        SimulatedCluster(
            boot_delay_s=0.3,
            ready_delay_s=0.3,
            cloud_token=secrets.token_hex(16),
            clouds=list(KNOWN_STANDINS),
            missing_standins="skip",
        )
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def multicloud_kubeconfig(
    multicloud_cluster: SimulatedCluster, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    path = tmp_path_factory.mktemp("kube-multicloud") / "kubeconfig"
    multicloud_cluster.write_kubeconfig(path)
    return path


@pytest.fixture(scope="session")
def multicloud_kube(
    multicloud_cluster: SimulatedCluster, multicloud_kubeconfig: Path
) -> k8s.ApiClient:
    from worker.kube_client import kube_api_client
    from worker.settings import Settings

    return kube_api_client(Settings(kubeconfig=multicloud_kubeconfig))
