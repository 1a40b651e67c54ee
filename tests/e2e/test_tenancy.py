"""A namespace is a trust boundary, end to end (issue #13, docs/security.md).

The escalation the issue describes: whoever may edit NodeClasses in namespace A writes one
that names a Secret of namespace B and an endpoint of their own. Today's worker refuses it
everywhere it could act — the trigger (a condition and an Event on the NodeClass, the pod
told why), the orphan GC (which reads every NodeClass's credentials on its schedule) and a
claim started by hand with that class (the activities' own check) — and the API server's
audit log and the attacker's server show that nothing was read and nothing was sent.

Then a whole life of a node with a per-node Tailscale key: minted through the (simulated)
Tailscale API, single-use, only ever in Secrets of kube-system and cloudburst-system.

Then an attacker for each way one tenant reached another's pods, nodes and VMs (issue #41),
each as a tenant with edit rights in its own namespace would try it: a pool of A's that would
take every namespace's pods; pools whose ids collided across namespaces; a NodeClaim of A's
named like B's, deleted; a kubelet registered under a claim's name by another machine; a
pool labelling its nodes with a key Kubernetes owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes import client as k8s
from temporalio.client import Client, WorkflowFailureError

from activities.claim_authority import create_nodeclaim
from api import NodeClaimPhase, NodeClass, NodePool, labels
from api._base import ObjectMeta
from api.gc import OrphanGcInput, OrphanGcReport
from api.messages import (
    NodeClaimInput,
    ScaleDownRequest,
    claim_task_queue,
    claim_workflow_id,
)
from api.nodeclass import NodeClassSpec
from api.nodepool.messages import PoolStatus, pool_workflow_id
from cli.manual_claims import (
    PoolContext,
    build_claim,
    load_pool,
    new_claim_name,
    start_workflow_for,
)
from cluster.tenancy import NODE_SELECTOR_ANNOTATION, tenant_namespace_annotations
from sim.clouds.base import Request, Response, StandinHTTPServer
from sim.cluster import SimulatedCluster
from sim.dev.stack import CLOUD_TOKEN_SECRET
from tests.conftest import SecretRecorder
from tests.e2e.harness import (
    CLUSTER_ID,
    FAST,
    Stack,
    eventually,
    fake_offering,
    in_thread,
    new_task_queue,
    serving,
    start_test_claim,
    wait_for_phase,
)
from tests.histories import history_text
from worker.settings import Settings
from workflows.gc import OrphanGcWorkflow
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.nodepool import NodePoolWorkflow

TEAM_A, TEAM_B, NOT_SERVED = "team-a", "team-b", "team-z"
# `team`/`b-web` and `team-b`/`web`: one workflow id when ids were `nodepool-<ns>-<name>`.
TEAM = "team"
TENANTS = ("default", TEAM_A, TEAM_B, TEAM)
GROUP, VERSION = "cloudburst.io", "v1alpha1"


class Attacker:
    """The namespace editor's own server: records every request that reaches it."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._server = StandinHTTPServer(self._route, name="attacker")

    @property
    def url(self) -> str:
        return self._server.url

    def _route(self, req: Request) -> Response:
        with self._lock:
            self.hits.append((req.method, req.path))
        return Response(200, {})

    def __enter__(self) -> Attacker:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


@pytest.fixture
def attacker() -> Iterator[Attacker]:
    with Attacker() as server:
        yield server


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    temporal_client: Client, kube: k8s.ApiClient, sim_cluster: SimulatedCluster, kubeconfig: Path
) -> AsyncIterator[Stack]:
    core = k8s.CoreV1Api(kube)
    for namespace in (TEAM_A, TEAM_B, TEAM, NOT_SERVED):
        await in_thread(ensure_namespace, core, namespace)
    queue = new_task_queue()
    # As an operator configures it: the tenants it serves, the stand-ins it may call.
    settings = Settings(
        kubeconfig=kubeconfig,
        task_queue=queue,
        cluster_id=CLUSTER_ID,
        tenant_namespaces=list(TENANTS),
        allowed_endpoints=sim_cluster.endpoints(),
    )
    async with serving(Stack(temporal_client, kube, sim_cluster, queue, settings)) as stack:
        yield stack


def ensure_namespace(core: k8s.CoreV1Api, name: str) -> None:
    try:
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    except k8s.ApiException as err:
        if err.status != 409:
            raise


def put_secret(core: k8s.CoreV1Api, namespace: str, name: str, data: dict[str, str]) -> None:
    core.create_namespaced_secret(
        namespace, k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=name), string_data=data)
    )


def node_class(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeClass",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"join": {"hostApiServer": "https://10.0.0.1:6443"}, **spec},
    }


def node_pool(namespace: str, name: str, class_name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodePool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeClassRef": class_name,
            "requirements": {"allowedProviders": ["fake"]},
            "template": {"labels": {"test-pool": name}},
            "disruption": {"ttlSecondsAfterEmpty": 3600},
        },
    }


