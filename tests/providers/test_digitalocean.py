"""DigitalOcean's API traps: the endpoint on every call, errors told apart by message."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from activities.providers import provider_class
from activities.providers.base import (
    CapacityError,
    FatalError,
    InstanceSpec,
    ProviderError,
    RetryableError,
)
from activities.providers.digitalocean import DigitalOceanProvider
from api import labels as L
from api.label_tags import label_tag, labels_from_tags, tags_for
from sim.clouds.digitalocean import DigitalOceanStandin
from tests.providers.harness_digitalocean import standin_and_provider

CLUSTER = "do-test"


def spec(name: str, pool: str = "burst", cluster: str = CLUSTER, **kw: object) -> InstanceSpec:
    values: dict[str, object] = {
        "name": name,
        "cluster_id": cluster,
        "node_pool": pool,
        "region": "fra1",
        "instance_type": "s-2vcpu-4gb",
        "user_data": "#!/bin/sh\necho hi\n",
        "labels": {L.MANAGED: "true", L.CLUSTER: cluster, L.NODEPOOL: pool, L.NODECLAIM: name},
        **kw,
    }
    return InstanceSpec.model_validate(values)


def claim() -> str:
    return f"burst-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def do() -> Iterator[tuple[DigitalOceanStandin, DigitalOceanProvider]]:
    with standin_and_provider() as pair:
        yield pair


def test_registered() -> None:
    assert provider_class("digitalocean") is DigitalOceanProvider


def test_every_call_stays_on_the_configured_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """The env the SDK falls back to points at a decoy, and pagination links point there too:
    not one request may reach it, and the process env is left as it was."""
    with DigitalOceanStandin(token="decoy-token") as decoy:
        monkeypatch.setenv("DIGITALOCEAN_END_POINT", decoy.endpoint)
        monkeypatch.setenv("DIGITALOCEAN_ACCESS_TOKEN", "decoy-token")
        env_before = dict(os.environ)
        # Two items per page whatever we ask: every list is paged, with links to the decoy.
        with standin_and_provider(page_size_cap=2) as (cloud, provider):
            cloud.next_link_base = decoy.url
            names = [claim() for _ in range(3)]
            made = [provider.create(spec(n)) for n in names]
            assert provider.create(spec(names[0])).id == made[0].id  # found by tag, page 1..n
            owned = provider.list_owned(CLUSTER)
            assert sorted(i.id for i in owned) == sorted(i.id for i in made)
            types = provider.instance_types()
            assert len(types) == len(cloud.sizes)  # all five pages, fetched here
            for inst in made:
                assert provider.get(inst.id) is not None
                provider.delete(inst.id)
            provider.delete(made[0].id)
            seen = cloud.requests_seen()

        assert decoy.requests_seen() == [], "a request left the configured endpoint"
        assert dict(os.environ) == env_before
        host = cloud.url.removeprefix("http://")
        assert seen and all(h == host for _m, _p, h in seen)
        assert all(p.startswith("/v2/") for _m, p, _h in seen)
        methods = {m for m, _p, _h in seen}
        assert methods == {"GET", "POST", "DELETE"}
        assert any("page=3" in p for _m, p, _h in seen if p.startswith("/v2/sizes"))


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("throttle", RetryableError),  # 429 "API Rate limit exceeded."
        ("server_error", RetryableError),  # 500 "Server was unable to give you a response."
        ("unavailable", CapacityError),  # 503: outage, try the next offering
        ("capacity", CapacityError),  # 422 "Size is not available in this region."
        ("quota", CapacityError),  # 422 droplet limit
        ("auth", FatalError),  # 401
    ],
)
def test_429_and_5xx_are_told_apart_by_message(
    do: tuple[DigitalOceanStandin, DigitalOceanProvider], kind: str, error: type[ProviderError]
) -> None:
    cloud, provider = do
    cloud.inject_failure("create", kind)
    with pytest.raises(ProviderError) as caught:
        provider.create(spec(claim()))
    assert type(caught.value) is error, caught.value
    assert cloud.credential not in str(caught.value)
    assert cloud.credential not in repr(caught.value.__cause__)
    if isinstance(caught.value, FatalError):
        assert "apiTokenSecretRef" in caught.value.fix


def test_errors_on_every_operation_are_classified(
    do: tuple[DigitalOceanStandin, DigitalOceanProvider],
) -> None:
    cloud, provider = do
    inst = provider.create(spec(claim()))
    cloud.inject_failure("get", "throttle")
    with pytest.raises(RetryableError):
        provider.get(inst.id)
    cloud.inject_failure("list", "auth")
    with pytest.raises(FatalError):
        provider.list_owned(CLUSTER)
    cloud.inject_failure("delete", "server_error")
    with pytest.raises(RetryableError):
        provider.delete(inst.id)
    cloud.inject_failure("catalog", "unavailable")
    with pytest.raises(CapacityError):
        provider.instance_types()
    provider.delete(inst.id)


def test_invalid_request_is_fatal_with_a_fix(
    do: tuple[DigitalOceanStandin, DigitalOceanProvider],
) -> None:
    _cloud, provider = do
    with pytest.raises(FatalError) as caught:
        provider.create(spec(claim(), instance_type="no-such-size"))
    assert "invalid size" in str(caught.value)
    assert "spec.digitalocean" in caught.value.fix


def test_wrong_token_is_fatal_and_not_echoed(
    do: tuple[DigitalOceanStandin, DigitalOceanProvider],
) -> None:
    cloud, provider = do
    wrong = DigitalOceanProvider(provider.block, "dop_v1_wrong-secret-value")
    with pytest.raises(FatalError) as caught:
        wrong.list_owned(CLUSTER)
    assert "wrong-secret-value" not in str(caught.value)
    assert cloud.credential not in str(caught.value)
    with pytest.raises(FatalError):
        DigitalOceanProvider(provider.block, "  ")


def test_unreachable_endpoint_is_retryable() -> None:
    with standin_and_provider() as (_cloud, provider):
        pass  # stopped: nothing listens there any more
    with pytest.raises(RetryableError) as caught:
        provider.list_owned(CLUSTER)
    assert provider.token not in str(caught.value)


def test_labels_round_trip_through_tags(
    do: tuple[DigitalOceanStandin, DigitalOceanProvider],
) -> None:
    cloud, provider = do
    name = claim()
    inst = provider.create(spec(name, pool="gpu.pool", cluster="prod.eu-1"))
    assert inst.labels == {
        L.MANAGED: "true",
        L.CLUSTER: "prod.eu-1",
        L.NODEPOOL: "gpu.pool",
        L.NODECLAIM: name,
    }
    vm = cloud.peek(inst.id.rsplit("/", 1)[1])
    assert vm is not None
    assert f"cloudburst-nodeclaim:{name}" in vm["tags"]
    assert "cloudburst-nodepool:gpu_2epool" in vm["tags"]
    assert vm["labels"] == inst.labels  # the stand-in reads the convention back alike
    assert [i.id for i in provider.list_owned("prod.eu-1")] == [inst.id]
    assert provider.list_owned("prod") == []
    weird = {L.NODECLAIM: "a:b_c/ü"}
    assert labels_from_tags(tags_for(weird)) == weird
    assert all(c.isalnum() or c in ":-_" for c in label_tag(L.NODECLAIM, "a:b_c/ü"))


def test_same_claim_name_in_another_cluster_is_not_ours(
    do: tuple[DigitalOceanStandin, DigitalOceanProvider],
) -> None:
    cloud, provider = do
    name = claim()
    theirs = provider.create(spec(name, cluster="other-cluster"))
    ours = provider.create(spec(name))
    assert ours.id != theirs.id
    assert provider.create(spec(name)).id == ours.id
    assert cloud.stats()["created_by_name"][name] == 2


def test_user_data_and_catalog(do: tuple[DigitalOceanStandin, DigitalOceanProvider]) -> None:
    cloud, provider = do
    inst = provider.create(spec(claim(), user_data="#cloud-config\nruncmd: ['echo \"ü\"']\n"))
    vm = cloud.peek(inst.id.rsplit("/", 1)[1])
    assert vm is not None and vm["user_data"] == "#cloud-config\nruncmd: ['echo \"ü\"']\n"
    small = next(t for t in provider.instance_types() if t.name == "s-2vcpu-4gb")
    assert (small.vcpu, small.memory_gib, small.arch) == (2.0, 4.0, "x86_64")
    assert small.price_eur_per_hour == pytest.approx(0.03571 * 0.92, abs=1e-5)
    assert "fra1" in small.regions
