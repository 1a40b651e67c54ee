"""Confinement in the activities: a claim or a GC scope the operator does not allow reads no
Secret and calls no endpoint (the second line behind the trigger's refusal)."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.bootstrap import BootstrapActivities
from activities.compute import ComputeActivities
from activities.gc import GcActivities
from activities.planning.activity import PlanningActivities
from activities.planning.config import PlanningConfig
from api.gc import OrphanGcInput
from api.messages import BootstrapInput, InstanceRef
from api.nodeclaim import Offering
from api.nodeclass import NodeClassSpec
from api.nodepool import NodePoolSpec
from api.planning import PlanRequest
from cluster.tenancy import ENDPOINT_NOT_ALLOWED, NAMESPACE_NOT_SERVED, Tenancy, url_parts
from sim.clouds.base import Request, Response, StandinHTTPServer
from sim.kubeapi import KubeApiServer


class Listener:
    """Stands where an attacker would point an endpoint: records whatever reaches it."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, str, dict[str, str]]] = []
        self._lock = threading.Lock()
        self._server = StandinHTTPServer(self._route, name="listener")

    @property
    def url(self) -> str:
        return self._server.url

    def _route(self, req: Request) -> Response:
        with self._lock:
            self.hits.append((req.method, req.path, req.headers))
        return Response(200, {})

    def __enter__(self) -> Listener:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


@pytest.fixture
def listener() -> Iterator[Listener]:
    with Listener() as server:
        yield server


def credential(core: client.CoreV1Api, namespace: str, value: str) -> None:
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="creds"),
            data={"token": base64.b64encode(value.encode()).decode()},
        ),
    )


def hetzner_class(endpoint: str | None) -> NodeClassSpec:
    block: dict[str, Any] = {
        "location": "fsn1",
        "apiTokenSecretRef": {"name": "creds", "key": "token"},
    }
    if endpoint:
        block["endpoint"] = endpoint
    return NodeClassSpec.model_validate(
        {"hetzner": block, "join": {"hostApiServer": "https://10.0.0.1:6443"}}
    )


def secret_reads(kubeapi: KubeApiServer, since: int) -> list[Any]:
    return [r for r in kubeapi.audit(after=since) if r.resource == "secrets"]


def instance_ref(namespace: str, node_class: NodeClassSpec) -> InstanceRef:
    return InstanceRef(
        claim_name="burst-x",
        instance_id="hetzner/fsn1/1",
        provider="hetzner",
        cluster_id="c",
        namespace=namespace,
        node_class_name="default",
        node_class=node_class,
    )


def failure(fn: Any, arg: Any) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        ActivityEnvironment().run(fn, arg)
    return caught.value


def test_an_endpoint_not_allowed_is_refused_before_the_secret_or_the_call(
    kube_api_client, core, kubeapi, namespace, listener
) -> None:
    credential(core, namespace, "hcloud-token-of-the-namespace")
    acts = ComputeActivities(kube_api_client, Tenancy())
    since = kubeapi.audit_mark()
    err = failure(acts.get_instance, instance_ref(namespace, hetzner_class(listener.url)))
    assert err.type == "InvalidConfiguration" and err.non_retryable
    assert err.details == (ENDPOINT_NOT_ALLOWED,)
    assert "spec.hetzner.endpoint" in err.message
    assert "CLOUDBURST_ALLOWED_ENDPOINTS[hetzner]" in err.message
    assert listener.hits == [] and secret_reads(kubeapi, since) == []


def test_an_allowed_endpoint_gets_the_call(
    kube_api_client, core, kubeapi, namespace, listener
) -> None:
    """The same NodeClass once the operator allows the address: the token goes there."""
    credential(core, namespace, "hcloud-token-of-the-namespace")
    tenancy = Tenancy(allowed_endpoints={"hetzner": (listener.url,)})
    acts = ComputeActivities(kube_api_client, tenancy)
    with pytest.raises(Exception):  # noqa: B017 - the listener is no Hetzner
        ActivityEnvironment().run(
            acts.get_instance, instance_ref(namespace, hetzner_class(f"{listener.url}/v1"))
        )
    assert listener.hits
    assert listener.hits[0][2]["authorization"] == "Bearer hcloud-token-of-the-namespace"


def test_a_namespace_not_served_is_refused_unread(kube_api_client, core, kubeapi, namespace):
    credential(core, namespace, "hcloud-token-of-the-namespace")
    acts = ComputeActivities(kube_api_client, Tenancy(namespaces=frozenset({"team-a"})))
    since = kubeapi.audit_mark()
    err = failure(acts.delete_instance, instance_ref(namespace, hetzner_class(None)))
    # Deletion retries every error (a VM must not outlive its claim), visibly.
    assert err.type == "InvalidConfiguration" and not err.non_retryable
    assert f"namespace {namespace} is not one this Cloudburst serves" in err.message
    assert "CLOUDBURST_TENANT_NAMESPACES" in err.message and err.details == (NAMESPACE_NOT_SERVED,)
    assert secret_reads(kubeapi, since) == []


def test_planning_asks_no_fake_cloud_the_operator_does_not_allow(
    kube_api_client, core, kubeapi, namespace, listener
) -> None:
    credential(core, namespace, "fake-cloud-token")
    node_class = NodeClassSpec.model_validate(
        {
            "fake": {
                "endpoint": listener.url,
                "apiTokenSecretRef": {"name": "creds", "key": "token"},
            },
            "join": {"hostApiServer": "https://10.0.0.1:6443"},
        }
    )
    request = PlanRequest(
        pool_name="p",
        pool=NodePoolSpec.model_validate({"requirements": {"allowedProviders": ["fake"]}}),
        class_providers=["fake"],
        pods=[],
        namespace=namespace,
        node_class=node_class,
    )
    acts = PlanningActivities(kube_api_client, config=PlanningConfig(), tenancy=Tenancy())
    since = kubeapi.audit_mark()
    err = failure(acts.plan_capacity, request)
    assert err.type == "InvalidConfiguration" and "spec.fake.endpoint" in err.message
    assert listener.hits == [] and secret_reads(kubeapi, since) == []