def pending_pod(namespace: str, name: str, pool: str) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        spec=k8s.V1PodSpec(
            node_selector={"test-pool": pool},
            containers=[
                k8s.V1Container(
                    name="app",
                    image="busybox:1.36",
                    resources=k8s.V1ResourceRequirements(requests={"cpu": "250m"}),
                )
            ],
        ),
    )


async def create(stack: Stack, body: dict[str, Any], plural: str) -> None:
    await in_thread(
        stack.custom.create_namespaced_custom_object,
        GROUP,
        VERSION,
        body["metadata"]["namespace"],
        plural,
        body,
    )


async def read(stack: Stack, namespace: str, plural: str, name: str) -> dict[str, Any]:
    found = await in_thread(
        stack.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, plural, name
    )
    assert isinstance(found, dict)
    return found


def refused_with(reason: str) -> Any:
    def check(obj: dict[str, Any]) -> bool:
        conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        ready = conditions.get("Ready", {})
        return ready.get("status") == "False" and ready.get("reason") == reason

    return check


def ready_message(obj: dict[str, Any]) -> str:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return str(next(c for c in conditions if c["type"] == "Ready")["message"])


async def warned(stack: Stack, namespace: str, name: str, reason: str) -> None:
    found = await eventually(
        lambda: events(stack, namespace, name),
        lambda listed: any(e.reason == reason and e.type == "Warning" for e in listed),
    )
    assert found


async def events(stack: Stack, namespace: str, name: str) -> list[k8s.CoreV1Event]:
    listing = await in_thread(
        stack.core.list_namespaced_event, namespace, field_selector=f"involvedObject.name={name}"
    )
    return list(listing.items)


async def test_a_namespace_editor_cannot_reach_another_namespaces_secret(
    stack: Stack, attacker: Attacker
) -> None:
    suffix = uuid.uuid4().hex[:6]
    victim, exfil, stray = f"db-{suffix}", f"exfil-{suffix}", f"stray-{suffix}"
    kube_api = stack.cluster.kube
    # Namespace B's Secret, and namespace A's own credential (a legitimate tenant's).
    await in_thread(put_secret, stack.core, TEAM_B, victim, {"token": f"victim-{suffix}"})
    await in_thread(put_secret, stack.core, TEAM_A, "own", {"token": f"own-{suffix}"})
    mark = kube_api.audit_mark()

    # A's editor: B's Secret, sent to their own server. And a class with A's own Secret but
    # their server (the credential, or the worker's ambient identity, would go there).
    # And one in a namespace the operator does not serve.
    cross = {"endpoint": attacker.url, "apiTokenSecretRef": {"name": victim, "key": "token"}}
    cross["apiTokenSecretRef"]["namespace"] = TEAM_B
    await create(stack, node_class(TEAM_A, exfil, {"fake": cross}), "nodeclasses")
    await create(stack, node_pool(TEAM_A, exfil, exfil), "nodepools")
    await in_thread(
        stack.core.create_namespaced_pod, TEAM_A, pending_pod(TEAM_A, f"{exfil}-0", exfil)
    )
    own = {"endpoint": f"{attacker.url}/v1", "apiTokenSecretRef": {"name": "own", "key": "token"}}
    await create(stack, node_class(TEAM_A, stray, {"fake": own}), "nodeclasses")
    unserved = {"apiTokenSecretRef": {"name": "own", "key": "token"}}
    await create(stack, node_class(NOT_SERVED, stray, {"fake": unserved}), "nodeclasses")
    await in_thread(pod_is_unschedulable, stack.core, TEAM_A, f"{exfil}-0")

    # 1. Where the user looks: Ready=False with a reason and what to change, and an Event.
    found = await eventually(
        lambda: read(stack, TEAM_A, "nodeclasses", exfil), refused_with("InvalidSpec")
    )
    assert f"apiTokenSecretRef.namespace: {TEAM_B}" in ready_message(found)
    assert "only reference Secrets in its own namespace" in ready_message(found)
    found = await eventually(
        lambda: read(stack, TEAM_A, "nodeclasses", stray), refused_with("EndpointNotAllowed")
    )
    assert "spec.fake.endpoint" in ready_message(found)
    assert "CLOUDBURST_ALLOWED_ENDPOINTS[fake]" in ready_message(found)
    found = await eventually(
        lambda: read(stack, NOT_SERVED, "nodeclasses", stray), refused_with("NamespaceNotServed")
    )
    assert "CLOUDBURST_TENANT_NAMESPACES" in ready_message(found)
    for namespace, name, reason in (
        (TEAM_A, exfil, "InvalidSpec"),
        (TEAM_A, stray, "EndpointNotAllowed"),
        (NOT_SERVED, stray, "NamespaceNotServed"),
    ):
        await warned(stack, namespace, name, reason)
    told = await eventually(
        lambda: events(stack, TEAM_A, f"{exfil}-0"),
        lambda found: any(e.reason == "NoMatchingNodePool" for e in found),
    )
    assert any(f"its NodeClass {exfil} is invalid" in (e.message or "") for e in told)

    # 2. The orphan GC reads every NodeClass's credentials on its schedule: not these.
    report: OrphanGcReport = await stack.temporal.execute_workflow(
        OrphanGcWorkflow.run,
        OrphanGcInput(cluster_id=f"tenancy-{suffix}", grace_period_s=3600, delete_timeout_s=10),
        id=f"gc-tenancy-{suffix}",
        task_queue=stack.task_queue,
        execution_timeout=timedelta(minutes=3),
    )
    errors = " | ".join(report.errors)
    assert f"NodeClass {TEAM_A}/{exfil}: invalid" in errors
    assert f"NodeClass {TEAM_A}/{stray} fake: EndpointNotAllowed" in errors
    assert f"NodeClass {NOT_SERVED}/{stray} fake: NamespaceNotServed" in errors

    # 3. A claim started by hand with that class's spec (no trigger, no check of the whole
    # object by the model): the activities refuse it before they read or send anything.
    spec = NodeClassSpec.model_validate(node_class(TEAM_A, exfil, {"fake": cross})["spec"])
    pool = NodePool.model_validate(node_pool(TEAM_A, exfil, exfil))
    context = PoolContext(
        pool,
        exfil,
        # Only the spec is checked: as a claim input recorded before, or built by hand.
        NodeClass.model_construct(metadata=ObjectMeta(name=exfil, namespace=TEAM_A), spec=spec),
        stack.settings.tenancy().node_spec(TEAM_A, pool.spec),
    )
    claim = build_claim(context, [fake_offering()], new_claim_name(exfil))
    # Started as whoever reaches Temporal starts one: no NodeClaim object behind it.
    handle = await start_workflow_for(
        stack.temporal,
        context,
        claim,
        task_queue=stack.task_queue,
        cluster_id=CLUSTER_ID,
        timings=FAST,
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), timeout=60)
    # Refused before anything of the class is looked at: no NodeClaim of the worker's is
    # behind a claim started by hand (and the class's refused endpoint would refuse it next).
    assert "not authorised by the cluster: there is no NodeClaim" in str(failed.value.cause)
    status = await handle.query(NodeClaimWorkflow.status)
    assert status.phase == NodeClaimPhase.FAILED
    assert status.failure_reason == "InvalidConfiguration"

    # Nothing read in B, nothing sent to the attacker, no pool started for A's class.
    reads = [
        r
        for r in kube_api.audit(after=mark)
        if r.resource == "secrets" and r.namespace == TEAM_B and r.verb != "create"
    ]
    assert reads == []
    assert attacker.hits == []
    assert [r for r in kube_api.audit(after=mark) if r.name == "own" and r.verb == "get"] == []
    pools = [
        w.id
        async for w in stack.temporal.list_workflows(
            f"WorkflowId = '{pool_workflow_id(TEAM_A, exfil)}'"
        )
    ]
    assert pools == []


