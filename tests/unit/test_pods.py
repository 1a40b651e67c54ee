"""What a pod means for its node (cluster/pods.py), the way kubectl drain and Karpenter read
it: these decide whether a node counts as empty and whether a pod asks for a node."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s

from cluster.pod_view import PodUnreadable, pod_view
from cluster.pods import (
    bound_pod_fields,
    is_do_not_disrupt,
    is_left_alone,
    is_unschedulable,
    pod_fields,
    pod_model,
)
from cluster.requirements import pod_demand


def pod(
    *,
    owner: str | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    node: str | None = None,
    deleting: bool = False,
    scheduled: tuple[str, str] | None = ("False", "Unschedulable"),
) -> k8s.V1Pod:
    conditions = []
    if scheduled is not None:
        status, reason = scheduled
        conditions.append(k8s.V1PodCondition(type="PodScheduled", status=status, reason=reason))
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(
            name="p",
            namespace="default",
            annotations=annotations,
            owner_references=[
                k8s.V1OwnerReference(api_version="apps/v1", kind=owner, name="o", uid="u")
            ]
            if owner
            else None,
            deletion_timestamp=datetime.now(UTC) if deleting else None,
        ),
        spec=k8s.V1PodSpec(containers=[], node_name=node),
        status=k8s.V1PodStatus(phase=phase, conditions=conditions),
    )


@pytest.mark.parametrize(
    ("case", "left_alone"),
    [
        (pod(owner="ReplicaSet"), False),
        (pod(owner="DaemonSet"), True),
        (pod(annotations={"kubernetes.io/config.mirror": "abc"}), True),
        (pod(phase="Succeeded"), True),
        (pod(phase="Failed"), True),
        (pod(), False),
    ],
)
def test_daemonset_mirror_and_finished_pods_neither_keep_a_node_busy_nor_get_evicted(
    case: k8s.V1Pod, left_alone: bool
) -> None:
    assert is_left_alone(case) is left_alone


@pytest.mark.parametrize(
    ("annotations", "protected"),
    [
        ({"karpenter.sh/do-not-disrupt": "true"}, True),
        ({"cloudburst.io/do-not-disrupt": "true"}, True),
        ({"karpenter.sh/do-not-disrupt": "false"}, False),
        ({"karpenter.sh/do-not-disrupt": "True"}, False),  # Karpenter matches "true" only
        (None, False),
    ],
)
def test_do_not_disrupt_takes_either_annotation_set_to_true(
    annotations: dict[str, str] | None, protected: bool
) -> None:
    assert is_do_not_disrupt(pod(annotations=annotations)) is protected


@pytest.mark.parametrize(
    ("case", "asks_for_a_node"),
    [
        (pod(), True),
        (pod(node="n1"), False),  # bound
        (pod(deleting=True), False),
        (pod(owner="DaemonSet"), False),  # the DaemonSet controller places it
        (pod(scheduled=("False", "SchedulingGated")), False),
        (pod(scheduled=None), False),  # the scheduler has not looked yet
    ],
)
def test_only_a_pod_the_scheduler_found_no_room_for_asks_for_a_node(
    case: k8s.V1Pod, asks_for_a_node: bool
) -> None:
    assert is_unschedulable(case) is asks_for_a_node


# A pod as an API server sends it, with what the watchers leave out (images, env, probes,
# volumes, statuses, managed fields) and all they read.


def slim_pod(raw: dict[str, Any]) -> k8s.V1Pod:
    """A pod as the pending-pod trigger's watch reads it."""
    return pod_model(pod_fields(raw))


def bound_view(raw: dict[str, Any]) -> k8s.V1Pod:
    """A bound pod as the node watcher's watch reads it."""
    return pod_model(bound_pod_fields(raw))


FULL_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-1",
        "namespace": "shop",
        "uid": "0b8c",
        "resourceVersion": "42",
        "creationTimestamp": "2026-11-26T03:00:00Z",
        "labels": {"app": "web"},
        "annotations": {"karpenter.sh/do-not-disrupt": "true"},
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "r"}
        ],
        "managedFields": [
            {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}
        ],
    },
    "spec": {
        "nodeSelector": {"cloudburst.io/pool": "burst"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "arch", "operator": "In", "values": ["arm64"]}
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
        "overhead": {"cpu": "100m"},
        "priority": 1000,
        "volumes": [{"name": "data", "emptyDir": {}}],
        "initContainers": [
            {"name": "migrate", "image": "web:1", "resources": {"requests": {"cpu": "2"}}},
            {
                "name": "proxy",
                "image": "envoy:1",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
            },
        ],
        "containers": [
            {
                "name": "app",
                "image": "web:1",
                "env": [{"name": "A", "value": "b"}],
                "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}},
            }
        ],
    },
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available",
                "lastTransitionTime": "2026-11-26T03:00:01Z",
            }
        ],
        "containerStatuses": [
            {"name": "app", "ready": False, "restartCount": 0, "image": "web:1", "imageID": ""}
        ],
    },
}


