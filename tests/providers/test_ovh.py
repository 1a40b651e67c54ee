"""OVHcloud specifics: /auth/time, the claim in the instance name, endpoint by name, errors."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator

import ovh.client
import pytest

from activities.providers import provider_class
from activities.providers.base import (
    CapacityError,
    FatalError,
    InstanceSpec,
    ProviderError,
    RetryableError,
)
from activities.providers.ovh import OvhProvider, parse_vm_name, vm_name
from api import labels as L
from api.nodeclass import OvhClass
from sim.clouds.ovh import OvhStandin
from tests.providers.harness_ovh import standin_and_provider

CLUSTER = "ovh-test"
SHIPPED_ENDPOINTS = {
    "ovh-eu": "https://eu.api.ovh.com/1.0",
    "ovh-us": "https://api.us.ovhcloud.com/1.0",
    "ovh-ca": "https://ca.api.ovh.com/1.0",
}


def spec(name: str, pool: str = "burst", cluster: str = CLUSTER, **kw: object) -> InstanceSpec:
    values: dict[str, object] = {
        "name": name,
        "cluster_id": cluster,
        "node_pool": pool,
        "region": "GRA11",
        "instance_type": "d2-4",
        "user_data": "#!/bin/sh\necho hi\n",
        "labels": {L.MANAGED: "true", L.CLUSTER: cluster, L.NODEPOOL: pool, L.NODECLAIM: name},
        **kw,
    }
    return InstanceSpec.model_validate(values)


def claim(pool: str = "burst") -> str:
    return f"{pool}-{uuid.uuid4().hex[:5]}"


@pytest.fixture
def cloud_and_provider() -> Iterator[tuple[OvhStandin, OvhProvider]]:
    with standin_and_provider() as pair:
        yield pair


def secrets_of(cloud: OvhStandin) -> list[str]:
    return [cloud.application_key, cloud.application_secret, cloud.consumer_key]


def test_registered() -> None:
    assert provider_class("ovh") is OvhProvider


def test_auth_time_is_answered_and_used_for_signing() -> None:
    # The server's clock is an hour ahead: only a client that synced by /auth/time signs
    # requests the stand-in accepts.
    with standin_and_provider(clock_skew_s=3600) as (cloud, provider):
        inst = provider.create(spec(claim()))
        assert provider.get(inst.id) is not None
        provider.delete(inst.id)
        seen = cloud.requests_seen()
    assert seen[0] == ("GET", "/1.0/auth/time")
    assert seen.count(("GET", "/1.0/auth/time")) == 1  # once per provider object
    assert all(path.startswith("/1.0/") for _m, path in seen)


def test_claim_is_encoded_in_the_instance_name(
    cloud_and_provider: tuple[OvhStandin, OvhProvider],
) -> None:
    cloud, provider = cloud_and_provider
    # A cluster id with '_' and '.' still splits unambiguously (claim/pool never contain '_').
    cluster = "prod_eu.1"
    name = claim("gpu")
    inst = provider.create(spec(name, pool="gpu", cluster=cluster))
    native = inst.id.rsplit("/", 1)[1]
    vm = cloud.peek(native)
    assert vm is not None
    assert vm["name"] == f"cb_prod_eu.1_gpu_{name}" == vm_name(cluster, "gpu", name)
    assert parse_vm_name(vm["name"]) == (cluster, "gpu", name)
    assert inst.name == name
    assert inst.labels == {
        L.MANAGED: "true",
        L.CLUSTER: cluster,
        L.NODEPOOL: "gpu",
        L.NODECLAIM: name,
    }
    assert [i.id for i in provider.list_owned(cluster)] == [inst.id]
    assert provider.list_owned("prod") == []
    assert provider.list_owned("eu.1") == []
    # Another cluster's VM with the same claim name is a different VM, never "ours".
    other = provider.create(spec(name, pool="gpu", cluster="prod"))
    assert other.id != inst.id
    assert [i.id for i in provider.list_owned("prod")] == [other.id]
    assert provider.create(spec(name, pool="gpu", cluster=cluster)).id == inst.id
    with pytest.raises(FatalError):
        provider.create(spec("bad_claim"))


def test_not_ours_is_ignored(cloud_and_provider: tuple[OvhStandin, OvhProvider]) -> None:
    _cloud, provider = cloud_and_provider
    assert parse_vm_name("my-webserver") is None
    assert parse_vm_name("cb_only_two") is None
    assert parse_vm_name("cb___") is None
    ours = provider.create(spec(claim()))
    assert [i.id for i in provider.list_owned(CLUSTER)] == [ours.id]


def test_endpoint_is_registered_by_a_name_derived_from_it() -> None:
    with standin_and_provider() as (cloud_a, a), standin_and_provider() as (cloud_b, b):
        results: dict[str, str] = {}

        def run(key: str, provider: OvhProvider) -> None:
            results[key] = provider.create(spec(claim())).id

        threads = [threading.Thread(target=run, args=(k, p)) for k, p in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert cloud_a.peek(results["a"].rsplit("/", 1)[1]) is not None
        assert cloud_b.peek(results["b"].rsplit("/", 1)[1]) is not None
        assert ovh.client.ENDPOINTS[f"cloudburst:{cloud_a.endpoint}"] == cloud_a.endpoint
    for name, url in SHIPPED_ENDPOINTS.items():
        assert ovh.client.ENDPOINTS[name] == url


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("throttle", RetryableError),  # 429
        ("unavailable", CapacityError),  # 503
        ("capacity", CapacityError),  # 500 no valid host
        ("server_error", CapacityError),  # any 5xx: outage, next offering
        ("quota", CapacityError),  # quota exceeded
        ("auth", FatalError),  # INVALID_CREDENTIAL
    ],
)
def test_errors_are_classified(
    cloud_and_provider: tuple[OvhStandin, OvhProvider], kind: str, error: type[ProviderError]
) -> None:
    cloud, provider = cloud_and_provider
    cloud.inject_failure("create", kind)
    with pytest.raises(ProviderError) as caught:
        provider.create(spec(claim()))
    err = caught.value
    assert type(err) is error, err
    if isinstance(err, RetryableError):
        assert err.retry_after_s == 1.0
    if isinstance(err, FatalError):
        assert "credentialsSecretRef" in err.fix
    for value in secrets_of(cloud):
        assert value not in str(err) and value not in repr(err.__cause__)


def test_bad_credentials_are_fatal_and_never_echoed(
    cloud_and_provider: tuple[OvhStandin, OvhProvider],
) -> None:
    cloud, provider = cloud_and_provider
    wrong_secret = json.dumps(
        {
            "application_key": cloud.application_key,
            "application_secret": "not-the-secret-1234",
            "consumer_key": cloud.consumer_key,
        }
    )
    with pytest.raises(FatalError) as caught:
        OvhProvider(provider.block, wrong_secret).list_owned(CLUSTER)
    assert "not-the-secret-1234" not in str(caught.value)
    wrong_key = json.dumps({**json.loads(wrong_secret), "application_key": "nope-key-5678"})
    with pytest.raises(FatalError) as caught:
        OvhProvider(provider.block, wrong_key).list_owned(CLUSTER)
    assert "nope-key-5678" not in str(caught.value)
    for bad in ("not json", "[]", json.dumps({"application_key": "only-this-value"})):
        with pytest.raises(FatalError) as caught:
            OvhProvider(provider.block, bad)
        assert "only-this-value" not in str(caught.value)
        assert "credentialsSecretRef" in caught.value.fix


def test_errors_on_other_operations(cloud_and_provider: tuple[OvhStandin, OvhProvider]) -> None:
    cloud, provider = cloud_and_provider
    inst = provider.create(spec(claim()))
    cloud.inject_failure("get", "throttle")
    with pytest.raises(RetryableError):
        provider.get(inst.id)
    cloud.inject_failure("list", "auth")
    with pytest.raises(FatalError):
        provider.list_owned(CLUSTER)
    cloud.inject_failure("delete", "unavailable")
    with pytest.raises(RetryableError):  # an outage outside create: retry, no other offering
        provider.delete(inst.id)
    provider.delete(inst.id)
    provider.delete(inst.id)


@pytest.mark.parametrize("kind", ["unavailable", "server_error", "capacity"])  # 503, 500, 500
@pytest.mark.parametrize("op", ["get", "list", "delete", "catalog"])
def test_5xx_outside_create_is_retryable(
    cloud_and_provider: tuple[OvhStandin, OvhProvider], op: str, kind: str
) -> None:
    """Capacity (try the next offering) means something only to a create; a 5xx on a
    lookup or a delete is retried, and the call succeeds once the API answers again."""
    cloud, provider = cloud_and_provider
    inst = provider.create(spec(claim()))
    calls = {
        "get": lambda: provider.get(inst.id),
        "list": lambda: provider.list_owned(CLUSTER),
        "delete": lambda: provider.delete(inst.id),
        "catalog": provider.instance_types,
    }
    cloud.inject_failure(op, kind)
    with pytest.raises(ProviderError) as caught:
        calls[op]()
    assert type(caught.value) is RetryableError, caught.value
    assert "HTTP 5" in str(caught.value)
    calls[op]()  # the retry
    if op == "delete":
        vm = cloud.peek(inst.id.rsplit("/", 1)[1])
        assert vm is None or vm["state"] == "stopping"


@pytest.mark.parametrize("op", ["create", "list", "catalog"])
@pytest.mark.parametrize("kind", ["unavailable", "server_error"])
def test_5xx_during_create_is_capacity(
    cloud_and_provider: tuple[OvhStandin, OvhProvider], op: str, kind: str
) -> None:
    """Every call of a create (the look-up, the flavor list, the POST): next offering."""
    cloud, provider = cloud_and_provider
    cloud.inject_failure(op, kind)
    with pytest.raises(ProviderError) as caught:
        provider.create(spec(claim()))
    assert type(caught.value) is CapacityError, caught.value


def test_invalid_offering_image_and_project(
    cloud_and_provider: tuple[OvhStandin, OvhProvider],
) -> None:
    cloud, provider = cloud_and_provider
    with pytest.raises(FatalError, match="flavor 'nope-1' does not exist"):
        provider.create(spec(claim(), instance_type="nope-1"))
    with pytest.raises(FatalError, match="image 'Windows 95'") as caught:
        provider.create(spec(claim(), image="Windows 95"))
    assert "spec.ovh.image" in caught.value.fix
    block = OvhClass.model_validate(
        {**cloud.nodeclass_block("ovh", "credentials"), "projectID": "other-project"}
    )
    with pytest.raises(FatalError) as caught:
        OvhProvider(block, cloud.credential).list_owned(CLUSTER)
    assert "projectID" in caught.value.fix


def test_user_data_and_catalog(cloud_and_provider: tuple[OvhStandin, OvhProvider]) -> None:
    cloud, provider = cloud_and_provider
    script = "#!/bin/bash\necho 'ü \"q\"'\n"
    inst = provider.create(spec(claim(), user_data=script))
    assert inst.instance_type == "d2-4"
    vm = cloud.peek(inst.id.rsplit("/", 1)[1])
    assert vm is not None and vm["user_data"] == script
    types = {t.name: t for t in provider.instance_types()}
    assert (types["b3-8"].vcpu, types["b3-8"].memory_gib) == (2.0, 8.0)
    assert sorted(types["b3-8"].regions) == sorted(cloud.regions)
