"""Machines that join Kubernetes' own control plane as `kubeadm join` and the kubelet do.

`JoiningKubelets` boots the clouds `Kubelets` reads (sim/kubelet.py), and for
each running VM does, with nothing but what the VM's user data carries:

1. **Discovery** (kubeadm's token discovery): read `kube-public/cluster-info` anonymously from
   the JoinConfiguration's `apiServerEndpoint`, without trusting its certificate yet; check the
   bootstrap signer's JWS for the token (`jws-kubeconfig-<token id>`: only a holder of the token
   can have it signed) and the CA against the `caCertHashes` pin.
2. **TLS bootstrap**, authenticated by the API server with the VM's own bootstrap token: a
   kubeadm join's reads (the `kubeadm-config` and `kubelet-config` ConfigMaps, whether a Ready
   Node has its name), then a CSR for `system:node:<name>` in `system:nodes` (signer
   `kubernetes.io/kube-apiserver-client-kubelet`), approved and signed by the controller-manager
   (or whichever approver the cluster runs).
3. **Registration** as `system:node:<name>` with that certificate, so NodeRestriction judges the
   Node: real capacity and allocatable, the providerID, the JoinConfiguration's labels and taints.

After `ready_delay_s` the Node gets `MANAGED_LABEL` and KWOK takes it over (its Lease, Ready, the
pods bound there); when the VM is gone the label goes, KWOK lets the Lease lapse and the node
lifecycle controller marks the Node `Ready=Unknown` and taints it, as for a machine that died.
A join that fails is retried and its reason kept in `join_failures`, as with `Kubelets`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client

from sim.clouds.base import BootableCloud
from sim.controlplane.cluster import MANAGED_LABEL, kubeconfig_document
from sim.kubelet import (
    TOKEN_RE,
    JoinConfig,
    JoinError,
    Kubelets,
    _Joined,
    ca_cert_hash,
    call,
    check_node_labels,
    parse_join_config,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]
KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
# How long a join waits for the bootstrap signer's JWS and for its CSR's certificate (kubeadm's
# discovery and TLS bootstrap retry for minutes; the tick retries a failed join after that).
DISCOVERY_WAIT_S = 15.0
CSR_WAIT_S = 30.0
JOIN_THREADS = 8


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def verify_cluster_info_jws(kubeconfig: str, jws: str, token_id: str, token_secret: str) -> None:
    """The bootstrap signer's detached JWS (HS256, key: the token secret) over cluster-info's
    kubeconfig, as kubeadm checks it (`k8s.io/cluster-bootstrap/token/jws`)."""
    header_b64, _, signature_b64 = jws.partition("..")
    if not header_b64 or not signature_b64:
        raise JoinError("cluster-info's JWS is not a detached compact JWS")
    try:
        header = json.loads(base64.urlsafe_b64decode(header_b64 + "=" * (-len(header_b64) % 4)))
    except (ValueError, binascii.Error) as exc:
        raise JoinError("cluster-info's JWS header is unreadable") from exc
    if header.get("alg") != "HS256" or header.get("kid") != token_id:
        raise JoinError(f"cluster-info's JWS header {header} is not HS256 for token {token_id}")
    signing_input = f"{header_b64}.{_b64url(kubeconfig.encode())}".encode()
    expected = _b64url(hmac.new(token_secret.encode(), signing_input, hashlib.sha256).digest())
    if not hmac.compare_digest(expected, signature_b64):
        raise JoinError("cluster-info's JWS does not verify with this bootstrap token")


def kubelet_csr(node_name: str) -> tuple[bytes, bytes]:
    """A kubelet client certificate request for `node_name`: (CSR PEM, private key PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                    x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}"),
                ]
            )
        )
        .sign(key, hashes.SHA256())
    )
    return (
        request.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


class JoiningKubelets(Kubelets):
    """`Kubelets` for Kubernetes' own control plane: joins through bootstrap tokens and CSRs,
    KWOK for leases and pods. `api_client` is an administrator's (it plays the machine's
    agents: KWOK's label, the spot-notice taint)."""

    def __init__(
        self,
        *args: Any,
        api_server: str,
        work_dir: Path,
        loopback_prefix: str = "127.64",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        # host:port of the control plane. A VM's JoinConfiguration names the address it reaches
        # the API server at on its own network (a tailnet or private address); here every
        # machine's network leads to this loopback address, and no other is ever dialled.
        self.api_server = api_server
        self.work_dir = work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        self.loopback_prefix = loopback_prefix
        self._pool = ThreadPoolExecutor(JOIN_THREADS, thread_name_prefix="kubeadm-join")
        self._joining: set[str] = set()
        self._join_lock = threading.Lock()
        # node name -> the kubeconfig of its kubelet identity (tests act as that node with it).
        self.node_kubeconfigs: dict[str, Path] = {}

    def stop(self) -> None:
        super().stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- joining ---------------------------------------------------------------------------

    def _join_all(self, instance_ids: list[str], now: float) -> None:
        for iid in instance_ids:
            with self._join_lock:
                if iid in self._joining:
                    continue
                self._joining.add(iid)
            self._pool.submit(self._join_one, iid, now)

    def _join_one(self, iid: str, now: float) -> None:
        try:
            cloud, native = self._where[iid]
            detail = cloud.peek(native)
            if detail is None:
                return
            user_data = str(detail.get("user_data") or "")
            config = parse_join_config(user_data)
            check_node_labels(config.node_labels)
            tailnet_ip = self._join_tailnet(iid, user_data, config.node_name)
            self._kubeadm_join(iid, cloud, native, detail, config, now, tailnet_ip)
            self.join_failures.pop(iid, None)
        except JoinError as exc:
            self._join_failed(iid, str(exc), time.monotonic())
        except client.ApiException as exc:
            self._join_failed(iid, f"API error {exc.status}: {exc.reason}", time.monotonic())
        except Exception as exc:  # a join never takes the kubelets' thread down
            log.exception("joining %s failed", iid)
            self._join_failed(iid, f"{type(exc).__name__}: {exc}", time.monotonic())
        finally:
            with self._join_lock:
                self._joining.discard(iid)

    def _kubeadm_join(
        self,
        iid: str,
        cloud: BootableCloud,
        native: str,
        detail: Obj,
        config: JoinConfig,
        now: float,
        tailnet_ip: str | None,
    ) -> None:
        match = TOKEN_RE.match(config.token)
        if match is None:
            raise JoinError("bootstrap token is malformed (want [a-z0-9]{6}.[a-z0-9]{16})")
        token_id, token_secret = match.groups()
        server, ca_pem = self._discover(config, token_id, token_secret)
        with self._client(server, ca_pem, token=config.token) as bootstrap:
            self._kubeadm_preflight(bootstrap, config.node_name)
            cert_pem, key_pem = self._tls_bootstrap(bootstrap, config.node_name)
        kubeconfig = self._node_kubeconfig(config.node_name, server, ca_pem, cert_pem, key_pem)
        node, ip = self._node_manifest(cloud, native, detail, config, tailnet_ip)
        if not (tailnet_ip or config.node_ip):
            with self._lock:
                n = next(self._indexes)
            ip = f"{self.loopback_prefix}.{(n >> 8) & 0xFF}.{n & 0xFF}"
            node["status"]["addresses"][0]["address"] = ip
        with self._client_from(kubeconfig) as as_node:
            core = client.CoreV1Api(as_node)
            try:
                created = call(core.create_node, node)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise JoinError(
                        f"registering Node {config.node_name} as system:node:{config.node_name}: "
                        f"{exc.status} {_message(exc)}"
                    ) from exc
                created = call(core.read_node, config.node_name)
                if (created.get("spec") or {}).get("providerID") != node["spec"]["providerID"]:
                    raise JoinError(
                        f"a Node named {config.node_name} exists with another providerID"
                    ) from exc
        with self._lock:
            self.node_kubeconfigs[config.node_name] = kubeconfig
            self.joined[iid] = _Joined(
                iid,
                config.node_name,
                ip,
                time.monotonic(),
                next(self._indexes),
                node_uid=str((created.get("metadata") or {}).get("uid") or ""),
            )
        log.info("instance %s joined as node %s", iid, config.node_name)

    def _discover(self, config: JoinConfig, token_id: str, token_secret: str) -> tuple[str, str]:
        """Token discovery: (the API server's URL, its CA) from cluster-info, once verified."""
        if not config.api_server_endpoint:
            raise JoinError(
                "the JoinConfiguration has no discovery.bootstrapToken.apiServerEndpoint"
            )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        url = f"https://{self.api_server}/api/v1/namespaces/kube-public/configmaps/cluster-info"
        deadline = time.monotonic() + DISCOVERY_WAIT_S
        while True:
            try:
                with urllib.request.urlopen(url, context=insecure, timeout=5) as answer:
                    data = json.loads(answer.read()).get("data") or {}
            except (urllib.error.URLError, OSError, ValueError) as exc:
                raise JoinError(
                    f"discovery at {config.api_server_endpoint} ({self.api_server}) failed: {exc}"
                ) from exc
            jws = data.get(f"jws-kubeconfig-{token_id}")
            if jws:
                break
            if time.monotonic() > deadline:
                raise JoinError(
                    f"cluster-info has no JWS for token {token_id} (unknown token, or one "
                    "without usage-bootstrap-signing)"
                )
            time.sleep(0.2)
        kubeconfig = str(data.get("kubeconfig") or "")
        verify_cluster_info_jws(kubeconfig, str(jws), token_id, token_secret)
        try:
            cluster = yaml.safe_load(kubeconfig)["clusters"][0]["cluster"]
            ca_pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
        except (KeyError, IndexError, TypeError, ValueError, yaml.YAMLError) as exc:
            raise JoinError("cluster-info's kubeconfig has no cluster with a CA") from exc
        pins = [h.lower() for h in config.ca_cert_hashes]
        if not pins and not config.unsafe_skip_ca_verification:
            raise JoinError("no caCertHashes and unsafeSkipCAVerification is not set")
        if pins and ca_cert_hash(ca_pem.encode()) not in pins:
            raise JoinError("cluster CA public key does not match any caCertHashes pin")
        # kubeadm goes on at cluster-info's `server`; here that is this control plane, which is
        # the one address a machine dials.
        return f"https://{self.api_server}", ca_pem

    def _kubeadm_preflight(self, bootstrap: client.ApiClient, node_name: str) -> None:
        """What `kubeadm join` reads with the token before the kubelet starts."""
        core = client.CoreV1Api(bootstrap)
        try:
            for config_map in ("kubeadm-config", "kubelet-config"):
                call(core.read_namespaced_config_map, config_map, "kube-system")
            node = call(core.read_node, node_name)
        except client.ApiException as exc:
            if exc.status == 401:
                raise JoinError("the API server refused the bootstrap token (401)") from exc
            if exc.status != 404:
                raise JoinError(f"kubeadm join's reads: {exc.status} {_message(exc)}") from exc
            return
        ready = next(
            (
                c
                for c in (node.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready"
            ),
            None,
        )
        if ready is not None and ready.get("status") == "True":
            raise JoinError(f"a Node with name {node_name!r} and status Ready already exists")

    def _tls_bootstrap(self, bootstrap: client.ApiClient, node_name: str) -> tuple[bytes, bytes]:
        request_pem, key_pem = kubelet_csr(node_name)
        certificates = client.CertificatesV1Api(bootstrap)
        name = f"node-csr-{secrets.token_hex(8)}"
        body = {
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {
                "request": base64.b64encode(request_pem).decode(),
                "signerName": KUBELET_CLIENT_SIGNER,
                "usages": ["digital signature", "client auth"],
            },
        }
        try:
            call(certificates.create_certificate_signing_request, body)
        except client.ApiException as exc:
            raise JoinError(f"creating CSR {name}: {exc.status} {_message(exc)}") from exc
        deadline = time.monotonic() + CSR_WAIT_S
        while time.monotonic() < deadline:
            csr = call(certificates.read_certificate_signing_request, name)
            status = csr.get("status") or {}
            for condition in status.get("conditions") or []:
                if condition.get("type") in ("Denied", "Failed"):
                    raise JoinError(
                        f"CSR {name} {condition['type']}: {condition.get('message') or condition.get('reason')}"
                    )
            if status.get("certificate"):
                return base64.b64decode(status["certificate"]), key_pem
            time.sleep(0.1)
        raise JoinError(
            f"CSR {name} for system:node:{node_name} got no certificate in {CSR_WAIT_S:.0f} s"
        )

    # ---- clients ---------------------------------------------------------------------------

    def _client(self, server: str, ca_pem: str, *, token: str) -> client.ApiClient:
        configuration = client.Configuration(host=server)
        configuration.ssl_ca_cert = self._ca_file(ca_pem)
        configuration.api_key = {"authorization": f"Bearer {token}"}
        return client.ApiClient(configuration)

    def _client_from(self, kubeconfig: Path) -> client.ApiClient:
        from kubernetes import config

        configuration = client.Configuration()
        config.load_kube_config(str(kubeconfig), client_configuration=configuration)
        return client.ApiClient(configuration)

    def _ca_file(self, ca_pem: str) -> str:
        path = self.work_dir / f"ca-{hashlib.sha256(ca_pem.encode()).hexdigest()[:12]}.crt"
        if not path.exists():
            with tempfile.NamedTemporaryFile("w", dir=self.work_dir, delete=False) as out:
                out.write(ca_pem)
            Path(out.name).replace(path)
        return str(path)

    def _node_kubeconfig(
        self, node_name: str, server: str, ca_pem: str, cert_pem: bytes, key_pem: bytes
    ) -> Path:
        """The kubelet's kubeconfig (/etc/kubernetes/kubelet.conf on a real machine)."""
        document = kubeconfig_document(
            server, ca_pem, cert_pem, key_pem, context=f"system:node:{node_name}"
        )
        path = self.work_dir / f"{node_name}-{secrets.token_hex(4)}.kubeconfig"
        path.write_text(yaml.safe_dump(document))
        path.chmod(0o600)
        return path

    # ---- what KWOK and the node lifecycle controller do here -------------------------------

    def _set_ready(self, j: _Joined) -> None:
        """The kubelet is up: KWOK takes the Node over (Ready, its Lease, its pods)."""
        if self._set_managed(j, "true"):
            j.ready = True

    def _lose(self, j: _Joined) -> None:
        """The VM is gone: KWOK lets go of the Node; its Lease lapses and the node lifecycle
        controller marks it Ready=Unknown and taints it."""
        j.lost = True
        tailnet_node = self._tailnet_nodes.get(j.instance_id)
        if self.tailnet is not None and tailnet_node is not None:
            self.tailnet.set_online(tailnet_node[0], False)
        self._set_managed(j, None)
        log.info("node %s lost its VM %s", j.node_name, j.instance_id)

    def _set_managed(self, j: _Joined, value: str | None) -> bool:
        try:
            call(
                self.core.patch_node,
                j.node_name,
                {"metadata": {"labels": {MANAGED_LABEL: value}}},
                _content_type="application/merge-patch+json",
            )
        except client.ApiException as exc:
            if exc.status == 404:
                log.info("node %s was deleted; its kubelet stops", j.node_name)
                j.lost = True
                return False
            raise
        return True


def _message(exc: client.ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)
