"""The Kubernetes API emulator, driven over HTTP by the official `kubernetes` client."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client, config, watch
from kubernetes.client import ApiException

from sim.kubeapi import KubeApiServer
from sim.kubeapi.resources import NAMESPACES, PODS
from sim.kubeapi.store import Store

GROUP, VERSION = "cloudburst.io", "v1alpha1"
MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def server() -> Iterator[KubeApiServer]:
    srv = KubeApiServer(host="127.0.0.1", port=0)
    srv.start()
    srv.start()  # idempotent
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def api(server: KubeApiServer) -> Iterator[client.ApiClient]:
    api_client = server.api_client()
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def core(api: client.ApiClient) -> Any:
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def custom(api: client.ApiClient) -> Any:
    return client.CustomObjectsApi(api)


@pytest.fixture(scope="module")
def policy(api: client.ApiClient) -> Any:
    return client.PolicyV1Api(api)


@pytest.fixture
def ns(core: Any) -> str:
    """A fresh namespace per test, so tests never see each other's objects."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def pod(
    name: str,
    labels: dict[str, str] | None = None,
    phase: str | None = None,
    ready: bool = True,
    node: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    if node:
        body["spec"]["nodeName"] = node
    if phase:
        conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
        body["status"] = {"phase": phase, "conditions": conditions}
    return body


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body or "{}")
    assert body["kind"] == "Status"
    return body


