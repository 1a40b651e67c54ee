"""sync_nodeclaim against Kubernetes' own API server: the NodeClaim resource a claim shows,
and what it costs the API server (its audit log)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError

from activities.claim_authority import create_nodeclaim
from activities.mirror import GROUP, PLURAL, VERSION, MirrorActivities
from api import labels
from api.claims import pool_owner
from api.events import KubeEvent, ObjectRef
from api.messages import MirrorInput
from api.nodeclaim import NodeClaim, NodeClaimPhase
from sim.controlplane.cluster import AuditRecord
from tests.activities.claims import claims_env
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
    meta = input.claim.metadata
    claims_env(meta.namespace, meta.name).run(acts.sync_nodeclaim, input)


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


def made(custom: client.CustomObjectsApi, namespace: str, name: str) -> NodeClaim:
    """The claim, its NodeClaim object made as its pool's start activity makes it (owned by
    the pool `burst`)."""
    pool_uid = create_pool(custom, namespace)
    shown = claim(namespace, name, NodeClaimPhase.PROVISIONING)
    shown.metadata.owner_references = [pool_owner("burst", pool_uid)]
    create_nodeclaim(custom, shown)
    return shown


def test_first_showing_writes_the_status_of_the_resource_made_before_the_claim(
    kube_api_client, audit, namespace, unique
):
    acts, custom = MirrorActivities(kube_api_client), client.CustomObjectsApi(kube_api_client)
    name = f"burst-{unique}"
    made(custom, namespace, name)
    since = audit.mark()

    show(acts, MirrorInput(claim=claim(namespace, name, NodeClaimPhase.PROVISIONING), new=True))

    # Its status written: nothing read or created.
    assert claim_requests(audit, since, 1) == ["patch"]
    shown = resource(custom, namespace, name)
    assert shown["status"]["phase"] == "Provisioning"
    assert labels.TERMINATION_FINALIZER in shown["metadata"]["finalizers"]


def test_a_later_showing_is_one_status_write_and_its_events_name_the_resource(
    kube_api_client, audit, core, namespace, unique
):
    acts, custom = MirrorActivities(kube_api_client), client.CustomObjectsApi(kube_api_client)
    name = f"burst-{unique}"
    made(custom, namespace, name)
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


def test_the_mirror_never_makes_the_resource_that_authorises_a_claim(
    kube_api_client, audit, namespace, unique
):
    """A claim's own activity creates no NodeClaim: not at its first showing (a claim started
    by whoever reaches Temporal would make its own authority), nor when someone stripped the
    finalizer and deleted it under a live claim. (Fails on the mirror that created one.)"""
    acts, custom = MirrorActivities(kube_api_client), client.CustomObjectsApi(kube_api_client)
    forged = f"burst-{unique}"
    since = audit.mark()
    result = claims_env(namespace, forged).run(
        acts.sync_nodeclaim,
        MirrorInput(claim=claim(namespace, forged, NodeClaimPhase.PROVISIONING), new=True),
    )
    assert result.uid is None
    assert "create" not in claim_requests(audit, since, 1)

    name = f"burst-{unique}-live"
    made(custom, namespace, name)
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"finalizers": []}}
    )
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    shown = claims_env(namespace, name).run(
        acts.sync_nodeclaim, MirrorInput(claim=claim(namespace, name, NodeClaimPhase.READY))
    )
    assert shown.uid is None
    for gone in (forged, name):
        try:
            resource(custom, namespace, gone)
        except client.ApiException as err:
            assert err.status == 404
        else:
            raise AssertionError(f"NodeClaim {gone} was made")


def test_a_workflow_of_another_id_writes_nothing_of_a_claims(
    kube_api_client, audit, namespace, unique
):
    """Whoever reaches Temporal can start a workflow whose input names a live claim (a sealed
    input copied from its history opens): its mirror must not write that claim's status,
    Events or finalizer. (Fails on the mirror that wrote to whatever claim its input named:
    the live claim showed Failed.)"""
    acts, custom = MirrorActivities(kube_api_client), client.CustomObjectsApi(kube_api_client)
    name = f"burst-{unique}"
    made(custom, namespace, name)
    for workflow_of in (f"{name}-forged", name):
        env = claims_env("elsewhere" if workflow_of == name else namespace, workflow_of)
        failed = claim(namespace, name, NodeClaimPhase.FAILED)
        with pytest.raises(ApplicationError):
            env.run(acts.sync_nodeclaim, MirrorInput(claim=failed, remove=True, keep=True))
    shown = resource(custom, namespace, name)
    assert (shown.get("status") or {}).get("phase") != "Failed"
    assert labels.TERMINATION_FINALIZER in shown["metadata"]["finalizers"]
