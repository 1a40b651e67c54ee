"""Simulated kubelets: join verification, Node registration, readiness, lost VMs, pods."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import string
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client

from activities.providers.base import InstanceSpec
from activities.providers.fake import FakeProvider
from api.nodeclass import FakeClass
from sim.cloud import FakeCloud
from sim.cluster import SimulatedCluster
from sim.kubeapi import KubeApiServer
from sim.kubelet import Kubelets, parse_join_config

Obj = dict[str, Any]
ALPHABET = string.ascii_lowercase + string.digits


# ---- helpers: what the product's prepare_bootstrap does, written independently ------------


def raw(fn: Callable[..., Any], *args: Any, **kw: Any) -> Obj:
    return json.loads(fn(*args, _preload_content=False, **kw).data)


def wait_for(fn: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting; last value {value!r}")
        time.sleep(0.05)


def make_token(core: client.CoreV1Api, ttl: timedelta = timedelta(hours=1)) -> str:
    token_id = "".join(secrets.choice(ALPHABET) for _ in range(6))
    token_secret = "".join(secrets.choice(ALPHABET) for _ in range(16))
    data = {
        "token-id": token_id,
        "token-secret": token_secret,
        "expiration": (datetime.now(UTC) + ttl).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",
        "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
    }
    body = {
        "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }
    raw(core.create_namespaced_secret, "kube-system", body)
    return f"{token_id}.{token_secret}"


def ca_hash(core: client.CoreV1Api) -> str:
    cm = raw(core.read_namespaced_config_map, "cluster-info", "kube-public")
    kubeconfig = yaml.safe_load(cm["data"]["kubeconfig"])
    pem = base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"])
    spki = (
        x509.load_pem_x509_certificate(pem)
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def user_data(
    token: str,
    pin: str,
    node: str,
    labels: str = "cloudburst.io/nodepool=burst,team=a",
    taints: str = '[{key: "cloudburst.io/burst", value: "true", effect: "NoSchedule"}]',
) -> str:
    return f"""#!/bin/bash
set -euo pipefail
mkdir -p /etc/kubernetes
cat > /etc/kubernetes/kubeadm-join.yaml <<'CLOUDBURST_JOIN_CONFIG'
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "100.64.0.1:6443"
    token: "{token}"
    caCertHashes: ["{pin}"]
nodeRegistration:
  name: "{node}"
  taints: {taints}
  kubeletExtraArgs:
    - {{name: node-labels, value: "{labels}"}}
