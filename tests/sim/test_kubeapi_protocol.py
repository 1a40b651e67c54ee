"""The emulator's wire protocol, request by request, as a real API server answers it.

Content negotiation (protobuf bodies, Tables, partial metadata, 406/415), paging, watch-list,
discovery, server-side apply and managedFields, strategic-merge keys from the kinds' schemas,
the `scale` subresource, Service defaults, events.k8s.io, reviews, Status bodies.
"""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from sim.kubeapi import KubeApiServer

JSON = "application/json"
PROTOBUF = "application/vnd.kubernetes.protobuf"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
# `kubectl create namespace x`, as kubectl 1.37 encodes it (captured with -v=9).
NAMESPACE_X = bytes.fromhex(
    "6b3873000a0f0a02763112094e616d65737061636512190a110a01781200"
    "1a00220 02a0032003800420012001a020a001a002200".replace(" ", "")
)


@pytest.fixture(scope="module")
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as srv:
        yield srv


def call(
    server: KubeApiServer,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = JSON,
    accept: str = JSON,
    user_agent: str = "kubectl/v1.37.1 (linux/amd64) kubernetes/f78e722",
) -> tuple[int, Any, dict[str, str]]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method=method)
    req.add_header("Content-Type", content_type)
    req.add_header("Accept", accept)
    req.add_header("User-Agent", user_agent)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw, code, headers = resp.read(), resp.status, dict(resp.headers)
    except urllib.error.HTTPError as e:
        raw, code, headers = e.read(), e.code, dict(e.headers)
    text = raw.decode()
    try:
        return code, json.loads(text), headers
    except ValueError:
        return code, [json.loads(line) for line in text.splitlines() if line], headers


def cm(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


# ---- bodies in, representations out -------------------------------------------------------


def test_a_protobuf_body_from_kubectl_creates_the_object(server: KubeApiServer) -> None:
    code, body, _ = call(server, "POST", "/api/v1/namespaces", NAMESPACE_X, PROTOBUF)
    assert code == 201, body
    assert body["kind"] == "Namespace" and body["metadata"]["name"] == "x"
    assert body["status"] == {"phase": "Active"}


def test_unsupported_media_types_list_exactly_what_is_accepted(server: KubeApiServer) -> None:
    path = "/apis/cloudburst.io/v1alpha1/namespaces/default/nodepools"
    code, body, _ = call(server, "POST", path, b"k8s\x00", PROTOBUF)
    assert (code, body["reason"]) == (415, "UnsupportedMediaType")
    assert body["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml"
    )
    call(server, "POST", "/api/v1/namespaces/default/configmaps", cm("media"))
    code, body, _ = call(
        server, "PATCH", "/api/v1/namespaces/default/configmaps/media", {}, "text/plain"
    )
    assert code == 415 and body["message"].endswith(
        "accepted media types include: application/json-patch+json, "
        "application/merge-patch+json, application/strategic-merge-patch+json, "
        "application/apply-patch+yaml"
    )
    code, body, _ = call(server, "PATCH", f"{path}/p", {}, "application/strategic-merge-patch+json")
    assert code == 415 and body["message"].endswith(
        "accepted media types include: application/json-patch+json, "
        "application/merge-patch+json, application/apply-patch+yaml"
    )
    code, body, _ = call(server, "GET", "/api/v1/namespaces", accept=PROTOBUF)
    assert (code, body["reason"]) == (406, "NotAcceptable")


def test_tables_and_partial_metadata(server: KubeApiServer) -> None:
    call(server, "POST", "/api/v1/namespaces/default/configmaps", cm("tabled", a="1", b="2"))
    code, table, headers = call(
        server, "GET", "/api/v1/namespaces/default/configmaps", accept=TABLE
    )
    assert code == 200 and table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert headers["Content-Type"].startswith("application/json;as=Table")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    row = next(r for r in table["rows"] if r["cells"][0] == "tabled")
    assert row["cells"][1] == 2
    assert row["object"]["kind"] == "PartialObjectMetadata"
    code, one, _ = call(
        server,
        "GET",
        "/api/v1/namespaces/default/configmaps/tabled?includeObject=Object",
        accept=TABLE,
    )
    assert one["rows"][0]["object"]["data"] == {"a": "1", "b": "2"}
    accept = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
    code, partial, _ = call(server, "GET", "/api/v1/namespaces/default/configmaps", accept=accept)
    assert partial["kind"] == "PartialObjectMetadataList"
    item = next(i for i in partial["items"] if i["metadata"]["name"] == "tabled")
    assert item["kind"] == "PartialObjectMetadata" and "data" not in item


def test_custom_resource_tables_use_the_printer_columns(server: KubeApiServer) -> None:
    pool = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "pool"},
        "spec": {"limits": {"maxNodes": 3}},
    }
    path = "/apis/cloudburst.io/v1alpha1/namespaces/default/nodepools"
    assert call(server, "POST", path, pool)[0] == 201
    _, table, _ = call(server, "GET", path, accept=TABLE)
    names = [(c["name"], c["type"], c["priority"]) for c in table["columnDefinitions"]]
    assert names[:7] == [
        ("Name", "string", 0),
        ("Nodes", "integer", 0),
        ("Ready", "integer", 0),
        ("CPU", "string", 0),
        ("Memory", "string", 0),
        ("Limit", "integer", 0),
        ("Age", "date", 0),
    ]
    cells = table["rows"][0]["cells"]
    assert cells[0] == "pool" and cells[5] == 3 and cells[1] is None and cells[6].endswith("s")


