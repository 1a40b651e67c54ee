"""The interruption notice a Node carries, as the watcher and the claim's poll read it."""

from __future__ import annotations

from kubernetes import client as k8s

from cluster.interruption import interruption_notice


def node(*taints: k8s.V1Taint) -> k8s.V1Node:
    return k8s.V1Node(
        metadata=k8s.V1ObjectMeta(name="n"), spec=k8s.V1NodeSpec(taints=list(taints) or None)
    )


def test_the_interruption_taint_is_the_notice_and_other_taints_are_not() -> None:
    assert interruption_notice(node()) is None
    assert (
        interruption_notice(node(k8s.V1Taint(key="cloudburst.io/disrupted", effect="NoSchedule")))
        is None
    )
    notice = k8s.V1Taint(key="cloudburst.io/interruption", value="preempted", effect="NoSchedule")
    assert interruption_notice(node(notice)) == "preempted"
    bare = k8s.V1Taint(key="cloudburst.io/interruption", effect="NoSchedule")
    assert interruption_notice(node(bare)) == "interrupted"
    assert interruption_notice(k8s.V1Node(metadata=k8s.V1ObjectMeta(name="n"))) is None
