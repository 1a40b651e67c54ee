"""The simulated scheduler against the Kubernetes API emulator, with the real client."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from sim.kubeapi import KubeApiServer
from sim.kubeapi.resources import PODS, REGISTRY
from sim.scheduler import (
    ApiListWatch,
    Informer,
    ListWatch,
    Scheduler,
    StoreListWatch,
    node_matches_pod_affinity,
    pod_key,
    pod_requests,
    tolerates,
    unschedulable_message,
)

Obj = dict[str, Any]
NODES = REGISTRY[("", "v1", "nodes")]


@pytest.fixture(params=["over-api", "in-store"])
def server(request: pytest.FixtureRequest) -> Iterator[KubeApiServer]:
    """The API server with a running scheduler, reading and writing over the API (as on any
    API server) or straight in the store (as in the simulated cluster): both must behave
    alike."""
    server = KubeApiServer()
    server.start()
    store = server.store if request.param == "in-store" else None
    scheduler = Scheduler(server.api_client(), resync_s=0.2, store=store)
    scheduler.start()
    try:
        yield server
    finally:
        scheduler.stop()
        server.stop()


@pytest.fixture
def core(server: KubeApiServer) -> client.CoreV1Api:
    return client.CoreV1Api(server.api_client())


def wait_for(fn: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting; last value {value!r}")
        time.sleep(0.05)


def raw(fn: Callable[..., Any], *args: Any, **kw: Any) -> Obj:
    return json.loads(fn(*args, _preload_content=False, **kw).data)


def make_node(
    core: client.CoreV1Api,
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    labels: dict[str, str] | None = None,
    taints: list[Obj] | None = None,
    ready: str = "True",
    unschedulable: bool = False,
) -> None:
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    body = {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "capacity": alloc,
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }
    raw(core.create_node, body)


def make_pod(core: client.CoreV1Api, name: str, cpu: str = "500m", **spec: Any) -> None:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}
            ],
            **spec,
        },
    }
    raw(core.create_namespaced_pod, "default", body)


def node_of(core: client.CoreV1Api, pod: str) -> str | None:
    return raw(core.read_namespaced_pod, pod, "default").get("spec", {}).get("nodeName")


def scheduled_condition(core: client.CoreV1Api, pod: str) -> Obj | None:
    conds = raw(core.read_namespaced_pod, pod, "default").get("status", {}).get("conditions")
    return next((c for c in conds or [] if c["type"] == "PodScheduled"), None)


def test_binds_fitting_pod_and_bin_packs(core: client.CoreV1Api) -> None:
    make_node(core, "big", cpu="8")
    make_node(core, "small", cpu="2", labels={"size": "small"})
    # Nodes and pods come on watches of their own, in no order between them (as to
    # kube-scheduler): a pod only the small node can host shows the scheduler has both.
    make_pod(core, "probe", cpu="1m", nodeSelector={"size": "small"})
    assert wait_for(lambda: node_of(core, "probe")) == "small"
    make_pod(core, "p1", cpu="1")
    # Most-allocated: the small node ends up fuller, so it wins.
    assert wait_for(lambda: node_of(core, "p1")) == "small"
    make_pod(core, "p2", cpu="1500m")
    assert wait_for(lambda: node_of(core, "p2")) == "big"  # small has only 1 cpu left
    cond = scheduled_condition(core, "p2")
    assert cond is not None and cond["status"] == "True"


def test_too_big_pod_is_unschedulable_and_condition_is_stable(core: client.CoreV1Api) -> None:
    make_node(core, "n1", cpu="2")
    make_pod(core, "huge", cpu="16")
    # The scheduler may see the pod a moment before the node ("0/0 nodes"): wait for both.
    cond = wait_for(
        lambda: (c := scheduled_condition(core, "huge")) and "0/0" not in c["message"] and c
    )
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert cond["message"].startswith("0/1 nodes are available: 1 Insufficient cpu.")
    rv = raw(core.read_namespaced_pod, "huge", "default")["metadata"]["resourceVersion"]
    time.sleep(0.6)  # several resync passes: no new writes
    assert raw(core.read_namespaced_pod, "huge", "default")["metadata"]["resourceVersion"] == rv
    assert node_of(core, "huge") is None
    # A node that fits arrives: the pod is bound.
    make_node(core, "n2", cpu="32")
    assert wait_for(lambda: node_of(core, "huge")) == "n2"


def test_no_nodes_message(core: client.CoreV1Api) -> None:
    make_pod(core, "p")
    cond = wait_for(lambda: scheduled_condition(core, "p"))
    assert cond["reason"] == "Unschedulable" and cond["message"].startswith("0/0 nodes")


def test_node_selector_and_affinity(core: client.CoreV1Api) -> None:
    make_node(core, "a", labels={"zone": "a", "gen": "3"})
    make_node(core, "b", labels={"zone": "b", "gen": "5"})
    make_pod(core, "sel", nodeSelector={"zone": "b"})
    assert wait_for(lambda: node_of(core, "sel")) == "b"
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["4"]}]}
                ]
            }
        }
    }
    make_pod(core, "aff", affinity=affinity)
    assert wait_for(lambda: node_of(core, "aff")) == "a"
    make_pod(core, "nowhere", nodeSelector={"zone": "c"})
    cond = wait_for(lambda: scheduled_condition(core, "nowhere"))
    assert "2 node(s) didn't match Pod's node affinity/selector" in cond["message"]


def test_taints_and_tolerations(core: client.CoreV1Api) -> None:
    taint = {"key": "cloudburst.io/burst", "value": "true", "effect": "NoSchedule"}
    make_node(core, "tainted", taints=[taint])
    make_pod(core, "plain")
    # The scheduler may see the pod a moment before the node ("0/0 nodes"): wait for both.
    cond = wait_for(
        lambda: (c := scheduled_condition(core, "plain")) and "0/0" not in c["message"] and c
    )
    assert cond["status"] == "False"
    assert "1 node(s) had untolerated taint {cloudburst.io/burst: true}" in cond["message"]
    make_pod(
        core,
        "tolerant",
        tolerations=[{"key": "cloudburst.io/burst", "operator": "Equal", "value": "true"}],
    )
    assert wait_for(lambda: node_of(core, "tolerant")) == "tainted"
    # PreferNoSchedule does not block.
    make_node(core, "soft", taints=[{"key": "x", "effect": "PreferNoSchedule"}], cpu="1")
    make_pod(core, "soft-pod", cpu="100m")
    assert wait_for(lambda: node_of(core, "soft-pod")) == "soft"


def test_cordoned_and_not_ready_nodes_are_skipped(core: client.CoreV1Api) -> None:
    make_node(core, "cordoned", unschedulable=True)
    make_node(core, "notready", ready="False")
    make_pod(core, "p")
    # The scheduler may see the pod a moment before the second node ("0/1 nodes"): the
    # reason it gives once it has seen both.
    cond = wait_for(
        lambda: (c := scheduled_condition(core, "p")) and "0/2 nodes" in c["message"] and c
    )
    assert "1 node(s) were unschedulable" in cond["message"]
    assert "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }" in cond["message"]
    raw(
        core.patch_node,
        "cordoned",
        {"spec": {"unschedulable": False}},
        _content_type="application/merge-patch+json",
    )
    assert wait_for(lambda: node_of(core, "p")) == "cordoned"


def test_capacity_accounts_for_bound_pods(core: client.CoreV1Api) -> None:
    make_node(core, "n", cpu="2")
    for i in range(4):
        make_pod(core, f"p{i}", cpu="600m")
    wait_for(lambda: sum(bool(node_of(core, f"p{i}")) for i in range(4)) == 3)
    time.sleep(0.4)
    assert sum(bool(node_of(core, f"p{i}")) for i in range(4)) == 3
    raw(core.delete_namespaced_pod, "p0", "default")
    wait_for(lambda: all(node_of(core, f"p{i}") for i in range(1, 4)))


# ---- pure helpers -------------------------------------------------------------------------


def test_a_malformed_pod_or_node_never_stops_the_others(
    server: KubeApiServer, core: client.CoreV1Api
) -> None:
    """Objects stored before the API server validated them (planted: no admission)."""
    make_node(core, "good", cpu="4")
    bad_alloc = {"cpu": "lots", "memory": "8Gi", "pods": "110"}
    server.store.create(
        NODES,
        "",
        {
            "metadata": {"name": "a-broken"},  # sorts first: every pass meets it
            "status": {
                "capacity": bad_alloc,
                "allocatable": bad_alloc,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    for name, cpu in (("a-malformed", "1.5.3Gi"), ("a-huge-exponent", "1e9999")):
        server.store.create(
            PODS,
            "default",
            {
                "metadata": {"name": name},
                "spec": {
                    "containers": [
                        {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}
                    ]
                },
            },
        )
    make_pod(core, "fine", cpu="1")
    assert wait_for(lambda: node_of(core, "fine")) == "good"
    make_pod(core, "later", cpu="1")  # passes go on after meeting the malformed ones
    assert wait_for(lambda: node_of(core, "later")) == "good"
    assert node_of(core, "a-malformed") is None and node_of(core, "a-huge-exponent") is None

    def failed_scheduling() -> dict[str, str]:
        events = raw(core.list_namespaced_event, "default")["items"]
        return {
            e["involvedObject"]["name"]: e["message"]
            for e in events
            if e["reason"] == "FailedScheduling" and e["type"] == "Warning"
        }

    reported = wait_for(lambda: len(failed_scheduling()) == 2 and failed_scheduling())
    assert "1.5.3Gi" in reported["a-malformed"] and "1e9999" in reported["a-huge-exponent"]
    time.sleep(0.6)  # several passes: each pod is reported once, not once a pass
    events = raw(core.list_namespaced_event, "default")["items"]
    assert len([e for e in events if e["reason"] == "FailedScheduling"]) == 2


def test_pod_requests_with_init_and_overhead() -> None:
    pod = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
                {"resources": {"requests": {"cpu": "200m"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "1", "memory": "32Mi"}}}],
            "overhead": {"cpu": "10m"},
        }
    }
    r = pod_requests(pod)
    assert (r.cpu, r.memory, r.pods) == (1010, 64 * 2**20, 1)


def test_toleration_rules() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert tolerates({"operator": "Exists"}, taint)
    assert not tolerates({"operator": "Equal"}, taint)
    assert tolerates({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, taint)
    assert not tolerates({"key": "k", "value": "w"}, taint)
    assert not tolerates({"key": "k", "operator": "Exists", "effect": "NoExecute"}, taint)


def test_affinity_operators() -> None:
    node = {"metadata": {"name": "n", "labels": {"a": "1", "b": "x"}}}

    def pod(*exprs: Obj) -> Obj:
        terms = [{"matchExpressions": list(exprs)}]
        req = {"nodeSelectorTerms": terms}
        return {
            "spec": {
                "affinity": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": req}
                }
            }
        }

    assert node_matches_pod_affinity(pod({"key": "b", "operator": "In", "values": ["x"]}), node)
    assert not node_matches_pod_affinity(
        pod({"key": "b", "operator": "NotIn", "values": ["x"]}), node
    )
    assert node_matches_pod_affinity(pod({"key": "c", "operator": "DoesNotExist"}), node)
    assert not node_matches_pod_affinity(pod({"key": "c", "operator": "Exists"}), node)
    assert node_matches_pod_affinity(pod({"key": "a", "operator": "Gt", "values": ["0"]}), node)
    assert not node_matches_pod_affinity(pod({"key": "b", "operator": "Gt", "values": ["0"]}), node)
    assert not node_matches_pod_affinity(
        {
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
                    }
                }
            }
        },
        node,
    )


def test_message_format() -> None:
    from collections import Counter

    msg = unschedulable_message(
        3, Counter({"Insufficient cpu": 1, "node(s) were unschedulable": 2})
    )
    assert msg == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) were unschedulable. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )


def test_why_a_pod_waits_is_rewritten_no_more_often_than_kube_schedulers_backoff(
    core: client.CoreV1Api,
) -> None:
    """kube-scheduler tries a pod that did not fit again only after a backoff (1 s, doubling,
    up to 10 s): nodes joining one after another do not each rewrite every waiting pod (in
    a 1,000-pod burst that was most of what the simulator did)."""
    make_node(core, "n0", cpu="1")
    make_pod(core, "huge", cpu="16")
    first = wait_for(
        lambda: (c := scheduled_condition(core, "huge")) and "0/1 nodes" in c["message"] and c
    )
    assert first["reason"] == "Unschedulable"
    rv = raw(core.read_namespaced_pod, "huge", "default")["metadata"]["resourceVersion"]
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        field_selector="metadata.name=huge",
        resource_version=rv,
        timeout_seconds=2,
        deserialize=False,
    )
    for index in range(1, 9):  # a node joins every 0.1 s, none fits
        make_node(core, f"n{index}", cpu="1")
        time.sleep(0.1)
    rewrites = [e["object"]["status"]["conditions"] for e in stream if e["type"] == "MODIFIED"]
    assert 1 <= len(rewrites) <= 2, rewrites
    # Not stale for good: once the backoff is over it says what it sees.
    assert wait_for(lambda: "0/9 nodes" in scheduled_condition(core, "huge")["message"])


def test_in_the_simulated_cluster_the_scheduler_writes_as_kube_scheduler() -> None:
    """Writing straight into the store, the scheduler still writes what a real API server
    records for kube-scheduler: the condition under its own field manager on the status
    subresource (`kubectl get pod --show-managed-fields`), and the watch event every
    watcher gets."""
    server = KubeApiServer()
    server.start()
    scheduler = Scheduler(server.api_client(), resync_s=0.2, store=server.store)
    scheduler.start()
    try:
        core = client.CoreV1Api(server.api_client())
        make_pod(core, "waiting")
        stream = watch.Watch().stream(
            core.list_namespaced_pod, "default", timeout_seconds=5, deserialize=False
        )
        for event in stream:
            conditions = event["object"].get("status", {}).get("conditions") or []
            if any(c["type"] == "PodScheduled" for c in conditions):
                break
        else:
            raise AssertionError("no watch event carried the PodScheduled condition")
        pod = raw(core.read_namespaced_pod, "waiting", "default")
        entries = [m for m in pod["metadata"]["managedFields"] if m["manager"] == "kube-scheduler"]
        assert len(entries) == 1, pod["metadata"]["managedFields"]
        assert entries[0]["subresource"] == "status" and entries[0]["operation"] == "Update"
        assert "f:conditions" in entries[0]["fieldsV1"]["f:status"]
    finally:
        scheduler.stop()
        server.stop()


@pytest.mark.parametrize("source", ["over-api", "in-store"])
def test_an_informer_that_falls_behind_catches_up_by_listing_again(source: str) -> None:
    """A reader too slow for the server's watch buffer has its watch ended; the informer
    lists again and its cache holds every object, none stale (client-go's re-list). And
    stopping it ends its watch at once."""
    server = KubeApiServer(event_log_size=4, watch_queue_size=2)
    server.start()
    store = server.store
    stalled = threading.Event()
    stalled.set()

    def on_change() -> None:
        stalled.wait(10)  # while cleared, the informer reads nothing and the buffer fills

    listwatch: ListWatch = (
        ApiListWatch(client.CoreV1Api(server.api_client()).list_pod_for_all_namespaces)
        if source == "over-api"
        else StoreListWatch(store, PODS)
    )
    informer = Informer("pods", listwatch, on_change)
    informer.start()
    try:
        assert informer.synced.wait(5)
        stalled.clear()
        for i in range(12):
            store.create(PODS, "default", {"metadata": {"name": f"p{i}"}, "spec": {}})
        store.delete(PODS, "default", "p0")
        stalled.set()
        wait_for(lambda: len(informer.items()) == 11)
        versions = {pod_key(o): o["metadata"]["resourceVersion"] for o in informer.items()}
        stored = {
            pod_key(o): o["metadata"]["resourceVersion"] for o in store.list_objects(PODS, None)[0]
        }
        assert versions == stored
    finally:
        informer.stop()  # waits up to 2 s for its thread
        stopped_in_time = not informer.alive
        server.stop()
    # Stopping ends its watch at once, not at the watch's 5 s timeout.
    assert stopped_in_time