def pod_is_unschedulable(core: k8s.CoreV1Api, namespace: str, name: str) -> None:
    """What the scheduler says of a pod no node fits, so the trigger sees it as pending."""
    core.patch_namespaced_pod_status(
        name,
        namespace,
        {
            "status": {
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ]
            }
        },
    )


async def test_a_nodes_tailscale_key_is_its_own_and_lives_only_where_it_should(
    stack: Stack, sim_cluster: SimulatedCluster, secret_recorder: SecretRecorder
) -> None:
    tailnet = sim_cluster.tailnet
    assert tailnet is not None
    suffix = uuid.uuid4().hex[:5]
    name = f"tsm{suffix}"
    await in_thread(
        put_secret, stack.core, "default", f"ts-oauth-{suffix}", tailnet.oauth_secret_data()
    )
    sample = await read(stack, "default", "nodeclasses", "sample")
    spec = {
        "fake": sample["spec"]["fake"],
        "tailscale": tailnet.nodeclass_block(f"ts-oauth-{suffix}"),
    }
    await create(stack, node_class("default", name, spec), "nodeclasses")
    await create(stack, node_pool("default", name, name), "nodepools")
    before = tailnet.minted_values()

    claim, handle = await start_test_claim(stack, name)
    await wait_for_phase(handle, NodeClaimPhase.READY)
    # The node joined the tailnet with a key of its own: single-use, ephemeral, tagged.
    [device] = [d for d in tailnet.devices() if d["hostname"] == claim]
    assert device["tags"] == ["tag:cloudburst"] and device["isEphemeral"]
    node = await in_thread(stack.core.read_node, claim)
    addresses = {a.type: a.address for a in node.status.addresses}
    assert addresses["InternalIP"] == device["addresses"][0]
    [key] = tailnet.minted_values() - before
    [minted] = [k for k in tailnet.auth_keys() if k.key == key]
    assert (minted.reusable, minted.ephemeral, minted.preauthorized) == (False, True, True)
    assert minted.uses == 1
    await handle.signal(NodeClaimWorkflow.scale_down, ScaleDownRequest(reason="done"))
    await asyncio.wait_for(handle.result(), timeout=60)
    # The node left the tailnet with the claim.
    assert not [d for d in tailnet.devices() if d["hostname"] == claim]
    await asyncio.sleep(0.5)  # let the recorder see the last Secret events

    # The key and the join token lived in Secrets of kube-system and cloudburst-system
    # only, never in the pool's namespace (nor any other), and never in history.
    tokens = {
        v for v in secret_recorder.by_namespace.get("kube-system", set()) if v.count(".") == 1
    }
    assert key in secret_recorder.by_namespace.get("cloudburst-system", set())
    for namespace, values in secret_recorder.by_namespace.items():
        if namespace not in ("kube-system", "cloudburst-system"):
            assert key not in values and not (tokens & values), namespace
    history = history_text(await handle.fetch_history())
    assert key not in history and not any(t in history for t in tokens)
    assert tailnet.client_secret not in history
    # Nothing of it is left in a Secret: the script went once the node was Ready.
    left = await in_thread(
        stack.core.list_namespaced_secret,
        "cloudburst-system",
        label_selector=f"{labels.NODECLAIM}={claim}",
    )
    assert left.items == []


