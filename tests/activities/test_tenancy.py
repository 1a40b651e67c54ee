"""Confinement in the activities: a claim or a GC scope the operator does not allow reads no
Secret and calls no endpoint (the second line behind the trigger's refusal).

The activities run as the worker (`worker_api_client`: deploy/base/rbac.yaml's rights, and
`cloudburst tenant-rbac`'s in the namespaces it serves), so a Secret they leave unread is one
they could have read, and one outside what they are granted would be refused; the API server's
audit log says what they asked for."""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Iterator
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
from sim.controlplane.cluster import AuditRecord
from tests.activities.claims import authorise_bootstrap, claims_env
from tests.activities.conftest import WORKER_USER, AuditLog, create_namespace


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


def secret_reads(audit: AuditLog, since: int) -> list[AuditRecord]:
    """The worker's requests for Secrets since `since`."""
    return [r for r in audit.since(since, user=WORKER_USER) if r.resource == "secrets"]


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
    """`fn`'s error, run as a claim's own workflow runs it when `arg` names a claim."""
    env = (
        claims_env(arg.namespace, arg.claim_name)
        if isinstance(arg, InstanceRef)
        else ActivityEnvironment()
    )
    with pytest.raises(ApplicationError) as caught:
        env.run(fn, arg)
    return caught.value


def test_an_endpoint_not_allowed_is_refused_before_the_secret_or_the_call(
    worker_api_client, core, audit, namespace, serve_tenant, listener
) -> None:
    credential(core, namespace, "hcloud-token-of-the-namespace")
    serve_tenant(namespace)  # the worker may read it: it must not
    acts = ComputeActivities(worker_api_client, Tenancy())
    since = audit.mark()
    err = failure(acts.get_instance, instance_ref(namespace, hetzner_class(listener.url)))
    assert err.type == "InvalidConfiguration" and err.non_retryable
    assert err.details == (ENDPOINT_NOT_ALLOWED,)
    assert "spec.hetzner.endpoint" in err.message
    assert "CLOUDBURST_ALLOWED_ENDPOINTS[hetzner]" in err.message
    assert listener.hits == [] and secret_reads(audit, since) == []


def test_an_allowed_endpoint_gets_the_call(
    worker_api_client, core, namespace, serve_tenant, listener
) -> None:
    """The same NodeClass once the operator allows the address: the token goes there (read
    with what `cloudburst tenant-rbac` grants the worker)."""
    credential(core, namespace, "hcloud-token-of-the-namespace")
    serve_tenant(namespace)
    tenancy = Tenancy(allowed_endpoints={"hetzner": (listener.url,)})
    acts = ComputeActivities(worker_api_client, tenancy)
    with pytest.raises(Exception):  # noqa: B017 - the listener is no Hetzner
        asked = instance_ref(namespace, hetzner_class(f"{listener.url}/v1"))
        claims_env(namespace, asked.claim_name).run(acts.get_instance, asked)
    assert listener.hits
    assert listener.hits[0][2]["authorization"] == "Bearer hcloud-token-of-the-namespace"


def test_a_namespace_not_served_is_refused_unread(worker_api_client, core, audit, namespace):
    """Not served, so not granted either (an operator runs `cloudburst tenant-rbac` for the
    namespaces it lists): a read would be refused, and logged."""
    credential(core, namespace, "hcloud-token-of-the-namespace")
    acts = ComputeActivities(worker_api_client, Tenancy(namespaces=frozenset({"team-a"})))
    since = audit.mark()
    err = failure(acts.delete_instance, instance_ref(namespace, hetzner_class(None)))
    # Deletion retries every error (a VM must not outlive its claim), visibly.
    assert err.type == "InvalidConfiguration" and not err.non_retryable
    assert f"namespace {namespace} is not one this Cloudburst serves" in err.message
    assert "CLOUDBURST_TENANT_NAMESPACES" in err.message and err.details == (NAMESPACE_NOT_SERVED,)
    assert secret_reads(audit, since) == []


