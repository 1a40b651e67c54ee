"""`cloudburst doctor` on Kubernetes' own control plane with the shipped manifests installed
(kustomize deploy/base, one tenant from `cloudburst tenant-rbac`), as an operator would have
it: green but for the dev Temporal's missing TLS; then prerequisites broken in the cluster
each fail their own line. The judgements themselves are proven one by one in the fast lane
(tests/unit/test_doctor_checks.py); this proves the gathering against the real API server.

The control plane is this module's own: the test deletes cluster-wide objects (kubeadm's
auto-approval binding, a CRD) that the session's other tests rely on.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from sim.cloud import FakeCloud, FakeCloudServer
from sim.controlplane.cluster import MANAGED_LABEL, KubernetesControlPlane
from tests.conftest import started_control_plane

REPO = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).with_name("cloudburst"))
NAMESPACE = "cloudburst-system"
TENANT = "team-doctor"
CLOUD_TOKEN = secrets.token_hex(16)


def kubectl(plane: KubernetesControlPlane, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [str(plane.kubectl), f"--kubeconfig={plane.admin_kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)}:\n{result.stderr}"
    return result.stdout


def apply(plane: KubernetesControlPlane, objects: str) -> None:
    kubectl(plane, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=objects)


def doctor(plane: KubernetesControlPlane, temporal_address: str) -> tuple[int, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDBURST_")}
    result = subprocess.run(
        [
            CLI,
            "doctor",
            f"--kubeconfig={plane.admin_kubeconfig}",
            f"--temporal-address={temporal_address}",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {line["check"]: line["status"] for line in report["checks"]}


@pytest.fixture(scope="module")
def installed() -> Iterator[KubernetesControlPlane]:
    """The shipped base and a tenant on a fresh control plane, with what an operator adds per
    docs/doctor.md: the CSR approver (the control plane binds neither of kubeadm's blanket
    approvals, as docs/security.md has them removed) and a live bootstrap
    token (`kubeadm token create`); a node for the Deployments' pods (KWOK); and the tenant's
    NodeClass on the simulated cloud, its endpoint allowed, joining at cluster-info's
    address."""
    cloud = FakeCloudServer(FakeCloud(token=CLOUD_TOKEN)).start()
    plane = started_control_plane(KubernetesControlPlane(install_namespaces=(NAMESPACE,)))
    try:
        apply(plane, yaml.safe_dump(kwok_node()))
        apply(plane, kubectl(plane, "kustomize", str(REPO / "deploy" / "base")))
        tenants = subprocess.run(
            [CLI, "tenant-rbac", TENANT], capture_output=True, text=True, check=True, timeout=60
        ).stdout
        apply(plane, tenants)
        kubectl(
            plane,
            "-n",
            NAMESPACE,
            "patch",
            "configmap",
            "cloudburst-config",
            "--type=merge",
            "-p",
            json.dumps(
                {
                    "data": {
                        "CLOUDBURST_TENANT_NAMESPACES": TENANT,
                        "CLOUDBURST_ALLOWED_ENDPOINTS": json.dumps({"fake": [cloud.url]}),
                    }
                }
            ),
        )
        apply(plane, yaml.safe_dump(cloud_token(CLOUD_TOKEN)))
        apply(plane, yaml.safe_dump(node_class(join=plane.url, endpoint=cloud.url)))
        apply(plane, yaml.safe_dump(bootstrap_token()))
        apps = k8s.AppsV1Api(plane.api_client())

        def rolled_out() -> bool:
            names = ("cloudburst-worker", "cloudburst-trigger", "cloudburst-csr-approver")
            for name in names:
                d = apps.read_namespaced_deployment(name, NAMESPACE)
                if (d.status.ready_replicas or 0) < (d.spec.replicas or 0):
                    return False
            return True

        wait_until(
            rolled_out,
            "the Deployments ready",
            lambda: kubectl(plane, "-n", NAMESPACE, "get", "deployments,pods", "-o", "wide"),
        )
        yield plane
    finally:
        plane.stop()
        cloud.stop()


def wait_until(
    condition: Callable[[], bool], what: str, seen: Callable[[], str], timeout_s: float = 240
) -> None:
    """Poll until `condition` holds (never a fixed sleep); fail showing what was `seen`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s:\n{seen()}"
        time.sleep(0.5)


