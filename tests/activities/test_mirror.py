"""sync_nodeclaim against Kubernetes' own API server: the NodeClaim resource a claim shows,
and what it costs the API server (its audit log)."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.mirror import GROUP, PLURAL, VERSION, MirrorActivities
from api import labels
from api.claims import pool_owner
from api.events import KubeEvent, ObjectRef
from api.messages import MirrorInput
from api.nodeclaim import NodeClaim, NodeClaimPhase
from sim.controlplane.cluster import AuditRecord
from tests.activities.conftest import AuditLog


def claim(namespace: str, name: str, phase: NodeClaimPhase) -> NodeClaim:
    return NodeClaim.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "nodePool": "burst",
                "nodeClass": "default",
                "offerings": [{"provider": "fake", "region": "sim-1", "instanceType": "small"}],
            },
            "status": {"phase": phase.value, "instanceID": f"fake-{name}"},
        }
    )


def show(acts: MirrorActivities, input: MirrorInput) -> None:
    ActivityEnvironment().run(acts.sync_nodeclaim, input)


def resource(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
        GROUP, VERSION, namespace, PLURAL, name
    )
    return found


def claim_verbs(records: list[AuditRecord]) -> list[str]:
    return [r.verb for r in records if r.resource.startswith(PLURAL)]


def claim_requests(audit: AuditLog, since: int, expected: int) -> list[str]:
    """The verbs of the requests on NodeClaims since `since` (waiting, up to a deadline, for at
    least `expected` of them to be logged)."""
    return claim_verbs(audit.since(since, until=lambda found: len(claim_verbs(found)) >= expected))


def create_pool(custom: client.CustomObjectsApi, namespace: str) -> str:
    """The claims' pool, `burst`; its uid."""
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodePool", "metadata": {"name": "burst"}}
    created: dict[str, Any] = custom.create_namespaced_custom_object(  # type: ignore[assignment]
        GROUP, VERSION, namespace, "nodepools", {**body, "spec": {"nodeClassRef": "default"}}
    )
    return str(created["metadata"]["uid"])


def owner_uids(custom: client.CustomObjectsApi, namespace: str, name: str) -> list[str]:
    return [
        ref["uid"]
        for ref in resource(custom, namespace, name)["metadata"].get("ownerReferences", [])
        if ref["kind"] == "NodePool" and ref["name"] == "burst"
    ]


def launched(namespace: str, name: str) -> KubeEvent:
    return KubeEvent(
        regarding=ObjectRef(kind="NodeClaim", name=name, namespace=namespace),
        reason="Launched",
        message="Launched fake/sim-1/small",
    )


def test_first_showing_creates_the_resource_with_its_status_and_finalizer(
    kube_api_client, audit, namespace, unique
):
    acts, custom = MirrorActivities(kube_api_client), client.CustomObjectsApi(kube_api_client)
    name = f"burst-{unique}"
    since = audit.mark()

    show(acts, MirrorInput(claim=claim(namespace, name, NodeClaimPhase.PROVISIONING), new=True))

    # Created, then its status written: nothing read first.
    assert claim_requests(audit, since, 2) == ["create", "patch"]
    shown = resource(custom, namespace, name)
    assert shown["status"]["phase"] == "Provisioning"
    assert labels.TERMINATION_FINALIZER in shown["metadata"]["finalizers"]


def test_a_later_showing_is_one_status_write_and_its_events_name_the_resource(
    kube_api_client, audit, core, namespace, unique
):
    acts, custom = MirrorActivities(kube_api_client), client.CustomObjectsApi(kube_api_client)
    name = f"burst-{unique}"
    show(acts, MirrorInput(claim=claim(namespace, name, NodeClaimPhase.PROVISIONING), new=True))
    since = audit.mark()

    show(
        acts,
        MirrorInput(
            claim=claim(namespace, name, NodeClaimPhase.JOINING),
            events=[launched(namespace, name)],
        ),
    )

    assert claim_requests(audit, since, 1) == ["patch"]
    shown = resource(custom, namespace, name)
    assert shown["status"]["phase"] == "Joining"
    listed = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    assert [(e.reason, e.involved_object.uid) for e in listed.items] == [
        ("Launched", shown["metadata"]["uid"])
    ]


