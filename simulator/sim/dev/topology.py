"""The production topology as separate OS processes, for the benches and drills of bench/
(chaos.py, burst.py, scale.py, upgrade.py): the Temporal dev server on a persistent database,
the simulated cluster (`python -m sim`), `cloudburst worker`s and `cloudburst trigger`s, each on
free local ports; the seed the chaos soak and the upgrade drill run on (one NodeClass, two
pools); what a run watches (pods bound, the fake cloud's VMs, each process tree's CPU and
memory); and the soak's verdict read from every history. A module of the simulator's
distribution, so that a bench imports it as a package (the benches are scripts, not one)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig

from api import search_attributes
from sim.dev.stack import free_port, temporal_cli
from worker.client import payload_converter
from worker.settings import Settings

POOLS = ("lane-a", "lane-b")
CLUSTER_ID = "chaos"
KEPT = "state kept in"
BIN = Path(sys.executable).parent
# The repository, where this module is installed from (editable, as `make setup` does).
REPO = Path(__file__).resolve().parents[3]
# What the image installs compiled (pip writes bytecode): the workflow sandbox loads a
# workflow's module afresh for every run, so without it (PYTHONDONTWRITEBYTECODE, a fresh
# checkout) every new claim would compile its module from source and the figures with it.
PACKAGES = (
    "api",
    "activities",
    "cluster",
    "planner",
    "observability",
    "simulator/sim",
    "trigger",
    "worker",
    "workflows",
)


@dataclass
class Report:
    ok: bool = False
    waves: int = 0
    lifecycles_completed: int = 0
    kills: dict[str, int] = field(default_factory=dict)
    vms_created: int = 0
    vms_leaked: int = 0
    vms_created_twice: list[str] = field(default_factory=list)
    claims_stuck: list[str] = field(default_factory=list)
    workflows_failed: list[str] = field(default_factory=list)
    workflow_tasks_failed: dict[str, int] = field(default_factory=dict)
    # Tasks Temporal refused because a signal came in as they closed the run (a
    # continue-as-new, a claim's end): the worker runs the task again with the signal, and
    # the server holds further signals back until it closes. Temporal's way of losing no
    # signal, not a workflow bug; counted apart, and a run that never closed would show as
    # stuck.
    close_races: dict[str, int] = field(default_factory=dict)
    pods_created: int = 0
    pods_never_bound: int = 0
    bind_latency_p50_s: float | None = None
    bind_latency_max_s: float | None = None
    # The slowest pods and what was killed while each waited: what a latency is made of.
    slowest_binds: list[dict[str, Any]] = field(default_factory=list)
    queries: int = 0
    # Refused by a worker taking the workflow over (`worker/untaken_events.py`).
    queries_refused: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


class Process:
    """One component as an OS process that the soak can SIGKILL and start again."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=own_group_dying_with_parent,
            )

    def exited(self) -> bool:
        return self.popen is not None and self.popen.poll() is not None

    def tail(self, lines: int = 30) -> str:
        """The end of its log: what a report shows when this process did not do its part."""
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def kill(self) -> None:
        if self.popen and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)

    def stop(self) -> None:
        if self.popen and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def _names(role: str, count: int) -> list[str]:
    """ "worker", or "worker-1", "worker-2", … when there are several."""
    return [role] if count == 1 else [f"{role}-{i}" for i in range(1, count + 1)]