def test_planning_asks_no_fake_cloud_the_operator_does_not_allow(
    worker_api_client, core, audit, namespace, serve_tenant, listener
) -> None:
    credential(core, namespace, "fake-cloud-token")
    serve_tenant(namespace)
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
    acts = PlanningActivities(worker_api_client, config=PlanningConfig(), tenancy=Tenancy())
    since = audit.mark()
    err = failure(acts.plan_capacity, request)
    assert err.type == "InvalidConfiguration" and "spec.fake.endpoint" in err.message
    assert listener.hits == [] and secret_reads(audit, since) == []


def test_orphan_gc_skips_what_it_may_not_reach(
    worker_api_client,
    kube_api_client,
    core,
    audit,
    unique,
    serve_tenant: Callable[[str], None],
    listener: Listener,
) -> None:
    """Every NodeClass in the cluster is listed, and only served ones with allowed
    endpoints and own-namespace Secrets get their credential read and their cloud called.

    The cluster is the session's: other tests' NodeClasses are listed too, so what is checked
    is what became of this test's, in namespaces of its own."""
    team_a, team_b, other = (f"{ns}-{unique}" for ns in ("team-a", "team-b", "other"))
    custom = client.CustomObjectsApi(kube_api_client)
    for ns in (team_a, team_b, other):
        create_namespace(core, ns)
        credential(core, ns, f"token-of-{ns}")
    for ns in (team_a, team_b):  # what an operator serving them grants the worker
        serve_tenant(ns)

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
    node_class(team_a, "good", {"endpoint": allowed, "apiTokenSecretRef": ref})
    node_class(team_a, "elsewhere", {"endpoint": f"{listener.url}/evil", "apiTokenSecretRef": ref})
    node_class(
        team_a, "cross", {"endpoint": allowed, "apiTokenSecretRef": {**ref, "namespace": team_b}}
    )
    node_class(other, "unserved", {"endpoint": allowed, "apiTokenSecretRef": ref})
    tenancy = Tenancy(
        namespaces=frozenset({team_a, team_b}), allowed_endpoints={"fake": (allowed,)}
    )
    since = audit.mark()
    inventory = ActivityEnvironment().run(
        GcActivities(worker_api_client, tenancy).collect_orphans, OrphanGcInput(cluster_id="c")
    )
    mine = {team_a, team_b, other}
    reads = {
        (r.namespace, r.name)
        for r in audit.since(since, user=WORKER_USER)
        if r.verb == "get" and r.namespace in mine
    }
    assert reads == {(team_a, "creds")}
    assert {p for _, p, _ in listener.hits} <= {"/allowed/v1/instances", "/allowed/instances"}
    assert {h[2]["authorization"] for h in listener.hits} == {f"Bearer token-of-{team_a}"}
    assert [s.node_class_name for s in inventory.scopes if s.namespace in mine] == ["good"]
    errors = " | ".join(inventory.errors)
    assert f"{team_a}/elsewhere fake: EndpointNotAllowed" in errors
    assert f"{other}/unserved fake: NamespaceNotServed" in errors
    assert f"{team_a}/cross: invalid" in errors


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
    worker_api_client, kube_api_client, audit, namespace, listener
) -> None:
    """Refused in prepare_bootstrap, a claim fails before it launches anything: no token, no
    script, no VM for its cleanup to look for behind the refused endpoint."""
    node_class = NodeClassSpec.model_validate(
        {
            "fake": {"endpoint": listener.url, "apiTokenSecretRef": {"name": "creds", "key": "t"}},
            "join": {"hostApiServer": "https://10.0.0.1:6443"},
        }
    )
    claim, asked = authorise_bootstrap(
        kube_api_client,
        BootstrapInput(
            claim_name="burst-refused",
            namespace=namespace,
            node_pool="p",
            node_class_name="c",
            node_class=node_class,
            offering=Offering(provider="fake", region="sim-1", instance_type="fk-small"),
        ),
    )
    since = audit.mark()
    with pytest.raises(ApplicationError) as refused:
        claim.env().run(BootstrapActivities(worker_api_client, Tenancy()).prepare_bootstrap, asked)
    err = refused.value
    assert err.type == "InvalidConfiguration" and err.details == (ENDPOINT_NOT_ALLOWED,)
    assert secret_reads(audit, since) == []
    assert listener.hits == []