CLOUDBURST_JOIN_CONFIG
kubeadm join --config /etc/kubernetes/kubeadm-join.yaml
"""


# ---- fixtures -----------------------------------------------------------------------------


class Env:
    def __init__(self, core: client.CoreV1Api, cloud: FakeCloud, kubelets: Kubelets) -> None:
        self.core, self.cloud, self.kubelets = core, cloud, kubelets

    def boot(self, name: str, data: str, instance_type: str = "fk-medium") -> str:
        inst = self.cloud.create_instance(
            name=name, region="sim-2", instance_type=instance_type, user_data=data
        )
        return str(inst["id"])

    def node(self, name: str) -> Obj | None:
        try:
            return raw(self.core.read_node, name)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def ready(self, name: str) -> str | None:
        node = self.node(name) or {}
        for c in (node.get("status") or {}).get("conditions") or []:
            if c["type"] == "Ready":
                return str(c["status"])
        return None


@pytest.fixture
def env() -> Iterator[Env]:
    server = KubeApiServer()
    server.start()
    cloud = FakeCloud(boot_delay_s=0.05, delete_delay_s=0.05)
    kubelets = Kubelets(server.api_client(), cloud, ready_delay_s=0.3, poll_s=0.05)
    kubelets.start()
    try:
        yield Env(client.CoreV1Api(server.api_client()), cloud, kubelets)
    finally:
        kubelets.stop()
        server.stop()


# ---- tests --------------------------------------------------------------------------------


def test_valid_join_registers_node_that_turns_ready(env: Env) -> None:
    iid = env.boot("nc-a", user_data(make_token(env.core), ca_hash(env.core), "nc-a"))
    node = wait_for(lambda: env.node("nc-a"))
    assert env.ready("nc-a") == "False"  # NotReady at first
    labels = node["metadata"]["labels"]
    assert labels["cloudburst.io/nodepool"] == "burst" and labels["team"] == "a"
    assert labels["kubernetes.io/hostname"] == "nc-a"
    assert labels["kubernetes.io/arch"] == "amd64" and labels["kubernetes.io/os"] == "linux"
    assert labels["node.kubernetes.io/instance-type"] == "fk-medium"
    assert labels["topology.kubernetes.io/region"] == "sim-2"
    assert node["spec"]["taints"] == [
        {"key": "cloudburst.io/burst", "value": "true", "effect": "NoSchedule"}
    ]
    assert node["spec"]["providerID"] == f"fake:///sim-2/{iid}"
    assert node["status"]["capacity"]["cpu"] == "4"
    assert node["status"]["allocatable"]["cpu"] == "3920m"  # minus kube-reserved
    assert node["status"]["capacity"]["memory"] == f"{8 * 1024 * 1024}Ki"
    assert node["status"]["allocatable"]["pods"] == "110"
    vm = env.cloud.peek(iid)
    assert vm is not None
    assert {"type": "InternalIP", "address": vm["private_ip"]} in node["status"]["addresses"]
    wait_for(lambda: env.ready("nc-a") == "True")
    assert env.kubelets.join_failures == {}


@pytest.mark.parametrize(
    "case", ["bad-secret", "unknown-token", "expired", "wrong-ca", "no-heredoc"]
)
def test_bad_join_material_registers_nothing(env: Env, case: str) -> None:
    token = make_token(
        env.core, ttl=timedelta(seconds=-5) if case == "expired" else timedelta(hours=1)
    )
    pin = ca_hash(env.core)
    if case == "bad-secret":
        token = token.split(".")[0] + ".0000000000000000"
    elif case == "unknown-token":
        token = "zzzzzz.0123456789abcdef"
    elif case == "wrong-ca":
        pin = "sha256:" + "0" * 64
    data = "#!/bin/sh\necho hi\n" if case == "no-heredoc" else user_data(token, pin, "bad")
    iid = env.boot("bad", data)
    reason = wait_for(lambda: env.kubelets.join_failures.get(iid))
    expected = {
        "bad-secret": "token-secret does not match",
        "unknown-token": "not found",
        "expired": "expired",
        "wrong-ca": "caCertHashes",
        "no-heredoc": "no kubeadm JoinConfiguration",
    }[case]
    assert expected in reason
    time.sleep(0.2)
    assert env.node("bad") is None


def test_reserved_node_label_is_refused(env: Env) -> None:
    data = user_data(
        make_token(env.core), ca_hash(env.core), "r", labels="node-role.kubernetes.io/worker="
    )
    iid = env.boot("r", data)
    assert "reserved" in wait_for(lambda: env.kubelets.join_failures.get(iid))
    assert env.node("r") is None


def test_vm_gone_turns_node_unknown_and_node_is_kept(env: Env) -> None:
    iid = env.boot("nc-b", user_data(make_token(env.core), ca_hash(env.core), "nc-b"))
    wait_for(lambda: env.ready("nc-b") == "True")
    env.cloud.delete_behind_our_back(iid)
    wait_for(lambda: env.ready("nc-b") == "Unknown")
    node = env.node("nc-b")
    assert node is not None
    cond = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert cond["reason"] == "NodeStatusUnknown"
    assert cond["message"] == "Kubelet stopped posting node status."
    time.sleep(0.2)
    assert env.node("nc-b") is not None  # the autoscaler must delete it


def test_a_node_holds_a_lease_renewed_while_its_vm_runs(env: Env) -> None:
    """What `kubectl get leases -n kube-node-lease` shows on a real cluster: one Lease per
    Node, owned by it, held by the node, renewed while the kubelet runs and not after."""
    env.kubelets.lease_renew_s = 0.1
    coordination = client.CoordinationV1Api(env.core.api_client)

    def lease() -> Obj | None:
        try:
            return raw(coordination.read_namespaced_lease, "nc-l", "kube-node-lease")
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    iid = env.boot("nc-l", user_data(make_token(env.core), ca_hash(env.core), "nc-l"))
    first = wait_for(lease)
    node = env.node("nc-l")
    assert node is not None
    assert first["spec"]["holderIdentity"] == "nc-l"
    assert first["spec"]["leaseDurationSeconds"] == 40
    [owner] = first["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", "nc-l", node["metadata"]["uid"])
    renewed = wait_for(
        lambda: (current := lease()) and current["spec"]["renewTime"] != first["spec"]["renewTime"]
    )
    assert renewed
    env.cloud.delete_behind_our_back(iid)
    wait_for(lambda: env.ready("nc-l") == "Unknown")
    time.sleep(0.2)
    stopped = (lease() or {})["spec"]["renewTime"]
    time.sleep(0.4)
    assert (lease() or {})["spec"]["renewTime"] == stopped


def test_deleted_node_of_live_vm_is_not_reregistered(env: Env) -> None:
    env.boot("nc-c", user_data(make_token(env.core), ca_hash(env.core), "nc-c"))
    wait_for(lambda: env.ready("nc-c") == "True")
    raw(env.core.delete_node, "nc-c")
    time.sleep(0.3)
    assert env.node("nc-c") is None


def test_bound_pods_go_running(env: Env) -> None:
    env.boot("nc-d", user_data(make_token(env.core), ca_hash(env.core), "nc-d"))
    wait_for(lambda: env.ready("nc-d") == "True")
    pod = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
    }
    raw(env.core.create_namespaced_pod, "default", pod)
    binding = {"metadata": {"name": "web"}, "target": {"kind": "Node", "name": "nc-d"}}
    raw(env.core.create_namespaced_pod_binding, "web", "default", binding)

    def running() -> Obj | None:
        p = raw(env.core.read_namespaced_pod, "web", "default")
        return p if p["status"].get("phase") == "Running" else None

    status = wait_for(running)["status"]
    conds = {c["type"]: c["status"] for c in status["conditions"]}
    for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
        assert conds[kind] == "True"
    assert status["containerStatuses"][0]["state"]["running"]["startedAt"]
    assert status["containerStatuses"][0]["ready"] is True
    vm = env.cloud.peek(next(iter(env.kubelets.joined)))
    assert vm is not None
    assert status["podIP"] and status["hostIP"] == vm["private_ip"]


def test_parse_join_config_v1beta3_map_args() -> None:
    data = """x <<'CLOUDBURST_JOIN_CONFIG'
