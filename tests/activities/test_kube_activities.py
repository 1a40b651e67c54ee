"""Node activities (label, cordon, drain, delete, state) against Kubernetes' own API server.

No kubelet runs the Nodes made here: their status and their pods' are written by the test, and
the pods end the moment they are deleted (a grace period of 0, as a kubelet would end them).
They tolerate the Nodes' own NoExecute taint, as pods running on such a Node do (the taint
eviction controller deletes every pod that does not)."""

from __future__ import annotations

import base64
import dataclasses
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment

from activities.credentials import read_secret_value
from activities.heartbeat import heartbeating, sleep_heartbeating
from activities.kube import MERGE_PATCH, KubeActivities
from api import labels
from api._base import SecretKeyRef
from api.messages import (
    DrainInput,
    DrainResult,
    LabelNodeInput,
    NodeRef,
    NodeState,
    claim_workflow_id,
)
from api.nodepool import Taint
from cluster.tenancy import Tenancy
from tests.activities.claims import AuthorisedClaim, authorise_claim

# --- helpers: build the world the activities act on -------------------------------------

# The taints Kubernetes' node lifecycle controller puts on and takes off a Node by itself
# (`node.kubernetes.io/unschedulable` on a cordoned one, `not-ready` / `unreachable`):
# not the activities' to keep or lift, and left out of what is compared here.
CONTROL_PLANE_TAINTS = "node.kubernetes.io/"
# The DaemonSet the DaemonSet pods here belong to (the garbage collector deletes a pod whose
# owner does not exist); it selects no Node, so its controller makes no pod of its own.
OWNER_DAEMONSET = "owner"


def taints(spec: client.V1NodeSpec) -> list[tuple[str, str]]:
    return [
        (t.key, t.effect) for t in spec.taints or [] if not t.key.startswith(CONTROL_PLANE_TAINTS)
    ]


def make_node(
    core: client.CoreV1Api, name: str, ready: bool = True, provider_id: str | None = None
) -> None:
    """A node as the claim `name`'s VM registers it (`provider_id`: as another machine)."""
    core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name=name, labels={"existing": "yes"}),
            spec=client.V1NodeSpec(
                taints=[client.V1Taint(key="other", effect="NoExecute")],
                provider_id=provider_id or f"fake:///sim-1/{name}",
            ),
        )
    )
    core.patch_node_status(
        name,
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True" if ready else "False", "reason": "Test"}
                ]
            }
        },
        _content_type=MERGE_PATCH,
    )


def daemonset_owner(core: client.CoreV1Api, namespace: str) -> client.V1OwnerReference:
    """The namespace's DaemonSet `owner`, made the first time (no Node matches its selector)."""
    apps = client.AppsV1Api(core.api_client)
    selected = {"app": "owner-daemonset"}
    try:
        apps.create_namespaced_daemon_set(
            namespace,
            client.V1DaemonSet(
                metadata=client.V1ObjectMeta(name=OWNER_DAEMONSET),
                spec=client.V1DaemonSetSpec(
                    selector=client.V1LabelSelector(match_labels=selected),
                    template=client.V1PodTemplateSpec(
                        metadata=client.V1ObjectMeta(labels=selected),
                        spec=client.V1PodSpec(
                            node_selector={"cloudburst.test/no-such-node": "true"},
                            containers=[client.V1Container(name="agent", image="agent")],
                        ),
                    ),
                ),
            ),
        )
    except ApiException as err:
        if err.status != 409:
            raise
    owner = apps.read_namespaced_daemon_set(OWNER_DAEMONSET, namespace)
    return client.V1OwnerReference(
        api_version="apps/v1", kind="DaemonSet", name=OWNER_DAEMONSET, uid=owner.metadata.uid
    )


