"""The trigger's pod watches pass on only the events that change what their watcher reads:
the scheduler rewriting why a pod waits and the kubelet reporting a running pod's readiness
are most of a burst's pod events, and news to no watcher. A watch the API server expires
(410 Gone) lists again quietly. Against Kubernetes' own API server (`kube_control_plane`).

Where a 410 comes from there: a watch that names a resourceVersion is served from the API
server's watch cache when its resource has one (pods do), which answers 410 for a version
older than the events it keeps — every event of the last 75 s at least, whatever etcd has
compacted — and from etcd when it has none (Events: kube-apiserver keeps no watch cache of
them), which answers 410 for a version etcd has compacted away.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from cluster.pods import bound_pod_fields, pod_fields, pod_model
from sim.controlplane.cluster import KubernetesControlPlane
from trigger.watch import Slim, watch_forever

WAIT_S = 10.0
# What the API server's watch cache keeps of every resource it caches: each event of the last
# 75 s (k8s.io/apiserver storagebackend.DefaultEventsHistoryWindow), older ones only until it
# is full (100 events at first, doubled while all it holds is younger than that).
WATCH_CACHE_HISTORY_S = 75.0
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def core(kube_control_plane: KubernetesControlPlane) -> Iterator[Any]:
    api = kube_control_plane.api_client()
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()


@pytest.fixture
def ns(kube_control_plane: KubernetesControlPlane, core: Any) -> Iterator[str]:
    """A namespace of the test's own (the control plane is the session's)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube_control_plane.ensure_namespace(name)
    yield name
    core.delete_namespace(name)


class Watching:
    """`watch_forever` in its thread, as the trigger runs it; what it passes on, in order."""

    def __init__(
        self, list_fn: Callable[..., Any], kwargs: dict[str, Any], slim: Slim, kind: str = "pod"
    ) -> None:
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._halt = threading.Event()
        self._thread = threading.Thread(
            target=watch_forever,
            args=(
                kind,
                list_fn,
                kwargs,
                lambda _kind, event, obj: self.events.put((event, obj)),
                self._halt,
                slim,
            ),
            daemon=True,
        )
        self._thread.start()

    def next(self, timeout: float = WAIT_S) -> tuple[str, Any]:
        return self.events.get(timeout=timeout)

    def stop(self) -> None:
        self._halt.set()


def _unschedulable(message: str) -> dict[str, Any]:
    return {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": "2026-11-28T14:00:00Z",
                }
            ]
        }
    }


