"""A namespace is a trust boundary, end to end (issue #13, docs/security.md).

The escalation the issue describes: whoever may edit NodeClasses in namespace A writes one
that names a Secret of namespace B and an endpoint of their own. Today's worker refuses it
everywhere it could act — the trigger (a condition and an Event on the NodeClass, the pod
told why), the orphan GC (which reads every NodeClass's credentials on its schedule) and a
claim started by hand with that class (the activities' own check) — and the API server's
audit log and the attacker's server show that nothing was read and nothing was sent.

Then a whole life of a node with a per-node Tailscale key: minted through the (simulated)
Tailscale API, single-use, only ever in Secrets of kube-system and cloudburst-system.
"""

from __future__ import annotations

import asyncio
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

from api import NodeClaimPhase, NodeClass, NodePool, labels
from api._base import ObjectMeta
from api.gc import OrphanGcInput, OrphanGcReport
from api.messages import ScaleDownRequest
from api.nodeclass import NodeClassSpec
from cli.manual_claims import PoolContext, build_claim, new_claim_name, start_claim
from sim.clouds.base import Request, Response, StandinHTTPServer
from sim.cluster import SimulatedCluster
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
from tests.replay.test_histories import history_text
from worker.settings import Settings
from workflows.gc import OrphanGcWorkflow
from workflows.nodeclaim import NodeClaimWorkflow

TEAM_A, TEAM_B, NOT_SERVED = "team-a", "team-b", "team-z"
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
    for namespace in (TEAM_A, TEAM_B, NOT_SERVED):
        await in_thread(ensure_namespace, core, namespace)
    queue = new_task_queue()
    # As an operator configures it: the tenants it serves, the stand-ins it may call.
    settings = Settings(
        kubeconfig=kubeconfig,
        task_queue=queue,
        cluster_id=CLUSTER_ID,
        tenant_namespaces=["default", TEAM_A, TEAM_B],
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
    handle = await start_claim(
        stack.temporal,
        context,
        claim,
        task_queue=stack.task_queue,
        cluster_id=CLUSTER_ID,
        timings=FAST,
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), timeout=60)
    assert "spec.fake.endpoint" in str(failed.value.cause)
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
        async for w in stack.temporal.list_workflows(f"WorkflowId = 'nodepool-{TEAM_A}-{exfil}'")
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
