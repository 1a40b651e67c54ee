"""Kubernetes' own control plane on this machine: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK, one process each, on 127.0.0.1 and free ports.

    plane = KubernetesControlPlane()
    plane.start()                  # builds the binaries on first use (binaries.py)
    plane.url                      # "https://127.0.0.1:PORT"
    plane.write_kubeconfig(path)   # cluster-admin's client certificate, the cluster CA
    plane.api_client()             # a kubernetes.client.ApiClient as cluster-admin
    plane.stop()

Configured as Cloudburst's docs ask of a cluster (docs/security.md): `Node,RBAC` authorization,
bootstrap-token authentication, the NodeRestriction, PodNodeSelector and
PodTolerationRestriction admission plugins beside the defaults; the controller-manager with
every default controller plus the bootstrap signer and token cleaner, its CSR signer on the
cluster CA and its approver; what `kubeadm init` adds for joins (kubeadm_init.py); Cloudburst's
CRDs and install namespace. Machines join as kubelets do (joining.py); KWOK keeps the Nodes
it is told to manage (the label `MANAGED_LABEL`): their Lease and their pods, with the stages
`node-initialize`, `node-heartbeat-with-lease` and `pod-ready/complete/delete` (pod-ready
with one fix: stages/pod-ready.yaml). Node and pod
addresses are in 127.0.0.0/8.

The node lifecycle controller's grace period is `node_monitor_grace_s` (20 s here, 50 s by
default in Kubernetes) and KWOK's leases last `node_lease_duration_s` (20 s, renewed every
quarter of it, as the kubelet does): a machine that disappears is `Ready=Unknown` within about
20 s, and a KWOK starved of the CPU for less than 15 s loses no node.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sim.controlplane.binaries import control_plane_binaries, release
from sim.controlplane.kubeadm_init import kubeadm_init_objects
from sim.controlplane.pki import ClientIdentity, ClusterPki

log = logging.getLogger(__name__)

CONTEXT = "cloudburst-kubernetes"
# The label by which KWOK manages a Node (joining.py sets it once the machine's kubelet would be up).
MANAGED_LABEL = "kwok.sim.cloudburst.dev/managed"
SERVICE_CIDR = "127.96.0.0/16"
POD_CIDR = "127.128.0.0/10"
ADMISSION_PLUGINS = ("NodeRestriction", "PodNodeSelector", "PodTolerationRestriction")
START_TIMEOUT_S = 90.0
# What a component gets to end on SIGTERM before it is killed (a test cluster keeps no state).
STOP_GRACE_S = 3.0
# Set: a stopped control plane's directory (its components' logs, the audit log) is kept.
KEEP_LOGS = "CLOUDBURST_KEEP_CONTROL_PLANE_LOGS"
# The CRDs as shipped (deploy/base/crds, which sim/controlplane/crds links to).
CRDS = Path(__file__).resolve().parent / "crds"
# Cloudburst's access for a claim's join token, and its CSR approver's (deploy/base).
ACCESS_MANIFESTS = tuple(
    Path(__file__).resolve().parent / name for name in ("join.yaml", "csr-approver.yaml")
)
RBAC_KINDS = frozenset({"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})
CSR_APPROVER_USER = "system:serviceaccount:cloudburst-system:cloudburst-csr-approver"
CERTIFICATE_LIFETIME = "24h"
CERTIFICATE_LIFETIME_S = 24 * 3600
# How often the approver judges pending requests again, besides watching them.
APPROVER_RESYNC_S = 2.0
# KWOK stages of our own (pod-ready: KWOK's, fixed), beside those the build copies from KWOK.
OUR_STAGES = Path(__file__).resolve().parent / "stages"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass(frozen=True)
class AuditRecord:
    """One resource request, as the API server's audit log (and RBAC) sees it."""

    seq: int  # 1, 2, ...: its place in the log
    verb: str  # get, list, watch, create, update, patch, delete, deletecollection
    group: str  # "" for the core group
    resource: str  # plural, with "/subresource" when there is one
    namespace: str | None  # None: all namespaces, or a cluster-scoped resource
    name: str
    user: str = ""  # who asked