def own_group_dying_with_parent() -> None:
    """In the child before exec: its own process group (killed as one), and SIGKILL when
    the soak itself dies (Linux), so that a soak killed by a test's timeout leaves nothing."""
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass(frozen=True)
class TaskTimeouts:
    """What a crash of a worker costs, as a run sets it (seconds; None: the product's
    default): the pools' and their claims' workflow task timeouts (the trigger's
    CLOUDBURST_POOL_TASK_TIMEOUT_S and CLOUDBURST_CLAIM_TASK_TIMEOUT_S) and the sticky queue
    timeout of the workers polling only pools and of the others
    (CLOUDBURST_STICKY_QUEUE_TIMEOUT_S)."""

    pool_task: float | None = None
    pool_sticky: float | None = None
    claim_task: float | None = None
    claim_sticky: float | None = None

    @classmethod
    def of(cls, args: argparse.Namespace) -> TaskTimeouts:
        return cls(
            args.pool_task_timeout,
            args.pool_sticky_timeout,
            args.claim_task_timeout,
            args.claim_sticky_timeout,
        )

    def trigger_env(self) -> dict[str, str]:
        return {
            **_setting("CLOUDBURST_POOL_TASK_TIMEOUT_S", self.pool_task),
            **_setting("CLOUDBURST_CLAIM_TASK_TIMEOUT_S", self.claim_task),
        }

    def worker_env(self, queues: str) -> dict[str, str]:
        sticky = self.pool_sticky if queues == "pools" else self.claim_sticky
        return _setting("CLOUDBURST_STICKY_QUEUE_TIMEOUT_S", sticky)

    def given(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _setting(name: str, value: float | None) -> dict[str, str]:
    return {} if value is None else {name: str(value)}


def add_topology_options(parser: argparse.ArgumentParser, claims_workers: str) -> None:
    """--pool-workers and the task timeouts (`TaskTimeouts`), as every bench of the topology
    takes them."""
    parser.add_argument(
        "--pool-workers",
        type=int,
        default=0,
        help=f"that many more workers poll only the pools' queue, {claims_workers} the claims'",
    )
    for kind, whose in (
        ("pool-task", "the pools' workflow task timeout (CLOUDBURST_POOL_TASK_TIMEOUT_S)"),
        ("pool-sticky", "the --pool-workers' sticky queue timeout"),
        ("claim-task", "the claims' workflow task timeout (CLOUDBURST_CLAIM_TASK_TIMEOUT_S)"),
        ("claim-sticky", "the other workers' sticky queue timeout"),
    ):
        parser.add_argument(f"--{kind}-timeout", type=float, default=None, help=f"{whose}, s")


def add_control_plane_argument(parser: argparse.ArgumentParser) -> None:
    """`--control-plane`: the simulated cluster's (`python -m sim --control-plane`)."""
    parser.add_argument(
        "--control-plane",
        choices=("kubernetes",),
        default="kubernetes",
        help="Kubernetes' own control plane, built from its Go modules (the only one; the "
        "option stays for the commands written with it)",
    )


class Topology:
    """Temporal, the simulated cluster, and `workers` workers and `triggers` triggers (each
    its own process; no leader election: the pool workflow is the single writer). With
    `pool_workers`, that many more poll the pools' task queue only and the `workers` the
    claims' only (`cloudburst worker --queues`, a Deployment of each). `timeouts`: what a
    worker's crash costs, when a run sets it."""

    def __init__(
        self,
        state: Path,
        boot_delay_s: float,
        *,
        workers: int = 1,
        triggers: int = 1,
        pool_workers: int = 0,
        timeouts: TaskTimeouts = TaskTimeouts(),
        control_plane: str = "kubernetes",
    ) -> None:
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", *(str(REPO / p) for p in PACKAGES)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        self.state = state
        self.temporal_port = free_port()
        self.kube_port = free_port()
        self.cloud_port = free_port()
        self.kubeconfig = state / "kubeconfig"
        self.cloud_token = secrets.token_hex(16)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.temporal = Process(
            "temporal",
            [
                temporal_cli(),
                "server",
                "start-dev",
                "--ip",
                "127.0.0.1",
                "--port",
                str(self.temporal_port),
                "--headless",
                "--log-level",
                "error",
                "--db-filename",
                str(state / "temporal.db"),
                # Write-ahead log, synced at checkpoints: a commit survives the process being
                # SIGKILLed (what the soak does), not a power cut. With sqlite's default (an
                # fsync per commit) one burst's child starts queue for seconds on this disk;
                # a real cluster's PostgreSQL or Cassandra writes in parallel.
                "--sqlite-pragma",
                "journal_mode=WAL",
                "--sqlite-pragma",
                "synchronous=NORMAL",
                *[
                    a
                    for k in search_attributes.ALL
                    for a in ("--search-attribute", f"{k.name}=Keyword")
                ],
            ],
            env,
            state / "temporal.log",
        )
        self.sim = Process(
            "sim",
            [
                sys.executable,
                "-m",
                "sim",
                "--kube-port",
                str(self.kube_port),
                "--cloud-port",
                str(self.cloud_port),
                "--kubeconfig",
                str(self.kubeconfig),
                "--cloud-token",
                self.cloud_token,
                "--boot-delay",
                str(boot_delay_s),
                "--ready-delay",
                str(boot_delay_s),
                "--control-plane",
                control_plane,
            ],
            env,
            state / "sim.log",
        )
        product_env = {
            **env,
            "CLOUDBURST_TEMPORAL_ADDRESS": f"127.0.0.1:{self.temporal_port}",
            "CLOUDBURST_KUBECONFIG": str(self.kubeconfig),
            "CLOUDBURST_CLUSTER_ID": CLUSTER_ID,
            "CLOUDBURST_HEALTH_PORT": "0",
            "CLOUDBURST_METRICS_PORT": "0",
            "CLOUDBURST_SDK_METRICS_PORT": "0",
            "CLOUDBURST_GC_ENABLED": "false",
            # As the operator of this stack: the fake cloud is an endpoint override to allow.
            "CLOUDBURST_ALLOWED_ENDPOINTS": json.dumps(
                {"fake": [f"http://127.0.0.1:{self.cloud_port}"]}
            ),
        }
        # As the worker's Deployment runs it (deploy/base/worker.yaml): two malloc arenas.
        worker_env = {**product_env, "MALLOC_ARENA_MAX": "2"}
        # Pool workers first: `worker` (the first) is then one that holds the pools.
        self.queues: dict[str, str] = {
            **{name: "pools" for name in _names("pool-worker", pool_workers)},
            **{name: "claims" if pool_workers else "all" for name in _names("worker", workers)},
        }
        self.workers = [
            Process(
                name,
                [str(BIN / "cloudburst"), "worker", "--queues", queues],
                {**worker_env, **timeouts.worker_env(queues)},
                state / f"{name}.log",
            )
            for name, queues in self.queues.items()
        ]
        trigger_env = {**product_env, **timeouts.trigger_env()}
        # Each trigger's Lease (trigger/peers.py) is named by its process name: one
        # restarted after a kill takes its Lease back at once, as a pod restarted under its
        # name does.
        self.triggers = [
            Process(
                name,
                [str(BIN / "cloudburst"), "trigger"],
                {**trigger_env, "CLOUDBURST_TRIGGER_ID": name},
                state / f"{name}.log",
            )
            for name in _names("trigger", triggers)
        ]

    @property
    def worker(self) -> Process:
        return self.workers[0]

    @property
    def trigger(self) -> Process:
        return self.triggers[0]

    @property
    def all(self) -> list[Process]:
        return [*self.triggers, *self.workers, self.sim, self.temporal]

    @property
    def cloud_url(self) -> str:
        return f"http://127.0.0.1:{self.cloud_port}"

    def stop(self) -> None:
        for process in self.all:
            process.stop()


def quiet_runtime() -> Runtime:
    """The SDK core's own warnings (a query retried while Temporal is down, as this soak
    intends) go to Python logging, so stderr: stdout carries nothing but the report."""
    forwarding = LogForwardingConfig(logger=logging.getLogger("temporalio.core"))
    logging_config = LoggingConfig(filter=LoggingConfig.default.filter, forwarding=forwarding)
    return Runtime(telemetry=TelemetryConfig(logging=logging_config))


async def connect(topology: Topology) -> Client:
    last: Exception | None = None
    runtime = quiet_runtime()
    for _ in range(600):
        try:
            return await Client.connect(
                f"127.0.0.1:{topology.temporal_port}",
                # Sealed as the topology's processes are, when they have a keyring.
                data_converter=payload_converter(Settings()),
                runtime=runtime,
            )
        except RuntimeError as err:
            last = err
            await asyncio.sleep(0.2)
    raise RuntimeError(f"Temporal never answered: {last}")


def kube_client(topology: Topology, timeout_s: float = 120.0) -> k8s.ApiClient:
    """The simulated cluster's client, once `python -m sim` has written its kubeconfig (it does
    after its servers listen; on a loaded machine the imports alone can take many seconds)."""
    deadline = time.monotonic() + timeout_s
    while not topology.kubeconfig.exists():
        if time.monotonic() > deadline or topology.sim.exited():
            raise RuntimeError(f"the simulated cluster wrote no kubeconfig: {topology.sim.tail()}")
        time.sleep(0.1)
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(str(topology.kubeconfig), client_configuration=configuration)
    return k8s.ApiClient(configuration)


def seed(api: k8s.ApiClient, topology: Topology, empty_ttl_s: int) -> None:
    """The fake cloud's token, one NodeClass, and the two pools the waves go to."""
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    core.create_namespaced_secret(
        "default",
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name="chaos-cloud-token"),
            string_data={"token": topology.cloud_token},
        ),
    )
    node_class = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodeClass",
        "metadata": {"name": "chaos", "namespace": "default"},
        "spec": {
            "fake": {
                "endpoint": topology.cloud_url,
                "region": "sim-1",
                "apiTokenSecretRef": {"name": "chaos-cloud-token", "key": "token"},
            },
            "join": {
                "hostApiServer": f"https://127.0.0.1:{topology.kube_port}",
                "kindClusterName": "chaos",
                "registrationTimeoutSeconds": 180,
            },
        },
    }
    custom.create_namespaced_custom_object(
        "cloudburst.io", "v1alpha1", "default", "nodeclasses", node_class
    )
    for pool in POOLS:
        body = {
            "apiVersion": "cloudburst.io/v1alpha1",
            "kind": "NodePool",
            "metadata": {"name": pool, "namespace": "default"},
            "spec": {
                "nodeClassRef": "chaos",
                "requirements": {"allowedProviders": ["fake"]},
                "limits": {"maxNodes": 16},
                "template": {"labels": {"chaos.io/lane": pool}},
                "disruption": {
                    "ttlSecondsAfterEmpty": empty_ttl_s,
                    "terminationGracePeriodSeconds": 20,
                    "budgets": [{"nodes": "100%"}],
                },
            },
        }
        custom.create_namespaced_custom_object(
            "cloudburst.io", "v1alpha1", "default", "nodepools", body
        )