def test_a_resource_deleted_under_a_live_claim_is_shown_again(kube_api_client, namespace, unique):
    acts, custom = MirrorActivities(kube_api_client), client.CustomObjectsApi(kube_api_client)
    name = f"burst-{unique}"
    show(acts, MirrorInput(claim=claim(namespace, name, NodeClaimPhase.PROVISIONING), new=True))
    # Someone strips the finalizer and deletes it: the claim (and its VM) still live.
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"finalizers": []}}
    )
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    show(acts, MirrorInput(claim=claim(namespace, name, NodeClaimPhase.READY)))

    shown = resource(custom, namespace, name)
    assert shown["status"]["phase"] == "Ready"
    assert labels.TERMINATION_FINALIZER in shown["metadata"]["finalizers"]


def test_a_first_showing_retried_after_it_landed_updates_the_resource(
    kube_api_client, namespace, unique
):
    acts, custom = MirrorActivities(kube_api_client), client.CustomObjectsApi(kube_api_client)
    name = f"burst-{unique}"
    first = MirrorInput(claim=claim(namespace, name, NodeClaimPhase.PROVISIONING), new=True)
    show(acts, first)
    uid = resource(custom, namespace, name)["metadata"]["uid"]

    # The worker died after the create: the retry finds the resource there (a 409).
    show(acts, first.model_copy(update={"claim": claim(namespace, name, NodeClaimPhase.JOINING)}))

    shown = resource(custom, namespace, name)
    assert (shown["metadata"]["uid"], shown["status"]["phase"]) == (uid, "Joining")


def owned_claim(namespace: str, name: str, pool_uid: str) -> NodeClaim:
    """A claim as its pool's workflow starts it: owned by the pool's uid it was told."""
    made = claim(namespace, name, NodeClaimPhase.PROVISIONING)
    made.metadata.owner_references = [pool_owner("burst", pool_uid)]
    return made


def test_claims_owned_by_their_pool_show_without_reading_it(
    kube_api_client, audit, namespace, unique
):
    acts, custom = MirrorActivities(kube_api_client), client.CustomObjectsApi(kube_api_client)
    pool_uid = create_pool(custom, namespace)
    names = [f"burst-{unique}-{n}" for n in range(5)]
    since = audit.mark()

    for name in names:
        show(acts, MirrorInput(claim=owned_claim(namespace, name, pool_uid), new=True))

    assert [r for r in audit.since(since) if r.resource == "nodepools"] == []
    # Deleting the pool deletes its claims' resources (the garbage collector's work).
    assert [owner_uids(custom, namespace, name) for name in names] == [[pool_uid]] * 5


def test_a_claim_owned_by_a_pool_created_again_is_not_owned_by_the_new_one(
    kube_api_client, namespace, unique
):
    """The owner is the pool the claim was planned by: one deleted meanwhile takes its claim
    with it (the garbage collector), never hands it to the pool now under its name."""
    acts, custom = MirrorActivities(kube_api_client), client.CustomObjectsApi(kube_api_client)
    old_uid = create_pool(custom, namespace)
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "nodepools", "burst")
    new_uid = create_pool(custom, namespace)
    name = f"burst-{unique}"

    show(acts, MirrorInput(claim=owned_claim(namespace, name, old_uid), new=True))

    assert owner_uids(custom, namespace, name) == [old_uid] != [new_uid]


def test_a_claim_without_its_owner_reads_the_pool_there_now(
    kube_api_client, audit, namespace, unique
):
    """A claim started before pools knew their uid (an older pool workflow's)."""
    acts, custom = MirrorActivities(kube_api_client), client.CustomObjectsApi(kube_api_client)
    pool_uid = create_pool(custom, namespace)
    name = f"burst-{unique}"
    since = audit.mark()

    show(acts, MirrorInput(claim=claim(namespace, name, NodeClaimPhase.PROVISIONING), new=True))

    def pool_verbs(records: list[AuditRecord]) -> list[str]:
        return [r.verb for r in records if r.resource == "nodepools"]

    pool_reads = pool_verbs(audit.since(since, until=lambda found: len(pool_verbs(found)) >= 1))
    assert pool_reads == ["get"]
    assert owner_uids(custom, namespace, name) == [pool_uid]