def test_a_slim_pod_reads_as_the_whole_one_to_every_watcher_rule() -> None:
    whole = k8s.ApiClient().deserialize(json.dumps(FULL_POD), "V1Pod", "application/json")
    slim = slim_pod(FULL_POD)
    assert pod_demand(slim) == pod_demand(whole)
    assert pod_demand(slim).requests.cpu_m == 2100  # the init container's peak, + overhead
    for rule in (is_unschedulable, is_left_alone, is_do_not_disrupt):
        assert rule(slim) == rule(whole)
    assert is_unschedulable(slim) and is_do_not_disrupt(slim)
    # What changes on every write and no watcher reads: an event changing only these is
    # no news (trigger.watch.Slim).
    assert slim.metadata.resource_version is None
    assert slim.status.conditions[0].message is None
    assert slim.status.conditions[0].last_transition_time == datetime(
        2026, 11, 26, 3, 0, 1, tzinfo=UTC
    )
    # What no watcher reads is left out.
    assert slim.metadata.managed_fields is None and slim.spec.volumes is None
    assert slim.spec.containers[0].env is None and slim.status.container_statuses is None


def test_a_pod_from_a_newer_api_server_reads_as_it_would_without_the_fields_it_adds() -> None:
    # The client's models forbid fields they do not know; a newer cluster's pod must still
    # ask for a node (the watch skips a pod it cannot read: nothing would scale for it).
    newer = copy.deepcopy(FULL_POD)
    newer["spec"]["tolerations"][0]["futureField"] = "x"
    newer["spec"]["affinity"]["nodeAffinity"]["futureField"] = {"a": 1}
    newer["status"]["conditions"][0]["observedRevision"] = 7
    newer["spec"]["containers"][0]["resources"]["futureField"] = []
    slim = slim_pod(newer)
    assert slim == slim_pod(FULL_POD)
    assert is_unschedulable(slim) and pod_demand(slim) == pod_demand(slim_pod(FULL_POD))


def test_a_slim_pod_keeps_a_daemonset_pod_and_a_bound_one_what_they_are() -> None:
    daemon = {
        "metadata": {
            "name": "agent",
            "namespace": "kube-system",
            "uid": "d",
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "a", "uid": "x"}
            ],
        },
        "spec": {"nodeName": "burst-abcde", "containers": [{"name": "agent", "image": "agent:1"}]},
        "status": {"phase": "Running"},
    }
    slim = slim_pod(daemon)
    assert is_left_alone(slim) and slim.spec.node_name == "burst-abcde"
    assert pod_demand(slim).requests.pods == 1


def test_the_node_watchers_view_of_a_bound_pod_keeps_what_its_node_holds_and_whether_it_is_done() -> (
    None
):
    bound = copy.deepcopy(FULL_POD)
    bound["spec"]["nodeName"] = "burst-abcde"
    whole = k8s.ApiClient().deserialize(json.dumps(bound), "V1Pod", "application/json")
    for phase in ("Pending", "Running"):
        bound["status"]["phase"] = phase
        view = bound_view(bound)
        assert pod_demand(view).requests == pod_demand(whole).requests
        assert is_do_not_disrupt(view) and not is_left_alone(view)
        # Pending and Running are alike to it: the kubelet starting a pod is no news.
        assert view == bound_view(FULL_POD | {"spec": bound["spec"]})
        assert view.status.conditions is None and view.spec.node_selector is None
    bound["status"]["phase"] = "Succeeded"
    assert is_left_alone(bound_view(bound))


# `cloudburst plan` reads its files' pods and the DaemonSets' templates through a view of their
# JSON (cluster/pod_view.py), not the client's model: each must ask the same of a node.

_QUANTITIES = st.sampled_from(["100m", "250m", "1", "2", "1.5", "64Mi", "1Gi", "2G", "3"])
_NAMES = st.sampled_from(["a", "team", "zone", "kubernetes.io/arch", "cloudburst.io/provider"])