apiVersion: kubeadm.k8s.io/v1beta3
kind: JoinConfiguration
discovery:
  bootstrapToken: {apiServerEndpoint: "a:6443", token: "abcdef.0123456789abcdef", caCertHashes: []}
nodeRegistration:
  name: n
  kubeletExtraArgs: {node-labels: "a=b", node-ip: 10.0.0.9}
CLOUDBURST_JOIN_CONFIG
"""
    cfg = parse_join_config(data)
    assert cfg.node_labels == {"a": "b"} and cfg.node_ip == "10.0.0.9" and cfg.taints == []


def test_simulated_cluster_end_to_end(tmp_path: Any) -> None:
    """Provider creates a VM over HTTP -> kubelet joins it -> scheduler binds -> pod runs."""
    with SimulatedCluster(boot_delay_s=0.1, ready_delay_s=0.1, cloud_token="t") as sim:
        assert sim.write_kubeconfig(tmp_path / "kubeconfig").exists()
        core = client.CoreV1Api(sim.kube.api_client())
        pod = {
            "metadata": {"name": "job", "namespace": "default"},
            "spec": {
                "containers": [
                    {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
                ],
                "tolerations": [{"key": "cloudburst.io/burst", "operator": "Exists"}],
            },
        }
        raw(core.create_namespaced_pod, "default", pod)

        def reason() -> str | None:
            conds = raw(core.read_namespaced_pod, "job", "default")["status"].get("conditions")
            return next((c.get("reason") for c in conds or [] if c["type"] == "PodScheduled"), None)

        assert wait_for(reason) == "Unschedulable"
        provider = FakeProvider(FakeClass(endpoint=sim.cloud_url, region="sim-1"), "t")
        spec = InstanceSpec(
            name="nodeclaim-burst-e2e",
            cluster_id="c1",
            node_pool="burst",
            region="sim-1",
            instance_type="fk-small",
            user_data=user_data(make_token(core), ca_hash(core), "nodeclaim-burst-e2e"),
        )
        provider.create(spec)

        def phase() -> str | None:
            return raw(core.read_namespaced_pod, "job", "default")["status"].get("phase")

        wait_for(lambda: phase() == "Running", timeout=10)
        pod_now = raw(core.read_namespaced_pod, "job", "default")
        assert pod_now["spec"]["nodeName"] == "nodeclaim-burst-e2e"
        stats = httpx.get(f"{sim.cloud_url}/_admin/stats").json()
        assert stats["created_by_name"] == {"nodeclaim-burst-e2e": 1}
