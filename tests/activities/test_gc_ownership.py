"""The orphan GC judges shared hardware only through the namespace that holds it, and never on
a failed listing (issue #55): two tenants' NodeClasses list the same Redfish inventory
(sushy-tools' emulator), the worker collects as itself on the session's control plane."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.gc import GcActivities
from activities.providers.base import InstanceSpec
from activities.providers.redfish import RedfishProvider
from api import labels as L
from api.gc import OrphanGcInput
from cluster.tenancy import Tenancy
from sim.clouds.redfish import RedfishBridge, inventory
from tests.activities.conftest import create_namespace
from tests.providers.harness_redfish import block, logins


@pytest.fixture(scope="module")
def bridge() -> Iterator[RedfishBridge]:
    with RedfishBridge(machines=inventory((("rack", 2, 16, 64),)), poll_s=0.1) as b:
        yield b


def test_a_failing_bmc_listing_deletes_nothing_of_another_tenants(
    worker_api_client: client.ApiClient,
    kube_api_client: client.ApiClient,
    core: client.CoreV1Api,
    unique: str,
    serve_tenant: Callable[[str], None],
    bridge: RedfishBridge,
) -> None:
    """team-a holds a machine; team-a's BMC login fails, team-b's NodeClass lists the same
    inventory. Fails without the fix: team-b's listing alone reported team-a's machine,
    judged by team-b's claims (none), so the GC workflow would power it off and return it
    through team-b's scope."""
    team_a, team_b = f"team-a-{unique}", f"team-b-{unique}"
    custom = client.CustomObjectsApi(kube_api_client)
    passwords = {team_a: "not-the-bmc-password", team_b: bridge.password}
    for ns in (team_a, team_b):
        create_namespace(core, ns)
        serve_tenant(ns)
        login = base64.b64encode(f"cloudburst:{passwords[ns]}".encode()).decode()
        core.create_namespaced_secret(
            ns,
            client.V1Secret(metadata=client.V1ObjectMeta(name="bmc"), data={"login": login}),
        )
        custom.create_namespaced_custom_object(
            "cloudburst.io",
            "v1alpha1",
            ns,
            "nodeclasses",
            {
                "apiVersion": "cloudburst.io/v1alpha1",
                "kind": "NodeClass",
                "metadata": {"name": "metal", "namespace": ns},
                "spec": {
                    "redfish": bridge.nodeclass_block("bmc", "login"),
                    "join": {"hostApiServer": "https://10.0.0.1:6443"},
                },
            },
        )
    cluster_id = f"c-{unique}"
    holder = RedfishProvider(block(bridge), logins(bridge))
    try:
        held = holder.create(
            InstanceSpec(
                name="nc-a",
                cluster_id=cluster_id,
                node_pool="metal",
                region="on-prem",
                instance_type=bridge.instance_type,
                user_data="#!/bin/sh\n",
                namespace=team_a,
                claim_uid="uid-a",
            )
        )
        tenancy = Tenancy(
            namespaces=frozenset({team_a, team_b}),
            allowed_endpoints={"redfish": (bridge.url, bridge.seed.url)},
        )
        found = ActivityEnvironment().run(
            GcActivities(worker_api_client, tenancy).collect_orphans,
            OrphanGcInput(cluster_id=cluster_id),
        )
        assert [vm.instance_id for vm in found.vms] == []  # nothing the workflow may delete
        assert any(f"{team_a}/metal" in e for e in found.errors)
        assert holder.get(held.id) is not None
        assert held.labels[L.NODEPOOL_NAMESPACE] == team_a
    finally:
        for inst in holder.list_owned(cluster_id):
            holder.delete(inst.id)
        holder.close()