def raw(
    server: KubeApiServer, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes]:
    req = urllib.request.Request(server.url + path, data=body, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


# ---- bootstrap state -----------------------------------------------------------------------


def test_seeded_namespaces_and_cluster_info_ca(server: KubeApiServer, core: Any) -> None:
    names = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names
    assert core.read_namespace("default").status.phase == "Active"

    cm = core.read_namespaced_config_map("cluster-info", "kube-public")
    kubeconfig = yaml.safe_load(cm.data["kubeconfig"])
    cluster = kubeconfig["clusters"][0]["cluster"]
    assert cluster["server"] == server.url
    pem = base64.b64decode(cluster["certificate-authority-data"])
    assert pem.decode() == server.ca_cert_pem
    cert = x509.load_pem_x509_certificate(pem)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert len(hashlib.sha256(spki).hexdigest()) == 64  # what `kubeadm join` pins


def test_kubeconfig_version_health_and_discovery(server: KubeApiServer, tmp_path: Path) -> None:
    path = server.write_kubeconfig(tmp_path / "kubeconfig")
    doc = yaml.safe_load(path.read_text())
    assert doc["current-context"] == "cloudburst-sim"
    with config.new_client_from_config(str(path)) as api_client:
        core: Any = client.CoreV1Api(api_client)
        version: Any = client.VersionApi(api_client)
        assert core.read_namespace("kube-system").metadata.name == "kube-system"
        assert version.get_code().git_version.startswith("v1.34.")
    assert raw(server, "GET", "/healthz") == (200, b"ok")
    assert raw(server, "GET", "/readyz") == (200, b"ok")
    code, body = raw(server, "GET", "/apis")
    assert code == 200 and GROUP in {g["name"] for g in json.loads(body)["groups"]}
    code, body = raw(server, "GET", f"/apis/{GROUP}/{VERSION}")
    assert "nodeclaims/status" in {r["name"] for r in json.loads(body)["resources"]}


# ---- CRUD and statuses ---------------------------------------------------------------------


def test_pod_crud_and_status_codes(core: Any, ns: str) -> None:
    created, code, _ = core.create_namespaced_pod_with_http_info(ns, pod("p1"))
    assert code == 201
    md = created.metadata
    assert md.uid and md.creation_timestamp and md.generation == 1 and md.namespace == ns
    assert int(md.resource_version) > 0
    assert created.status.phase == "Pending"

    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(ns, pod("p1"))
    assert exc.value.status == 409 and status_of(exc.value)["reason"] == "AlreadyExists"

    assert core.read_namespaced_pod("p1", ns).metadata.uid == md.uid
    deleted = core.delete_namespaced_pod("p1", ns, grace_period_seconds=30)
    assert deleted.metadata.name == "p1"
    for call in (core.read_namespaced_pod, core.delete_namespaced_pod):
        with pytest.raises(ApiException) as exc:
            call("p1", ns)
        assert exc.value.status == 404 and status_of(exc.value)["reason"] == "NotFound"


def test_namespace_lifecycle(core: Any) -> None:
    core.create_namespace({"metadata": {"name": "doomed"}})
    core.create_namespaced_config_map("doomed", {"metadata": {"name": "cm"}})
    core.delete_namespace("doomed")
    with pytest.raises(ApiException) as exc:
        core.read_namespace("doomed")
    assert exc.value.status == 404
    with pytest.raises(ApiException) as exc:  # contents went with it; creating there fails
        core.create_namespaced_config_map("doomed", {"metadata": {"name": "cm"}})
    assert exc.value.status == 404


def test_node_secret_configmap_event_crud(core: Any, ns: str) -> None:
    node = core.create_node({"metadata": {"name": f"node-{ns}", "labels": {"zone": "a"}}})
    assert node.metadata.namespace is None
    assert core.read_node(f"node-{ns}").metadata.labels == {"zone": "a"}
    core.delete_node(f"node-{ns}")
    with pytest.raises(ApiException):
        core.read_node(f"node-{ns}")

    secret = client.V1Secret(
        metadata=client.V1ObjectMeta(name="s"), string_data=None, data={"k": "dg=="}
    )
    core.create_namespaced_secret(ns, secret)
    assert core.read_namespaced_secret("s", ns).data == {"k": "dg=="}
    core.delete_namespaced_secret("s", ns)

    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    cm.data = {"a": "2"}
    replaced = core.replace_namespaced_config_map("cm", ns, cm)
    assert replaced.data == {"a": "2"}
    assert int(replaced.metadata.resource_version) > int(cm.metadata.resource_version)

    event = {
        "metadata": {"generateName": "ev-"},
        "involvedObject": {"kind": "Pod", "name": "p1", "namespace": ns},
        "reason": "Burst",
        "message": "hello",
        "type": "Normal",
    }
    core.create_namespaced_event(ns, event)
    core.create_namespaced_event(ns, event | {"involvedObject": {"kind": "Pod", "name": "p2"}})
    found = core.list_namespaced_event(ns, field_selector="involvedObject.name=p1").items
    assert [e.message for e in found] == ["hello"]

    events_v1: Any = client.EventsV1Api(core.api_client)
    ev = events_v1.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "e1"},
            "eventTime": "2025-01-01T00:00:00.000000Z",
            "reason": "X",
            "action": "Y",
            "reportingController": "c",
            "reportingInstance": "i",
            "type": "Normal",
        },
    )
    assert ev.metadata.name == "e1"
    apps: Any = client.AppsV1Api(core.api_client)
    ds = {
        "metadata": {"name": "ds"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": pod("x")["spec"]},
        },
    }
    assert apps.create_namespaced_daemon_set(ns, ds).metadata.name == "ds"
    assert [d.metadata.name for d in apps.list_namespaced_daemon_set(ns).items] == ["ds"]


