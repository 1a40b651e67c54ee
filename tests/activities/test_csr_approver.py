"""Who may be a node, on Kubernetes' own control plane: Cloudburst's CSR approver (which the
session's control plane runs with its ServiceAccount's rights, as deploy/base installs it, and
with kubeadm's blanket approvals not bound) judges kubelet certificate requests that the
controller-manager's real signer then signs; the node guard forgets the Nodes of claims that
ended and evicts other namespaces' pods from tenant nodes (approver/, issue #54)."""

from __future__ import annotations

import base64
import functools
import os
import secrets
import string
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from activities.bootstrap import JOIN_GROUP
from api import labels
from approver.main import running
from approver.nodes import NodeGuard
from cluster.certificates import KUBELET_CLIENT_SIGNER, claim_token_group
from cluster.node_guard import FORGOTTEN_TAINT
from sim.controlplane.cluster import CSR_APPROVER_USER, KubernetesControlPlane, free_port
from sim.controlplane.joining import kubelet_csr
from sim.controlplane.pki import ClientIdentity
from tests.activities.claims import GROUP, VERSION, authorise_claim
from tests.activities.conftest import create_namespace, identity_client, wait_for

KUBEADM_GROUP = "system:bootstrappers:kubeadm:default-node-token"


def bootstrap_token(core: client.CoreV1Api, groups: list[str]) -> str:
    """A bootstrap token in kube-system, as the worker (or kubeadm) writes one."""
    alphabet = string.ascii_lowercase + string.digits
    token_id = "".join(secrets.choice(alphabet) for _ in range(6))
    token_secret = "".join(secrets.choice(alphabet) for _ in range(16))
    data = {
        "token-id": token_id,
        "token-secret": token_secret,
        "expiration": (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "usage-bootstrap-authentication": "true",
        "auth-extra-groups": ",".join(groups),
    }
    core.create_namespaced_secret(
        "kube-system",
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=f"bootstrap-token-{token_id}"),
            type="bootstrap.kubernetes.io/token",
            data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        ),
    )
    return f"{token_id}.{token_secret}"


def as_token(plane: KubernetesControlPlane, token: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = plane.url
    configuration.api_key = {"authorization": f"Bearer {token}"}
    ca = plane.work_dir / "ca-for-tokens.crt"
    ca.write_text(plane.ca_cert_pem)
    configuration.ssl_ca_cert = str(ca)
    api = client.ApiClient(configuration)

    def authenticated() -> bool:
        try:
            client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview())
        except ApiException as err:
            if err.status == 401:
                return False
            raise
        return True

    # The API server learns a new token Secret from its informer, a moment after its create.
    wait_for("the token known to the API server", authenticated)
    return api


def ask_for_client_certificate(api: client.ApiClient, node: str) -> str:
    """A kubelet client CSR for `node`, as the kubelet's TLS bootstrap makes it."""
    request, _key = kubelet_csr(node)
    name = f"node-csr-{secrets.token_hex(8)}"
    client.CertificatesV1Api(api).create_certificate_signing_request(
        client.V1CertificateSigningRequest(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1CertificateSigningRequestSpec(
                request=base64.b64encode(request).decode(),
                signer_name=KUBELET_CLIENT_SIGNER,
                usages=["digital signature", "client auth"],
            ),
        )
    )
    return name


def conditions(api: client.ApiClient, csr: str) -> dict[str, Any]:
    found = client.CertificatesV1Api(api).read_certificate_signing_request(csr)
    return {c.type: c for c in (found.status.conditions or [])}


def pending_reason(core: client.CoreV1Api, csr: str) -> str | None:
    """The approver's reason for leaving `csr` pending, once its Event is there."""
    for event in core.list_namespaced_event("default").items:
        if (
            event.involved_object.kind == "CertificateSigningRequest"
            and event.involved_object.name == csr
            and event.reason == "CertificateNotApproved"
        ):
            return str(event.message).split(":", 1)[0]
    return None


def signed(api: client.ApiClient, csr: str) -> bool:
    found = client.CertificatesV1Api(api).read_certificate_signing_request(csr)
    return bool(found.status and found.status.certificate)


@pytest.fixture
def team_b(core: client.CoreV1Api) -> str:
    return create_namespace(core, f"t-{secrets.token_hex(4)}")


def test_a_claims_token_gets_its_own_nodes_certificate_from_the_real_signer(
    cluster, kube_api_client, core, namespace, unique
):
    name = f"burst-{unique}"
    authorise_claim(kube_api_client, namespace, name)
    token = bootstrap_token(core, [JOIN_GROUP, claim_token_group(namespace, name)])
    csr = ask_for_client_certificate(as_token(cluster, token), name)
    wait_for("the controller-manager's signature", lambda: signed(kube_api_client, csr))
    approved = conditions(kube_api_client, csr)["Approved"]
    assert approved.reason == "CloudburstClaimVerified"
    assert f"{namespace}/{name}" in approved.message