def test_limit_and_continue_page_through_a_list(server: KubeApiServer) -> None:
    call(server, "POST", "/api/v1/namespaces", {"metadata": {"name": "paged"}})
    for i in range(5):
        call(server, "POST", "/api/v1/namespaces/paged/configmaps", cm(f"c{i}"))
    seen, token, pages = [], "", 0
    while True:
        query = f"?limit=2&continue={token}" if token else "?limit=2"
        code, page, _ = call(server, "GET", f"/api/v1/namespaces/paged/configmaps{query}")
        assert code == 200
        pages += 1
        seen += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue", "")
        if pages == 1:
            assert page["metadata"]["remainingItemCount"] == 3
        if not token:
            break
    assert seen == sorted(seen) and {f"c{i}" for i in range(5)} <= set(seen)
    assert pages == 3
    code, body, _ = call(server, "GET", "/api/v1/namespaces/paged/configmaps?limit=2&continue=zz")
    assert (code, body["reason"]) == (400, "BadRequest")


def test_watch_list_ends_its_initial_events_with_a_bookmark(server: KubeApiServer) -> None:
    call(server, "POST", "/api/v1/namespaces", {"metadata": {"name": "watched"}})
    call(server, "POST", "/api/v1/namespaces/watched/configmaps", cm("w1"))
    query = (
        "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        "&allowWatchBookmarks=true&timeoutSeconds=1"
    )
    code, events, _ = call(server, "GET", f"/api/v1/namespaces/watched/configmaps{query}")
    assert code == 200
    # The initial events, their closing bookmark, and the watch's own closing bookmark.
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK", "BOOKMARK"]
    bookmark = events[1]["object"]
    assert bookmark["kind"] == "ConfigMap"
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(
        events[0]["object"]["metadata"]["resourceVersion"]
    )
    bad = "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
    code, body, _ = call(server, "GET", f"/api/v1/namespaces/watched/configmaps{bad}")
    assert (code, body["reason"]) == (422, "Invalid")
    assert "sendInitialEvents requires setting allowWatchBookmarks to true" in body["message"]