def make_pod(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    node: str,
    *,
    app: str = "web",
    phase: str = "Running",
    owner_kind: str | None = None,
    mirror: bool = False,
) -> None:
    owners = None
    if owner_kind:
        assert owner_kind == "DaemonSet"
        owners = [daemonset_owner(core, namespace)]
    annotations = {"kubernetes.io/config.mirror": "hash"} if mirror else None
    core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(
                name=name,
                labels={"app": app},
                owner_references=owners,
                annotations=annotations,
            ),
            spec=client.V1PodSpec(
                node_name=node,
                containers=[client.V1Container(name="c", image="busybox")],
                termination_grace_period_seconds=0,
                tolerations=[client.V1Toleration(key="other", operator="Exists")],
            ),
        ),
    )
    ready = "True" if phase == "Running" else "False"
    core.patch_namespaced_pod_status(
        name,
        namespace,
        {"status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}},
        _content_type=MERGE_PATCH,
    )


def pod_names(core: client.CoreV1Api, node: str) -> set[str]:
    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
    return {str(p.metadata.name) for p in pods.items if p.metadata}


def make_pdb(api: client.ApiClient, namespace: str, app: str) -> None:
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
        namespace,
        client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name=f"{app}-pdb"),
            spec=client.V1PodDisruptionBudgetSpec(
                min_available=1, selector=client.V1LabelSelector(match_labels={"app": app})
            ),
        ),
    )


def ref(node: str) -> NodeRef:
    """The claim `node`'s node: its VM is `fake/sim-1/<node>` (`make_node`)."""
    return NodeRef(node_name=node, instance_id=f"fake/sim-1/{node}")


def drain_input(node: str, force_in_s: float, **kw: Any) -> DrainInput:
    return DrainInput(
        node_name=node,
        instance_id=ref(node).instance_id,
        force_after=datetime.now(UTC) + timedelta(seconds=force_in_s),
        poll_interval_s=kw.pop("poll_interval_s", 0.1),
        eviction_retry_s=kw.pop("eviction_retry_s", 0.1),
        **kw,
    )


@pytest.fixture
def acts(kube_api_client: client.ApiClient) -> KubeActivities:
    return KubeActivities(kube_api_client, Tenancy())


@pytest.fixture
def node(core: client.CoreV1Api, unique: str, made_nodes: list[str]) -> str:
    name = f"node-{unique}"
    made_nodes.append(name)
    make_node(core, name)
    return name


def run(fn: Any, arg: Any, env: ActivityEnvironment | None = None) -> Any:
    """`fn` as the claim `arg` names (its node's) runs it: for that claim's own workflow
    (nodes made here carry no namespace mark, so any namespace's claim is theirs)."""
    name = getattr(arg, "node_name", None)
    env = env or ActivityEnvironment()
    if name is not None:
        env.info = dataclasses.replace(env.info, workflow_id=claim_workflow_id("default", name))
    return env.run(fn, arg)


# --- read_secret_value -------------------------------------------------------------------


def test_read_secret_value(core, namespace):
    value = "s3cr3t-value"
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="creds"),
            data={"token": base64.b64encode(value.encode()).decode()},
        ),
    )
    assert read_secret_value(core, namespace, SecretKeyRef(name="creds", key="token")) == value
    # A ref may spell out its own namespace...
    ref = SecretKeyRef(name="creds", key="token", namespace=namespace)
    assert read_secret_value(core, namespace, ref) == value
    # ...but never reach into another one: refused before anything is read.
    with pytest.raises(ApplicationError) as elsewhere:
        read_secret_value(core, "default", ref)
    assert elsewhere.value.type == "InvalidConfiguration" and elsewhere.value.non_retryable
    assert f"{namespace}/creds" in str(elsewhere.value) and "own namespace" in str(elsewhere.value)

    with pytest.raises(ApplicationError) as missing_key:
        read_secret_value(core, namespace, SecretKeyRef(name="creds", key="nope"))
    assert missing_key.value.type == "InvalidConfiguration"
    assert missing_key.value.non_retryable
    assert f"{namespace}/creds" in str(missing_key.value) and "nope" in str(missing_key.value)
    assert value not in str(missing_key.value)

    with pytest.raises(ApplicationError) as missing_secret:
        read_secret_value(core, namespace, SecretKeyRef(name="absent", key="token"))
    assert missing_secret.value.type == "InvalidConfiguration"
    assert f"{namespace}/absent" in str(missing_secret.value)


# --- label / cordon / delete -------------------------------------------------------------