def test_a_claims_token_asking_for_another_claims_node_stays_pending_with_its_event(
    cluster, kube_api_client, core, namespace, team_b, unique
):
    """A tenant is root on its machines and holds its join token: with it, it asks for the
    certificate of another tenant's node. Fails on the code before issue #54, where the token
    carried kubeadm's default-node-token group and kubeadm's binding had the controller-manager
    approve any name for it."""
    mine, theirs = f"burst-{unique}", f"web-{unique}"
    authorise_claim(kube_api_client, namespace, mine)
    authorise_claim(kube_api_client, team_b, theirs)
    token = bootstrap_token(core, [JOIN_GROUP, claim_token_group(namespace, mine)])
    csr = ask_for_client_certificate(as_token(cluster, token), theirs)
    reason = wait_for("the approver's Event", lambda: pending_reason(core, csr))
    assert reason == "NotTheClaimsNode"
    assert conditions(kube_api_client, csr) == {} and not signed(kube_api_client, csr)


def test_a_token_of_no_claim_is_left_to_the_operator(cluster, kube_api_client, core, unique):
    """kubeadm's own token (an operator's join): not Cloudburst's to approve."""
    token = bootstrap_token(core, [KUBEADM_GROUP])
    csr = ask_for_client_certificate(as_token(cluster, token), f"own-{unique}")
    assert wait_for("the approver's Event", lambda: pending_reason(core, csr)) == "NotAClaimsToken"
    assert conditions(kube_api_client, csr) == {}


def test_a_claims_token_joins_no_more_once_its_claim_is_ready(
    cluster, kube_api_client, core, namespace, unique
):
    name = f"burst-{unique}"
    authorise_claim(kube_api_client, namespace, name)
    set_claim_status(kube_api_client, namespace, name, {"phase": "Ready"})
    token = bootstrap_token(core, [JOIN_GROUP, claim_token_group(namespace, name)])
    csr = ask_for_client_certificate(as_token(cluster, token), name)
    assert wait_for("the approver's Event", lambda: pending_reason(core, csr)) == (
        "ClaimNotLaunching"
    )


def test_a_node_renews_its_certificate_only_while_its_claim_lives(
    cluster, kube_api_client, core, namespace, unique, made_nodes
):
    """A kubelet renews its client certificate as `system:node:<name>`. Fails on the code
    before issue #54: kubeadm's `node-autoapprove-certificate-rotation` binding had the
    controller-manager renew any node's, its claim ended or not."""
    name = f"burst-{unique}"
    authorise_claim(kube_api_client, namespace, name)
    set_claim_status(kube_api_client, namespace, name, {"instanceID": f"fake/sim-1/{name}"})
    made_nodes.append(name)
    core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1NodeSpec(provider_id=f"fake:///sim-1/{name}"),
        )
    )
    kubelet = identity_client(cluster, f"kubelet-{name}", f"system:node:{name}", ["system:nodes"])
    renewal = ask_for_client_certificate(kubelet, name)
    wait_for("the renewal signed", lambda: signed(kube_api_client, renewal))

    client.CustomObjectsApi(kube_api_client).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, "nodeclaims", name
    )
    remove_finalizers(kube_api_client, namespace, name)
    late = ask_for_client_certificate(kubelet, name)
    assert wait_for("the approver's Event", lambda: pending_reason(core, late)) == "ClaimEnded"
    assert conditions(kube_api_client, late) == {}


def set_claim_status(api: client.ApiClient, namespace: str, name: str, status: dict[str, Any]):
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "nodeclaims", name, {"status": status}
    )


def remove_finalizers(api: client.ApiClient, namespace: str, name: str) -> None:
    try:
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "nodeclaims", name, {"metadata": {"finalizers": None}}
        )
    except ApiException as err:
        if err.status != 404:
            raise


# --- the node guard -------------------------------------------------------------------------


@pytest.fixture
def node_guard(cluster: KubernetesControlPlane) -> Iterator[None]:
    """The guard as `cloudburst csr-approver` runs it, with the approver's rights."""
    with running([NodeGuard(cluster.approver_api_client, resync_s=1.0)], stop_within_s=5):
        yield


def node_events(core: client.CoreV1Api, node: str, reason: str) -> list[client.CoreV1Event]:
    return [
        e
        for e in core.list_namespaced_event("default").items
        if e.involved_object.kind == "Node"
        and e.involved_object.name == node
        and e.reason == reason
    ]