def test_a_quiet_watch_that_asked_for_bookmarks_ends_with_one_at_the_current_version(
    server: KubeApiServer,
) -> None:
    call(server, "POST", "/api/v1/namespaces", {"metadata": {"name": "quiet"}})
    _, listing, _ = call(server, "GET", "/api/v1/namespaces/quiet/configmaps")
    since = listing["metadata"]["resourceVersion"]
    # Writes to another kind move the server's version on; none concern this watch.
    for i in range(3):
        call(server, "POST", "/api/v1/namespaces/quiet/secrets", {"metadata": {"name": f"s{i}"}})
    _, secrets, _ = call(server, "GET", "/api/v1/namespaces/quiet/secrets")
    watch = f"?watch=true&resourceVersion={since}&timeoutSeconds=1"
    _, event, _ = call(
        server, "GET", f"/api/v1/namespaces/quiet/configmaps{watch}&allowWatchBookmarks=true"
    )
    assert event["type"] == "BOOKMARK"  # the only line: `call` reads it as one document
    bookmark = event["object"]
    assert bookmark["kind"] == "ConfigMap"
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(
        secrets["metadata"]["resourceVersion"]
    )
    # Not asked for: none (a client that does not expect bookmarks never gets one).
    _, events, _ = call(server, "GET", f"/api/v1/namespaces/quiet/configmaps{watch}")
    assert events == []


# ---- discovery ------------------------------------------------------------------------------


def test_discovery_names_short_names_categories_and_addresses(server: KubeApiServer) -> None:
    _, api, _ = call(server, "GET", "/api")
    assert api["serverAddressByClientCIDRs"] == [
        {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{server.port}"}
    ]
    _, apps, _ = call(server, "GET", "/apis/apps/v1")
    deployments = next(r for r in apps["resources"] if r["name"] == "deployments")
    assert deployments["shortNames"] == ["deploy"] and deployments["categories"] == ["all"]
    scale = next(r for r in apps["resources"] if r["name"] == "deployments/scale")
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    _, groups, headers = call(server, "GET", "/apis", accept=accept)
    assert headers["Content-Type"] == (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    )
    cloudburst = next(g for g in groups["items"] if g["metadata"]["name"] == "cloudburst.io")
    claims = next(
        r for r in cloudburst["versions"][0]["resources"] if r["resource"] == "nodeclaims"
    )
    assert claims["shortNames"] == ["cbclaim"] and claims["categories"] == ["cloudburst"]


# ---- built-in behaviour ---------------------------------------------------------------------


def test_services_get_defaults_and_their_delete_answers_the_object(server: KubeApiServer) -> None:
    svc = {
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    }
    code, created, _ = call(server, "POST", "/api/v1/namespaces/default/services", svc)
    assert code == 201
    spec = created["spec"]
    assert spec["type"] == "ClusterIP" and spec["clusterIP"].startswith("10.96.")
    assert spec["clusterIPs"] == [spec["clusterIP"]] and spec["ipFamilies"] == ["IPv4"]
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    assert created["status"] == {"loadBalancer": {}}
    code, deleted, _ = call(server, "DELETE", "/api/v1/namespaces/default/services/web")
    assert code == 200 and deleted["kind"] == "Service" and deleted["metadata"]["name"] == "web"
    call(server, "POST", "/api/v1/namespaces/default/configmaps", cm("gone"))
    code, status, _ = call(server, "DELETE", "/api/v1/namespaces/default/configmaps/gone")
    assert status["kind"] == "Status" and status["status"] == "Success"


def test_strategic_merge_uses_each_list_s_merge_key(server: KubeApiServer) -> None:
    svc = {
        "metadata": {"name": "ports"},
        "spec": {"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]},
    }
    call(server, "POST", "/api/v1/namespaces/default/services", svc)
    patch = {"spec": {"ports": [{"port": 443, "targetPort": 8443}]}}
    code, patched, _ = call(
        server,
        "PATCH",
        "/api/v1/namespaces/default/services/ports",
        patch,
        "application/strategic-merge-patch+json",
    )
    assert code == 200
    assert [(p["port"], p["targetPort"]) for p in patched["spec"]["ports"]] == [
        (80, 80),
        (443, 8443),
    ]


def test_events_k8s_io_shows_the_core_events(server: KubeApiServer) -> None:
    event = {
        "metadata": {"name": "ev1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Started",
        "message": "hello",
        "type": "Normal",
    }
    call(server, "POST", "/api/v1/namespaces/default/events", event)
    code, seen, _ = call(server, "GET", "/apis/events.k8s.io/v1/namespaces/default/events/ev1")
    assert code == 200 and seen["apiVersion"] == "events.k8s.io/v1"
    assert seen["note"] == "hello" and seen["regarding"]["name"] == "p"
    v1 = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "ev2"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "regarding": {"kind": "Node", "name": "n1"},
        "note": "from the new API",
        "reason": "Booted",
        "action": "Boot",
        "reportingController": "sim/kubelet",
        "reportingInstance": "n1",
        "type": "Normal",
    }
    path = "/apis/events.k8s.io/v1/namespaces/default/events"
    assert call(server, "POST", path, v1)[0] == 201
    code, core, _ = call(server, "GET", "/api/v1/namespaces/default/events/ev2")
    assert core["apiVersion"] == "v1" and core["message"] == "from the new API"
    assert core["involvedObject"]["name"] == "n1" and core["reportingComponent"] == "sim/kubelet"
    code, patched, _ = call(
        server, "PATCH", f"{path}/ev2", {"note": "edited"}, "application/merge-patch+json"
    )
    assert code == 200 and patched["note"] == "edited"
    assert call(server, "GET", "/api/v1/namespaces/default/events/ev2")[1]["message"] == "edited"


def test_scale_subresource(server: KubeApiServer) -> None:
    deployment = {
        "metadata": {"name": "scaled"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "scaled"}},
            "template": {
                "metadata": {"labels": {"app": "scaled"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }
    call(server, "POST", "/apis/apps/v1/namespaces/default/deployments", deployment)
    path = "/apis/apps/v1/namespaces/default/deployments/scaled/scale"
    code, scale, _ = call(server, "GET", path)
    assert code == 200 and scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 1} and scale["status"]["selector"] == "app=scaled"
    code, scale, _ = call(
        server, "PATCH", path, {"spec": {"replicas": 4}}, "application/merge-patch+json"
    )
    assert code == 200 and scale["spec"]["replicas"] == 4
    _, live, _ = call(server, "GET", "/apis/apps/v1/namespaces/default/deployments/scaled")
    assert live["spec"]["replicas"] == 4


def test_reviews_answer_for_the_caller(server: KubeApiServer) -> None:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "create", "resource": "pods", "namespace": "x"}},
    }
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    code, answer, _ = call(server, "POST", path, review)
    assert (code, answer["status"]) == (201, {"allowed": True})
    server.forbid("create", "pods", "x")
    try:
        assert call(server, "POST", path, review)[1]["status"] == {"allowed": False}
    finally:
        server.allow_all()


