"""A pending pod the trigger cannot read never stops it: the pod watch skips one no model of a
pod can hold, the trigger one whose requests cannot be read, and every other pod reaches its
pool. Kubernetes' own API server neither stores such a pod nor serves one written into etcd
by hand (it fails the whole list); an older server's (or another storage's) could, so the
skipping is proven here on the raw JSON the watch reads, without an API server."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client as k8s
from temporalio.client import Client

from api.nodepool.messages import pool_workflow_id
from cluster.pods import pod_fields, pod_model
from cluster.tenancy import Tenancy
from trigger.pending import BatchWindows, PendingPodTrigger
from trigger.watch import Slim, watch_forever

WAIT_S = 5.0
FAKE_ENDPOINT = "http://127.0.0.1:8788/"
POOL = "sturdy"

# No model of a pod holds it: its tolerations are not a list.
MISSHAPEN: dict[str, Any] = {
    "metadata": {"name": "a-sturdy-misshapen", "namespace": "default", "uid": "uid-misshapen"},
    "spec": {
        "nodeSelector": {"test-pool": POOL},
        "tolerations": "all of them",
        "containers": [{"name": "app", "image": "busybox"}],
    },
    "status": {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    },
}


def pending(name: str, cpu: str) -> dict[str, Any]:
    """An unbound pod the scheduler found no room for, which only the pool `POOL` can host."""
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "nodeSelector": {"test-pool": POOL},
            "containers": [
                {"name": "app", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
            ],
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


# A model holds it (a quantity is a string there), but what it asks of a node cannot be read.
UNREADABLE = pending("a-sturdy-unreadable", "1.5.3Gi")
STURDY = pending("sturdy-0", "500m")


# ---- the pod watch ------------------------------------------------------------------------


class Answer:
    """A response as the client returns it with `_preload_content=False`: a listing's body,
    or a watch's stream of JSON lines."""

    def __init__(self, data: bytes) -> None:
        self.status = 200
        self.data = data

    def stream(self, amt: int | None = None, decode_content: bool = False) -> Iterator[bytes]:
        yield self.data

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class Pods:
    """`list_pod_for_all_namespaces` answering raw JSON: a listing, then one watch of
    `events`; a later watch waits for the test's end, as a quiet one would."""

    def __init__(
        self, listed: list[dict[str, Any]], events: list[tuple[str, dict[str, Any]]]
    ) -> None:
        self.listed = listed
        self.events = events
        self.listings = 0
        self.watches = 0
        self.done = threading.Event()

    def __call__(self, **kwargs: Any) -> Answer:
        if not kwargs.get("watch"):
            self.listings += 1
            listing = {"metadata": {"resourceVersion": "10"}, "items": self.listed}
            return Answer(json.dumps(listing).encode())
        self.watches += 1
        if self.watches > 1:
            self.done.wait(WAIT_S)
            return Answer(b"")
        lines = (
            json.dumps({"type": kind, "object": obj}) + "\n"
            for kind, obj in [*self.events, ("BOOKMARK", {"metadata": {"resourceVersion": "20"}})]
        )
        return Answer("".join(lines).encode())


def with_version(obj: dict[str, Any], version: str, **labels: str) -> dict[str, Any]:
    metadata = {**obj["metadata"], "resourceVersion": version}
    if labels:
        metadata["labels"] = labels
    return {**obj, "metadata": metadata}


def test_the_pod_watch_skips_a_pod_no_model_can_hold_and_watches_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pods = Pods(
        listed=[MISSHAPEN, UNREADABLE, STURDY],
        events=[
            ("MODIFIED", with_version(MISSHAPEN, "11", tier="front")),
            ("MODIFIED", with_version(STURDY, "12", tier="front")),
        ],
    )
    got: queue.Queue[tuple[str, Any]] = queue.Queue()
    halt = threading.Event()
    watching = threading.Thread(
        target=watch_forever,
        args=(
            "pod",
            pods,
            {"field_selector": "spec.nodeName="},
            lambda _kind, event, obj: got.put((event, obj)),
            halt,
            Slim(pod_fields, pod_model),
        ),
        daemon=True,
    )
    with caplog.at_level("WARNING", logger="trigger.watch"):
        watching.start()
        try:
            event, listed = got.get(timeout=WAIT_S)
            # The listing without the pod it cannot read; the unreadable quantity is the
            # trigger's to judge (below).
            assert event == "SYNC"
            assert [p.metadata.name for p in listed] == ["a-sturdy-unreadable", "sturdy-0"]
            # The misshapen pod's change is passed over; the watch goes on to the next one.
            event, pod = got.get(timeout=WAIT_S)
            assert (event, pod.metadata.name) == ("MODIFIED", "sturdy-0")
            assert pod.metadata.labels == {"tier": "front"}
        finally:
            halt.set()
            pods.done.set()
            watching.join(WAIT_S)
    # Skipped, said so, and never re-listed for it (a re-list would meet it again).
    assert pods.listings == 1 and got.empty()
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 2 and all("a-sturdy-misshapen" in m for m in skipped)
    assert not [r for r in caplog.records if "watch failed" in r.getMessage()]