def label(claim: AuthorisedClaim, node: str, labels_: dict[str, str], **kw: Any) -> None:
    acts = kw.pop("acts")
    asked = LabelNodeInput(
        node_name=node,
        instance_id=ref(node).instance_id,
        labels=labels_,
        namespace=claim.namespace,
        claim_uid=claim.uid,
        **kw,
    )
    claim.env().run(acts.label_node, asked)


def test_label_node_merges_and_is_idempotent(acts, core, node, namespace, kube_api_client):
    claim = authorise_claim(kube_api_client, namespace, node, labels={"team": "blue"})
    asked = {"team": "blue", labels.PROVIDER: "fake"}
    label(claim, node, asked, acts=acts)
    label(claim, node, asked, acts=acts)
    got = core.read_node(node).metadata.labels
    owned = labels.ownership_labels(node, namespace=namespace, node_pool="burst")
    assert got == {"existing": "yes", **asked, **owned}


def test_label_missing_node_is_node_not_found(acts, unique, namespace, kube_api_client):
    claim = authorise_claim(kube_api_client, namespace, f"ghost-{unique}")
    with pytest.raises(ApplicationError) as info:
        label(claim, f"ghost-{unique}", {}, acts=acts)
    assert info.value.type == "NodeNotFound"
    assert info.value.non_retryable


def test_labels_and_taints_the_nodeclaim_lacks_are_refused_and_nothing_is_applied(
    acts, core, node, namespace, kube_api_client
):
    """A claim's message is no authority over its node: a label or taint beyond its NodeClaim's
    (another tenant's mark among them), or a VM label of an instance type it was not made for,
    refuses the call and the node is left as it was. (Fails on the label call that applied
    whatever its input said.)"""
    claim = authorise_claim(kube_api_client, namespace, node)
    before = core.read_node(node)
    for asked, taints_ in (
        ({labels.TENANT_LABEL: "team-b"}, []),
        ({labels.NODEPOOL_NAMESPACE: "team-b"}, []),
        ({labels.INSTANCE_TYPE: "fk-huge"}, []),
        ({}, [Taint(key="gpu", value="true", effect="NoSchedule")]),
    ):
        with pytest.raises(ApplicationError) as refused:
            label(claim, node, asked, acts=acts, taints=taints_)
        assert refused.value.type == "InvalidConfiguration" and refused.value.non_retryable
        assert "not authorised by the cluster" in str(refused.value)
    after = core.read_node(node)
    assert after.metadata.labels == before.metadata.labels
    assert taints(after.spec) == taints(before.spec)


def test_a_tenants_node_gets_its_own_namespaces_marks(core, node, namespace, kube_api_client):
    """The tenant marks are the worker's, from its tenancy and the claim's namespace: a node
    of a tenant's claim carries them even when the message left them out."""
    acts = KubeActivities(kube_api_client, Tenancy(namespaces=frozenset({namespace})))
    claim = authorise_claim(kube_api_client, namespace, node)
    label(claim, node, {}, acts=acts)
    got = core.read_node(node)
    assert got.metadata.labels[labels.TENANT_LABEL] == namespace
    assert ("cloudburst.io/tenant", "NoSchedule") in taints(got.spec)


def test_a_claim_without_its_nodeclaim_or_of_another_workflow_is_refused(
    acts, core, node, namespace, kube_api_client
):
    """No NodeClaim object, one of another uid, or an activity run for another workflow: the
    node is not touched. (Fails on the label call that read nothing from the cluster.)"""
    before = core.read_node(node).metadata.labels
    unauthorised = AuthorisedClaim(namespace, node, "burst", "no-such-uid", "no-pool")
    with pytest.raises(ApplicationError) as missing:
        label(unauthorised, node, {}, acts=acts)
    assert f"no NodeClaim {namespace}/{node}" in str(missing.value)
    claim = authorise_claim(kube_api_client, namespace, node)
    with pytest.raises(ApplicationError) as other_uid:
        label(unauthorised, node, {}, acts=acts)
    assert "is not the one this claim was started for" in str(other_uid.value)
    asked = LabelNodeInput(node_name=node, labels={}, namespace=namespace, claim_uid=claim.uid)
    with pytest.raises(ApplicationError) as elsewhere:
        ActivityEnvironment().run(acts.label_node, asked)
    assert "runs for workflow 'test'" in str(elsewhere.value)
    assert core.read_node(node).metadata.labels == before


