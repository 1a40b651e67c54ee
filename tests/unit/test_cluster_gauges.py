"""The pool and claim gauges from the cluster's objects (`observability/cluster_gauges.py`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import pytest
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry, generate_latest

from observability.cluster_gauges import cluster_families
from trigger.gauges import ClusterGauges


def pool(
    namespace: str,
    name: str,
    *,
    nodes: int = 0,
    cpu: str | None = None,
    limits: dict[str, Any] | None = None,
    conditions: list[dict[str, str]] | None = None,
    status: bool = True,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"limits": limits or {}},
    }
    if status:
        obj["status"] = {
            "nodes": nodes,
            "resources": {"cpu": cpu, "memory": "3Gi"} if cpu else {},
            "conditions": conditions or [],
        }
    return obj


def claim(namespace: str, name: str, phase: str, *, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"namespace": namespace, "name": name}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": metadata,
        "spec": {"nodePool": "web"},
        "status": {"phase": phase, "provider": "hetzner", "capacityType": "on-demand"},
    }


def samples(families: list[Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families
        for s in family.samples
    }


def test_two_pools_of_one_name_in_two_namespaces_are_two_series() -> None:
    """Keyed by namespace and name: `team-a/web` and `team-b/web` each have their usage
    (the gauges keyed by pool name alone made them one series, whichever wrote last)."""
    found = samples(
        cluster_families(
            [
                pool("team-a", "web", nodes=2, cpu="4", limits={"maxNodes": 5, "cpu": "64"}),
                pool("team-b", "web", nodes=1, cpu="500m"),
            ],
            [],
            [
                ("team-a", "a-0", ("team-a", "web")),
                ("team-a", "a-1", ("team-a", "web")),
                ("team-c", "c-0", ("team-a", "web")),  # a pod of another namespace, shared pool
            ],
        )
    )
    usage = "cloudburst_nodepools_usage"
    assert found[usage, (("namespace", "team-a"), ("nodepool", "web"), ("resource", "nodes"))] == 2
    assert found[usage, (("namespace", "team-b"), ("nodepool", "web"), ("resource", "nodes"))] == 1
    assert found[usage, (("namespace", "team-a"), ("nodepool", "web"), ("resource", "cpu"))] == 4
    assert found[usage, (("namespace", "team-b"), ("nodepool", "web"), ("resource", "cpu"))] == 0.5
    assert (
        found[usage, (("namespace", "team-a"), ("nodepool", "web"), ("resource", "memory"))]
        == 3 * 2**30
    )
    limit = "cloudburst_nodepools_limit"
    assert found[limit, (("namespace", "team-a"), ("nodepool", "web"), ("resource", "nodes"))] == 5
    assert found[limit, (("namespace", "team-a"), ("nodepool", "web"), ("resource", "cpu"))] == 64
    # Unlimited: no limit series (a ratio against it would be meaningless).
    assert not [k for k in found if k[0] == limit and ("namespace", "team-b") in k[1]]
    pending = "cloudburst_nodepools_pending_pods"
    assert found[pending, (("namespace", "team-a"), ("nodepool", "web"))] == 3
    state = "cloudburst_pods_state"
    assert (
        found[
            state,
            (
                ("name", "c-0"),
                ("namespace", "team-c"),
                ("nodepool", "web"),
                ("nodepool_namespace", "team-a"),
                ("phase", "Pending"),
            ),
        ]
        == 1
    )
    assert found[pending, (("namespace", "team-b"), ("nodepool", "web"))] == 0
    # The deprecated names, by pool name alone: the sum over namespaces (one series each).
    assert found["cloudburst_nodepool_usage", (("nodepool", "web"), ("resource", "nodes"))] == 3


def test_a_pool_that_is_gone_has_no_series_and_a_new_one_none_before_its_status() -> None:
    found = samples(cluster_families([pool("team-a", "new", status=False)], [], []))
    assert not [k for k in found if k[0] == "cloudburst_nodepools_usage"]
    gone = samples(cluster_families([], [], []))
    assert not [k for k in gone if k[0].startswith("cloudburst_nodepools")]


def test_conditions_are_one_and_zero_and_unknown_ones_are_left_out() -> None:
    found = samples(
        cluster_families(
            [
                pool(
                    "a",
                    "p",
                    conditions=[
                        {"type": "LimitReached", "status": "True"},
                        {"type": "PricesStale", "status": "False"},
                        {"type": "Ready", "status": "Unknown"},
                    ],
                )
            ],
            [],
            [],
        )
    )
    condition = "cloudburst_nodepools_condition"
    assert found[condition, (("namespace", "a"), ("nodepool", "p"), ("type", "LimitReached"))] == 1
    assert found[condition, (("namespace", "a"), ("nodepool", "p"), ("type", "PricesStale"))] == 0
    assert (condition, (("namespace", "a"), ("nodepool", "p"), ("type", "Ready"))) not in found


def test_a_claim_whose_deletion_began_is_deleting_until_it_ended() -> None:
    found = samples(
        cluster_families(
            [],
            [
                claim("a", "web-1", "Ready", deleting=True),
                claim("a", "web-2", "Deleted", deleting=True),
                claim("a", "web-3", "Joining"),
            ],
            [],
        )
    )
    phases = {
        dict(labels)["nodeclaim"]: dict(labels)["phase"]
        for name, labels in found
        if name == "cloudburst_nodeclaims_state"
    }
    assert phases == {"web-1": "Deleting", "web-2": "Deleted", "web-3": "Joining"}


def test_only_the_serving_trigger_lists_and_serves_them() -> None:
    """A trigger that is not the one `trigger_for` names serves no pool or claim series (each
    would otherwise be counted once per replica), and reads nothing from the API server."""
    unreachable = k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9"))
    registry = CollectorRegistry()
    registry.register(
        ClusterGauges(unreachable, serving=lambda: False, pending_pods=list, timeout_s=1)
    )
    assert b"cloudburst_" not in generate_latest(registry)


def test_an_unreachable_api_server_costs_the_gauges_not_the_scrape() -> None:
    unreachable = k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9"))
    registry = CollectorRegistry()
    registry.register(
        ClusterGauges(unreachable, serving=lambda: True, pending_pods=list, timeout_s=1)
    )
    assert b"cloudburst_nodepools" not in generate_latest(registry)


class _Listings(BaseHTTPRequestHandler):
    """An API server that lists one NodePool and no NodeClaim, and counts the lists."""

    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        items = [pool("a", "p", nodes=1)] if "nodepools" in self.path else []
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": items}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def api_server() -> Iterator[str]:
    _Listings.requests = []
    server = HTTPServer(("127.0.0.1", 0), _Listings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_scrapes_within_the_reuse_window_list_the_api_server_once(api_server: str) -> None:
    """However often it is scraped, the API server is listed once per `reuse_s` (fails
    without the reuse: a list of every NodePool and NodeClaim per scrape)."""
    now = [0.0]
    registry = CollectorRegistry()
    registry.register(
        ClusterGauges(
            k8s.ApiClient(k8s.Configuration(host=api_server)),
            serving=lambda: True,
            pending_pods=list,
            reuse_s=5,
            clock=lambda: now[0],
        )
    )
    for at in (0.0, 1.0, 4.9):
        now[0] = at
        assert b'cloudburst_nodepools_usage{namespace="a",nodepool="p",resource="nodes"} 1.0' in (
            generate_latest(registry)
        )
    assert len(_Listings.requests) == 2  # NodePools and NodeClaims, once
    now[0] = 5.0
    generate_latest(registry)
    assert len(_Listings.requests) == 4