# --- one tenant's objects reach only that tenant's pods, nodes and VMs ----------------------


async def as_tenant(stack: Stack, namespace: str, *, node_selector: bool = True) -> None:
    """What an operator does to serve `namespace` (`cloudburst tenant-rbac`: its Namespace's
    annotations), and the tenant's own credential for the (simulated) cloud."""
    annotations = tenant_namespace_annotations(namespace, node_selector=node_selector)
    if not node_selector:
        annotations[NODE_SELECTOR_ANNOTATION] = None  # type: ignore[assignment]
    await in_thread(
        stack.core.patch_namespace, namespace, {"metadata": {"annotations": annotations}}
    )
    token = await in_thread(stack.core.read_namespaced_secret, CLOUD_TOKEN_SECRET, "default")
    body = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=CLOUD_TOKEN_SECRET), data=token.data)
    try:
        await in_thread(stack.core.create_namespaced_secret, namespace, body)
    except k8s.ApiException as err:
        if err.status != 409:
            raise


async def fake_cloud_class(stack: Stack, namespace: str, name: str) -> None:
    """A NodeClass on the (simulated) cloud, with the namespace's own credential."""
    sample = await read(stack, "default", "nodeclasses", "sample")
    await create(
        stack, node_class(namespace, name, {"fake": sample["spec"]["fake"]}), "nodeclasses"
    )