def test_cordon_taints_once_and_keeps_other_taints(acts, core, node):
    run(acts.cordon_node, ref(node))
    run(acts.cordon_node, ref(node))
    spec = core.read_node(node).spec
    assert spec.unschedulable is True
    assert sorted(taints(spec)) == sorted(
        [(labels.DISRUPTED_TAINT, "NoSchedule"), ("other", "NoExecute")]
    )


def test_uncordon_undoes_only_our_cordon(acts, core, node):
    run(acts.cordon_node, ref(node))
    run(acts.uncordon_node, ref(node))
    run(acts.uncordon_node, ref(node))  # again: nothing left to undo
    spec = core.read_node(node).spec
    assert not spec.unschedulable
    assert taints(spec) == [("other", "NoExecute")]
    run(acts.uncordon_node, ref("ghost-node-never-made"))


def test_cordon_missing_node_is_noop(acts, unique):
    run(acts.cordon_node, ref(f"ghost-{unique}"))


def test_delete_node_is_idempotent(acts, core, node):
    run(acts.delete_node, ref(node))
    with pytest.raises(ApiException) as info:
        core.read_node(node)
    assert info.value.status == 404
    run(acts.delete_node, ref(node))


# --- get_node_state ----------------------------------------------------------------------


def looked(state: NodeState) -> NodeState:
    """The state without its timestamp (the activity's clock when it looked), checked once,
    and without the providerID of a node made by `make_node` (the claim's VM's)."""
    assert state.observed_at is not None
    mine = state.provider_id is not None and state.provider_id.startswith("fake:///sim-1/")
    return state.model_copy(
        update={"observed_at": None, "provider_id": None if mine else state.provider_id}
    )


def test_node_state_missing(acts, unique):
    state: NodeState = run(acts.get_node_state, ref(f"ghost-{unique}"))
    assert looked(state) == NodeState(exists=False, ready=False, empty=True, pod_count=0)


def test_node_state_empty_then_busy(acts, core, node, namespace):
    make_pod(core, namespace, "ds", node, owner_kind="DaemonSet")
    make_pod(core, namespace, "mirror", node, mirror=True)
    make_pod(core, namespace, "done", node, phase="Succeeded")
    state: NodeState = run(acts.get_node_state, ref(node))
    assert looked(state) == NodeState(exists=True, ready=True, empty=True, pod_count=0)

    make_pod(core, namespace, "work", node)
    state = run(acts.get_node_state, ref(node))
    assert looked(state) == NodeState(exists=True, ready=True, empty=False, pod_count=1)


def test_cordon_and_look_cordons_then_sees_pods_bound_meanwhile(acts, core, node, namespace):
    """The empty re-check: after the taint, a pod the scheduler bound keeps the node."""
    make_pod(core, namespace, "work", node)
    state: NodeState = run(acts.cordon_and_look, ref(node))
    assert looked(state) == NodeState(exists=True, ready=True, empty=False, pod_count=1)
    spec = core.read_node(node).spec
    assert spec.unschedulable is True
    assert (labels.DISRUPTED_TAINT, "NoSchedule") in taints(spec)


def test_cordon_and_look_waits_for_a_bind_the_scheduler_had_under_way(acts, core, node, namespace):
    """kube-scheduler binds asynchronously: a pod placed on the node before the scheduler saw
    the cordon is bound just after it. Bound right after the cordon here, it must still be
    seen, or the node would be deleted under it."""

    def bind_once_cordoned() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if core.read_node(node).spec.unschedulable:
                make_pod(core, namespace, "late", node)
                return
            time.sleep(0.02)

    binder = threading.Thread(target=bind_once_cordoned)
    binder.start()
    try:
        state: NodeState = run(acts.cordon_and_look, ref(node))
    finally:
        binder.join()
    assert looked(state) == NodeState(exists=True, ready=True, empty=False, pod_count=1)


def test_node_state_not_ready(acts, core, unique, made_nodes):
    name = f"node-{unique}"
    made_nodes.append(name)
    make_node(core, name, ready=False)
    state: NodeState = run(acts.get_node_state, ref(name))
    assert state.exists and not state.ready and state.empty


