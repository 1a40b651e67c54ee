"""Simulated machines: a VM that boots in a cloud stand-in runs a kubelet that joins the cluster.

`Kubelets` boots the VMs of a list of clouds: the fake cloud (`sim.cloud.FakeCloud`) and any
stand-in of `sim/clouds/` — anything with the `BootableCloud` protocol of
`sim/clouds/base.py`. VMs are keyed by (provider, native id) (`instance_key`: the bare native
id for the fake cloud, `<provider>/<native id>` for the others); a Node's providerID is
`<provider>:///<region>/<native id>` and its capacity comes from the cloud's `instance_shape`.

For every running VM it reads the JoinConfiguration from the user data (`parse_join_config`)
and joins as `kubeadm join` does (`sim/controlplane/joining.py`: `JoiningKubelets`, token
discovery, the CA pin, a CSR, the Node created as `system:node:<name>`); after
`ready_delay_s` the machine's kubelet is up (KWOK keeps the Node Ready, its Lease and its
pods). Wrong join material means no Node, as in real life; the reason is kept in
`join_failures` so that tests (and the demo) can say why. A spot notice from the VM's cloud
becomes the node's interruption taint (the in-VM termination handler's part). When a VM
disappears from the cloud the machine is lost: its Node's Lease lapses.

With a tailnet (`sim.tailscale.TailnetStandin`), a VM whose script turns Tailscale on first
runs `tailscale up` with the key from its user data (`TailnetStandin.register`, in-process):
a key the tailnet refuses (unknown, revoked, expired, single-use and spent) means no Node,
and the node's InternalIP is its tailnet address.

The clouds are read in-process every `poll_s`, on one thread.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shlex
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client

from api import labels as L
from sim.cloud import FakeCloud
from sim.clouds.base import BootableCloud, as_bootable
from sim.tailscale import TailnetError, TailnetStandin

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    """Call a `kubernetes` client method with a raw JSON body and return the raw JSON reply
    (the typed client's models are slow to build and not needed here); {} for no body."""
    response = fn(*args, _preload_content=False, **kwargs)
    data = response.data
    return json.loads(data) if data else {}


JOIN_HEREDOC = re.compile(
    r"<<'CLOUDBURST_JOIN_CONFIG'\s*\n(?P<body>.*?)\n\s*CLOUDBURST_JOIN_CONFIG\s*(?:\n|$)", re.S
)
TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
# The script's Tailscale settings (activities/bootstrap.sh.tmpl), one shell word each.
TAILSCALE_LINE = re.compile(r"^(TAILSCALE_ENABLED|TAILSCALE_AUTHKEY)=(.*)$", re.M)
KUBELET_VERSION = "v1.34.1"
ARCH = {"x86_64": "amd64", "amd64": "amd64", "arm64": "arm64", "aarch64": "arm64"}
# What `--node-labels` may set in the kubernetes.io / k8s.io namespaces (the kubelet refuses
# to start otherwise; NodeRestriction would refuse the Node).
_ALLOWED_K8S_LABELS = {
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
}
_ALLOWED_K8S_PREFIXES = ("kubelet.kubernetes.io/", "node.kubernetes.io/")


def allocatable(vcpu: float, memory_gib: float) -> dict[str, str]:
    """Capacity minus kube-reserved and the eviction threshold, as a kubelet configured the
    GKE/Karpenter way reports it: cpu 6% of the first core, 1% of the next, 0.5% of the next
    two, 0.25% above four; memory 25% of the first 4 GiB, 20% of the next 4, 10% of the next
    8, 6% of the next 112, 2% above; plus 100Mi for eviction."""
    millicores = vcpu * 1000
    reserved_cpu = 0.0
    for size, share in ((1000, 0.06), (1000, 0.01), (2000, 0.005), (float("inf"), 0.0025)):
        step = min(size, millicores)
        reserved_cpu += step * share
        millicores -= step
        if millicores <= 0:
            break
    mib = memory_gib * 1024
    reserved_mib = 0.0
    for size, share in (
        (4096, 0.25),
        (4096, 0.2),
        (8192, 0.1),
        (114688, 0.06),
        (float("inf"), 0.02),
    ):
        step = min(size, mib)
        reserved_mib += step * share
        mib -= step
        if mib <= 0:
            break
    cpu = int(vcpu * 1000 - reserved_cpu)
    memory_ki = int((memory_gib * 1024 - reserved_mib - 100) * 1024)
    return {
        "cpu": f"{cpu}m",
        "memory": f"{memory_ki}Ki",
        "pods": "110",
        "ephemeral-storage": "36Gi",
    }


def instance_key(provider: str, native_id: str) -> str:
    """How `Kubelets.joined` / `join_failures` name a VM: unique over all its clouds."""
    return native_id if provider == "fake" else f"{provider}/{native_id}"


def _quantity_cpu(vcpu: float) -> str:
    return str(int(vcpu)) if float(vcpu).is_integer() else f"{round(vcpu * 1000)}m"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class JoinError(Exception):
    """Why `kubeadm join` would have failed on this VM."""


@dataclass
class JoinConfig:
    api_server_endpoint: str
    token: str
    ca_cert_hashes: list[str]
    unsafe_skip_ca_verification: bool
    node_name: str
    taints: list[Obj]
    node_labels: dict[str, str]
    node_ip: str | None


def parse_join_config(user_data: str) -> JoinConfig:
    """Extract and read the kubeadm JoinConfiguration the bootstrap script writes."""
    match = JOIN_HEREDOC.search(user_data)
    if match is None:
        raise JoinError(
            "no kubeadm JoinConfiguration heredoc (CLOUDBURST_JOIN_CONFIG) in user data"
        )
    try:
        doc = yaml.safe_load(match.group("body"))
    except yaml.YAMLError as exc:
        raise JoinError(f"JoinConfiguration is not valid YAML: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("kind") != "JoinConfiguration":
        raise JoinError("the heredoc is not a kubeadm JoinConfiguration")
    if not str(doc.get("apiVersion", "")).startswith("kubeadm.k8s.io/"):
        raise JoinError(f"unexpected apiVersion {doc.get('apiVersion')!r}")
    discovery = (doc.get("discovery") or {}).get("bootstrapToken") or {}
    registration = doc.get("nodeRegistration") or {}
    extra = registration.get("kubeletExtraArgs") or []
    # v1beta4 has a list of {name, value}; v1beta3 had a map.
    args: dict[str, str] = (
        {str(a.get("name")): str(a.get("value", "")) for a in extra if isinstance(a, dict)}
        if isinstance(extra, list)
        else {str(k): str(v) for k, v in dict(extra).items()}
    )
    node_labels: dict[str, str] = {}
    for item in (args.get("node-labels") or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise JoinError(f"--node-labels item {item!r} is not key=value")
        node_labels[key.strip()] = value.strip()
    token = str(discovery.get("token") or doc.get("discovery", {}).get("tlsBootstrapToken") or "")
    name = str(registration.get("name") or "")
    if not name:
        raise JoinError("nodeRegistration.name is empty")
    taints = registration.get("taints") or []
    if not isinstance(taints, list):
        raise JoinError("nodeRegistration.taints is not a list")
    return JoinConfig(
        api_server_endpoint=str(discovery.get("apiServerEndpoint") or ""),
        token=token,
        ca_cert_hashes=[str(h) for h in discovery.get("caCertHashes") or []],
        unsafe_skip_ca_verification=bool(discovery.get("unsafeSkipCAVerification")),
        node_name=name,
        taints=[
            {k: str(v) for k, v in dict(t).items() if k in ("key", "value", "effect")}
            for t in taints
        ],
        node_labels=node_labels,
        node_ip=args.get("node-ip") or None,
    )


def ca_cert_hash(ca_pem: bytes) -> str:
    """kubeadm's CA pin: sha256 of the DER SubjectPublicKeyInfo."""
    cert = x509.load_pem_x509_certificate(ca_pem)
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def check_node_labels(labels: dict[str, str]) -> None:
    for key in labels:
        prefix, _, _ = key.rpartition("/")
        if (prefix.endswith("kubernetes.io") or prefix.endswith("k8s.io")) and not (
            key in _ALLOWED_K8S_LABELS or key.startswith(_ALLOWED_K8S_PREFIXES)
        ):
            raise JoinError(f"kubelet refuses --node-labels {key}: reserved kubernetes.io label")


@dataclass
class _Joined:
    instance_id: str
    node_name: str
    ip: str
    registered_at: float
    index: int
    node_uid: str = ""
    ready: bool = False
    lost: bool = False  # VM gone: no longer managed
    pod_ips: int = 0
    interruption: str | None = None  # the spot notice this node was tainted with


class Kubelets:
    """All the kubelets of the simulated cluster, on one thread.

    `cloud` is one cloud or a list of them (`FakeCloud` or any `BootableCloud`); more can be
    added with `add_cloud` while running.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        cloud: FakeCloud | BootableCloud | list[FakeCloud | BootableCloud],
        ready_delay_s: float = 1.0,
        *,
        poll_s: float = 0.25,
        join_retry_s: float = 2.0,
        join_timeout_s: float = 60.0,
        tailnet: TailnetStandin | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.tailnet = tailnet
        # instance key -> (tailnet node id, address): `tailscale up` ran once for this VM.
        self._tailnet_nodes: dict[str, tuple[str, str]] = {}
        given = cloud if isinstance(cloud, list) else [cloud]
        if not given:
            raise ValueError("Kubelets needs at least one cloud")
        self.cloud = given[0]  # the first (usually the fake cloud), as before
        self.clouds: list[BootableCloud] = []
        for c in given:
            self.add_cloud(c)
        # instance key -> (cloud, native id), refreshed every tick
        self._where: dict[str, tuple[BootableCloud, str]] = {}
        self.ready_delay_s = ready_delay_s
        self.poll_s = poll_s
        self.join_retry_s = join_retry_s
        self.join_timeout_s = join_timeout_s
        self._lock = threading.Lock()
        self.joined: dict[str, _Joined] = {}  # instance id -> node
        # instance id -> why it could not join (the latest reason; kept after giving up).
        self.join_failures: dict[str, str] = {}
        self._first_try: dict[str, float] = {}
        self._next_try: dict[str, float] = {}
        self._given_up: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._indexes = iter(range(1, 1 << 30))

    def add_cloud(self, cloud: FakeCloud | BootableCloud) -> None:
        bootable = as_bootable(cloud)
        if any(c.provider == bootable.provider for c in self.clouds):
            raise ValueError(f"a {bootable.provider} cloud is already booted by these kubelets")
        self.clouds = [*self.clouds, bootable]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kubelets", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def node_for(self, instance_id: str) -> str | None:
        with self._lock:
            j = self.joined.get(instance_id)
            return j.node_name if j else None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("kubelet tick failed")
            self._stop.wait(self.poll_s)

    def tick(self) -> None:
        """One round: join new VMs, turn nodes Ready, notice lost VMs, run bound pods."""
        now = time.monotonic()
        states: dict[str, str] = {}
        where: dict[str, tuple[BootableCloud, str]] = {}
        for cloud in self.clouds:
            try:
                cloud_states = cloud.instance_states()
            except Exception:
                # One stand-in failing must not stop the others' nodes (nor mark its VMs lost).
                log.exception("reading %s instance states failed", cloud.provider)
                for key, (c, native) in self._where.items():
                    if c is cloud:
                        states[key], where[key] = "unknown", (c, native)
                continue
            for native, state in cloud_states.items():
                key = instance_key(cloud.provider, str(native))
                states[key] = state
                where[key] = (cloud, str(native))
        self._where = where
        to_join = [
            iid
            for iid, state in states.items()
            if state == "running"
            and iid not in self.joined
            and iid not in self._given_up
            and self._next_try.get(iid, 0.0) <= now
        ]
        if to_join:
            self._join_all(to_join, now)
        for j in list(self.joined.values()):
            if j.lost:
                continue
            if states.get(j.instance_id) == "unknown":
                continue
            if states.get(j.instance_id, "terminated") in ("terminated", "stopping"):
                # stopping: the OS is shutting down; the kubelet stops posting status.
                self._lose(j)
            else:
                if not j.ready and now - j.registered_at >= self.ready_delay_s:
                    self._set_ready(j)
                if not j.lost and j.interruption is None:
                    self._watch_interruption(j)

    # ---- joining ---------------------------------------------------------------------------

    def _join_all(self, instance_ids: list[str], now: float) -> None:
        """Join these running VMs (`JoiningKubelets`: as kubeadm join does)."""
        raise NotImplementedError

    def _set_ready(self, j: _Joined) -> None:
        """The machine's kubelet is up, `ready_delay_s` after its Node was created."""
        raise NotImplementedError

    def _lose(self, j: _Joined) -> None:
        """The VM is gone."""
        raise NotImplementedError

    def _join_failed(self, iid: str, reason: str, now: float) -> None:
        first = self._first_try.setdefault(iid, now)
        self.join_failures[iid] = reason
        self._next_try[iid] = now + self.join_retry_s
        if now - first >= self.join_timeout_s:
            self._given_up.add(iid)
        log.warning("instance %s cannot join: %s", iid, reason)

    def _join_tailnet(self, iid: str, user_data: str, hostname: str) -> str | None:
        """`tailscale up` as the script runs it (once per VM): the tailnet address, or None."""
        if self.tailnet is None:
            return None
        settings = {}
        for name, value in TAILSCALE_LINE.findall(user_data):
            words = shlex.split(value)
            settings[name] = words[0] if words else ""
        if settings.get("TAILSCALE_ENABLED") != "true":
            return None
        joined = self._tailnet_nodes.get(iid)
        if joined is None:
            try:
                device = self.tailnet.register(settings.get("TAILSCALE_AUTHKEY", ""), hostname)
            except TailnetError as exc:
                raise JoinError(f"tailscale up failed: {exc}") from exc
            joined = (str(device["nodeId"]), str(device["addresses"][0]))
            self._tailnet_nodes[iid] = joined
        return joined[1]

    def _node_manifest(
        self,
        cloud: BootableCloud,
        native: str,
        detail: Obj,
        config: JoinConfig,
        tailnet_ip: str | None,
    ) -> tuple[Obj, str]:
        """The Node a kubelet on this VM registers, and the node's InternalIP."""
        machine_uuid = uuid.uuid5(uuid.NAMESPACE_URL, f"{cloud.provider}/{native}")
        type_name = str(detail.get("instance_type"))
        shape = cloud.instance_shape(type_name)
        if shape is None:
            raise JoinError(f"unknown instance type {type_name!r}")
        vcpu, memory_gib, raw_arch = shape
        arch = ARCH.get(raw_arch, raw_arch)
        region = str(detail.get("region"))
        ip = config.node_ip or tailnet_ip or str(detail.get("private_ip") or "")
        labels = {
            **config.node_labels,
            "kubernetes.io/hostname": config.node_name,
            L.K8S_ARCH: arch,
            "kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": arch,
            "beta.kubernetes.io/os": "linux",
            L.K8S_INSTANCE_TYPE: type_name,
            L.K8S_REGION: region,
        }
        if detail.get("zone"):
            labels["topology.kubernetes.io/zone"] = str(detail["zone"])
        resources = {
            "cpu": _quantity_cpu(vcpu),
            "memory": f"{int(memory_gib * 1024 * 1024)}Ki",
            "pods": "110",
            "ephemeral-storage": "40Gi",
        }
        node: Obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": config.node_name,
                "labels": labels,
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {
                "providerID": f"{cloud.provider}:///{_identity_place(cloud, detail)}/{native}"
            },
            "status": {
                "capacity": resources,
                "allocatable": allocatable(vcpu, memory_gib),
                "addresses": [
                    {"type": "InternalIP", "address": ip},
                    {"type": "Hostname", "address": config.node_name},
                ],
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "KubeletNotReady",
                        "message": "container runtime network not ready: NetworkReady=false",
                        "lastHeartbeatTime": _now(),
                        "lastTransitionTime": _now(),
                    }
                ],
                "nodeInfo": {
                    "architecture": arch,
                    "operatingSystem": "linux",
                    "osImage": str(detail.get("image") or "Ubuntu 24.04 LTS"),
                    "kernelVersion": "6.8.0-sim",
                    "containerRuntimeVersion": "containerd://2.1.0",
                    "kubeletVersion": KUBELET_VERSION,
                    "kubeProxyVersion": "",
                    # /etc/machine-id's 32 hex digits and the UUIDs a kubelet reports (a bare
                    # cloud id such as Hetzner's number is no string once KWOK's stage
                    # template renders it).
                    "machineID": machine_uuid.hex,
                    "systemUUID": str(machine_uuid),
                    "bootID": str(machine_uuid),
                },
            },
        }
        if config.taints:
            node["spec"]["taints"] = config.taints
        return node, ip

    # ---- spot interruption -----------------------------------------------------------------

    def _watch_interruption(self, j: _Joined) -> None:
        """Play the in-VM agent (aws-node-termination-handler in IMDS mode and its GCE/Azure
        equivalents): a spot notice from the VM's cloud becomes the node's interruption
        taint, once. Clouds without spot VMs have no `interruption_notice`."""
        located = self._where.get(j.instance_id)
        if located is None:
            return
        cloud, native = located
        read = getattr(cloud, "interruption_notice", None)
        notice = read(native) if read is not None else None
        if not notice:
            return
        try:
            node = call(self.core.read_node, j.node_name)
            taints = [
                t
                for t in (node.get("spec") or {}).get("taints") or []
                if t.get("key") != L.INTERRUPTION_TAINT
            ]
            taints.append({"key": L.INTERRUPTION_TAINT, "value": notice, "effect": "NoSchedule"})
            # spec.taints has no merge key: the whole list is replaced.
            call(
                self.core.patch_node,
                j.node_name,
                {"spec": {"taints": taints}},
                _content_type="application/merge-patch+json",
            )
        except client.ApiException as exc:
            if exc.status == 404:
                j.lost = True
                return
            log.warning("tainting node %s for its interruption: %s", j.node_name, exc.reason)
            return  # tried again next tick
        j.interruption = notice
        log.info("node %s: spot interruption notice %r, tainted", j.node_name, notice)


# The clouds whose metadata service the first-boot script reads a zone from for the providerID
# (activities/bootstrap.sh.tmpl read_identity: GCP's instance/zone, Scaleway's
# location.zone_id), as their providers record the VM's id; the others name the region.
_ZONE_IN_PROVIDER_ID = frozenset({"gcp", "scaleway"})


def _identity_place(cloud: BootableCloud, detail: Obj) -> str:
    """The region or zone segment of a VM's providerID, as the first-boot script writes it."""
    if cloud.provider in _ZONE_IN_PROVIDER_ID and detail.get("zone"):
        return str(detail["zone"])
    return str(detail.get("region"))