def wave_pod(name: str, pool: str) -> k8s.V1Pod:
    # 1.5 CPU: one pod a small node, so a wave makes several nodes of each pool.
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, namespace="default", labels={"chaos": "wave"}),
        spec=k8s.V1PodSpec(
            node_selector={"chaos.io/lane": pool},
            containers=[
                k8s.V1Container(
                    name="app",
                    image="busybox",
                    resources=k8s.V1ResourceRequirements(
                        requests={"cpu": "1500m", "memory": "1Gi"}
                    ),
                )
            ],
        ),
    )


class BindWatch:
    """When each pod was created and first seen bound (polls the API every 0.2 s)."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self._core = k8s.CoreV1Api(api)
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            with contextlib.suppress(Exception):
                for pod in self._core.list_namespaced_pod("default", label_selector="chaos").items:
                    name = pod.metadata.name if pod.metadata else None
                    bound = bool(pod.spec and pod.spec.node_name)
                    if name and bound and name not in self.bound:
                        self.bound[name] = time.monotonic()


def report_failure(topology: Topology, problems: list[str], err: Exception) -> None:
    """A run that broke: its cause among the problems, the traceback and each process's
    last log lines on stderr (stdout carries nothing but the report)."""
    problems.append(f"{type(err).__name__}: {err}")
    traceback.print_exc(file=sys.stderr)
    for process in topology.all:
        print(f"--- {process.name} log, last lines\n{process.tail()}", file=sys.stderr)


def tear_down(topology: Topology, state: Path, *, keep: bool, problems: list[str]) -> str:
    """Stop every process and remove the state (or say where it is kept); returns the load
    average at the end, for the report."""
    topology.stop()
    load_average = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    if keep:
        problems.append(f"{KEPT} {state}")
    else:
        shutil.rmtree(state, ignore_errors=True)
    return load_average


def without_kept(problems: list[str]) -> list[str]:
    """The problems that are real: a kept state dir is a note, not a failure."""
    return [p for p in problems if not p.startswith(KEPT)]


def admin(topology: Topology, what: str) -> dict[str, Any]:
    """The fake cloud's admin API: `stats`, `create-times`, …"""
    answer = httpx.get(f"{topology.cloud_url}/_admin/{what}", timeout=30)
    answer.raise_for_status()
    result: dict[str, Any] = answer.json()
    return result


