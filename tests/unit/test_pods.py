"""What a pod means for its node (cluster/pods.py), the way kubectl drain and Karpenter read
it: these decide whether a node counts as empty and whether a pod asks for a node."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client as k8s

from cluster.pods import is_do_not_disrupt, is_left_alone, is_unschedulable


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