# --- drain -------------------------------------------------------------------------------


def test_drain_evicts_workloads_and_leaves_system_pods(acts, core, node, namespace):
    make_pod(core, namespace, "web-1", node)
    make_pod(core, namespace, "web-2", node, app="api")
    make_pod(core, namespace, "ds", node, owner_kind="DaemonSet")
    make_pod(core, namespace, "mirror", node, mirror=True)
    make_pod(core, namespace, "done", node, phase="Succeeded")
    make_pod(core, namespace, "failed", node, phase="Failed")
    beats: list[Any] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)

    result: DrainResult = run(acts.drain_node, drain_input(node, force_in_s=60), env)

    assert result == DrainResult(evicted=2, forced=0, left_alone=4)
    assert pod_names(core, node) == {"ds", "mirror", "done", "failed"}
    assert beats, "drain must heartbeat"
    # Idempotent: running it again finds nothing to do.
    again: DrainResult = run(acts.drain_node, drain_input(node, force_in_s=60))
    assert again == DrainResult(evicted=0, forced=0, left_alone=4)


def test_drain_waits_on_pdb_then_forces(acts, core, node, namespace, kube_api_client):
    make_pod(core, namespace, "guarded", node, app="db")
    make_pdb(kube_api_client, namespace, "db")
    # The budget really refuses: the API server answers 429.
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_eviction(
            "guarded",
            namespace,
            client.V1Eviction(metadata=client.V1ObjectMeta(name="guarded", namespace=namespace)),
            _preload_content=False,
        )
    assert refused.value.status == 429

    beats: list[Any] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    result: DrainResult = run(
        acts.drain_node, drain_input(node, force_in_s=1.5, poll_interval_s=0.1), env
    )

    assert result == DrainResult(evicted=0, forced=1, left_alone=0)
    assert pod_names(core, node) == set()
    # Before force_after the budget was asked, refused, and the pod left where it was: rounds
    # heartbeated with the pod remaining and nothing forced, before the round that forced it.
    progress = [d[0] for d in beats if d and isinstance(d[0], dict)]
    waited = [p for p in progress if p.get("remaining") == 1 and not p.get("forced")]
    assert waited, "the pod was forced before force_after, in the first round"
    assert progress[-1]["forced"], progress[-1]


def test_drain_resumes_counts_from_heartbeat(acts, core, node, namespace):
    make_pod(core, namespace, "web", node)
    env = ActivityEnvironment()
    # As if an earlier attempt had evicted one pod before its worker died.
    env.info = dataclasses.replace(
        env.info, heartbeat_details=[{"evicted": ["earlier"], "forced": []}]
    )
    result: DrainResult = run(acts.drain_node, drain_input(node, force_in_s=60), env)
    assert result == DrainResult(evicted=2, forced=0, left_alone=0)


def test_drain_missing_node_returns(acts, unique):
    result: DrainResult = run(acts.drain_node, drain_input(f"ghost-{unique}", force_in_s=0))
    assert result == DrainResult(evicted=0, forced=0, left_alone=0)


@pytest.mark.timeout(60)
def test_drain_is_cancellable_while_blocked(acts, core, node, namespace, kube_api_client):
    make_pod(core, namespace, "guarded", node, app="db")
    make_pdb(kube_api_client, namespace, "db")
    env = ActivityEnvironment()
    timer = threading.Timer(0.5, env.cancel)
    timer.start()
    # Its next look is an hour away: only the cancellation can end this wait in the test's
    # time (without it, the test times out).
    with pytest.raises(CancelledError):
        run(acts.drain_node, drain_input(node, force_in_s=3600, poll_interval_s=3600), env)
    timer.cancel()
    assert pod_names(core, node) == {"guarded"}


def test_activities_names(acts):
    assert {fn.__name__ for fn in acts.activities()} == {
        "label_node",
        "cordon_node",
        "cordon_and_look",
        "uncordon_node",
        "drain_node",
        "delete_node",
        "get_node_state",
    }


# --- heartbeat helpers -------------------------------------------------------------------