def test_optimistic_concurrency(core: Any, ns: str) -> None:
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"v": "1"}})
    cm.data = {"v": "2"}
    fresh = core.replace_namespaced_config_map("cm", ns, cm)
    cm.data = {"v": "3"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_config_map("cm", ns, cm)
    assert exc.value.status == 409 and status_of(exc.value)["reason"] == "Conflict"
    fresh.data = {"v": "3"}
    assert core.replace_namespaced_config_map("cm", ns, fresh).data == {"v": "3"}


def test_generate_name(core: Any, ns: str) -> None:
    names = {
        core.create_namespaced_pod(
            ns, {**pod(""), "metadata": {"generateName": "web-"}}
        ).metadata.name
        for _ in range(5)
    }
    assert len(names) == 5 and all(n.startswith("web-") and len(n) == 9 for n in names)


def test_invalid_requests(server: KubeApiServer, core: Any, ns: str) -> None:
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_config_map(ns, {"metadata": {}})
    assert exc.value.status == 422 and status_of(exc.value)["reason"] == "Invalid"
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_config_map("cm", ns, {"metadata": {"name": "other"}})
    assert exc.value.status == 422
    code, _ = raw(server, "POST", f"/api/v1/namespaces/{ns}/configmaps", b"{not json")
    assert code == 400
    code, body = raw(server, "GET", f"/api/v1/namespaces/{ns}/widgets")
    assert code == 404 and json.loads(body)["kind"] == "Status"
    assert raw(server, "GET", "/nonsense")[0] == 404


# ---- selectors -----------------------------------------------------------------------------


def test_label_selectors(core: Any, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("a", {"app": "web", "tier": "front"}))
    core.create_namespaced_pod(ns, pod("b", {"app": "web", "tier": "back"}))
    core.create_namespaced_pod(ns, pod("c", {"app": "db"}))

    def names(selector: str) -> list[str]:
        return [
            p.metadata.name for p in core.list_namespaced_pod(ns, label_selector=selector).items
        ]

    assert names("app=web") == ["a", "b"]
    assert names("app==web,tier=back") == ["b"]
    assert names("app!=web") == ["c"]
    assert names("tier in (front, back)") == ["a", "b"]
    assert names("tier notin (front)") == ["b", "c"]
    assert names("tier") == ["a", "b"]
    assert names("!tier") == ["c"]
    assert names("") == ["a", "b", "c"]


def test_field_selectors_and_cluster_wide_list(core: Any, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("bound", node="n1", phase="Running"))
    core.create_namespaced_pod(ns, pod("pending"))

    def names(selector: str) -> list[str]:
        return [
            p.metadata.name for p in core.list_namespaced_pod(ns, field_selector=selector).items
        ]

    assert names("spec.nodeName=n1") == ["bound"]
    assert names("spec.nodeName=") == ["pending"]
    assert names("status.phase!=Running") == ["pending"]
    assert names("metadata.name==bound,status.phase=Running") == ["bound"]
    everywhere = core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={ns}")
    assert [p.metadata.name for p in everywhere.items] == ["bound", "pending"]
    assert int(everywhere.metadata.resource_version) >= 1


# ---- patches -------------------------------------------------------------------------------


def test_strategic_merge_vs_merge_vs_json_patch(core: Any, ns: str) -> None:
    name = f"node-{ns}"
    core.create_node(
        {
            "metadata": {"name": name},
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "MemoryPressure", "status": "False"},
                ]
            },
        }
    )
    # Strategic merge (the client's default for a dict body): conditions merged by type.
    node = core.patch_node_status(
        name, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    assert {c.type: c.status for c in node.status.conditions} == {
        "Ready": "True",
        "MemoryPressure": "False",
    }
    # NodeSpec.taints has no merge key upstream: a strategic merge replaces the whole list,
    # as the real API server does (so callers must send every taint they want to keep).
    node = core.patch_node(name, {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}})
    assert [t.key for t in node.spec.taints] == ["b"]
    node = core.patch_node(name, {"spec": {"unschedulable": True}})
    assert node.spec.unschedulable is True
    assert [
        n.metadata.name for n in core.list_node(field_selector="spec.unschedulable=true").items
    ] == [name]

    # JSON merge patch replaces lists wholesale.
    node = core.patch_node_status(
        name,
        {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
        _content_type=MERGE,
    )
    assert [(c.type, c.status) for c in node.status.conditions] == [("Ready", "Unknown")]

    # JSON patch: the client sends it for a list body.
    node = core.patch_node(name, [{"op": "add", "path": "/metadata/labels", "value": {"x": "1"}}])
    assert node.metadata.labels == {"x": "1"}
    node = core.patch_node(name, [{"op": "remove", "path": "/metadata/labels/x"}])
    assert not node.metadata.labels


def test_pod_finalizers_merge_as_a_set(core: Any, ns: str) -> None:
    core.create_namespaced_pod(ns, {**pod("p"), "metadata": {"name": "p", "finalizers": ["a/x"]}})
    p = core.patch_namespaced_pod("p", ns, {"metadata": {"finalizers": ["b/y"]}})
    assert p.metadata.finalizers == ["a/x", "b/y"]
    core.delete_namespaced_pod("p", ns)
    p = core.read_namespaced_pod("p", ns)
    assert p.metadata.deletion_timestamp is not None
    core.patch_namespaced_pod(
        "p", ns, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x", "b/y"]}}
    )
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod("p", ns)
    assert exc.value.status == 404


# ---- custom resources ----------------------------------------------------------------------


CLAIM_SPEC = {
    "nodePool": "p",
    "nodeClass": "aws",
    "offerings": [{"provider": "aws", "region": "eu-west-1", "instanceType": "t3.small"}],
}


def test_custom_resource_lifecycle(custom: Any, ns: str) -> None:
    args = (GROUP, VERSION, ns, "nodeclaims")
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeClaim",
        "metadata": {"name": "claim", "labels": {"pool": "p"}, "finalizers": ["cloudburst.io/vm"]},
        "spec": CLAIM_SPEC,
        "status": {"phase": "Ignored"},
    }
    created = custom.create_namespaced_custom_object(*args, body)
    assert created["metadata"]["uid"] and "status" not in created  # status goes through /status
    assert custom.get_namespaced_custom_object(*args, "claim")["spec"] == CLAIM_SPEC
    listed = custom.list_namespaced_custom_object(*args, label_selector="pool=p")
    assert [o["metadata"]["name"] for o in listed["items"]] == ["claim"]
    assert listed["items"][0]["kind"] == "NodeClaim"
    everywhere = custom.list_cluster_custom_object(GROUP, VERSION, "nodeclaims")
    assert "claim" in [o["metadata"]["name"] for o in everywhere["items"]]

    st = custom.patch_namespaced_custom_object_status(
        *args, "claim", {"status": {"phase": "Ready"}, "spec": {"nodeClass": "changed"}}
    )
    assert st["status"] == {"phase": "Ready"} and st["spec"] == CLAIM_SPEC
    assert st["metadata"]["generation"] == 1
    patched = custom.patch_namespaced_custom_object(
        *args, "claim", {"spec": {"nodeClass": "gcp"}, "status": {"phase": "Hacked"}}
    )
    assert patched["spec"] == CLAIM_SPEC | {"nodeClass": "gcp"}
    assert patched["status"] == {"phase": "Ready"}
    assert patched["metadata"]["generation"] == 2

    specs = {"NodePool": {}, "NodeClass": {"fake": {}, "join": {"hostApiServer": "https://k"}}}
    for plural, kind in (("nodepools", "NodePool"), ("nodeclasses", "NodeClass")):
        obj = custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            ns,
            plural,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": kind,
                "metadata": {"name": "x"},
                "spec": specs[kind],
            },
        )
        assert obj["kind"] == kind and obj["metadata"]["namespace"] == ns

    deleting = custom.delete_namespaced_custom_object(*args, "claim")
    assert deleting["metadata"]["deletionTimestamp"]
    assert custom.get_namespaced_custom_object(*args, "claim")["metadata"]["deletionTimestamp"]
    custom.patch_namespaced_custom_object(*args, "claim", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as exc:
        custom.get_namespaced_custom_object(*args, "claim")
    assert exc.value.status == 404


def test_custom_resource_replace_and_status_put(custom: Any, ns: str) -> None:
    args = (GROUP, VERSION, ns, "nodepools")
    obj = custom.create_namespaced_custom_object(
        *args,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodePool",
            "metadata": {"name": "p"},
            "spec": {"weight": 1},
        },
    )
    obj["status"] = {"nodes": 3}
    obj = custom.replace_namespaced_custom_object_status(*args, "p", obj)
    assert obj["status"] == {"nodes": 3}
    stale = dict(obj, spec={"weight": 2})
    custom.replace_namespaced_custom_object(*args, "p", dict(obj, spec={"weight": 3}))
    with pytest.raises(ApiException) as exc:
        custom.replace_namespaced_custom_object(*args, "p", stale)
    assert exc.value.status == 409
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(
            *args, "p", {"spec": {}}, _content_type="application/strategic-merge-patch+json"
        )
    assert exc.value.status == 415  # as a real server answers for custom resources