def gone(read: Any, *args: Any) -> bool:
    try:
        read(*args)
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def test_a_node_registering_as_an_ended_claims_is_forgotten(
    cluster, kube_api_client, core, namespace, unique, made_nodes, node_guard
):
    """The kubelet of a claim that ended registers again with the certificate it still holds,
    as its claim's Node (the labels its first-boot script gave it): cordoned, tainted, deleted,
    with an Event. Fails on the code before issue #54, where nothing removed such a Node."""
    ended, failed, living = f"burst-{unique}", f"failed-{unique}", f"live-{unique}"
    authorise_claim(kube_api_client, namespace, living)
    # A failed claim's NodeClaim stays (it says why); its node's life is over.
    authorise_claim(kube_api_client, namespace, failed)
    set_claim_status(kube_api_client, namespace, failed, {"phase": "Failed"})
    for name in (ended, failed, living):
        made_nodes.append(name)
        kubelet = identity_client(
            cluster, f"kubelet-{name}", f"system:node:{name}", ["system:nodes"]
        )
        client.CoreV1Api(kubelet).create_node(
            client.V1Node(
                metadata=client.V1ObjectMeta(
                    name=name,
                    labels=labels.ownership_labels(name, namespace=namespace, node_pool="burst"),
                ),
                spec=client.V1NodeSpec(provider_id=f"fake:///sim-1/{name}"),
            )
        )
    for name in (ended, failed):
        wait_for(f"{name}'s Node gone", functools.partial(gone, core.read_node, name))
        [event] = wait_for(  # the Event is written after the delete it reports
            f"{name}'s Event", functools.partial(node_events, core, name, "NodeForgotten")
        )
        assert f"{namespace}/{name}" in str(event.message)
    # The living claim's Node stays as it is, several of the guard's looks later (one a second).
    time.sleep(3.0)
    node = core.read_node(living)
    assert not node.spec.unschedulable
    assert FORGOTTEN_TAINT not in [t.key for t in node.spec.taints or []]
    assert not node_events(core, living, "NodeForgotten")


def test_another_namespaces_pod_bound_before_the_tenant_taint_is_evicted(
    kube_api_client, core, namespace, team_b, unique, made_nodes, node_guard
):
    """A tenant's node served others until the worker put the tenant taint back at Ready: a
    pod of another namespace bound then is evicted; the tenant's own pods, and pods that
    tolerate the taint, stay. Fails on the code before issue #54, where such a pod stayed."""
    name = f"burst-{unique}"
    made_nodes.append(name)
    core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name=name, labels={labels.TENANT_LABEL: namespace}),
            spec=client.V1NodeSpec(
                taints=[
                    client.V1Taint(key=labels.TENANT_TAINT, value=namespace, effect="NoSchedule")
                ]
            ),
        )
    )

    def bound_pod(ns: str, pod: str, tolerations: list[client.V1Toleration] | None = None):
        core.create_namespaced_pod(
            ns,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name=pod),
                spec=client.V1PodSpec(
                    node_name=name,
                    containers=[client.V1Container(name="c", image="busybox")],
                    tolerations=tolerations,
                ),
            ),
        )

    bound_pod(team_b, "stranger")
    bound_pod(namespace, "own")
    bound_pod(team_b, "tolerated", [client.V1Toleration(operator="Exists")])

    def evicted() -> bool:
        try:
            pod = core.read_namespaced_pod("stranger", team_b)
        except ApiException as err:
            return err.status == 404
        return pod.metadata.deletion_timestamp is not None

    wait_for("the stranger evicted", evicted)
    # The Event is written after the eviction it reports.
    [event] = wait_for(
        "the eviction's Event", lambda: node_events(core, name, "PodNotOfTenantEvicted")
    )
    assert f"{team_b}/stranger" in str(event.message)
    assert core.read_namespaced_pod("own", namespace).metadata.deletion_timestamp is None
    assert core.read_namespaced_pod("tolerated", team_b).metadata.deletion_timestamp is None


def test_the_command_serves_its_probes_with_the_approvers_rights(cluster, tmp_path) -> None:
    """`cloudburst csr-approver` as the Deployment runs it: ready once the API server answers
    it (its kubeconfig the approver's ServiceAccount identity), alive while its loop turns."""
    kubeconfig = cluster.write_identity_kubeconfig(
        "csr-approver-process", ClientIdentity(CSR_APPROVER_USER)
    )
    port = free_port("127.0.0.1")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "cloudburst"),
            "csr-approver",
            f"--kubeconfig={kubeconfig}",
            f"--health-port={port}",
        ],
        env={**os.environ, "CLOUDBURST_METRICS_PORT": "0", "CLOUDBURST_SDK_METRICS_PORT": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def answers(path: str) -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as got:
                    return bool(got.status == 200)
            except OSError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                return False

        wait_for("/readyz", lambda: answers("/readyz"))
        assert answers("/healthz")
    finally:
        process.terminate()
        process.wait(timeout=30)