def plain_pool(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    """A pool with no selector and no taint: it would host any pod."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodePool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeClassRef": name,
            "requirements": {"allowedProviders": ["fake"]},
            "disruption": {"ttlSecondsAfterEmpty": 2},
            **spec,
        },
    }


async def plain_pod(
    stack: Stack, namespace: str, name: str, selector: dict[str, str] | None = None
) -> None:
    """A pod with no toleration of its own (the namespace's admission adds what it adds),
    and no selector but `selector`."""
    pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        spec=k8s.V1PodSpec(
            node_selector=selector,
            containers=[
                k8s.V1Container(
                    name="app",
                    image="busybox:1.36",
                    resources=k8s.V1ResourceRequirements(requests={"cpu": "250m"}),
                )
            ],
        ),
    )
    await in_thread(stack.core.create_namespaced_pod, namespace, pod)


async def bound_node(stack: Stack, namespace: str, pod: str) -> k8s.V1Node:
    found = await eventually(
        lambda: in_thread(stack.core.read_namespaced_pod, pod, namespace),
        lambda p: bool(p.spec.node_name),
    )
    return await in_thread(stack.core.read_node, found.spec.node_name)


async def nodeclaims(stack: Stack, namespace: str, pool: str | None = None) -> list[dict[str, Any]]:
    """The NodeClaims of the namespace (of `pool`'s, when given)."""
    listed = await in_thread(
        stack.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, "nodeclaims"
    )
    assert isinstance(listed, dict)
    items = list(listed.get("items") or [])
    return [c for c in items if pool is None or c["spec"]["nodePool"] == pool]


async def delete_pod(stack: Stack, namespace: str, name: str) -> None:
    with contextlib.suppress(k8s.ApiException):  # never made, or gone already
        await in_thread(stack.core.delete_namespaced_pod, name, namespace)


async def delete_pool(stack: Stack, namespace: str, name: str) -> None:
    """`kubectl delete nodepool`: its claims go with it (their nodes and VMs)."""
    await in_thread(
        stack.custom.delete_namespaced_custom_object, GROUP, VERSION, namespace, "nodepools", name
    )


async def test_a_pool_serves_its_own_namespace_and_no_other_tenants_pod_reaches_its_nodes(
    stack: Stack,
) -> None:
    # Finding 1: tenant A's pool, weight 100, no taint, on A's own account, took every
    # namespace's pending pods it could host — here, those selecting the label its nodes
    # carry, one B's workloads select; and nothing kept B's pods off A's nodes.
    suffix = uuid.uuid4().hex[:5]
    greedy = f"greedy-{suffix}"
    label = {"workload": f"batch-{suffix}"}  # on A's nodes only, in this cluster
    await as_tenant(stack, TEAM_A)
    # B's pods are not pinned to B's nodes: only the tenant taint keeps them off A's.
    await as_tenant(stack, TEAM_B, node_selector=False)
    await fake_cloud_class(stack, TEAM_A, greedy)
    pool = plain_pool(TEAM_A, greedy, weight=100, template={"labels": label})
    await create(stack, pool, "nodepools")
    try:
        await plain_pod(stack, TEAM_A, f"a-{suffix}", label)
        node = await bound_node(stack, TEAM_A, f"a-{suffix}")
        # A's node is marked A's: the label only the worker sets, the taint only A tolerates.
        assert node.metadata.labels[labels.TENANT_LABEL] == TEAM_A
        assert (labels.TENANT_TAINT, TEAM_A, "NoSchedule") in {
            (t.key, t.value, t.effect) for t in node.spec.taints or []
        }

        await plain_pod(stack, TEAM_B, f"b-{suffix}", label)
        await warned(stack, TEAM_B, f"b-{suffix}", "NoMatchingNodePool")
        # (kube-scheduler's FailedScheduling is a Warning about the pod too.)
        [told] = [
            e
            for e in await events(stack, TEAM_B, f"b-{suffix}")
            if e.type == "Warning" and e.reason == "NoMatchingNodePool"
        ]
        assert f"no NodePool serves namespace {TEAM_B}" in str(told.message)
        assert greedy not in str(told.message)  # nothing of A's shown
        assert TEAM_A not in str(told.message)
        await asyncio.sleep(1)  # the scheduler has had its turns: A's node stays A's
        b_pod = await in_thread(stack.core.read_namespaced_pod, f"b-{suffix}", TEAM_B)
        assert b_pod.spec.node_name is None
        tolerated = {(t.key, t.value) for t in b_pod.spec.tolerations or []}
        assert (labels.TENANT_TAINT, TEAM_B) in tolerated
        assert (labels.TENANT_TAINT, TEAM_A) not in tolerated
        # A's pool never heard of B's pod, and launched one node only.
        handle = stack.temporal.get_workflow_handle_for(
            NodePoolWorkflow.run, pool_workflow_id(TEAM_A, greedy)
        )
        status: PoolStatus = await handle.query(NodePoolWorkflow.status)
        assert status.pending_pods == 0 and len(status.claims) == 1
    finally:
        for namespace, pod in ((TEAM_A, f"a-{suffix}"), (TEAM_B, f"b-{suffix}")):
            await delete_pod(stack, namespace, pod)
        await delete_pool(stack, TEAM_A, greedy)


async def test_another_tenants_pod_may_not_tolerate_a_tenants_taint(stack: Stack) -> None:
    # With PodTolerationRestriction as tenant-rbac configures it, B cannot put A's toleration
    # (or a tolerate-everything one) on its pods to reach A's nodes.
    await as_tenant(stack, TEAM_B)
    for toleration in (
        k8s.V1Toleration(key=labels.TENANT_TAINT, operator="Equal", value=TEAM_A),
        k8s.V1Toleration(operator="Exists"),
    ):
        pod = k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name=f"sneak-{uuid.uuid4().hex[:5]}"),
            spec=k8s.V1PodSpec(
                containers=[k8s.V1Container(name="app", image="busybox:1.36")],
                tolerations=[toleration],
            ),
        )
        with pytest.raises(k8s.ApiException) as refused:
            await in_thread(stack.core.create_namespaced_pod, TEAM_B, pod)
        assert "conflict with its namespace whitelist" in str(refused.value.body)


async def test_pools_whose_ids_used_to_collide_each_serve_their_own_namespace(
    stack: Stack,
) -> None:
    # Finding 2: `team`/`b-web` and `team-b`/`web` were one workflow, `nodepool-team-b-web`:
    # one pool's pods planned with the other's specs, in the other's namespace.
    suffix = uuid.uuid4().hex[:5]
    first, second = (TEAM, f"b-web-{suffix}"), (TEAM_B, f"web-{suffix}")
    for namespace, name in (first, second):
        await as_tenant(stack, namespace)
        await fake_cloud_class(stack, namespace, name)
        await create(stack, plain_pool(namespace, name), "nodepools")
    try:
        for namespace, _ in (first, second):
            await plain_pod(stack, namespace, f"pod-{suffix}")
        for namespace, name in (first, second):
            node = await bound_node(stack, namespace, f"pod-{suffix}")
            node_labels = node.metadata.labels
            assert (node_labels[labels.NODEPOOL_NAMESPACE], node_labels[labels.NODEPOOL]) == (
                namespace,
                name,
            )
            [claim] = await nodeclaims(stack, namespace, name)
            assert claim["metadata"]["name"] == node.metadata.name
            assert claim["spec"]["nodePool"] == name
            pool = stack.temporal.get_workflow_handle_for(
                NodePoolWorkflow.run, pool_workflow_id(namespace, name)
            )
            status: PoolStatus = await pool.query(NodePoolWorkflow.status)
            assert (status.namespace, status.name) == (namespace, name)
        assert pool_workflow_id(*first) != pool_workflow_id(*second)
    finally:
        for namespace, name in (first, second):
            await delete_pod(stack, namespace, f"pod-{suffix}")
            await delete_pool(stack, namespace, name)


async def test_deleting_a_nodeclaim_named_like_another_tenants_leaves_theirs_alone(
    stack: Stack, sim_cluster: SimulatedCluster
) -> None:
    # Finding 3: the trigger signalled `nodeclaim-<name>` for a NodeClaim deleted in any
    # namespace: A made one named like B's, deleted it, and B's node and VM went.
    suffix = uuid.uuid4().hex[:5]
    web = f"web-{suffix}"
    await as_tenant(stack, TEAM_B)
    await fake_cloud_class(stack, TEAM_B, web)
    # Its own pool's node, not one of another test's on its way out.
    own = {"test-pool": web}
    await create(stack, plain_pool(TEAM_B, web, template={"labels": own}), "nodepools")
    try:
        await plain_pod(stack, TEAM_B, f"pod-{suffix}", own)
        node = await bound_node(stack, TEAM_B, f"pod-{suffix}")
        name = str(node.metadata.name)  # B's claim (a node is named after its claim)
        victim = await read(stack, TEAM_B, "nodeclaims", name)
        handle = stack.temporal.get_workflow_handle_for(
            NodeClaimWorkflow.run, claim_workflow_id(TEAM_B, name)
        )
        await wait_for_phase(handle, NodeClaimPhase.READY)

        decoy = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeClaim",
            "metadata": {
                "name": name,
                "namespace": TEAM_A,
                "finalizers": [labels.TERMINATION_FINALIZER],
            },
            "spec": victim["spec"],
        }
        await create(stack, decoy, "nodeclaims")
        await in_thread(
            stack.custom.delete_namespaced_custom_object, GROUP, VERSION, TEAM_A, "nodeclaims", name
        )
        # A's object goes (no claim of A's has that name: its finalizer is released) ...
        await eventually(
            lambda: nodeclaims(stack, TEAM_A),
            lambda found: name not in {c["metadata"]["name"] for c in found},
        )
        await asyncio.sleep(1)
        # ... and B's claim, node and VM stay.
        status = await handle.query(NodeClaimWorkflow.status)
        assert status.phase == NodeClaimPhase.READY and status.deletion_reason is None
        assert (await in_thread(stack.core.read_node, name)).metadata.uid == node.metadata.uid
        vm = status.instance_id
        assert vm is not None and sim_cluster.cloud.peek(vm.rsplit("/", 1)[-1]) is not None
    finally:
        await delete_pod(stack, TEAM_B, f"pod-{suffix}")
        await delete_pool(stack, TEAM_B, web)


