"""Simulated kubelets: a VM that boots with valid join material becomes a Node.

`Kubelets` boots the VMs of a list of clouds: the fake cloud (`sim.cloud.FakeCloud`) and any
stand-in of `sim/clouds/` — anything with the `BootableCloud` protocol of
`sim/clouds/base.py`. VMs are keyed by (provider, native id) (`instance_key`: the bare native
id for the fake cloud, as before, `<provider>/<native id>` for the others); a Node's
providerID is `<provider>:///<region>/<native id>` and its capacity comes from the cloud's
`instance_shape`.

For every running VM, `Kubelets` does what `kubeadm join` + the kubelet
would: parse the JoinConfiguration from the user data, verify the bootstrap token against
its `kube-system/bootstrap-token-<id>` Secret and the CA pin against `kube-public/
cluster-info`, then register the Node (NotReady, Ready after `ready_delay_s`) and run the
pods bound to it. Wrong join material means no Node, as in real life; the reason is kept in
`join_failures` so that tests (and the demo) can say why.

With a tailnet (`sim.tailscale.TailnetStandin`), a VM whose script turns Tailscale on first
runs `tailscale up` with the key from its user data (`TailnetStandin.register`, in-process):
a key the tailnet refuses (unknown, revoked, expired, single-use and spent) means no Node,
and the node's InternalIP is its tailnet address. Without one, the Tailscale lines are
ignored as before.

Each registered Node has its `kube-node-lease/<node>` Lease (owned by the Node, as the kubelet
makes it), renewed every `lease_renew_s` (the kubelet's 10 s) while its VM runs: `kubectl get
leases -n kube-node-lease` and anything that watches node heartbeats see what they see on a
real cluster. A lost node's lease is no longer renewed.

When a VM disappears from the cloud its Node goes `Ready=Unknown` (the node lifecycle
controller's "Kubelet stopped posting node status.") and is left for the autoscaler to
delete. A Node deleted while its VM lives is not re-registered (a real kubelet would
re-register; not doing so keeps "delete the Node, then the VM" simple to observe).

Everything runs on one thread polling every `poll_s`: the cloud is read in-process (cheap),
the API with two calls per tick at most (pending pods bound to nodes, and only when there is
something to join: the token Secret and cluster-info).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
import shlex
import threading
import time
import uuid
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
from sim.scheduler import call
from sim.tailscale import TailnetError, TailnetStandin

log = logging.getLogger(__name__)

Obj = dict[str, Any]
JOIN_HEREDOC = re.compile(
    r"<<'CLOUDBURST_JOIN_CONFIG'\s*\n(?P<body>.*?)\n\s*CLOUDBURST_JOIN_CONFIG\s*(?:\n|$)", re.S
)
TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
# The script's Tailscale settings (activities/bootstrap.sh.tmpl), one shell word each.
TAILSCALE_LINE = re.compile(r"^(TAILSCALE_ENABLED|TAILSCALE_AUTHKEY)=(.*)$", re.M)
NODE_GROUP = "system:bootstrappers:kubeadm:default-node-token"
KUBELET_VERSION = "v1.34.1"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40  # the kubelet's default nodeLeaseDurationSeconds
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


def _now_micro() -> str:
    """A Lease's renewTime is a MicroTime (RFC 3339 with microseconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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


