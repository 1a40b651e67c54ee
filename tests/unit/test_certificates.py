"""The CSR approver's judgement (cluster/certificates.py) and the node guard's
(cluster/node_guard.py), without a cluster: which kubelet certificates a claim's machine gets,
and what happens to nodes and pods no live claim stands behind."""

from __future__ import annotations

import base64
import dataclasses
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from api import labels
from api.planning import Toleration
from cluster.certificates import (
    KUBELET_CLIENT_SIGNER,
    KUBELET_SERVING_SIGNER,
    CertificateRequest,
    CertificateVerdict,
    ClaimFacts,
    claim_token_group,
    judge,
    read_request,
)
from cluster.node_guard import PodOnNode, claim_of_node, strangers_on_tenant_node

DAY = 24 * 3600
NODE = "burst-x7k2p"
JOINING = ClaimFacts(
    namespace="team-a",
    name=NODE,
    token_group=claim_token_group("team-a", NODE),
    deleting=False,
    launching=True,
)
LIVING = dataclasses.replace(
    JOINING, launching=False, instance_id=f"fake/sim-1/{NODE}", addresses=frozenset({"10.0.0.7"})
)
PROVIDER_ID = f"fake:///sim-1/{NODE}"


def client_request(**changes: object) -> CertificateRequest:
    base = CertificateRequest(
        name="node-csr-1",
        signer=KUBELET_CLIENT_SIGNER,
        username="system:bootstrap:abcdef",
        groups=frozenset({"system:bootstrappers:cloudburst:join", JOINING.token_group}),
        usages=frozenset({"digital signature", "client auth"}),
        expiration_seconds=None,
        common_name=f"system:node:{NODE}",
        organizations=("system:nodes",),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def serving_request(**changes: object) -> CertificateRequest:
    serving: dict[str, object] = {
        "signer": KUBELET_SERVING_SIGNER,
        "username": f"system:node:{NODE}",
        "groups": frozenset({"system:nodes", "system:authenticated"}),
        "usages": frozenset({"digital signature", "server auth"}),
        "dns_names": (NODE,),
        "ip_addresses": ("10.0.0.7",),
    }
    return client_request(**{**serving, **changes})


def verdict(request: CertificateRequest, *claims: ClaimFacts, provider_id: str | None = None):
    return judge(request, claims, provider_id, DAY)


def test_a_launching_claims_token_gets_its_nodes_client_certificate() -> None:
    assert verdict(client_request(), JOINING).approve


@pytest.mark.parametrize(
    ("request_", "claims", "reason"),
    [
        # Its token asks for another claim's node (the other claim exists, in another namespace).
        (
            client_request(common_name="system:node:web-abcde"),
            (dataclasses.replace(JOINING, namespace="team-b", name="web-abcde",
                                 token_group=claim_token_group("team-b", "web-abcde")),),
            "NotTheClaimsNode",
        ),
        # A claim of the same name in another namespace: its group is not this token's.
        (
            client_request(),
            (dataclasses.replace(JOINING, namespace="team-b",
                                 token_group=claim_token_group("team-b", NODE)),),
            "NotTheClaimsNode",
        ),
        (client_request(), (), "NotTheClaimsNode"),  # the claim is gone
        (client_request(), (dataclasses.replace(JOINING, deleting=True),), "ClaimNotLaunching"),
        (client_request(), (dataclasses.replace(JOINING, launching=False),), "ClaimNotLaunching"),
        (client_request(groups=frozenset({"system:bootstrappers:kubeadm:default-node-token"})),
         (JOINING,), "NotAClaimsToken"),
        (client_request(groups=frozenset({JOINING.token_group, claim_token_group("b", "c")})),
         (JOINING,), "NotAClaimsToken"),
        (client_request(organizations=("system:masters",)), (JOINING,), "NotAKubeletRequest"),
        (client_request(organizations=("system:nodes", "system:masters")), (JOINING,),
         "NotAKubeletRequest"),
        (client_request(common_name="admin"), (JOINING,), "NotAKubeletRequest"),
        (client_request(dns_names=("example.com",)), (JOINING,), "NotAKubeletRequest"),
        (client_request(other_names=True), (JOINING,), "NotAKubeletRequest"),
        (client_request(usages=frozenset({"client auth", "server auth"})), (JOINING,),
         "UnexpectedUsages"),
        (client_request(expiration_seconds=DAY + 1), (JOINING,), "LifetimeTooLong"),
        (client_request(signer="kubernetes.io/kube-apiserver-client"), (JOINING,),
         "NotAKubeletSigner"),
        (client_request(username="system:serviceaccount:team-a:default"), (JOINING,),
         "NotTheNodesOwnRequest"),
    ],
)  # fmt: skip
def test_any_other_client_request_stays_pending(
    request_: CertificateRequest, claims: tuple[ClaimFacts, ...], reason: str
) -> None:
    said = verdict(request_, *claims)
    assert not said.approve and said.reason == reason, said


def test_a_node_renews_while_its_claim_lives_and_its_providerid_is_the_claims() -> None:
    renewal = client_request(username=f"system:node:{NODE}", groups=frozenset({"system:nodes"}))
    assert verdict(renewal, LIVING, provider_id=PROVIDER_ID).approve
    assert verdict(renewal, LIVING, provider_id=f"fake:///sim-2/{NODE}").reason == "ClaimEnded"
    assert verdict(renewal, provider_id=PROVIDER_ID).reason == "ClaimEnded"
    assert verdict(renewal, LIVING, provider_id=None).reason == "ClaimEnded"
    assert (
        verdict(renewal, dataclasses.replace(LIVING, deleting=True), provider_id=PROVIDER_ID).reason
        == "ClaimEnded"
    )
    other_user = dataclasses.replace(renewal, username="system:node:someone-else")
    assert verdict(other_user, LIVING, provider_id=PROVIDER_ID).reason == "NotTheNodesOwnRequest"


def test_a_serving_certificate_names_only_the_claims_node_and_vm() -> None:
    assert verdict(serving_request(), LIVING, provider_id=PROVIDER_ID).approve
    assert verdict(serving_request(ip_addresses=()), LIVING, provider_id=PROVIDER_ID).approve
    for changed in (
        serving_request(dns_names=(NODE, "kubernetes.default.svc")),
        serving_request(ip_addresses=("10.0.0.7", "10.0.0.8")),
        serving_request(ip_addresses=("not-an-ip",)),
    ):
        assert verdict(changed, LIVING, provider_id=PROVIDER_ID).reason == "NotTheClaimsAddress"
    assert verdict(serving_request(), LIVING, provider_id="fake:///sim-1/other").reason == (
        "ClaimEnded"
    )
    assert verdict(serving_request(username="system:bootstrap:abcdef"), LIVING,
                   provider_id=PROVIDER_ID).reason == "NotTheNodesOwnRequest"  # fmt: skip
    assert verdict(serving_request(dns_names=(), ip_addresses=()), LIVING,
                   provider_id=PROVIDER_ID).reason == "NotAKubeletRequest"  # fmt: skip


def pem_request(common_name: str, *, organization: str = "system:nodes", ip: str | None = None):
    key = ec.generate_private_key(ec.SECP256R1())
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            ]
        )
    )
    if ip:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(NODE), x509.IPAddress(ipaddress.ip_address(ip))]
            ),
            critical=False,
        )
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def test_a_request_is_read_from_its_pem_and_spec() -> None:
    read = read_request(
        "node-csr-1",
        {
            "signerName": KUBELET_SERVING_SIGNER,
            "username": f"system:node:{NODE}",
            "groups": ["system:nodes"],
            "usages": ["server auth"],
            "expirationSeconds": 3600,
        },
        pem_request(f"system:node:{NODE}", ip="10.0.0.7"),
    )
    assert isinstance(read, CertificateRequest)
    assert read.node_name == NODE and read.organizations == ("system:nodes",)
    assert read.dns_names == (NODE,) and read.ip_addresses == ("10.0.0.7",)
    assert read.expiration_seconds == 3600
    garbage = read_request("x", {}, base64.b64encode(b"not a request"))
    assert isinstance(garbage, CertificateVerdict) and garbage.reason == "UnreadableRequest"