# ---- watch ---------------------------------------------------------------------------------


def collect(stream: Iterator[dict[str, Any]], w: watch.Watch, count: int) -> list[tuple[str, str]]:
    seen = []
    for event in stream:
        obj = event["object"]
        name = obj["metadata"]["name"] if isinstance(obj, dict) else obj.metadata.name
        seen.append((event["type"], name))
        if len(seen) == count:
            w.stop()
    return seen


def test_watch_from_resource_version_sees_later_events_only(core: Any, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("before"))
    rv = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod(ns, pod("after"))
    core.delete_namespaced_pod("after", ns)
    w = watch.Watch()
    stream = w.stream(core.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=5)
    assert collect(stream, w, 2) == [("ADDED", "after"), ("DELETED", "after")]


def test_watch_without_resource_version_lists_then_follows(core: Any, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("existing"))

    def later() -> None:
        time.sleep(0.2)
        core.create_namespaced_pod(ns, pod("live"))

    threading.Thread(target=later, daemon=True).start()
    w = watch.Watch()
    stream = w.stream(
        core.list_pod_for_all_namespaces,
        field_selector=f"metadata.namespace={ns}",
        timeout_seconds=5,
    )
    assert collect(stream, w, 2) == [("ADDED", "existing"), ("ADDED", "live")]