async def no_vms(topology: Topology, timeout_s: float) -> list[dict[str, Any]]:
    """Wait until the fake cloud has no VM; the VMs still there at the timeout."""
    deadline = time.monotonic() + timeout_s
    left: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            left = await asyncio.to_thread(cloud_instances, topology)
            if not left:
                return []
        await asyncio.sleep(1)
    return left


def cloud_instances(topology: Topology) -> list[dict[str, Any]]:
    answer = httpx.get(f"{topology.cloud_url}/_admin/instances", timeout=10)
    answer.raise_for_status()
    instances: list[dict[str, Any]] = answer.json()["instances"]
    return [i for i in instances if i.get("state") != "terminated"]


def history_file_name(workflow_id: str, run_id: str) -> str:
    """A file name for a run's history: the id's `/` (namespace/name) as `_`, which neither a
    namespace nor a name contains."""
    return f"{workflow_id.replace('/', '_')}.{run_id}.json"


async def verdict(
    client: Client, topology: Topology, histories: Path | None, report: Report
) -> None:
    stats = httpx.get(f"{topology.cloud_url}/_admin/stats", timeout=10).json()
    by_name: dict[str, int] = stats.get("created_by_name", {})
    report.vms_created = sum(by_name.values())
    report.vms_created_twice = sorted(name for name, count in by_name.items() if count > 1)
    async for execution in client.list_workflows():
        if execution.status in (
            WorkflowExecutionStatus.FAILED,
            WorkflowExecutionStatus.TERMINATED,
            WorkflowExecutionStatus.TIMED_OUT,
        ):
            report.workflows_failed.append(f"{execution.id} {execution.status.name}")
        if execution.workflow_type == "NodeClaimWorkflow" and (
            execution.status == WorkflowExecutionStatus.COMPLETED
        ):
            report.lifecycles_completed += 1
        history = await client.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history()
        causes = [
            e.workflow_task_failed_event_attributes.cause
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
        races = causes.count(WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND)
        if races:
            report.close_races[execution.id] = races
        if len(causes) > races:
            report.workflow_tasks_failed[execution.id] = len(causes) - races
        if histories is not None and execution.workflow_type in (
            "NodeClaimWorkflow",
            "NodePoolWorkflow",
        ):
            (histories / history_file_name(execution.id, execution.run_id)).write_text(
                history.to_json()
            )


# ---- a process tree, sampled -------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                text = Path(f"/proc/{current}/task/{task}/children").read_text()
                todo += [int(c) for c in text.split()]
    return pids


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of the process tree in MB (VmHWM: each process's peak RSS)."""
    rss = hwm = 0
    for each in process_tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm += int(line.split()[1])
    return rss / 1024, hwm / 1024


# Kubernetes' own control plane, children of `python -m sim --control-plane kubernetes`: its
# CPU is reported apart from the simulator's and the product's.
CONTROL_PLANE_COMMANDS = frozenset(
    {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of the process tree."""
    own, control_plane = cpu_s_split(pid)
    return own + control_plane


def cpu_s_split(pid: int) -> tuple[float, float]:
    """User + system CPU seconds of the process tree: (the rest, Kubernetes' control plane)."""
    own = control_plane = 0.0
    for each in process_tree(pid):
        with contextlib.suppress(OSError):
            comm, rest = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)
            fields = rest.split()
            used = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
            if comm.split("(", 1)[1][:15] in {c[:15] for c in CONTROL_PLANE_COMMANDS}:
                control_plane += used
            else:
                own += used
    return own, control_plane