def test_heartbeating_beats_from_a_thread_while_blocked():
    beats: list[Any] = []
    env = ActivityEnvironment()
    four_beats = threading.Event()

    def beat(*details: Any) -> None:
        beats.append(details)
        if len(beats) >= 4:
            four_beats.set()

    env.on_heartbeat = beat

    def blocked() -> None:
        with heartbeating(interval_s=0.05, details=lambda: {"step": "waiting"}):
            # Blocked on something that is not a heartbeat: only the thread can beat.
            assert four_beats.wait(timeout=60), f"{len(beats)} beats while blocked"

    env.run(blocked)
    assert beats[-1] == ({"step": "waiting"},)


@pytest.mark.timeout(60)
def test_sleep_heartbeating_stops_on_cancel():
    env = ActivityEnvironment()
    threading.Timer(0.2, env.cancel).start()
    # An hour's sleep: only the cancellation ends it in the test's time.
    with pytest.raises(CancelledError):
        env.run(sleep_heartbeating, 3600.0)


# --- a Node of the claim's name that is not the claim's VM -------------------------------


@pytest.fixture(params=["another-vm", "the-vms-id-in-another-region"])
def stranger(
    request: pytest.FixtureRequest, core: client.CoreV1Api, unique: str, made_nodes: list[str]
) -> str:
    """A node registered under a claim's name by another machine: another VM's providerID, or
    one that ends in the claim's VM id but names another region (which the last-segment
    comparison of node identity took for the claim's VM, issue #54)."""
    name = f"node-{unique}"
    made_nodes.append(name)
    provider_id = {
        "another-vm": "fake:///sim-1/someone-elses-vm",
        "the-vms-id-in-another-region": f"fake:///sim-2/{name}",
    }[request.param]
    make_node(core, name, provider_id=provider_id)
    return name


def test_a_stranger_of_the_claims_name_is_neither_labelled_cordoned_nor_deleted(
    acts, core, stranger, namespace, kube_api_client
):
    before = core.read_node(stranger)
    claim = authorise_claim(kube_api_client, namespace, stranger)
    with pytest.raises(ApplicationError):
        label(claim, stranger, {}, acts=acts)
    run(acts.cordon_node, ref(stranger))
    run(acts.delete_node, ref(stranger))
    after = core.read_node(stranger)  # still there, untouched
    assert after.metadata.labels == before.metadata.labels == {"existing": "yes"}
    assert not after.spec.unschedulable
    assert taints(after.spec) == [("other", "NoExecute")]


def test_a_stranger_is_never_drained(acts, core, namespace, stranger):
    make_pod(core, namespace, "web-1", stranger)
    result: DrainResult = run(acts.drain_node, drain_input(stranger, force_in_s=0))
    assert result.evicted == result.forced == 0
    assert core.read_namespaced_pod("web-1", namespace).metadata.deletion_timestamp is None


def test_a_node_without_a_provider_id_is_nobodys(acts, core, unique, made_nodes):
    """A kubelet that set no providerID (no --provider-id, no cloud-controller-manager) proves
    nothing: its node is not acted on either."""
    name = f"node-{unique}"
    made_nodes.append(name)
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name)))
    run(acts.delete_node, ref(name))
    assert core.read_node(name).metadata.name == name


def test_the_node_state_says_whose_node_it_is(acts, core, stranger):
    state: NodeState = run(acts.get_node_state, ref(stranger))
    assert state.exists and state.provider_id == core.read_node(stranger).spec.provider_id


def test_a_claims_node_activities_act_only_for_its_own_workflow_and_namespace(
    acts, core, node, namespace
):
    """A workflow of another id (whoever reaches Temporal can start one naming this node) is
    refused; a claim of another namespace than the node's mark does not touch it. (Fails on
    the activities that acted on any node whose providerID matched.)"""
    with pytest.raises(ApplicationError) as elsewhere:
        ActivityEnvironment().run(acts.cordon_node, ref(node))
    assert "not authorised by the cluster" in str(elsewhere.value)
    core.patch_node(node, {"metadata": {"labels": {labels.NODEPOOL_NAMESPACE: "team-b"}}})
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=claim_workflow_id("team-a", node))
    env.run(acts.cordon_node, ref(node))
    env.run(acts.delete_node, ref(node))
    after = core.read_node(node)  # still there, not cordoned
    assert not after.spec.unschedulable