def _requests() -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(st.sampled_from(["cpu", "memory"]), _QUANTITIES, max_size=2)


def _container(init: bool) -> st.SearchStrategy[dict[str, Any]]:
    resources = st.fixed_dictionaries({}, optional={"requests": _requests(), "limits": _requests()})
    optional: dict[str, Any] = {"resources": resources}
    if init:
        optional["restartPolicy"] = st.just("Always")
    return st.fixed_dictionaries({"name": st.just("c"), "image": st.just("i")}, optional=optional)


def _expression() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "key": _NAMES,
            "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
        },
        optional={"values": st.lists(st.sampled_from(["x", "1", "arm64"]), max_size=2)},
    )


_TERM = st.fixed_dictionaries(
    {},
    optional={
        "matchExpressions": st.lists(_expression(), max_size=2),
        "matchFields": st.lists(_expression(), max_size=1),
    },
)
_TOLERATION = st.fixed_dictionaries(
    {},
    optional={
        "key": _NAMES,
        "operator": st.sampled_from(["Exists", "Equal"]),
        "value": st.sampled_from(["", "x"]),
        "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
    },
)
_POD = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.just("p")},
            optional={"namespace": st.just("team-a"), "uid": st.just("u-1")},
        ),
        "spec": st.fixed_dictionaries(
            {"containers": st.lists(_container(False), min_size=1, max_size=3)},
            optional={
                "initContainers": st.lists(_container(True), max_size=3),
                "overhead": _requests(),
                "nodeSelector": st.dictionaries(_NAMES, st.sampled_from(["x", "y"]), max_size=2),
                "tolerations": st.lists(_TOLERATION, max_size=3),
                "affinity": st.fixed_dictionaries(
                    {},
                    optional={
                        "nodeAffinity": st.fixed_dictionaries(
                            {},
                            optional={
                                "requiredDuringSchedulingIgnoredDuringExecution": (
                                    st.fixed_dictionaries(
                                        {"nodeSelectorTerms": st.lists(_TERM, max_size=2)}
                                    )
                                )
                            },
                        )
                    },
                ),
            },
        ),
    }
)


@settings(max_examples=300, deadline=None)
@given(_POD)
def test_a_pods_json_view_asks_of_a_node_what_the_clients_model_asks(raw: dict[str, Any]) -> None:
    model = k8s.ApiClient().deserialize(json.dumps(raw), "V1Pod", "application/json")
    assert pod_demand(pod_view(raw)) == pod_demand(model)


def test_the_json_view_of_a_whole_pod_and_a_newer_servers_reads_as_the_model() -> None:
    whole = k8s.ApiClient().deserialize(json.dumps(FULL_POD), "V1Pod", "application/json")
    newer = copy.deepcopy(FULL_POD)
    newer["spec"]["tolerations"][0]["futureField"] = "x"
    newer["spec"]["containers"][0]["resources"]["futureField"] = []
    assert pod_demand(pod_view(FULL_POD)) == pod_demand(whole)
    assert pod_demand(pod_view(newer)) == pod_demand(whole)
    assert pod_demand(pod_view(FULL_POD)).requests.cpu_m == 2100


def test_a_pod_that_does_not_read_as_one_names_each_field_that_is_wrong() -> None:
    raw = {
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": ["1"]}}}],
            "tolerations": "all",
        }
    }
    with pytest.raises(PodUnreadable) as unreadable:
        pod_view(raw)
    said = str(unreadable.value)
    assert "spec.containers.0.resources.requests.cpu" in said
    assert "spec.tolerations: Input should be a valid list" in said
    with pytest.raises(PodUnreadable, match=r"^spec\.containers: required field is missing"):
        pod_view({"spec": {}})


def test_a_quantity_a_manifest_writes_as_a_bare_number_is_read_as_the_api_server_reads_it() -> None:
    # YAML `cpu: 1` is an integer; Kubernetes takes a quantity as a string or a number.
    raw = {"spec": {"containers": [{"resources": {"requests": {"cpu": 1, "memory": 2**30}}}]}}
    assert pod_demand(pod_view(raw)).requests.cpu_m == 1000
    assert pod_demand(pod_view(raw)).requests.memory_bytes == 2**30
    half = {"spec": {"containers": [{"resources": {"limits": {"cpu": 0.5}}}]}}
    assert pod_demand(pod_view(half)).requests.cpu_m == 500