def test_watch_selector_transitions_and_timeout(core: Any, ns: str) -> None:
    rv = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod(ns, pod("p", {"app": "other"}))
    core.patch_namespaced_pod("p", ns, {"metadata": {"labels": {"app": "web"}}})
    core.patch_namespaced_pod("p", ns, {"metadata": {"annotations": {"a": "b"}}})
    core.patch_namespaced_pod("p", ns, {"metadata": {"labels": {"app": "other"}}})
    started = time.monotonic()
    events = list(
        watch.Watch().stream(
            core.list_namespaced_pod,
            ns,
            label_selector="app=web",
            resource_version=rv,
            timeout_seconds=1,
        )
    )
    assert time.monotonic() - started < 4  # timeoutSeconds ended the stream
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "p"),
        ("MODIFIED", "p"),
        ("DELETED", "p"),
    ]


def test_watch_custom_objects(custom: Any, ns: str) -> None:
    args = (GROUP, VERSION, ns, "nodeclaims")
    custom.create_namespaced_custom_object(
        *args,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": CLAIM_SPEC,
        },
    )

    def later() -> None:
        time.sleep(0.2)
        custom.patch_namespaced_custom_object_status(*args, "c", {"status": {"phase": "Ready"}})

    threading.Thread(target=later, daemon=True).start()
    w = watch.Watch()
    stream = w.stream(custom.list_namespaced_custom_object, *args, timeout_seconds=5)
    assert collect(stream, w, 2) == [("ADDED", "c"), ("MODIFIED", "c")]


def test_watch_too_old_resource_version_is_gone() -> None:
    with KubeApiServer(port=0, event_log_size=5) as small, small.api_client() as api_client:
        core: Any = client.CoreV1Api(api_client)
        for i in range(10):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"cm{i}"}})
        with pytest.raises(ApiException) as exc:
            list(
                watch.Watch().stream(
                    core.list_namespaced_config_map,
                    "default",
                    resource_version="2",
                    timeout_seconds=1,
                )
            )
        assert exc.value.status == 410
        rv = core.list_namespaced_config_map("default").metadata.resource_version
        assert (
            list(
                watch.Watch().stream(
                    core.list_namespaced_config_map,
                    "default",
                    resource_version=rv,
                    timeout_seconds=1,
                )
            )
            == []
        )


def test_a_connection_serves_the_next_request_after_a_watch_ends() -> None:
    """A client's pool takes a connection back once a watch's stream has ended and sends its
    next request (a POST, which it never retries) on it: as on a real API server, that
    connection must still be open, whether the watch timed out or was answered 410 Gone."""

    def create(conn: http.client.HTTPConnection, name: str) -> tuple[int, str]:
        conn.request(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            body=json.dumps({"metadata": {"name": name}}),
            headers={"Content-Type": "application/json"},
        )
        created = conn.getresponse()
        return created.status, json.loads(created.read())["metadata"]["name"]

    with KubeApiServer(port=0, event_log_size=5) as small:
        conn = http.client.HTTPConnection("127.0.0.1", small.port, timeout=10)
        try:
            for i in range(10):  # resourceVersion 2 leaves the event window
                create(conn, f"filler-{i}")
            for query, ending in [("timeoutSeconds=1", 0), ("resourceVersion=2", 410)]:
                conn.request("GET", f"/api/v1/namespaces/default/configmaps?watch=true&{query}")
                watched = conn.getresponse()
                last = json.loads(watched.read().splitlines()[-1])
                assert (watched.status, last["object"].get("code", 0)) == (200, ending)
                assert watched.getheader("Connection") != "close"
                assert create(conn, f"after-{ending}") == (201, f"after-{ending}")
        finally:
            conn.close()