async def test_a_node_registered_under_a_claims_name_by_another_machine_is_not_adopted(
    stack: Stack, sim_cluster: SimulatedCluster
) -> None:
    # Finding 4: a claim adopted "the Node named like it". Anyone with a join token (a
    # tenant's VM has one in its user data) can register a kubelet under a pending claim's
    # name, with labels of its choosing; the claim labelled it as the pool's, trusted it,
    # and deleted it at the end.
    suffix = uuid.uuid4().hex[:5]
    pool = f"own-{suffix}"
    await as_tenant(stack, TEAM_A)
    await fake_cloud_class(stack, TEAM_A, pool)
    await create(stack, plain_pool(TEAM_A, pool), "nodepools")
    name = new_claim_name(pool)
    impostor = "fake:///sim-1/not-the-claims-vm"
    # The claim's NodeClaim first: a Node of a claim that does not exist is the node guard's
    # to forget (approver/nodes.py); one of a launching claim is the claim's to judge.
    context = load_pool(stack.kube, TEAM_A, pool, stack.settings.tenancy())
    claim = build_claim(context, [fake_offering()], name)
    uid, _ = await in_thread(create_nodeclaim, stack.custom, claim)
    await in_thread(
        stack.core.create_node,
        k8s.V1Node(
            metadata=k8s.V1ObjectMeta(
                name=name,
                labels={
                    labels.NODECLAIM: name,
                    labels.NODEPOOL_NAMESPACE: TEAM_A,
                    labels.NODEPOOL: pool,
                },
            ),
            spec=k8s.V1NodeSpec(provider_id=impostor),
        ),
    )
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    await in_thread(stack.core.patch_node_status, name, {"status": {"conditions": [ready]}})
    try:
        handle = await start_workflow_for(
            stack.temporal,
            context,
            claim.model_copy(update={"metadata": claim.metadata.model_copy(update={"uid": uid})}),
            task_queue=stack.task_queue,
            cluster_id=CLUSTER_ID,
            timings=FAST.model_copy(update={"registration_timeout_s": 8}),
        )
        await warned(stack, TEAM_A, name, "NodeNotClaimed")
        [told] = [e for e in await events(stack, TEAM_A, name) if e.reason == "NodeNotClaimed"]
        assert impostor in str(told.message) and "its VM fake/" in str(told.message)
        # Never labelled, cordoned or deleted by the claim: the stranger is as it registered.
        node = await in_thread(stack.core.read_node, name)
        assert node.spec.provider_id == impostor and not node.spec.unschedulable
        assert labels.TENANT_LABEL not in (node.metadata.labels or {})
        assert labels.INSTANCE_TYPE not in (node.metadata.labels or {})
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), timeout=60)
        status = await handle.query(NodeClaimWorkflow.status)
        assert status.failure_reason == "RegistrationTimeout"
        # The claim's own VM was deleted with it ...
        assert sim_cluster.cloud.peek(str(status.instance_id).rsplit("/", 1)[-1]) is None
        # ... and the stranger, posing as the claim's node after the claim ended, is
        # forgotten by the node guard (approver/nodes.py).
        await eventually(lambda: node_gone(stack, name), bool, timeout_s=30)
    finally:
        with contextlib.suppress(k8s.ApiException):
            await in_thread(stack.core.delete_node, name)
        await delete_pool(stack, TEAM_A, pool)


