"""Machines join Kubernetes' own control plane as kubeadm and the kubelet make them join.

A claim's VM authenticates with its own bootstrap token, gets its kubelet client certificate
through a CSR the controller-manager approves and signs, and registers its Node as
`system:node:<name>`; from then on NodeRestriction (Kubernetes' admission plugin, not ours)
keeps that identity to its own Node.
"""

from __future__ import annotations

import base64
import json
import secrets
import string
import time
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from api import NodeClaimPhase
from sim.cluster import SimulatedCluster
from sim.controlplane.cluster import KubernetesControlPlane
from sim.controlplane.joining import KUBELET_CLIENT_SIGNER, verify_cluster_info_jws
from sim.kubelet import JoinError
from tests.e2e.harness import (
    Stack,
    in_process_worker,
    in_thread,
    make_pool,
    running_watcher,
    start_test_claim,
    wait_for_phase,
)


@pytest.fixture
def plane(sim_cluster: SimulatedCluster) -> KubernetesControlPlane:
    return sim_cluster.kube


def as_node(kubeconfig: Any) -> k8s.CoreV1Api:
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(str(kubeconfig), client_configuration=configuration)
    return k8s.CoreV1Api(k8s.ApiClient(configuration))


async def test_a_claims_machine_joins_through_a_csr_as_its_node(
    stack: Stack, plane: KubernetesControlPlane
) -> None:
    make_pool(stack.kube, "joins", empty_ttl=600)
    mark = plane.audit_mark()
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        name, handle = await start_test_claim(stack, "joins")
        await wait_for_phase(handle, NodeClaimPhase.READY)
        certificates = k8s.CertificatesV1Api(stack.kube)
        csrs = [
            csr
            for csr in (await in_thread(certificates.list_certificate_signing_request)).items
            if csr.spec.signer_name == KUBELET_CLIENT_SIGNER
            and x509.load_pem_x509_csr(base64.b64decode(csr.spec.request)).subject.rfc4514_string()
            == f"CN=system:node:{name},O=system:nodes"
        ]
        assert len(csrs) == 1, [c.metadata.name for c in csrs]
        csr = csrs[0]
        # Asked with the VM's own bootstrap token, carrying its claim's group.
        assert csr.spec.username.startswith("system:bootstrap:")
        assert f"system:bootstrappers:cloudburst:nodeclaim:default:{name}" in (
            csr.spec.groups or []
        )
        approved = {c.type: c for c in csr.status.conditions}
        assert approved["Approved"].reason == "CloudburstClaimVerified"  # our approver, no other
        issued = x509.load_pem_x509_certificate(base64.b64decode(str(csr.status.certificate)))
        assert issued.subject.rfc4514_string() == f"CN=system:node:{name},O=system:nodes"
        node_writes = [
            r for r in plane.audit(after=mark) if r.resource == "nodes" and r.verb == "create"
        ]
        assert [(r.name, r.user) for r in node_writes] == [(name, f"system:node:{name}")]
        await handle.cancel()


async def test_a_kubelet_identity_cannot_modify_another_node(
    stack: Stack, sim_cluster: SimulatedCluster, plane: KubernetesControlPlane
) -> None:
    make_pool(stack.kube, "restricted", empty_ttl=600)
    other = k8s.V1Node(
        metadata=k8s.V1ObjectMeta(name=f"someone-else-{time.time_ns()}"),
        spec=k8s.V1NodeSpec(provider_id="fake:///sim-1/someone-else"),
    )
    core = k8s.CoreV1Api(stack.kube)
    await in_thread(core.create_node, other)
    try:
        async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
            name, handle = await start_test_claim(stack, "restricted")
            await wait_for_phase(handle, NodeClaimPhase.READY)
            assert sim_cluster.kubelets is not None
            kubelet = as_node(sim_cluster.kubelets.node_kubeconfigs[name])
            own = await in_thread(kubelet.read_node, name)  # the Node authorizer lets it read
            assert own.metadata.name == name
            with pytest.raises(k8s.ApiException) as refused:
                await in_thread(
                    kubelet.patch_node, other.metadata.name, {"metadata": {"labels": {"x": "y"}}}
                )
            assert refused.value.status == 403
            # NodeRestriction's refusal.
            message = json.loads(str(refused.value.body))["message"]
            assert f'node "{name}" is not allowed to modify node "{other.metadata.name}"' in (
                message
            ), message
            with pytest.raises(k8s.ApiException) as restricted:
                await in_thread(
                    kubelet.patch_node,
                    name,
                    {"metadata": {"labels": {"node-restriction.kubernetes.io/tenant": "b"}}},
                )
            assert restricted.value.status == 403
            await handle.cancel()
    finally:
        await in_thread(core.delete_node, other.metadata.name)


async def test_cluster_info_is_signed_for_a_token_by_kubernetes_bootstrap_signer(
    stack: Stack, plane: KubernetesControlPlane
) -> None:
    """The discovery check a joining machine makes, against the real bootstrap signer: the
    token's JWS verifies with its secret and with no other."""
    core = k8s.CoreV1Api(stack.kube)
    # Random: every Secret value of the session is looked for in every history afterwards.
    alphabet = string.ascii_lowercase + string.digits
    token_id = "".join(secrets.choice(alphabet) for _ in range(6))
    token_secret = "".join(secrets.choice(alphabet) for _ in range(16))
    secret = k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(name=f"bootstrap-token-{token_id}", namespace="kube-system"),
        type="bootstrap.kubernetes.io/token",
        string_data={
            "token-id": token_id,
            "token-secret": token_secret,
            "usage-bootstrap-signing": "true",
            "usage-bootstrap-authentication": "true",
        },
    )
    await in_thread(core.create_namespaced_secret, "kube-system", secret)
    try:
        deadline = time.monotonic() + 30
        while True:
            info = await in_thread(core.read_namespaced_config_map, "cluster-info", "kube-public")
            jws = (info.data or {}).get(f"jws-kubeconfig-{token_id}")
            if jws or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert jws, "the bootstrap signer never signed cluster-info for the token"
        verify_cluster_info_jws(info.data["kubeconfig"], jws, token_id, token_secret)
        with pytest.raises(JoinError, match="does not verify"):
            verify_cluster_info_jws(info.data["kubeconfig"], jws, token_id, token_secret[::-1])
        with pytest.raises(JoinError, match="does not verify"):
            verify_cluster_info_jws(info.data["kubeconfig"] + "\n", jws, token_id, token_secret)
    finally:
        await in_thread(core.delete_namespaced_secret, f"bootstrap-token-{token_id}", "kube-system")
