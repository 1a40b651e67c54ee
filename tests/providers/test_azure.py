"""Azure specifics: classification by ARM error code (not by exception class), the NIC-first
create and its cleanup, LRO polling on the configured endpoint, credentials."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from azure.core.exceptions import HttpResponseError, ResourceExistsError

from activities.providers.azure import (
    AzureProvider,
    StaticTokenCredential,
    _is_arm_size,
    parse_credential,
)
from activities.providers.base import (
    CapacityError,
    FatalError,
    InstanceSpec,
    RetryableError,
    split_instance_id,
)
from api import labels as L
from api.nodeclass import AzureClass
from sim.clouds.azure import AzureStandin
from tests.providers.harness_azure import standin_and_provider

CLUSTER = "az-cluster"


def spec(name: str, **kw: Any) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        cluster_id=CLUSTER,
        node_pool="burst",
        region=kw.pop("region", "westeurope"),
        instance_type=kw.pop("instance_type", "Standard_D2s_v5"),
        user_data=kw.pop("user_data", "#!/bin/sh\necho hi\n"),
        labels={L.MANAGED: "true", L.CLUSTER: CLUSTER, L.NODEPOOL: "burst", L.NODECLAIM: name},
        **kw,
    )


def claim() -> str:
    return f"nc-az-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def azure() -> Iterator[tuple[AzureStandin, AzureProvider]]:
    with standin_and_provider() as pair:
        yield pair


def test_allocation_failure_inside_the_operation_is_capacity(
    azure: tuple[AzureStandin, AzureProvider],
) -> None:
    cloud, provider = azure
    name = claim()
    polls_before = len(cloud.polls())
    cloud.inject_failure("create", "capacity")
    with pytest.raises(CapacityError) as caught:
        provider.create(spec(name))
    assert "AllocationFailed" in str(caught.value)
    cause = caught.value.__cause__
    # It came out of the long-running operation as a plain HttpResponseError (not a 409).
    assert isinstance(cause, HttpResponseError) and not isinstance(cause, ResourceExistsError)
    assert cause.error is not None and cause.error.code == "AllocationFailed"
    assert len(cloud.polls()) > polls_before
    # The Failed VM and its NIC were cleaned up: a retry starts clean.
    assert cloud.peek(name) is None and f"{name}-nic" not in cloud.nic_names()
    inst = provider.create(spec(name))
    assert cloud.stats()["created_by_name"][name] == 2  # one failed allocation, one VM
    provider.delete(inst.id)


def test_a_409_is_classified_by_its_code(azure: tuple[AzureStandin, AzureProvider]) -> None:
    cloud, provider = azure
    cloud.inject_failure("create", "sku_unavailable")
    with pytest.raises(CapacityError) as sku:
        provider.create(spec(claim()))
    assert isinstance(sku.value.__cause__, ResourceExistsError)

    cloud.inject_failure("create", "conflict")
    with pytest.raises(FatalError) as conflict:
        provider.create(spec(claim()))
    assert isinstance(conflict.value.__cause__, ResourceExistsError)
    assert "PropertyChangeNotAllowed" in str(conflict.value)

    cloud.inject_failure("create", "quota")
    with pytest.raises(CapacityError) as quota:
        provider.create(spec(claim()))
    assert "OperationNotAllowed" in str(quota.value)


def test_throttling_carries_retry_after(azure: tuple[AzureStandin, AzureProvider]) -> None:
    cloud, provider = azure
    cloud.inject_failure("create", "throttle")
    with pytest.raises(RetryableError) as caught:
        provider.create(spec(claim()))
    assert caught.value.retry_after_s == 1.0


def test_nic_first_then_vm_and_delete_takes_both(azure: tuple[AzureStandin, AzureProvider]) -> None:
    cloud, provider = azure
    name = claim()
    script = "#!/bin/bash\necho 'ünïcode' \"q\" $HOME\n"
    inst = provider.create(spec(name, user_data=script))
    puts = [(m, p) for m, p, _ in cloud.requests_seen() if m == "PUT" and name in p]
    assert [p.rsplit("/", 2)[-2] for _, p in puts] == ["networkInterfaces", "virtualMachines"]
    assert inst.private_ip and inst.id == f"azure/westeurope/{name}"
    vm = cloud.peek(name)
    assert vm is not None and vm["user_data"] == script
    assert vm["labels"][L.NODECLAIM] == name
    again = provider.create(spec(name))
    assert again.id == inst.id and cloud.stats()["created_by_name"][name] == 1
    provider.delete(inst.id)
    assert provider.get(inst.id) is None
    assert f"{name}-nic" not in cloud.nic_names()
    provider.delete(inst.id)


def test_polling_stays_on_the_configured_endpoint(
    azure: tuple[AzureStandin, AzureProvider],
) -> None:
    cloud, provider = azure
    inst = provider.create(spec(claim()))
    host = urlsplit(cloud.url).netloc
    assert {h for _, _, h in cloud.requests_seen()} == {host}
    assert cloud.polls()
    provider.delete(inst.id)


def test_missing_subnet_or_group_says_what_to_fix(
    azure: tuple[AzureStandin, AzureProvider],
) -> None:
    cloud, _provider = azure
    block = AzureClass.model_validate(
        {**cloud.nodeclass_block("azure", "c"), "subnetId": cloud.subnet_id + "-nope"}
    )
    with pytest.raises(FatalError) as caught:
        AzureProvider(block, cloud.credential, polling_interval_s=0.05).create(spec(claim()))
    assert "subnetId" in caught.value.fix
    block = AzureClass.model_validate(
        {**cloud.nodeclass_block("azure", "c"), "resourceGroup": "nope-rg"}
    )
    with pytest.raises(FatalError) as rg:
        AzureProvider(block, cloud.credential, polling_interval_s=0.05).create(spec(claim()))
    assert "resourceGroup" in rg.value.fix


def test_credentials_never_appear_in_errors(azure: tuple[AzureStandin, AzureProvider]) -> None:
    cloud, provider = azure
    cloud.inject_failure("create", "auth")
    try:
        with pytest.raises(FatalError) as caught:
            provider.create(spec(claim()))
    finally:
        cloud.clear_failures()
    text = f"{caught.value} {caught.value!r} {caught.value.__cause__!r}"
    assert cloud.token not in text
    assert "credentialsSecretRef" in caught.value.fix
    # A wrong token: refused, and the token is not echoed.
    bad = json.dumps({"access_token": "wrong-" + uuid.uuid4().hex})
    block = AzureClass.model_validate(cloud.nodeclass_block("azure", "c"))
    with pytest.raises(FatalError) as refused:
        AzureProvider(block, bad, polling_interval_s=0.05).get("azure/westeurope/x")
    assert json.loads(bad)["access_token"] not in str(refused.value)

    secret = "s3cr3t-" + uuid.uuid4().hex
    with pytest.raises(FatalError) as missing:
        parse_credential(json.dumps({"tenant_id": "t", "client_secret": secret}))
    assert secret not in str(missing.value)
    assert secret not in repr(StaticTokenCredential(secret))


def test_service_principal_json_builds_a_client_secret_credential() -> None:
    from azure.identity import ClientSecretCredential

    cred = parse_credential(
        json.dumps({"tenant_id": "t-1", "client_id": "c-1", "client_secret": "s-1"})
    )
    assert isinstance(cred, ClientSecretCredential)


def test_catalog_and_arm_sizes(azure: tuple[AzureStandin, AzureProvider]) -> None:
    cloud, provider = azure
    types = {t.name: t for t in provider.instance_types()}
    assert types["Standard_D2ps_v5"].arch == "arm64" and types["Standard_D2s_v5"].arch == "x86_64"
    assert _is_arm_size("Standard_D2ps_v5") and _is_arm_size("Standard_E4pds_v6")
    assert not _is_arm_size("Standard_D2s_v5") and not _is_arm_size("Standard_D2as_v5")
    assert cloud.instance_shape("Standard_D2ps_v5") == (2.0, 8.0, "arm64")


def test_bootable_view(azure: tuple[AzureStandin, AzureProvider]) -> None:
    cloud, provider = azure
    inst = provider.create(spec(claim()))
    native = split_instance_id(inst.id)[2]
    assert cloud.instance_states()[native] in ("pending", "running")
    vm = cloud.peek(native)
    assert vm is not None and vm["private_ip"] and vm["region"] == "westeurope"
    provider.delete(inst.id)
    assert native not in cloud.instance_states()
