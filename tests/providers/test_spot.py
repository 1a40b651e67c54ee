"""Spot VMs on the three clouds that sell them: each provider module asks for spot the way
its API wants (EC2 InstanceMarketOptions, Compute Engine scheduling.provisioningModel SPOT,
ARM priority Spot), the stand-in records it and reports it back, and refuses what the real
API refuses."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from botocore.exceptions import ClientError
from google.api_core.exceptions import BadRequest
from google.cloud import compute_v1

from activities.providers.base import InstanceSpec, Provider, ProviderError, split_instance_id
from api import labels as L
from tests.providers import harness_aws, harness_azure, harness_gcp

CLUSTER = "spot-cluster"


def spec(provider: str, cloud: Any, name: str, capacity_type: str) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        cluster_id=CLUSTER,
        node_pool="burst",
        region=cloud.region,
        instance_type=cloud.instance_type,
        user_data="#!/bin/sh\necho hi\n",
        labels={L.MANAGED: "true", L.CLUSTER: CLUSTER, L.NODEPOOL: "burst", L.NODECLAIM: name},
        capacity_type=capacity_type,
    )


@pytest.fixture(scope="module", params=["aws", "gcp", "azure"])
def cloud(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any, Provider]]:
    module: Any = {"aws": harness_aws, "gcp": harness_gcp, "azure": harness_azure}[request.param]
    with module.standin_and_provider() as (standin, provider):
        yield request.param, standin, provider


def _name() -> str:
    return f"nc-spot-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("capacity_type", ["spot", "on-demand"])
def test_the_vm_is_made_with_the_capacity_type_asked_for(
    cloud: tuple[str, Any, Provider], capacity_type: str
) -> None:
    name, standin, provider = cloud
    made = provider.create(spec(name, standin, _name(), capacity_type))
    try:
        assert made.capacity_type == capacity_type
        again = provider.get(made.id)
        assert again is not None and again.capacity_type == capacity_type
        recorded = _recorded(name, standin, made.id)
        if capacity_type == "spot":
            assert recorded == _SPOT_FIELDS[name]
        else:
            assert not recorded
    finally:
        with contextlib.suppress(ProviderError):
            provider.delete(made.id)


# What each API records for a spot VM made the way the provider asks for it.
_SPOT_FIELDS: dict[str, Any] = {
    "aws": "spot",  # InstanceLifecycle
    "gcp": {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "automaticRestart": False,
        "onHostMaintenance": "TERMINATE",
    },
    "azure": {"priority": "Spot", "evictionPolicy": "Delete", "billingProfile": {"maxPrice": -1}},
}


def _recorded(name: str, standin: Any, iid: str) -> Any:
    _, region, native = split_instance_id(iid)
    if name == "aws":
        raw = standin.ec2(region).describe_instances(InstanceIds=[native])
        return raw["Reservations"][0]["Instances"][0].get("InstanceLifecycle")
    if name == "gcp":
        return standin.peek(native)["scheduling"]
    return standin.peek(native)["spot_settings"]


def test_malformed_spot_settings_are_refused_as_the_real_api_refuses_them(
    cloud: tuple[str, Any, Provider],
) -> None:
    name, standin, provider = cloud
    if name == "aws":
        ec2 = provider._ec2(standin.region)  # type: ignore[attr-defined]
        base = {"ImageId": "ami-12c6146b", "InstanceType": "t3.small", "MinCount": 1, "MaxCount": 1}
        with pytest.raises(ClientError, match="InvalidParameterValue"):
            ec2.run_instances(**base, InstanceMarketOptions={"MarketType": "cheap"})
        with pytest.raises(ClientError, match="InvalidParameterCombination"):
            ec2.run_instances(
                **base,
                InstanceMarketOptions={
                    "MarketType": "spot",
                    "SpotOptions": {
                        "SpotInstanceType": "one-time",
                        "InstanceInterruptionBehavior": "stop",
                    },
                },
            )
    elif name == "gcp":
        instances, _ = provider._clients()  # type: ignore[attr-defined]
        body = compute_v1.Instance(
            name=_name(),
            machine_type=f"zones/{standin.zone}/machineTypes/{standin.instance_type}",
            scheduling=compute_v1.Scheduling(provisioning_model="SPOT", automatic_restart=True),
        )
        with pytest.raises(BadRequest, match="automaticRestart"):
            instances.insert_unary(
                project=standin.project, zone=standin.zone, instance_resource=body
            )
    else:
        compute, _ = provider._clients()  # type: ignore[attr-defined]
        block = provider.block
        vm_body = {
            "location": standin.region,
            "properties": {
                "hardwareProfile": {"vmSize": standin.instance_type},
                "evictionPolicy": "Delete",  # without priority Spot
            },
        }
        with pytest.raises(HttpResponseError, match="only on Azure Spot"):
            compute.virtual_machines.begin_create_or_update(
                block.resource_group,  # type: ignore[attr-defined]
                _name(),
                vm_body,
            ).result()


# What the in-VM agent of each cloud turns into the node's interruption taint.
_TAINT_VALUE = {"aws": "spot-itn", "gcp": "preempted", "azure": "preempt"}


def test_a_spot_vm_is_warned_then_reclaimed_and_an_on_demand_vm_cannot_be(
    cloud: tuple[str, Any, Provider],
) -> None:
    name, standin, provider = cloud
    spot = provider.create(spec(name, standin, _name(), "spot"))
    regular = provider.create(spec(name, standin, _name(), "on-demand"))
    try:
        spot_native = split_instance_id(spot.id)[2]
        regular_native = split_instance_id(regular.id)[2]
        with pytest.raises(ValueError, match=r"(?i)not .*spot"):
            standin.interrupt(regular_native, notice_s=0.3)
        assert standin.interruption_notice(regular_native) is None

        standin.interrupt(spot_native, notice_s=0.6)
        # The notice first, the VM still there: what the in-VM endpoint says.
        assert standin.interruption_notice(spot_native) == _TAINT_VALUE[name]
        if name == "aws":
            action = standin.instance_action(spot_native)
            assert action is not None and action["action"] == "terminate" and action["time"]
        elif name == "gcp":
            assert standin.metadata_preempted(spot_native) == "TRUE"
            assert standin.metadata_preempted(regular_native) == "FALSE"
        else:
            events = standin.scheduled_events(spot_native)["Events"]
            assert [e["EventType"] for e in events] == ["Preempt"]
            assert events[0]["Resources"] == [spot_native] and events[0]["NotBefore"]
        assert provider.get(spot.id) is not None

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and provider.get(spot.id) is not None:
            time.sleep(0.1)
        # Reclaimed the way each cloud does it for the settings the provider asks for.
        assert provider.get(spot.id) is None
        assert spot_native not in standin.instance_states()
        if name == "aws":
            raw = standin.ec2(standin.region).describe_instances(InstanceIds=[spot_native])
            found = raw["Reservations"][0]["Instances"][0]
            assert found["State"]["Name"] == "terminated"
            assert found["StateReason"]["Code"] == "Server.SpotInstanceTermination"
        # The on-demand VM is untouched.
        assert provider.get(regular.id) is not None
    finally:
        for made in (spot, regular):
            with contextlib.suppress(ProviderError):
                provider.delete(made.id)