class ControlPlaneError(RuntimeError):
    """A component did not start (with the end of its log)."""


def kubeconfig_document(
    server: str, ca_pem: str, cert_pem: bytes, key_pem: bytes, *, context: str = CONTEXT
) -> dict[str, Any]:
    """A kubeconfig of one cluster and one client certificate, all its material inline."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode(),
                },
            }
        ],
        "users": [
            {
                "name": context,
                "user": {
                    "client-certificate-data": base64.b64encode(cert_pem).decode(),
                    "client-key-data": base64.b64encode(key_pem).decode(),
                },
            }
        ],
        "contexts": [
            {
                "name": context,
                "context": {"cluster": context, "user": context, "namespace": "default"},
            }
        ],
        "current-context": context,
        "preferences": {},
    }


def cloudburst_access_objects() -> list[dict[str, Any]]:
    """The RBAC objects of ACCESS_MANIFESTS (not the approver's Deployment: it runs here as a
    thread of the test process, `_start_csr_approver`), each named `sim:<name>` and bound to
    its `sim:` role: the same rights, under names no install of Cloudburst (`helm install`,
    `kubectl apply -k deploy/base`) finds taken."""
    documents = [
        document
        for path in ACCESS_MANIFESTS
        for document in yaml.safe_load_all(path.read_text())
        if document and document.get("kind") in RBAC_KINDS
    ]
    # Roles of these manifests are renamed; a binding to one of Kubernetes' own keeps it.
    ours = {d["metadata"]["name"] for d in documents if d["kind"] in ("Role", "ClusterRole")}
    for document in documents:
        metadata = document["metadata"]
        document["metadata"] = {
            key: value for key, value in metadata.items() if key in ("name", "namespace")
        }
        document["metadata"]["name"] = f"sim:{metadata['name']}"
        ref = document.get("roleRef")
        if ref is not None and ref["name"] in ours:
            ref["name"] = f"sim:{ref['name']}"
    return documents


class KubernetesControlPlane:
    """Start with `.start()` (or `with KubernetesControlPlane() as plane:`); `.stop()` ends it."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        node_monitor_grace_s: int = 20,
        node_lease_duration_s: int = 20,
        disable_admission_plugins: Iterable[str] = (),
        work_dir: Path | None = None,
        install_namespaces: Iterable[str] = (),
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.node_monitor_grace_s = node_monitor_grace_s
        self.node_lease_duration_s = node_lease_duration_s
        self.disable_admission_plugins = tuple(disable_admission_plugins)
        self.install_namespaces = tuple(install_namespaces)
        self._own_work_dir = work_dir is None
        # etcd's data on tmpfs where there is one: the test cluster's state need not outlive it.
        shm = Path("/dev/shm")
        self.work_dir = work_dir or Path(
            tempfile.mkdtemp(prefix="cloudburst-kube-", dir=shm if shm.is_dir() else None)
        )
        self._processes: list[_Process] = []
        self._admin_client: Any = None
        self.binaries: Path | None = None
        self.release = ""
        self.pki: ClusterPki | None = None
        self._approver: Any = None
        self._approver_client: Any = None

    # ---- what clients see ------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def ca_cert_pem(self) -> str:
        assert self.pki is not None, "start() first"
        return self.pki.ca_pem

    @property
    def admin_kubeconfig(self) -> Path:
        return self.work_dir / "admin.kubeconfig"

    @property
    def kubectl(self) -> Path:
        assert self.binaries is not None, "start() first"
        return self.binaries / "kubectl"

    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write cluster-admin's kubeconfig (context `cloudburst-kubernetes`) to `path`."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        partial.write_text(self.admin_kubeconfig.read_text())
        partial.chmod(0o600)
        partial.replace(target)
        return target

    def api_client(self) -> Any:
        """A `kubernetes.client.ApiClient` as cluster-admin."""
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(str(self.admin_kubeconfig), client_configuration=configuration)
        return client.ApiClient(configuration)

    def write_identity_kubeconfig(self, name: str, identity: ClientIdentity) -> Path:
        """A kubeconfig with a client certificate for `identity` (user and groups)."""
        assert self.pki is not None, "start() first"
        cert, key = self.pki.client_certificate(name, identity)
        path = self.work_dir / f"{name}.kubeconfig"
        path.write_text(
            yaml.safe_dump(
                kubeconfig_document(self.url, self.pki.ca_pem, cert.read_bytes(), key.read_bytes())
            )
        )
        path.chmod(0o600)
        return path

    # ---- life ------------------------------------------------------------------------------

    def start(self) -> KubernetesControlPlane:
        if self._processes:
            return self
        self.binaries = control_plane_binaries()
        self.release = release(self.binaries)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        assert self.binaries is not None
        self.pki = pki = ClusterPki(self.work_dir / "pki", self.host)
        # admin.kubeconfig: kubeadm's cluster-admin, in system:masters.
        self.write_identity_kubeconfig(
            "admin", ClientIdentity("kubernetes-admin", ("system:masters",))
        )
        etcd_port, etcd_peer = free_port(self.host), free_port(self.host)
        etcd_url = f"http://{self.host}:{etcd_port}"
        peer_url = f"http://{self.host}:{etcd_peer}"
        self._spawn(
            "etcd",
            [
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", lambda: _http_ok(f"{etcd_url}/health", None), START_TIMEOUT_S)
        disabled = [p for p in ADMISSION_PLUGINS if p in self.disable_admission_plugins]
        enabled = [p for p in ADMISSION_PLUGINS if p not in disabled]
        api_args = [
            f"--etcd-servers={etcd_url}",
            f"--bind-address={self.host}",
            f"--advertise-address={self.host}",
            # The `kubernetes` Service's endpoint would be this loopback address, which the
            # Endpoints API refuses; no pod here reaches the API server through the Service.
            "--endpoint-reconciler-type=none",
            f"--secure-port={self.port}",
            f"--tls-cert-file={pki.serving_cert_file}",
            f"--tls-private-key-file={pki.serving_key_file}",
            f"--client-ca-file={pki.ca_cert_file}",
            f"--cert-dir={self.work_dir / 'apiserver-certs'}",
            "--authorization-mode=Node,RBAC",
            "--enable-bootstrap-token-auth=true",
            f"--enable-admission-plugins={','.join(enabled)}",
            f"--service-account-issuer={self.url}",
            f"--service-account-key-file={pki.service_account_public_file}",
            f"--service-account-signing-key-file={pki.service_account_key_file}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--profiling=false",
            f"--audit-policy-file={self._write_audit_policy()}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--v=0",
        ]
        if self.disable_admission_plugins:
            api_args.append(
                f"--disable-admission-plugins={','.join(self.disable_admission_plugins)}"
            )
        self._spawn("kube-apiserver", api_args)
        self._wait("kube-apiserver", lambda: self._api_ok("/readyz"), START_TIMEOUT_S)
        kcm = self.write_identity_kubeconfig(
            "kube-controller-manager", ClientIdentity("system:kube-controller-manager")
        )
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kcm}",
                f"--authentication-kubeconfig={kcm}",
                f"--authorization-kubeconfig={kcm}",
                f"--bind-address={self.host}",
                f"--secure-port={free_port(self.host)}",
                "--leader-elect=false",
                "--controllers=*,bootstrap-signer-controller,token-cleaner-controller",
                f"--cluster-signing-cert-file={pki.ca_cert_file}",
                f"--cluster-signing-key-file={pki.ca_key_file}",
                # The kubelet certificates' lifetime, as docs/security.md advises: a node whose
                # claim ended cannot renew (the CSR approver refuses) and is out within a day.
                f"--cluster-signing-duration={CERTIFICATE_LIFETIME}",
                f"--root-ca-file={pki.ca_cert_file}",
                f"--service-account-private-key-file={pki.service_account_key_file}",
                "--use-service-account-credentials=true",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--node-monitor-period=1s",
                f"--node-monitor-grace-period={self.node_monitor_grace_s}s",
                "--profiling=false",
            ],
        )
        scheduler = self.write_identity_kubeconfig(
            "kube-scheduler", ClientIdentity("system:kube-scheduler")
        )
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={scheduler}",
                f"--authentication-kubeconfig={scheduler}",
                f"--authorization-kubeconfig={scheduler}",
                f"--bind-address={self.host}",
                f"--secure-port={free_port(self.host)}",
                "--leader-elect=false",
                "--profiling=false",
            ],
        )
        self._apply(
            [
                *kubeadm_init_objects(self.url, pki.ca_pem, self.release),
                # KWOK plays every machine's kubelet at once: no one node's identity fits it.
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": "sim:kwok"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "cluster-admin",
                    },
                    "subjects": [
                        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kwok"}
                    ],
                },
                *(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                    for name in self.install_namespaces
                ),
                # Cloudburst's join access and its CSR approver's RBAC (deploy/base), as an
                # operator installs them; kubeadm's blanket approval is not bound (kubeadm_init).
                *cloudburst_access_objects(),
            ]
        )
        crds = [
            arg
            for path in sorted(CRDS.glob("*.yaml"))
            if path.name != "kustomization.yaml"
            for arg in ("-f", str(path))
        ]
        self._kubectl("apply", "--server-side", *crds)
        kwok = self.write_identity_kubeconfig("kwok", ClientIdentity("kwok"))
        stages = sorted((self.binaries / "kwok-stages").glob("*.yaml")) + sorted(
            OUR_STAGES.glob("*.yaml")
        )
        self._spawn(
            "kwok",
            [
                f"--kubeconfig={kwok}",
                f"--manage-nodes-with-label-selector={MANAGED_LABEL}=true",
                f"--node-lease-duration-seconds={self.node_lease_duration_s}",
                f"--cidr={POD_CIDR}",
                f"--node-ip={self.host}",
                f"--server-address={self.host}:{free_port(self.host)}",
                *(f"--config={stage}" for stage in stages),
            ],
        )
        self._kubectl("wait", "--for=condition=Established", "--timeout=60s", *crds)
        for namespace in ("default", *self.install_namespaces):
            self._wait_for_service_account(namespace)
        for process in self._processes:
            if not process.alive():
                raise ControlPlaneError(f"{process.name} exited:\n{process.tail()}")
        self._start_csr_approver()

    @property
    def approver_api_client(self) -> Any:
        """A client with the CSR approver's ServiceAccount's rights (deploy/base)."""
        assert self._approver_client is not None, "start() first"
        return self._approver_client

    def _start_csr_approver(self) -> None:
        """Cloudburst's CSR approver, with its ServiceAccount's rights (deploy/base): the only
        approver of a claim's kubelet certificates here, as in a cluster set up as
        docs/security.md says."""
        from kubernetes import client, config

        from approver.csr import CsrApprover
        from approver.main import running

        kubeconfig = self.write_identity_kubeconfig(
            "csr-approver", ClientIdentity(CSR_APPROVER_USER)
        )
        configuration = client.Configuration()
        config.load_kube_config(str(kubeconfig), client_configuration=configuration)
        self._approver_client = client.ApiClient(configuration)
        approver = CsrApprover(
            self._approver_client,
            max_expiration_seconds=CERTIFICATE_LIFETIME_S,
            resync_s=APPROVER_RESYNC_S,
        )
        self._approver = running([approver], stop_within_s=APPROVER_RESYNC_S + 2)
        self._approver.__enter__()

    def stop(self) -> None:
        if self._approver is not None:
            self._approver.__exit__(None, None, None)
            self._approver = None
        for process in reversed(self._processes):
            if process.alive():
                process.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for process in reversed(self._processes):
            try:
                process.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait(5)
        self._processes = []
        if self._admin_client is not None:
            self._admin_client.close()
            self._admin_client = None
        if self._own_work_dir and not os.environ.get(KEEP_LOGS):
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> KubernetesControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- cluster chores --------------------------------------------------------------------

    def ensure_namespace(self, name: str) -> None:
        """Create a namespace (if missing) and wait for its `default` ServiceAccount, without
        which the ServiceAccount admission plugin refuses every pod in it."""
        self._apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])
        self._wait_for_service_account(name)

    @property
    def audit_log(self) -> Path:
        return self.work_dir / "audit.log"

    def _write_audit_policy(self) -> Path:
        path = self.work_dir / "audit-policy.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [{"level": "Metadata"}],
                }
            )
        )
        return path

    def audit_mark(self) -> int:
        """Where the audit log is now: pass it to `audit(after=...)` later."""
        try:
            return self.audit_log.stat().st_size
        except FileNotFoundError:
            return 0

    def audit(self, after: int = 0) -> list[AuditRecord]:
        """The resource requests the API server logged since `after` (a mark), oldest first."""
        records: list[AuditRecord] = []
        with open(self.audit_log, "rb") as log_file:
            log_file.seek(after)
            for offset, line in enumerate(log_file.read().splitlines(), start=after + 1):
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # the line being written
                ref = event.get("objectRef") or {}
                if not ref.get("resource"):
                    continue
                resource = ref["resource"] + (
                    f"/{ref['subresource']}" if ref.get("subresource") else ""
                )
                records.append(
                    AuditRecord(
                        seq=offset,
                        verb=str(event.get("verb") or ""),
                        group=str(ref.get("apiGroup") or ""),
                        resource=resource,
                        namespace=ref.get("namespace"),
                        name=str(ref.get("name") or ""),
                        user=str((event.get("user") or {}).get("username") or ""),
                    )
                )
        return records

    def version(self) -> dict[str, Any]:
        """The server's `/version` (gitVersion is the release its binaries were built from)."""
        return dict(json.loads(self._api_get("/version")))

    def logs(self) -> dict[str, Path]:
        return {process.name: process.log_path for process in self._processes}

    # ---- internals -------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> None:
        assert self.binaries is not None
        log_path = self.work_dir / f"{name}.log"
        with open(log_path, "wb") as out:
            popen = subprocess.Popen(
                [str(self.binaries / name), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                # Go's runtime on a shared 2-core machine: no more threads than cores.
                env={**os.environ, "GOMAXPROCS": os.environ.get("GOMAXPROCS", "2")},
            )
        self._processes.append(_Process(name, popen, log_path))

    def _wait(self, name: str, ready: Any, timeout_s: float) -> None:
        process = next(p for p in self._processes if p.name == name)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not process.alive():
                raise ControlPlaneError(f"{name} exited:\n{process.tail()}")
            if ready():
                return
            time.sleep(0.1)
        raise ControlPlaneError(f"{name} not ready after {timeout_s:.0f} s:\n{process.tail()}")

    def _tls(self) -> ssl.SSLContext:
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert_file))
        context.load_cert_chain(
            str(self.work_dir / "pki" / "admin.crt"), str(self.work_dir / "pki" / "admin.key")
        )
        return context

    def _api_get(self, path: str) -> str:
        with urllib.request.urlopen(f"{self.url}{path}", context=self._tls(), timeout=5) as answer:
            return str(answer.read().decode())

    def _api_ok(self, path: str) -> bool:
        try:
            self._api_get(path)
        except (urllib.error.URLError, OSError):
            return False
        return True

    def _kubectl(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.kubectl), f"--kubeconfig={self.admin_kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def _apply(self, objects: list[dict[str, Any]]) -> None:
        manifest = self.work_dir / "apply.yaml"
        manifest.write_text(yaml.safe_dump_all(objects))
        self._kubectl("apply", "--server-side", "-f", str(manifest))

    def _wait_for_service_account(self, namespace: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self._api_get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
                return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise ControlPlaneError(
            f"no default ServiceAccount in {namespace} after 60 s (is kube-controller-manager "
            "running?)"
        )


def _http_ok(url: str, context: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, context=context, timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False