def test_orphan_gc_skips_what_it_may_not_reach(listener: Listener) -> None:
    """Every NodeClass in the cluster is listed, and only served ones with allowed
    endpoints and own-namespace Secrets get their credential read and their cloud called."""
    with KubeApiServer(port=0) as server:
        api = server.api_client()
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        for ns in ("team-a", "team-b", "other"):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
            credential(core, ns, f"token-of-{ns}")

        def node_class(ns: str, name: str, block: dict[str, Any]) -> None:
            custom.create_namespaced_custom_object(
                "cloudburst.io",
                "v1alpha1",
                ns,
                "nodeclasses",
                {
                    "apiVersion": "cloudburst.io/v1alpha1",
                    "kind": "NodeClass",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"fake": block, "join": {"hostApiServer": "https://10.0.0.1:6443"}},
                },
            )

        ref = {"name": "creds", "key": "token"}
        allowed = f"{listener.url}/allowed"
        node_class("team-a", "good", {"endpoint": allowed, "apiTokenSecretRef": ref})
        node_class(
            "team-a", "elsewhere", {"endpoint": f"{listener.url}/evil", "apiTokenSecretRef": ref}
        )
        node_class(
            "team-a",
            "cross",
            {"endpoint": allowed, "apiTokenSecretRef": {**ref, "namespace": "team-b"}},
        )
        node_class("other", "unserved", {"endpoint": allowed, "apiTokenSecretRef": ref})
        tenancy = Tenancy(
            namespaces=frozenset({"team-a", "team-b"}), allowed_endpoints={"fake": (allowed,)}
        )
        since = server.audit_mark()
        inventory = ActivityEnvironment().run(
            GcActivities(api, tenancy).collect_orphans, OrphanGcInput(cluster_id="c")
        )
        reads = {(r.namespace, r.name) for r in server.audit(after=since) if r.verb == "get"}
        assert reads == {("team-a", "creds")}
        assert {p for _, p, _ in listener.hits} <= {"/allowed/v1/instances", "/allowed/instances"}
        assert {h[2]["authorization"] for h in listener.hits} == {"Bearer token-of-team-a"}
        assert [s.node_class_name for s in inventory.scopes] == ["good"]
        errors = " | ".join(inventory.errors)
        assert "team-a/elsewhere fake: EndpointNotAllowed" in errors
        assert "other/unserved fake: NamespaceNotServed" in errors
        assert "team-a/cross: invalid" in errors
        api.close()


@pytest.mark.parametrize(
    ("allowed", "endpoint", "ok"),
    [
        ("https://api.example.com", "https://api.example.com", True),
        ("https://api.example.com", "https://API.example.com:443/v1/", True),
        ("https://api.example.com/v1", "https://api.example.com/v1/servers", True),
        ("https://api.example.com/v1", "https://api.example.com/v10", False),
        ("https://api.example.com/v1", "https://api.example.com/", False),
        ("https://api.example.com", "https://api.example.com.attacker.net", False),
        ("https://api.example.com", "http://api.example.com", False),
        ("https://api.example.com", "https://api.example.com:8443", False),
        ("https://api.example.com", "https://user:pw@api.example.com", False),
        ("https://api.example.com", "https://api.example.com/?next=//evil", False),
        ("https://api.example.com", "ftp://api.example.com", False),
        ("https://api.example.com", "api.example.com", False),
    ],
)
def test_endpoint_matching(allowed: str, endpoint: str, ok: bool) -> None:
    tenancy = Tenancy(allowed_endpoints={"hetzner": (allowed,)})
    assert tenancy.endpoint_allowed("hetzner", endpoint) is ok
    assert not Tenancy().endpoint_allowed("hetzner", endpoint)
    assert not tenancy.endpoint_allowed("scaleway", endpoint)  # per provider


def test_url_parts_refuses_what_could_hide_a_host() -> None:
    assert url_parts("https://a.example/x") == ("https", "a.example", 443, ("x",))
    for url in ("https://a.example:99999", "https://@/", "https:///x", "//a.example"):
        assert url_parts(url) is None


def test_bootstrap_for_an_offering_not_allowed_mints_nothing(
    kube_api_client, core, kubeapi, namespace, listener
) -> None:
    """Refused in prepare_bootstrap, a claim fails before it launches anything: no token, no
    script, no VM for its cleanup to look for behind the refused endpoint."""
    node_class = NodeClassSpec.model_validate(
        {
            "fake": {"endpoint": listener.url, "apiTokenSecretRef": {"name": "creds", "key": "t"}},
            "join": {"hostApiServer": "https://10.0.0.1:6443"},
        }
    )
    since = kubeapi.audit_mark()
    err = failure(
        BootstrapActivities(kube_api_client, Tenancy()).prepare_bootstrap,
        BootstrapInput(
            claim_name="burst-refused",
            namespace=namespace,
            node_pool="p",
            node_class_name="c",
            node_class=node_class,
            offering=Offering(provider="fake", region="sim-1", instance_type="fk-small"),
        ),
    )
    assert err.type == "InvalidConfiguration" and err.details == (ENDPOINT_NOT_ALLOWED,)
    assert [r for r in kubeapi.audit(after=since) if r.resource == "secrets"] == []
    assert listener.hits == []