async def node_gone(stack: Stack, name: str) -> bool:
    try:
        await in_thread(stack.core.read_node, name)
    except k8s.ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


async def test_a_pool_may_not_label_its_nodes_with_keys_kubernetes_owns(stack: Stack) -> None:
    # Finding 5: a pool set `kubernetes.io/hostname=<B's node>` (or any key B's workloads
    # select) and the worker applied it with its cluster-wide node patch.
    body = plain_pool(TEAM_A, f"hostname-{uuid.uuid4().hex[:5]}")
    body["spec"]["template"] = {"labels": {"kubernetes.io/hostname": "someone-elses-node"}}
    with pytest.raises(k8s.ApiException) as refused:
        await create(stack, body, "nodepools")
    assert refused.value.status == 422
    assert "spec.template.labels" in str(refused.value.body)
    assert "label kubernetes.io/hostname is restricted" in str(refused.value.body)


async def test_a_shared_pool_serves_the_namespaces_its_selector_selects(stack: Stack) -> None:
    """The operator's pools may serve several namespaces; a tenant's may not."""
    suffix = uuid.uuid4().hex[:5]
    operator = stack.settings.worker_namespace
    shared, chosen, other = f"shared-{suffix}", f"chosen-{suffix}", f"other-{suffix}"
    for namespace in (chosen, other):
        await in_thread(ensure_namespace, stack.core, namespace)
    await in_thread(
        stack.core.patch_namespace, chosen, {"metadata": {"labels": {"burst-share": suffix}}}
    )
    await as_tenant(stack, operator)
    await fake_cloud_class(stack, operator, shared)
    selector = {"matchLabels": {"burst-share": suffix}}
    # Its nodes carry a label of their own, which the pods select: no other node fits them.
    own = {"test-pool": shared}
    pool = plain_pool(operator, shared, namespaceSelector=selector, template={"labels": own})
    await create(stack, pool, "nodepools")
    # A tenant's pool with a selector is refused, with the reason on the pool.
    sneaky = f"sneaky-{suffix}"
    await fake_cloud_class(stack, TEAM_A, sneaky)
    await create(stack, plain_pool(TEAM_A, sneaky, namespaceSelector={}), "nodepools")
    try:
        found = await eventually(
            lambda: read(stack, TEAM_A, "nodepools", sneaky),
            refused_with("NamespaceSelectorNotAllowed"),
        )
        assert "spec.namespaceSelector" in ready_message(found)

        # A namespace the selector does not select: no pool plans it a node. (Asked first: a
        # shared pool's node, like any untainted node, takes whatever pod fits.)
        await plain_pod(stack, other, "app", own)
        await warned(stack, other, "app", "NoMatchingNodePool")
        await plain_pod(stack, chosen, "app", own)
        node = await bound_node(stack, chosen, "app")
        assert node.metadata.labels[labels.NODEPOOL_NAMESPACE] == operator
        assert labels.TENANT_LABEL not in (node.metadata.labels or {})  # shared: no tenant's
    finally:
        for namespace in (chosen, other):
            await delete_pod(stack, namespace, "app")
        await delete_pool(stack, operator, shared)
        await delete_pool(stack, TEAM_A, sneaky)