# --- the node guard -------------------------------------------------------------------------


def test_a_node_is_a_claims_by_its_ownership_labels() -> None:
    marked = labels.ownership_labels(NODE, namespace="team-a", node_pool="burst")
    assert claim_of_node(NODE, marked) == ("team-a", NODE)
    assert claim_of_node(NODE, {}) is None
    assert claim_of_node(NODE, {labels.NODECLAIM: NODE}) is None  # no namespace: not ours


def pod(namespace: str, *, tolerations=(), owners=(), mirror=False, terminating=False):
    return PodOnNode(
        namespace=namespace,
        name=f"{namespace}-pod",
        tolerations=tuple(tolerations),
        owner_kinds=tuple(owners),
        mirror=mirror,
        terminating=terminating,
    )


def test_only_other_namespaces_pods_that_do_not_tolerate_the_tenant_taint_are_evicted() -> None:
    stranger = pod("team-b")
    kept = [
        pod("team-a"),
        pod("team-b", tolerations=[Toleration(operator="Exists")]),
        pod("team-b", tolerations=[Toleration(key=labels.TENANT_TAINT, value="team-a")]),
        pod("kube-system", owners=["DaemonSet"]),
        pod("kube-system", mirror=True),
        pod("team-b", terminating=True),
    ]
    assert strangers_on_tenant_node("team-a", "team-a", [stranger, *kept]) == [stranger]
    # Tolerating another tenant's taint is no pass here.
    other = pod("team-b", tolerations=[Toleration(key=labels.TENANT_TAINT, value="team-b")])
    assert strangers_on_tenant_node("team-a", "team-a", [other]) == [other]