def _decode(secret: Obj, key: str) -> str | None:
    if key in (secret.get("stringData") or {}):
        return str(secret["stringData"][key])
    raw = (secret.get("data") or {}).get(key)
    if raw is None:
        return None
    try:
        return base64.b64decode(raw).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def check_token_secret(secret: Obj, token_id: str, token_secret: str) -> None:
    """What the API server's bootstrap authenticator and kubeadm's discovery check."""
    if secret.get("type") != "bootstrap.kubernetes.io/token":
        raise JoinError(f"Secret bootstrap-token-{token_id} has type {secret.get('type')!r}")
    if _decode(secret, "token-id") != token_id:
        raise JoinError(f"Secret bootstrap-token-{token_id}: token-id does not match")
    if not hmac.compare_digest(_decode(secret, "token-secret") or "", token_secret):
        raise JoinError(f"Secret bootstrap-token-{token_id}: token-secret does not match")
    expiration = _decode(secret, "expiration")
    if expiration:
        try:
            when = datetime.fromisoformat(expiration.replace("Z", "+00:00"))
        except ValueError as exc:
            raise JoinError(f"token expiration {expiration!r} is not RFC3339") from exc
        if when.tzinfo is None or when <= datetime.now(UTC):
            raise JoinError(f"bootstrap token {token_id} expired at {expiration}")
    for usage in ("usage-bootstrap-authentication", "usage-bootstrap-signing"):
        if _decode(secret, usage) != "true":
            raise JoinError(f'bootstrap token {token_id}: {usage} is not "true"')
    groups = (_decode(secret, "auth-extra-groups") or "").split(",")
    if NODE_GROUP not in groups:
        raise JoinError(
            f"bootstrap token {token_id}: auth-extra-groups lacks {NODE_GROUP} "
            "(kubeadm's RBAC lets only that group join)"
        )


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
    lease_renewed_at: float | None = None  # monotonic; None until the lease exists
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
        lease_renew_s: float = 10.0,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.lease_renew_s = lease_renew_s
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
            if not j.lost:
                self._keep_lease(j, now)
        self._run_pods()

    # ---- joining ---------------------------------------------------------------------------

    def _join_all(self, instance_ids: list[str], now: float) -> None:
        try:
            ca_hash = self._cluster_ca_hash()
        except JoinError as exc:
            ca_hash = None
            ca_error = str(exc)
        for iid in instance_ids:
            try:
                cloud, native = self._where[iid]
                detail = cloud.peek(native)
                if detail is None:
                    continue
                if ca_hash is None:
                    raise JoinError(ca_error)
                user_data = str(detail.get("user_data") or "")
                config = parse_join_config(user_data)
                tailnet_ip = self._join_tailnet(iid, user_data, config.node_name)
                self._verify(config, ca_hash)
                self._register(iid, cloud, native, detail, config, now, tailnet_ip)
                self.join_failures.pop(iid, None)
            except JoinError as exc:
                self._join_failed(iid, str(exc), now)
            except client.ApiException as exc:
                self._join_failed(iid, f"API error {exc.status}: {exc.reason}", now)

    def _join_failed(self, iid: str, reason: str, now: float) -> None:
        first = self._first_try.setdefault(iid, now)
        self.join_failures[iid] = reason
        self._next_try[iid] = now + self.join_retry_s
        if now - first >= self.join_timeout_s:
            self._given_up.add(iid)
        log.warning("instance %s cannot join: %s", iid, reason)

    def _cluster_ca_hash(self) -> str:
        try:
            cm = call(self.core.read_namespaced_config_map, "cluster-info", "kube-public")
        except client.ApiException as exc:
            raise JoinError(f"cannot read kube-public/cluster-info: {exc.status}") from exc
        kubeconfig = yaml.safe_load((cm.get("data") or {}).get("kubeconfig") or "") or {}
        clusters = kubeconfig.get("clusters") or []
        if not clusters:
            raise JoinError("kube-public/cluster-info has no cluster")
        ca_b64 = (clusters[0].get("cluster") or {}).get("certificate-authority-data")
        if not ca_b64:
            raise JoinError("kube-public/cluster-info has no certificate-authority-data")
        return ca_cert_hash(base64.b64decode(ca_b64))

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

    def _verify(self, config: JoinConfig, ca_hash: str) -> None:
        m = TOKEN_RE.match(config.token)
        if m is None:
            raise JoinError("bootstrap token is malformed (want [a-z0-9]{6}.[a-z0-9]{16})")
        token_id, token_secret = m.groups()
        try:
            secret = call(
                self.core.read_namespaced_secret, f"bootstrap-token-{token_id}", "kube-system"
            )
        except client.ApiException as exc:
            if exc.status == 404:
                raise JoinError(f"bootstrap token {token_id} not found") from exc
            raise
        check_token_secret(secret, token_id, token_secret)
        pins = [h.lower() for h in config.ca_cert_hashes]
        if not pins and not config.unsafe_skip_ca_verification:
            raise JoinError("no caCertHashes and unsafeSkipCAVerification is not set")
        if pins and ca_hash not in pins:
            raise JoinError("cluster CA public key does not match any caCertHashes pin")
        check_node_labels(config.node_labels)

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
            "spec": {"providerID": f"{cloud.provider}:///{region}/{native}"},
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

    def _register(
        self,
        iid: str,
        cloud: BootableCloud,
        native: str,
        detail: Obj,
        config: JoinConfig,
        now: float,
        tailnet_ip: str | None = None,
    ) -> None:
        node, ip = self._node_manifest(cloud, native, detail, config, tailnet_ip)
        try:
            created = call(self.core.create_node, node)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            # A Node by that name exists: the kubelet takes it over only if it is its own.
            created = call(self.core.read_node, config.node_name)
            if (created.get("spec") or {}).get("providerID") != node["spec"]["providerID"]:
                raise JoinError(
                    f"a Node named {config.node_name} exists with another providerID"
                ) from exc
        node_uid = str((created.get("metadata") or {}).get("uid") or "")
        with self._lock:
            self.joined[iid] = _Joined(
                iid, config.node_name, ip, now, next(self._indexes), node_uid=node_uid
            )
        log.info("instance %s joined as node %s", iid, config.node_name)

    # ---- node lease ------------------------------------------------------------------------

    def _keep_lease(self, j: _Joined, now: float) -> None:
        """Create the node's Lease once, then renew it every `lease_renew_s`. A failure is
        logged and tried at the next tick, as the kubelet's lease controller does."""
        if j.lease_renewed_at is not None and now - j.lease_renewed_at < self.lease_renew_s:
            return
        renew = {"spec": {"renewTime": _now_micro()}}
        try:
            if j.lease_renewed_at is None:
                self._create_lease(j)
            else:
                call(
                    self.coordination.patch_namespaced_lease,
                    j.node_name,
                    LEASE_NAMESPACE,
                    renew,
                    _content_type="application/merge-patch+json",
                )
            j.lease_renewed_at = now
        except client.ApiException as exc:
            if exc.status == 404:
                j.lease_renewed_at = None  # deleted under us: created again next tick
            log.warning("lease of node %s not renewed: %s", j.node_name, exc.reason)

    def _create_lease(self, j: _Joined) -> None:
        lease: Obj = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": j.node_name,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": j.node_name,
                        "uid": j.node_uid,
                    }
                ],
            },
            "spec": {
                "holderIdentity": j.node_name,
                "leaseDurationSeconds": LEASE_DURATION_S,
                "renewTime": _now_micro(),
            },
        }
        try:
            call(self.coordination.create_namespaced_lease, LEASE_NAMESPACE, lease)
        except client.ApiException as exc:
            if exc.status != 409:  # taken over after a restart: renew it instead
                raise
            call(
                self.coordination.patch_namespaced_lease,
                j.node_name,
                LEASE_NAMESPACE,
                {"spec": {"renewTime": _now_micro()}},
                _content_type="application/merge-patch+json",
            )

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

    # ---- node status -----------------------------------------------------------------------

    def _patch_ready(self, j: _Joined, status: str, reason: str, message: str) -> bool:
        body = {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": status,
                        "reason": reason,
                        "message": message,
                        "lastHeartbeatTime": _now(),
                        "lastTransitionTime": _now(),
                    }
                ]
            }
        }
        try:
            call(
                self.core.patch_node_status,
                j.node_name,
                body,
                _content_type="application/strategic-merge-patch+json",
            )
        except client.ApiException as exc:
            if exc.status == 404:
                # Someone deleted the Node: this kubelet stops (it does not re-register).
                log.info("node %s was deleted; kubelet stops managing it", j.node_name)
                j.lost = True
                return False
            raise
        return True

    def _set_ready(self, j: _Joined) -> None:
        if self._patch_ready(j, "True", "KubeletReady", "kubelet is posting ready status"):
            j.ready = True
            log.info("node %s is Ready", j.node_name)

    def _lose(self, j: _Joined) -> None:
        j.lost = True
        tailnet_node = self._tailnet_nodes.get(j.instance_id)
        if self.tailnet is not None and tailnet_node is not None:
            self.tailnet.set_online(tailnet_node[0], False)
        self._patch_ready(j, "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
        log.info("node %s lost its VM %s: Ready=Unknown", j.node_name, j.instance_id)

    # ---- pods ------------------------------------------------------------------------------

    def _run_pods(self) -> None:
        with self._lock:
            nodes = {j.node_name: j for j in self.joined.values() if not j.lost}
        if not nodes:
            return
        data = call(
            self.core.list_pod_for_all_namespaces,
            field_selector="status.phase=Pending,spec.nodeName!=",
        )
        for pod in data.get("items") or []:
            node = nodes.get((pod.get("spec") or {}).get("nodeName") or "")
            md = pod.get("metadata") or {}
            if node is None or md.get("deletionTimestamp"):
                continue
            self._start_pod(node, pod)

    def _start_pod(self, node: _Joined, pod: Obj) -> None:
        md = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        now = _now()
        if spec.get("hostNetwork"):
            pod_ip = node.ip
        else:
            node.pod_ips += 1
            n = node.pod_ips
            pod_ip = f"10.{244 + (node.index >> 8) % 12}.{node.index & 0xFF}.{(n % 250) + 2}"
        containers = [
            {
                "name": c.get("name"),
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": "containerd://"
                + hashlib.sha256(f"{md.get('uid')}/{c.get('name')}".encode()).hexdigest(),
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for c in spec.get("containers") or []
        ]
        conditions = [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
            for t in (
                "PodReadyToStartContainers",
                "Initialized",
                "ContainersReady",
                "Ready",
                "PodScheduled",
            )
        ]
        body = {
            "status": {
                "phase": "Running",
                "conditions": conditions,
                "containerStatuses": containers,
                "hostIP": node.ip,
                "hostIPs": [{"ip": node.ip}],
                "podIP": pod_ip,
                "podIPs": [{"ip": pod_ip}],
                "startTime": now,
                "qosClass": (pod.get("status") or {}).get("qosClass") or "BestEffort",
            }
        }
        try:
            call(
                self.core.patch_namespaced_pod_status,
                md.get("name", ""),
                md.get("namespace", ""),
                body,
                _content_type="application/strategic-merge-patch+json",
            )
        except client.ApiException as exc:
            log.debug("starting pod %s/%s: %s", md.get("namespace"), md.get("name"), exc.status)