def test_unknown_fields_of_built_ins_follow_field_validation(server: KubeApiServer) -> None:
    body = cm("strict") | {"spec": {"x": 1}}
    path = "/api/v1/namespaces/default/configmaps"
    code, status, _ = call(server, "POST", f"{path}?fieldValidation=Strict", body)
    assert code == 400 and status["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
        'unknown field "spec"'
    )
    code, created, headers = call(server, "POST", path, body)
    assert code == 201 and "spec" not in created
    assert headers["Warning"] == '299 - "unknown field \\"spec\\""'


def test_already_exists_is_laid_out_like_a_real_server(server: KubeApiServer) -> None:
    call(server, "POST", "/api/v1/namespaces/default/configmaps", cm("twice"))
    code, body, _ = call(server, "POST", "/api/v1/namespaces/default/configmaps", cm("twice"))
    assert code == 409
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'configmaps "twice" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "twice", "kind": "configmaps"},
        "code": 409,
    }


def test_dry_run_stores_nothing(server: KubeApiServer) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    code, body, _ = call(server, "POST", f"{path}?dryRun=All", cm("dry"))
    assert code == 201 and body["metadata"]["name"] == "dry"
    assert call(server, "GET", f"{path}/dry")[0] == 404


# ---- field management and server-side apply -----------------------------------------------