async def started_input(stack: Stack, namespace: str, name: str) -> NodeClaimInput:
    """A claim's start input as whoever reaches Temporal reads it from its history."""
    handle = stack.temporal.get_workflow_handle(claim_workflow_id(namespace, name))
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [found] = await stack.temporal.data_converter.decode(started.input.payloads, [NodeClaimInput])
    assert isinstance(found, NodeClaimInput)
    return found


def forged(copied: NodeClaimInput, namespace: str, name: str, **spec: Any) -> NodeClaimInput:
    """`copied` as a script rewrites it: another namespace and name, any spec fields."""
    claim = copied.claim.model_copy(deep=True)
    claim.metadata.namespace, claim.metadata.name = namespace, name
    claim.spec = claim.spec.model_copy(update=spec)
    return copied.model_copy(update={"claim": claim, "pool_workflow_id": None})


async def test_a_claim_started_by_whoever_reaches_temporal_launches_and_marks_nothing(
    stack: Stack, sim_cluster: SimulatedCluster
) -> None:
    """Issue #53: a script that reaches Temporal copies a legitimate claim's start input from
    history and starts claims of its own: (1) in A's namespace with B's tenant label and taint
    (B's pods would run on a machine A controls); (2) in B's namespace with B's NodeClass
    (a VM on B's credential that nothing of B's asked for). Neither gets a VM or a node: no
    NodeClaim object of the worker's is behind them, and each ends Failed saying so. A's own
    claim meanwhile is untouched. (Fails on the activities that took the input as authority:
    both VMs launched, the first node marked B's.)"""
    suffix = uuid.uuid4().hex[:5]
    a_pool, b_pool = f"own-{suffix}", f"theirs-{suffix}"
    await as_tenant(stack, TEAM_A)
    await as_tenant(stack, TEAM_B)
    for namespace, pool in ((TEAM_A, a_pool), (TEAM_B, b_pool)):
        await fake_cloud_class(stack, namespace, pool)
        await create(
            stack,
            plain_pool(namespace, pool, template={"labels": {"test-pool": pool}}),
            "nodepools",
        )
    try:
        await plain_pod(stack, TEAM_A, f"a-{suffix}", {"test-pool": a_pool})
        node = await bound_node(stack, TEAM_A, f"a-{suffix}")
        legit = str(node.metadata.name)
        copied = await started_input(stack, TEAM_A, legit)
        assert copied.claim.metadata.uid  # the worker's NodeClaim object's

        b_marks = {**copied.claim.spec.labels, labels.TENANT_LABEL: TEAM_B}
        b_taint = copied.claim.spec.taints[0].model_copy(update={"value": TEAM_B})
        attempts = {
            (TEAM_A, f"{a_pool}-forged1"): forged(
                copied, TEAM_A, f"{a_pool}-forged1", labels=b_marks, taints=[b_taint]
            ),
            (TEAM_B, f"{b_pool}-forged2"): forged(
                copied.model_copy(update={"node_class_name": b_pool}),
                TEAM_B,
                f"{b_pool}-forged2",
                node_pool=b_pool,
                node_class=b_pool,
            ),
        }
        for (namespace, name), claim_input in attempts.items():
            handle = await stack.temporal.start_workflow(
                "NodeClaimWorkflow",
                claim_input,
                id=claim_workflow_id(namespace, name),
                task_queue=claim_task_queue(stack.task_queue),
            )
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(handle.result(), timeout=60)
            status = await stack.temporal.get_workflow_handle_for(
                NodeClaimWorkflow.run, claim_workflow_id(namespace, name)
            ).query(NodeClaimWorkflow.status)
            assert status.phase == NodeClaimPhase.FAILED
            assert status.failure_reason == "InvalidConfiguration"
            assert "not authorised by the cluster" in str(status.failure_message)
            assert f"no NodeClaim {namespace}/{name} in the cluster" in str(status.failure_message)
            # No VM was asked for, no node joined, no NodeClaim was made for it.
            assert name not in sim_cluster.cloud.create_times()
            with pytest.raises(k8s.ApiException) as no_node:
                await in_thread(stack.core.read_node, name)
            assert no_node.value.status == 404
            assert name not in {c["metadata"]["name"] for c in await nodeclaims(stack, namespace)}

        # A's own claim and node are as they were: Ready, A's marks only.
        own = await stack.temporal.get_workflow_handle_for(
            NodeClaimWorkflow.run, claim_workflow_id(TEAM_A, legit)
        ).query(NodeClaimWorkflow.status)
        assert own.phase == NodeClaimPhase.READY
        now = await in_thread(stack.core.read_node, legit)
        assert now.metadata.labels[labels.TENANT_LABEL] == TEAM_A
    finally:
        await delete_pod(stack, TEAM_A, f"a-{suffix}")
        for namespace, pool in ((TEAM_A, a_pool), (TEAM_B, b_pool)):
            await delete_pool(stack, namespace, pool)
