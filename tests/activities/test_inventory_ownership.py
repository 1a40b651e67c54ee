"""The operator's inventory has owners (issue #55): `CLOUDBURST_INVENTORY_OWNERS` gives each
Redfish machine to one namespace, and another namespace's NodeClass listing it gets none of it;
a claim's machine found without its id is the claim's own (namespace and uid), never a
same-named claim's of another namespace. Against sushy-tools' emulator, on the session's
control plane, the worker reading as itself."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.compute import ComputeActivities
from activities.gc import GcActivities
from activities.kube_reads import KubeReads
from activities.planning.inputs import PlanningInputs
from activities.providers.base import InstanceSpec
from activities.providers.redfish import RedfishProvider
from api.gc import OrphanGcInput
from api.messages import InstanceRef
from api.nodeclass import NodeClassSpec
from api.nodepool import NodePoolSpec
from api.planning import PlanRequest
from cluster.tenancy import MACHINE_NOT_OWNED, Tenancy
from sim.clouds.redfish import RedfishBridge, inventory
from tests.activities.conftest import create_namespace
from tests.providers.harness_redfish import block, logins


@pytest.fixture(scope="module")
def bridge() -> Iterator[RedfishBridge]:
    with RedfishBridge(machines=inventory((("owned", 2, 16, 64),)), poll_s=0.1) as b:
        yield b


def _node_class(bridge: RedfishBridge) -> NodeClassSpec:
    return NodeClassSpec.model_validate(
        {
            "redfish": bridge.nodeclass_block("bmc", "login"),
            "join": {"hostApiServer": "https://10.0.0.1:6443"},
        }
    )


def test_tenant_b_listing_a_tenants_machines_gets_none_of_them(
    worker_api_client: client.ApiClient,
    kube_api_client: client.ApiClient,
    core: client.CoreV1Api,
    unique: str,
    serve_tenant: Callable[[str], None],
    bridge: RedfishBridge,
) -> None:
    """The operator gives every machine to team-a; team-b's NodeClass lists them all, with a
    working BMC login. Fails without the fix: team-b's plan is offered team-a's free machines
    (and its GC scope lists them), since any NodeClass whose BMC addresses are allowed was
    served."""
    team_a, team_b = f"team-a-{unique}", f"team-b-{unique}"
    login = base64.b64encode(f"cloudburst:{bridge.password}".encode()).decode()
    spec = _node_class(bridge)
    create_namespace(core, team_b)
    serve_tenant(team_b)
    core.create_namespaced_secret(
        team_b, client.V1Secret(metadata=client.V1ObjectMeta(name="bmc"), data={"login": login})
    )
    client.CustomObjectsApi(kube_api_client).create_namespaced_custom_object(
        "cloudburst.io",
        "v1alpha1",
        team_b,
        "nodeclasses",
        {
            "apiVersion": "cloudburst.io/v1alpha1",
            "kind": "NodeClass",
            "metadata": {"name": "metal", "namespace": team_b},
            "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        },
    )
    tenancy = Tenancy(
        namespaces=frozenset({team_a, team_b}),
        allowed_endpoints={"redfish": (bridge.url, bridge.seed.url)},
        inventory_owners={team_a: tuple(m.name for m in bridge.machines)},
    )
    # Planning offers none: the catalog is never read with team-b's login.
    request = PlanRequest(
        pool_name="metal",
        pool=NodePoolSpec(),
        class_providers=["redfish"],
        node_class=spec,
        pods=[],
        namespace=team_b,
    )
    with pytest.raises(ApplicationError) as refused:
        PlanningInputs(KubeReads(worker_api_client), tenancy=tenancy).planning_inputs(request)
    assert refused.value.non_retryable and MACHINE_NOT_OWNED in str(refused.value.details)
    # The GC lists none through team-b's NodeClass.
    found = ActivityEnvironment().run(
        GcActivities(worker_api_client, tenancy).collect_orphans,
        OrphanGcInput(cluster_id=f"c-{unique}"),
    )
    assert any(f"{team_b}/metal redfish: {MACHINE_NOT_OWNED}" in e for e in found.errors)


def test_a_claims_machine_found_by_its_labels_is_its_own_not_a_same_named_claims(
    bridge: RedfishBridge, unique: str
) -> None:
    """Two namespaces' claims of one name hold two machines; team-b's claim, its create
    interrupted before it learnt the instance id, looks its machine up by its labels. Fails
    without the fix: the look-up matched the claim's name alone and found team-a's machine
    (listed first), which team-b's delete would then power off."""
    cluster_id = f"c-{unique}"
    provider = RedfishProvider(block(bridge), logins(bridge))
    try:
        held = {
            namespace: provider.create(
                InstanceSpec(
                    name="nc",
                    cluster_id=cluster_id,
                    node_pool="metal",
                    region=bridge.region,
                    instance_type=bridge.instance_type,
                    user_data="#!/bin/sh\n",
                    namespace=namespace,
                    claim_uid=f"uid-{namespace}",
                )
            )
            for namespace in ("team-a", "team-b")
        }
        ref = InstanceRef(
            claim_name="nc",
            provider="redfish",
            cluster_id=cluster_id,
            namespace="team-b",
            node_class_name="metal",
            node_class=_node_class(bridge),
            claim_uid="uid-team-b",
        )
        found = ComputeActivities._find(provider, ref)
        assert found is not None and found.id == held["team-b"].id
        assert ComputeActivities._find(provider, ref.model_copy(update={"claim_uid": "x"})) is None
    finally:
        for instance in provider.list_owned(cluster_id):
            provider.delete(instance.id)
        provider.close()