# ---- eviction and binding ------------------------------------------------------------------


def pdb(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }


def evict(core: Any, name: str, ns: str) -> None:
    core.create_namespaced_pod_eviction(
        name, ns, client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))
    )


def test_eviction_with_min_available(core: Any, policy: Any, ns: str) -> None:
    for name in ("a", "b"):
        core.create_namespaced_pod(ns, pod(name, {"app": "web"}, phase="Running"))
    core.create_namespaced_pod(ns, pod("pending", {"app": "web"}))
    policy.create_namespaced_pod_disruption_budget(ns, pdb("min2", minAvailable=2))

    status = policy.read_namespaced_pod_disruption_budget("min2", ns).status
    assert (
        status.expected_pods,
        status.current_healthy,
        status.desired_healthy,
        status.disruptions_allowed,
    ) == (3, 2, 2, 0)
    with pytest.raises(ApiException) as exc:
        evict(core, "a", ns)
    body = status_of(exc.value)
    assert exc.value.status == 429 and body["reason"] == "TooManyRequests"
    assert "disruption budget" in body["message"]
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"

    evict(core, "pending", ns)  # not running: always evictable
    core.create_namespaced_pod(ns, pod("c", {"app": "web"}, phase="Running"))
    evict(core, "a", ns)
    with pytest.raises(ApiException):
        core.read_namespaced_pod("a", ns)
    assert policy.list_namespaced_pod_disruption_budget(ns).items[0].status.disruptions_allowed == 0


def test_eviction_with_max_unavailable_percentage(core: Any, policy: Any, ns: str) -> None:
    for name in ("a", "b", "c"):
        core.create_namespaced_pod(ns, pod(name, {"app": "web"}, phase="Running"))
    core.create_namespaced_pod(ns, pod("sick", {"app": "web"}, phase="Running", ready=False))
    core.create_namespaced_pod(ns, pod("unrelated", {"app": "db"}, phase="Running"))
    policy.create_namespaced_pod_disruption_budget(ns, pdb("max25", maxUnavailable="25%"))

    # 4 expected, 25% -> 1 may be unavailable -> 3 desired, 3 healthy: no room.
    with pytest.raises(ApiException) as exc:
        evict(core, "a", ns)
    assert exc.value.status == 429
    evict(core, "unrelated", ns)  # no budget selects it
    evict(core, "sick", ns)  # unhealthy, and the budget is still met
    evict(core, "a", ns)  # now 3 expected, 1 may go


def test_binding_and_double_binding(core: Any, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("p"))
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="p"),
        target=client.V1ObjectReference(kind="Node", name="n1"),
    )
    resp = core.create_namespaced_pod_binding("p", ns, binding, _preload_content=False)
    assert resp.status == 201
    bound = core.read_namespaced_pod("p", ns)
    assert bound.spec.node_name == "n1"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in bound.status.conditions)
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_binding("p", ns, binding, _preload_content=False)
    assert exc.value.status == 409


def test_delete_collection_with_label_selector(core: Any, ns: str) -> None:
    for name, app in (("a", "web"), ("b", "web"), ("c", "db")):
        core.create_namespaced_pod(ns, pod(name, {"app": app}))
    core.delete_collection_namespaced_pod(ns, label_selector="app=web")
    assert [p.metadata.name for p in core.list_namespaced_pod(ns).items] == ["c"]


# ---- robustness ----------------------------------------------------------------------------


def test_slow_watcher_is_cut_off_not_waited_for() -> None:
    store = Store(watch_queue=3)
    w = store.watch(PODS, None, None, None, None)
    for i in range(10):  # nobody drains the queue: writers must not block
        store.create(NAMESPACES, "", {"metadata": {"name": f"ns{i}"}})
        store.create(PODS, f"ns{i}", pod("p"))
    assert w.closed and store.watcher_count() == 0