def _pod(name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        # No scheduler of this cluster's: kube-scheduler would write the pod's PodScheduled
        # condition itself (and bind it, were a node left by another test).
        "schedulerName": "cloudburst-test-nobody",
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def test_a_pending_pod_whose_scheduler_only_rewrites_why_it_waits_is_no_news(
    core: Any, ns: str
) -> None:
    core.create_namespaced_pod(ns, _pod("web"))
    unschedulable = _unschedulable("0/3 nodes are available")
    core.patch_namespaced_pod_status("web", ns, unschedulable, _content_type=STRATEGIC)
    watching = Watching(
        core.list_namespaced_pod,
        {"namespace": ns, "field_selector": "spec.nodeName="},
        Slim(pod_fields, pod_model),
    )
    try:
        event, listed = watching.next()
        assert event == "SYNC" and [p.metadata.name for p in listed] == ["web"]
        # The scheduler tries again and says so in other words; then someone labels the pod.
        again = _unschedulable("0/4 nodes are available")
        core.patch_namespaced_pod_status("web", ns, again, _content_type=STRATEGIC)
        labels = {"metadata": {"labels": {"tier": "front"}}}
        core.patch_namespaced_pod("web", ns, labels, _content_type=MERGE)
        event, pod = watching.next()
        # The label is the first news: the rewritten message was passed over.
        assert event == "MODIFIED" and pod.metadata.labels == {"tier": "front"}
        assert pod.status.conditions[0].reason == "Unschedulable"
        # Unbound: no grace period, but the API server writes the deletion (deletionTimestamp,
        # grace 0) before it removes the pod, and the watch shows both.
        core.delete_namespaced_pod("web", ns)
        event, pod = watching.next()
        assert event == "MODIFIED" and pod.metadata.deletion_timestamp is not None
        event, pod = watching.next()
        assert event == "DELETED" and pod.metadata.name == "web"
        # Created again (a new uid), it is news again, even though it reads the same.
        core.create_namespaced_pod(ns, _pod("web"))
        assert watching.next()[0] == "ADDED"
    finally:
        watching.stop()


def test_a_bound_pods_readiness_is_no_news_to_the_node_watcher_its_finishing_is(
    core: Any, ns: str
) -> None:
    # Bound to a node that does not exist: nothing but the test writes its status.
    core.create_namespaced_pod(ns, _pod("job", node="burst-abcde"))
    watching = Watching(
        core.list_namespaced_pod,
        {"namespace": ns, "field_selector": "spec.nodeName!="},
        Slim(bound_pod_fields, pod_model),
    )
    try:
        assert watching.next()[0] == "SYNC"
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-28T14:00:01Z"}
        # The kubelet starts it, then reports it ready: neither changes its node's load.
        running = {"status": {"phase": "Running"}}
        core.patch_namespaced_pod_status("job", ns, running, _content_type=STRATEGIC)
        running_ready = {"status": {"phase": "Running", "conditions": [ready]}}
        core.patch_namespaced_pod_status("job", ns, running_ready, _content_type=STRATEGIC)
        succeeded = {"status": {"phase": "Succeeded"}}
        core.patch_namespaced_pod_status("job", ns, succeeded, _content_type=STRATEGIC)
        event, pod = watching.next()
        assert event == "MODIFIED" and pod.status.phase == "Succeeded"
        assert pod.spec.node_name == "burst-abcde"
        assert pod.spec.containers[0].resources.requests == {"cpu": "1"}
    finally:
        watching.stop()


# ---- 410 Gone -------------------------------------------------------------------------------


def _etcd_url(plane: KubernetesControlPlane) -> str:
    """The etcd the API server stores in (its `--etcd-servers`)."""
    apiserver = next(p for p in plane._processes if p.name == "kube-apiserver")
    args = apiserver.popen.args
    assert isinstance(args, list)
    flag = next(str(a) for a in args if str(a).startswith("--etcd-servers="))
    return flag.partition("=")[2]


def _etcd(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """etcd's v3 API through its HTTP/JSON gateway."""
    request = urllib.request.Request(
        f"{url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return dict(json.loads(answer.read()))


def _compact_etcd(plane: KubernetesControlPlane) -> int:
    """Compact etcd's history up to its current revision, as kube-apiserver does every 5 min
    (`--etcd-compaction-interval`); the revision."""
    url = _etcd_url(plane)
    revision = int(_etcd(url, "/v3/kv/range", {"key": "AA=="})["header"]["revision"])
    _etcd(url, "/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


def _first_line_of_a_watch_from(list_fn: Callable[..., Any], version: str, **kwargs: Any) -> Any:
    """The first thing a watch from `version` gets (an event, or the ERROR it is refused with)."""
    answer = list_fn(
        **kwargs, watch=True, resource_version=version, timeout_seconds=1, _preload_content=False
    )
    try:
        return next((json.loads(line) for line in iter_resp_lines(answer) if line), None)
    finally:
        answer.close()
        answer.release_conn()


def _event(name: str, ns: str, message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": ns},
        "reason": "Testing",
        "message": message,
        "type": "Normal",
    }


def _event_fields(raw: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": raw["metadata"], "message": raw.get("message")}


def _messages(events: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["metadata"]["name"]: e["message"] for e in events}


def test_a_watch_from_a_compacted_version_lists_again_without_a_false_alarm(
    kube_control_plane: KubernetesControlPlane,
    core: Any,
    ns: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Between the listing and its watch, etcd compacts the listing's version away: the watch
    gets 410 Gone inside its stream (from etcd: Events have no watch cache), and the trigger's
    watch lists again, quietly. The same path as the pod watches' (`_raw_events`, `Slim`)."""
    core.create_namespaced_event(ns, _event("news", ns, "0"))
    listings = 0
    refused: list[Any] = []

    def list_then_compact(**kwargs: Any) -> Any:
        nonlocal listings
        answer = core.list_namespaced_event(**kwargs)
        if not kwargs.get("watch"):
            listings += 1
            if listings == 1:
                listed_at = json.loads(answer.data)["metadata"]["resourceVersion"]
                for n in range(1, 4):
                    core.patch_namespaced_event(
                        "news", ns, {"message": str(n)}, _content_type=MERGE
                    )
                _compact_etcd(kube_control_plane)
                # What the API server answers any watch from there.
                refused.append(
                    _first_line_of_a_watch_from(core.list_namespaced_event, listed_at, namespace=ns)
                )
        return answer

    watching = Watching(
        list_then_compact, {"namespace": ns}, Slim(_event_fields, dict), kind="event"
    )
    try:
        with caplog.at_level("WARNING", logger="trigger.watch"):
            event, first = watching.next()
            assert event == "SYNC" and _messages(first) == {"news": "0"}
            [gone] = refused
            assert gone["type"] == "ERROR" and gone["object"]["code"] == 410, gone
            # Listed again, with what the expired watch missed.
            event, again = watching.next()
            assert event == "SYNC" and _messages(again) == {"news": "3"}
        assert listings == 2
        # An expired watch is routine: re-listed, not reported as a failure.
        assert not [r for r in caplog.records if "watch failed" in r.getMessage()]
    finally:
        watching.stop()


@pytest.mark.slow
def test_a_pod_watch_the_watch_cache_expired_lists_again_without_a_false_alarm(
    core: Any, ns: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The trigger's own pod watch meets 410 from the API server's watch cache: the event
    after its listing outlives the cache's 75 s and is pushed out by later ones before the
    watch starts (a trigger that waited that long — or a busier cluster than this one)."""
    core.create_namespaced_pod(ns, _pod("web"))
    core.create_namespaced_pod(ns, _pod("churn"))
    listings = 0
    refused: list[Any] = []

    def list_then_age(**kwargs: Any) -> Any:
        nonlocal listings
        answer = core.list_namespaced_pod(**kwargs)
        if not kwargs.get("watch"):
            listings += 1
            if listings == 1:
                listed_at = json.loads(answer.data)["metadata"]["resourceVersion"]
                labelled = {"metadata": {"labels": {"n": "0"}}}
                core.patch_namespaced_pod("web", ns, labelled, _content_type=MERGE)
                time.sleep(WATCH_CACHE_HISTORY_S + 2)
                refused.append(_churn_until_expired(core, ns, listed_at))
        return answer

    watching = Watching(list_then_age, {"namespace": ns}, Slim(pod_fields, pod_model))
    try:
        with caplog.at_level("WARNING", logger="trigger.watch"):
            event, first = watching.next(WATCH_CACHE_HISTORY_S + 150)
            assert event == "SYNC"
            assert {p.metadata.name: p.metadata.labels for p in first} == {
                "churn": None,
                "web": None,
            }
            [gone] = refused
            assert gone is not None, "the watch cache kept every event"
            assert gone["type"] == "ERROR" and gone["object"]["code"] == 410, gone
            # Listed again, with what the expired watch missed.
            event, again = watching.next()
            assert event == "SYNC"
            assert {p.metadata.name: p.metadata.labels for p in again}["web"] == {"n": "0"}
        assert listings == 2
        assert not [r for r in caplog.records if "watch failed" in r.getMessage()]
    finally:
        watching.stop()


def _churn_until_expired(core: Any, ns: str, version: str, limit_s: float = 120.0) -> Any:
    """Change pod `churn` until a watch from `version` is refused; the refusal, or None."""
    deadline = time.monotonic() + limit_s
    n = 0
    while time.monotonic() < deadline:
        for _ in range(25):
            n += 1
            labels = {"metadata": {"labels": {"n": str(n)}}}
            core.patch_namespaced_pod("churn", ns, labels, _content_type=MERGE)
        first = _first_line_of_a_watch_from(core.list_namespaced_pod, version, namespace=ns)
        if first is not None and first["type"] == "ERROR":
            return first
    return None