# ---- the trigger --------------------------------------------------------------------------


class Handle:
    def __init__(self, temporal: Temporal, workflow_id: str) -> None:
        self._temporal, self._id = temporal, workflow_id

    async def signal(self, name: str, arg: Any) -> None:
        self._temporal.signals.append((self._id, name, arg))


class Temporal:
    """What the trigger asks of Temporal, kept: the pools it starts (with their first demand)
    and the signals it sends."""

    def __init__(self) -> None:
        self.started: list[dict[str, Any]] = []
        self.signals: list[tuple[str, str, Any]] = []

    async def start_workflow(self, *args: Any, **kwargs: Any) -> None:
        self.started.append(kwargs)

    def get_workflow_handle(self, workflow_id: str) -> Handle:
        return Handle(self, workflow_id)


class Verdicts:
    """The NodePool's and NodeClass's conditions, kept instead of written."""

    def __init__(self) -> None:
        self.invalid_: list[str] = []

    def valid(self, plural: str, raw: dict[str, Any]) -> None:
        pass

    def invalid(self, plural: str, raw: dict[str, Any], message: str, reason: str = "") -> None:
        self.invalid_.append(f"{plural} {raw['metadata']['name']}: {message}")


NODE_CLASS = {
    "apiVersion": "cloudburst.io/v1alpha1",
    "kind": "NodeClass",
    "metadata": {"name": "sample", "namespace": "default", "uid": "uid-class", "generation": 1},
    "spec": {
        "fake": {"endpoint": FAKE_ENDPOINT},
        "join": {"hostApiServer": "https://10.0.0.1:6443"},
    },
}
NODE_POOL = {
    "apiVersion": "cloudburst.io/v1alpha1",
    "kind": "NodePool",
    "metadata": {"name": POOL, "namespace": "default", "uid": "uid-pool", "generation": 1},
    "spec": {
        "nodeClassRef": "sample",
        "requirements": {"allowedProviders": ["fake"]},
        "template": {"labels": {"test-pool": POOL}},
    },
}


async def test_the_trigger_skips_a_pod_whose_requests_it_cannot_read_and_serves_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    temporal = Temporal()
    trigger = PendingPodTrigger(
        cast(Client, temporal),
        k8s.ApiClient(),
        task_queue="q",
        cluster_id="c1",
        windows=BatchWindows(idle_s=0, max_s=0),
        # The fake provider's endpoint, as the dev stack's settings allow it.
        tenancy=Tenancy(allowed_endpoints={"fake": (FAKE_ENDPOINT,)}),
    )
    verdicts = Verdicts()
    trigger._verdicts = verdicts  # type: ignore[assignment]
    await trigger._apply_logged("nodeclass", "SYNC", [NODE_CLASS])
    await trigger._apply_logged("nodepool", "SYNC", [NODE_POOL])
    assert verdicts.invalid_ == []
    # The pods as the watch hands them over (its models of their kept fields), the one it
    # cannot read listed first.
    listed = [pod_model(pod_fields(raw)) for raw in (UNREADABLE, STURDY)]
    with caplog.at_level("WARNING", logger="trigger.pending"):
        await trigger._apply_logged("pod", "SYNC", listed)
        await trigger._flush_due()
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 1
    assert skipped[0].startswith("pod default/a-sturdy-unreadable skipped: ")
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    # The pool is started with its demand: the other pod, and only it.
    [start] = temporal.started
    assert start["id"] == pool_workflow_id("default", POOL)
    [update] = start["start_signal_args"]
    assert [pod.name for pod in update.pods] == ["sturdy-0"]
    assert update.pods[0].requests.cpu_m == 500