def test_every_write_records_its_field_manager(server: KubeApiServer) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    _, created, _ = call(server, "POST", path, cm("managed", a="1"))
    (entry,) = created["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["apiVersion"]) == (
        "kubectl",
        "Update",
        "v1",
    )
    assert entry["fieldsV1"] == {"f:data": {"f:a": {}}}
    _, patched, _ = call(
        server,
        "PATCH",
        f"{path}/managed?fieldManager=tool",
        {"data": {"b": "2"}},
        "application/merge-patch+json",
    )
    managers = {e["manager"]: e["fieldsV1"] for e in patched["metadata"]["managedFields"]}
    assert managers == {"kubectl": {"f:data": {"f:a": {}}}, "tool": {"f:data": {"f:b": {}}}}


def test_server_side_apply_conflicts_and_force(server: KubeApiServer) -> None:
    path = "/api/v1/namespaces/default/configmaps/applied"
    applied = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: '1'\n"
    apply = "application/apply-patch+yaml"
    code, body, _ = call(server, "PATCH", f"{path}?fieldManager=one", applied.encode(), apply)
    assert code == 201 and body["data"] == {"a": "1"}
    other = applied.replace("'1'", "'2'").encode()
    code, body, _ = call(server, "PATCH", f"{path}?fieldManager=two", other, apply)
    assert code == 409
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "one": .data.a'
    assert body["details"] == {
        "causes": [
            {"reason": "FieldManagerConflict", "message": 'conflict with "one"', "field": ".data.a"}
        ]
    }
    code, body, _ = call(server, "PATCH", f"{path}?fieldManager=two&force=true", other, apply)
    assert code == 200 and body["data"] == {"a": "2"}
    assert [e["manager"] for e in body["metadata"]["managedFields"]] == ["two"]
    code, body, _ = call(server, "PATCH", path, applied.encode(), apply)
    assert code == 422 and body["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
        "is required for apply patch"
    )


def test_the_shipped_builtin_schemas_are_the_generated_ones() -> None:
    pytest.importorskip("kubernetes_validate")
    from sim.kubeapi import gen_builtin_schemas

    shipped = json.loads(gen_builtin_schemas.OUT.read_text())
    assert shipped == gen_builtin_schemas.build()


def test_a_client_that_drops_its_connection_prints_no_traceback(
    server: KubeApiServer, capfd: pytest.CaptureFixture[str]
) -> None:
    """A killed client resets its keep-alive connections: the real API server logs nothing,
    and a traceback per reset buried what `python -m sim` had to say in every bench's log."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as conn:
        conn.sendall(b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.recv(65536).startswith(b"HTTP/1.1 200")
        # Closed with a reset (linger 0), while the server waits for the next request.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    time.sleep(0.3)
    assert "Traceback" not in capfd.readouterr().err


def test_a_new_pod_tolerates_an_unresponsive_node_for_five_minutes(server: KubeApiServer) -> None:
    """DefaultTolerationSeconds: what a real API server adds to every pod, and so what every
    watcher (the trigger among them) sees; a toleration the pod brings is kept, not doubled."""

    def created(name: str, tolerations: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
        if tolerations is not None:
            spec["tolerations"] = tolerations
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
        code, pod, _ = call(server, "POST", "/api/v1/namespaces/default/pods", body)
        assert code == 201, pod
        tolerations = pod["spec"]["tolerations"]
        assert isinstance(tolerations, list)
        return tolerations

    default = {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    assert created("plain", None) == [
        {"key": "node.kubernetes.io/not-ready", **default},
        {"key": "node.kubernetes.io/unreachable", **default},
    ]
    own = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
    assert created("own", [own]) == [own, {"key": "node.kubernetes.io/not-ready", **default}]
    everything = {"operator": "Exists"}
    assert created("everything", [everything]) == [everything]
