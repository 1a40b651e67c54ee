"""A standin's VM joins Kubernetes' own control plane: user data written independently of the
product's bootstrap script, and the machines (JoiningKubelets) that run it."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import string
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client

from activities.bootstrap import JOIN_GROUP
from cluster.certificates import claim_token_group
from sim.cloud import FakeCloud
from sim.clouds.base import BootableCloud
from sim.controlplane.cluster import KubernetesControlPlane
from sim.controlplane.joining import JoiningKubelets
from tests.activities.claims import authorise_claim

# A join (discovery, the CSR signed, the Node registered) and KWOK's Ready on the real control
# plane: seconds, more on a loaded machine.
JOIN_S = 60.0


def wait_for(fn: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting; last value {value!r}")
        time.sleep(0.05)


def raw(fn: Callable[..., Any], *args: Any, **kw: Any) -> dict[str, Any]:
    return dict(json.loads(fn(*args, _preload_content=False, **kw).data))


def read_node(core: client.CoreV1Api, name: str) -> dict[str, Any] | None:
    try:
        return raw(core.read_node, name)
    except client.ApiException:
        return None


def join_user_data(core: client.CoreV1Api, node: str, namespace: str = "default") -> str:
    """User data that joins as `node` (what the product's bootstrap script carries, written
    independently): a bootstrap token of its own and the pin of the CA cluster-info shows.
    The token is a claim's (Cloudburst's join group and the claim's own), and the NodeClaim
    `namespace/node` exists: the cluster's CSR approver approves a claim's join only."""
    authorise_claim(core.api_client, namespace, node)
    alphabet = string.ascii_lowercase + string.digits
    token_id = "".join(secrets.choice(alphabet) for _ in range(6))
    token_secret = "".join(secrets.choice(alphabet) for _ in range(16))
    expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    data = {
        "token-id": token_id,
        "token-secret": token_secret,
        "expiration": expires,
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",
        "auth-extra-groups": f"{JOIN_GROUP},{claim_token_group(namespace, node)}",
    }
    core.create_namespaced_secret(
        "kube-system",
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=f"bootstrap-token-{token_id}"),
            type="bootstrap.kubernetes.io/token",
            data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        ),
    )
    info = raw(core.read_namespaced_config_map, "cluster-info", "kube-public")
    kubeconfig = yaml.safe_load(info["data"]["kubeconfig"])
    ca = base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"])
    spki = (
        x509.load_pem_x509_certificate(ca)
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return f"""#!/bin/bash
set -euo pipefail
mkdir -p /etc/kubernetes
cat > /etc/kubernetes/kubeadm-join.yaml <<'CLOUDBURST_JOIN_CONFIG'
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "100.64.0.1:6443"
    token: "{token_id}.{token_secret}"
    caCertHashes: ["sha256:{hashlib.sha256(spki).hexdigest()}"]
nodeRegistration:
  name: "{node}"
  taints: [{{key: "cloudburst.io/burst", value: "true", effect: "NoSchedule"}}]
  kubeletExtraArgs:
    - {{name: node-labels, value: "cloudburst.io/nodepool=burst,team=a"}}
CLOUDBURST_JOIN_CONFIG
kubeadm join --config /etc/kubernetes/kubeadm-join.yaml
"""


@contextmanager
def joining_machines(
    plane: KubernetesControlPlane,
    clouds: Sequence[FakeCloud | BootableCloud],
    work_dir: Path,
    nodes: Sequence[str],
    ready_delay_s: float = 0.2,
) -> Iterator[tuple[client.CoreV1Api, JoiningKubelets]]:
    """Machines that join `plane` from `clouds`; the Nodes named in `nodes` are deleted after."""
    api = plane.api_client()
    core = client.CoreV1Api(api)
    kubelets = JoiningKubelets(
        api,
        list(clouds),
        ready_delay_s=ready_delay_s,
        poll_s=0.05,
        api_server=plane.url.removeprefix("https://"),
        work_dir=work_dir,
    )
    kubelets.start()
    try:
        yield core, kubelets
    finally:
        kubelets.stop()
        for name in nodes:
            try:
                core.delete_node(name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
        api.close()
