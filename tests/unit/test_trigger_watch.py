"""The trigger's pod watches pass on only the events that change what their watcher reads:
the scheduler rewriting why a pod waits and the kubelet reporting a running pod's readiness
are most of a burst's pod events, and news to no watcher. A watch the API server expires
lists again quietly. Against the emulator's real watch."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from cluster.pods import bound_pod_fields, pod_fields, pod_model
from sim.kubeapi import KubeApiServer
from trigger.watch import Slim, watch_forever

WAIT_S = 10.0


@pytest.fixture(scope="module")
def core() -> Iterator[Any]:
    server = KubeApiServer(host="127.0.0.1", port=0)
    server.start()
    api = server.api_client()
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()
        server.stop()


@pytest.fixture
def ns(core: Any) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


class Watching:
    """`watch_forever` in its thread, as the trigger runs it; what it passes on, in order."""

    def __init__(self, core: Any, ns: str, field_selector: str, slim: Slim) -> None:
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._halt = threading.Event()
        self._thread = threading.Thread(
            target=watch_forever,
            args=(
                "pod",
                core.list_namespaced_pod,
                {"namespace": ns, "field_selector": field_selector},
                lambda _kind, event, obj: self.events.put((event, obj)),
                self._halt,
                slim,
            ),
            daemon=True,
        )
        self._thread.start()

    def next(self) -> tuple[str, Any]:
        return self.events.get(timeout=WAIT_S)

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
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def test_a_pending_pod_whose_scheduler_only_rewrites_why_it_waits_is_no_news(
    core: Any, ns: str
) -> None:
    core.create_namespaced_pod(ns, _pod("web"))
    core.patch_namespaced_pod_status("web", ns, _unschedulable("0/3 nodes are available"))
    watching = Watching(core, ns, "spec.nodeName=", Slim(pod_fields, pod_model))
    try:
        event, listed = watching.next()
        assert event == "SYNC" and [p.metadata.name for p in listed] == ["web"]
        # The scheduler tries again and says so in other words; then someone labels the pod.
        core.patch_namespaced_pod_status("web", ns, _unschedulable("0/4 nodes are available"))
        core.patch_namespaced_pod("web", ns, {"metadata": {"labels": {"tier": "front"}}})
        event, pod = watching.next()
        # The label is the first news: the rewritten message was passed over.
        assert event == "MODIFIED" and pod.metadata.labels == {"tier": "front"}
        assert pod.status.conditions[0].reason == "Unschedulable"
        core.delete_namespaced_pod("web", ns)
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
    core.create_namespaced_pod(ns, _pod("job", node="burst-abcde"))
    watching = Watching(core, ns, "spec.nodeName!=", Slim(bound_pod_fields, pod_model))
    try:
        assert watching.next()[0] == "SYNC"
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-28T14:00:01Z"}
        # The kubelet starts it, then reports it ready: neither changes its node's load.
        core.patch_namespaced_pod_status("job", ns, {"status": {"phase": "Running"}})
        core.patch_namespaced_pod_status(
            "job", ns, {"status": {"phase": "Running", "conditions": [ready]}}
        )
        core.patch_namespaced_pod_status("job", ns, {"status": {"phase": "Succeeded"}})
        event, pod = watching.next()
        assert event == "MODIFIED" and pod.status.phase == "Succeeded"
        assert pod.spec.node_name == "burst-abcde"
        assert pod.spec.containers[0].resources.requests == {"cpu": "1"}
    finally:
        watching.stop()


def test_a_watch_the_api_server_expired_lists_again_without_a_false_alarm(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A server keeping few events: writes between the listing and the watch push the
    # listing's resourceVersion out, and the watch gets 410 Expired inside its stream.
    server = KubeApiServer(host="127.0.0.1", port=0, event_log_size=3)
    server.start()
    api = server.api_client()
    core: Any = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="busy")))
    core.create_namespaced_pod("busy", _pod("web"))
    listings = 0

    def list_then_churn(**kwargs: Any) -> Any:
        nonlocal listings
        answer = core.list_namespaced_pod(**kwargs)
        if not kwargs.get("watch"):
            listings += 1
            if listings == 1:
                for n in range(5):
                    labels = {"metadata": {"labels": {"n": str(n)}}}
                    core.patch_namespaced_pod("web", "busy", labels)
        return answer

    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    halt = threading.Event()
    watching = threading.Thread(
        target=watch_forever,
        args=(
            "pod",
            list_then_churn,
            {"namespace": "busy"},
            lambda _kind, event, obj: events.put((event, obj)),
            halt,
            Slim(pod_fields, pod_model),
        ),
        daemon=True,
    )
    try:
        with caplog.at_level("WARNING", logger="trigger.watch"):
            watching.start()
            event, first = events.get(timeout=WAIT_S)
            assert event == "SYNC" and first[0].metadata.labels is None
            # Listed again, with what the expired watch missed.
            event, again = events.get(timeout=WAIT_S)
            assert event == "SYNC" and again[0].metadata.labels == {"n": "4"}
        # An expired watch is routine: re-listed, not reported as a failure.
        assert not [r for r in caplog.records if "watch failed" in r.getMessage()]
    finally:
        halt.set()
        api.close()
        server.stop()