def test_watch_ends_when_client_stops_or_server_stops(
    core: Any, server: KubeApiServer, ns: str
) -> None:
    core.create_namespaced_pod(ns, pod("p"))
    w = watch.Watch()
    assert collect(w.stream(core.list_namespaced_pod, ns), w, 1) == [("ADDED", "p")]
    deadline = time.monotonic() + 5
    while server.store.watcher_count() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.store.watcher_count() == 0  # the server noticed the client hung up

    with KubeApiServer() as other, other.api_client() as api_client:
        other_core: Any = client.CoreV1Api(api_client)
        seen: list[str] = []
        done = threading.Event()

        def follow() -> None:
            with contextlib.suppress(Exception):  # the re-connect after stop() fails
                for event in watch.Watch().stream(other_core.list_namespace):
                    seen.append(event["type"])
            done.set()

        threading.Thread(target=follow, daemon=True).start()
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.02)
        other.stop()
        assert done.wait(10) and seen[:1] == ["ADDED"]


def test_concurrent_read_modify_write_loses_no_update(core: Any, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "counter"}, "data": {"n": "0"}})

    def bump(times: int) -> None:
        for _ in range(times):
            while True:
                cm = core.read_namespaced_config_map("counter", ns)
                cm.data = {"n": str(int(cm.data["n"]) + 1)}
                try:
                    core.replace_namespaced_config_map("counter", ns, cm)
                    break
                except ApiException as e:
                    assert e.status == 409

    threads = [threading.Thread(target=bump, args=(15,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert core.read_namespaced_config_map("counter", ns).data == {"n": "60"}


def test_watch_snapshot_and_subscribe_has_no_gap(core: Any, ns: str) -> None:
    total = 150

    def writer() -> None:
        for i in range(total):
            core.create_namespaced_config_map(ns, {"metadata": {"name": f"cm{i}"}})

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(0.05)  # start watching while the writer is busy
    w = watch.Watch()
    seen = collect(w.stream(core.list_namespaced_config_map, ns, timeout_seconds=10), w, total)
    t.join()
    assert sorted(name for _, name in seen) == sorted(f"cm{i}" for i in range(total))
    assert {kind for kind, _ in seen} == {"ADDED"}


def test_the_audit_log_records_verbs_and_says_when_it_lost_some() -> None:
    from kubernetes import client as k8s

    with KubeApiServer(port=0, audit_size=4) as server:
        core = k8s.CoreV1Api(server.api_client())
        mark = server.audit_mark()
        core.create_namespaced_secret(
            "default", k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="s"), string_data={"k": "v"})
        )
        core.read_namespaced_secret("s", "default")
        core.list_namespaced_secret("default")
        core.delete_namespaced_secret("s", "default")
        seen = [(r.verb, r.resource, r.namespace, r.name) for r in server.audit(after=mark)]
        assert seen == [
            ("create", "secrets", "default", ""),
            ("get", "secrets", "default", "s"),
            ("list", "secrets", "default", ""),
            ("delete", "secrets", "default", "s"),
        ]
        core.list_namespaced_secret("default")
        with pytest.raises(LookupError):
            server.audit(after=mark)  # the create was dropped: never a silent gap
        assert len(server.audit(after=mark + 1)) == 4


def test_forbidden_requests_are_refused_like_rbac() -> None:
    from kubernetes import client as k8s

    with KubeApiServer(port=0) as server:
        core = k8s.CoreV1Api(server.api_client())
        server.forbid("get", "secrets", "kube-system")
        with pytest.raises(k8s.ApiException) as refused:
            core.read_namespaced_secret("anything", "kube-system")
        assert refused.value.status == 403
        status = json.loads(refused.value.body or "{}")
        assert status["reason"] == "Forbidden"
        assert 'cannot get resource "secrets"' in status["message"]
        core.list_namespaced_secret("kube-system")  # another verb: allowed
        server.allow_all()
        with pytest.raises(k8s.ApiException) as missing:
            core.read_namespaced_secret("anything", "kube-system")
        assert missing.value.status == 404