def bootstrap_token() -> dict[str, Any]:
    """A token as `kubeadm token create` makes it."""
    token_id = secrets.token_hex(3)
    expiry = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    data = {
        "token-id": token_id,
        "token-secret": secrets.token_hex(8),
        "expiration": expiry,
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",
        "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def kwok_node() -> dict[str, Any]:
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "doctor-control-plane-node",
            # A Linux node, as the chart's pods select (nodeSelector kubernetes.io/os).
            "labels": {
                MANAGED_LABEL: "true",
                "kubernetes.io/hostname": "doctor-node",
                "kubernetes.io/os": "linux",
            },
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def test_the_shipped_install_is_green_but_for_the_dev_temporals_tls(
    installed: KubernetesControlPlane, temporal_address: str
) -> None:
    """Every check ok on the install docs/doctor.md describes, with Temporal's dev server
    reached at its address; the one warning is its plaintext. Fails on a check that gathers
    wrongly against the real API server (a right the shipped RBAC grants reviewed as denied,
    the CRDs as served read as another schema, a dry-run Pod the plugins refuse taken for
    admitted)."""
    code, report = doctor(installed, temporal_address)
    seen = statuses(report)
    assert {c: s for c, s in seen.items() if s != "ok"} == {"temporal-tls": "warn"}, report
    assert code == 0
    assert report["summary"] == {"ok": len(seen) - 1, "warn": 1, "fail": 0}


def test_each_broken_prerequisite_fails_its_own_line(
    installed: KubernetesControlPlane, temporal_address: str
) -> None:
    """Break several prerequisites of the green install at once, each a different check's:
    kubeadm's blanket CSR approval back, a NetworkPolicy and the worker's cluster-info
    RoleBinding gone, the tenant's PodTolerationRestriction annotation removed, the trigger
    scaled to nothing, a NodeClaim CRD of another schema, a NodeClass joining elsewhere than
    cluster-info says, its credential Secret holding a token the cloud refuses. With the
    bootstrap token gone, doctor cannot tell whether the API server authenticates tokens and
    warns. Each fails its own
    line and no other check fails; the exit code is 1. (Run after the green test: it leaves
    the cluster broken.)"""
    plane = installed
    apply(
        plane,
        yaml.safe_dump(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "kubeadm:node-autoapprove-bootstrap"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Group",
                        "name": "system:bootstrappers:kubeadm:default-node-token",
                    }
                ],
            }
        ),
    )
    kubectl(plane, "-n", NAMESPACE, "delete", "networkpolicy", "cloudburst-metrics")
    kubectl(plane, "-n", "kube-public", "delete", "rolebinding", "cloudburst-worker-cluster-info")
    kubectl(
        plane,
        "annotate",
        "namespace",
        TENANT,
        "scheduler.alpha.kubernetes.io/tolerationsWhitelist-",
    )
    kubectl(plane, "-n", NAMESPACE, "scale", "deployment", "cloudburst-trigger", "--replicas=0")
    kubectl(
        plane,
        "patch",
        "crd",
        "nodeclaims.cloudburst.io",
        "--type=json",
        "-p",
        json.dumps(
            [
                {
                    "op": "add",
                    "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/"
                    "properties/fromAnotherRelease",
                    "value": {"type": "string"},
                }
            ]
        ),
    )
    nodeclass = node_class(join="https://10.9.9.9:6443", endpoint="")
    kubectl(
        plane,
        "-n",
        TENANT,
        "patch",
        "nodeclass",
        "doctor",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"join": nodeclass["spec"]["join"]}}),
    )
    apply(plane, yaml.safe_dump(cloud_token("not-the-token")))
    # No live token left to review, and no kube-apiserver Pod (these components are
    # processes): doctor cannot tell, and says so as a warning.
    kubectl(
        plane,
        "-n",
        "kube-system",
        "delete",
        "secret",
        "--field-selector=type=bootstrap.kubernetes.io/token",
    )

    code, report = doctor(plane, temporal_address)
    seen = statuses(report)
    broken = {
        "kubeadm-autoapprove",
        "network-policies",
        "rbac-worker",
        "admission-plugins",
        "trigger-ready",
        "crds",
        "join-address",
        f"credentials {TENANT}/doctor fake",
    }
    assert {c for c, s in seen.items() if s == "fail"} == broken, report
    assert code == 1
    assert seen["bootstrap-token-auth"] == "warn"
    lines = {line["check"]: line for line in report["checks"]}
    assert (
        "nodeclaims.cloudburst.io v1alpha1 differs at .properties.spec" in lines["crds"]["message"]
    )
    assert "get configmaps/cluster-info in kube-public" in lines["rbac-worker"]["message"]
    assert (
        "10.9.9.9:6443" in lines["join-address"]["fix"]
        or "10.9.9.9" in lines["join-address"]["message"]
    )
    assert "HTTP 401" in lines[f"credentials {TENANT}/doctor fake"]["message"]
    assert "not-the-token" not in json.dumps(report)
    assert all(line["fix"] for line in report["checks"] if line["status"] == "fail")


def cloud_token(token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "cloud-token", "namespace": TENANT},
        "stringData": {"token": token},
    }


def node_class(join: str, endpoint: str) -> dict[str, Any]:
    return {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodeClass",
        "metadata": {"name": "doctor", "namespace": TENANT},
        "spec": {
            "join": {"hostApiServer": join},
            "bootstrap": {"kubernetesVersion": "1.34.3"},
            "fake": {
                "endpoint": endpoint,
                "region": "sim-1",
                "apiTokenSecretRef": {"name": "cloud-token", "key": "token"},
            },
        },
    }
