"""`start_claim_workflows` against a cluster: the NodePool its claims belong to is read first."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client as k8s
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.claim_authority import delete_nodeclaim
from activities.claim_workflows import ClaimWorkflowActivities
from api.claims import pool_owner
from api.messages import ClaimStarts, claim_workflow_id
from cluster.tenancy import Tenancy
from tests.activities.test_claim_workflows import runs_of, start


@pytest.fixture
def pool() -> str:
    return f"gonepool{uuid.uuid4().hex[:6]}"


async def test_claims_of_a_nodepool_gone_from_the_cluster_are_not_started(
    temporal_client: Client, kube: k8s.ApiClient, pool: str
) -> None:
    """On a real cluster the garbage collector deletes a deleted pool's NodeClaims at once;
    the scale-downs free its limits before the trigger's word that the pool is gone reaches
    it, and it planned its waiting pods a new node of a pool that no longer exists. Claims
    owned by a NodePool the cluster no longer has (or has under another uid) start nothing.
    (Fails on the start activity that read no NodePool.)"""
    custom = k8s.CustomObjectsApi(kube)
    body = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": pool, "namespace": "default"},
        "spec": {"nodeClassRef": "sample"},
    }
    created = custom.create_namespaced_custom_object(
        "cloudburst.io", "v1alpha1", "default", "nodepools", body
    )
    uid = created["metadata"]["uid"]
    owned = start(pool, "eeeee", f"{pool}-claims")
    owned.input.claim.metadata.owner_references = [pool_owner(pool, uid)]
    stale = start(pool, "fffff", f"{pool}-claims")
    stale.input.claim.metadata.owner_references = [pool_owner(pool, "an-older-pools-uid")]
    starter = ClaimWorkflowActivities(kube, Tenancy())
    run = ActivityEnvironment(client=temporal_client).run
    try:
        refused = await run(starter.start_claim_workflows, ClaimStarts(starts=[stale]))
        assert refused.pool_gone and list(refused.refused) == [f"{pool}-fffff"]
        assert "is gone from the cluster" in refused.refused[f"{pool}-fffff"]
        assert (await run(starter.start_claim_workflows, ClaimStarts(starts=[owned]))).refused == {}
    finally:
        custom.delete_namespaced_custom_object(
            "cloudburst.io", "v1alpha1", "default", "nodepools", pool
        )
    gone = start(pool, "ggggg", f"{pool}-claims")
    gone.input.claim.metadata.owner_references = [pool_owner(pool, uid)]
    result = await run(starter.start_claim_workflows, ClaimStarts(starts=[gone]))
    assert result.pool_gone and list(result.refused) == [f"{pool}-ggggg"]
    assert await runs_of(temporal_client, f"{pool}-ggggg") == []
    await temporal_client.get_workflow_handle(
        claim_workflow_id("default", f"{pool}-eeeee")
    ).terminate()
    delete_nodeclaim(custom, "default", f"{pool}-eeeee")
