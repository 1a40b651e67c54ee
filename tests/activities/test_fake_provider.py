"""The `fake` provider against the fake cloud over real HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from activities.providers.base import (
    CapacityError,
    FatalError,
    InstanceSpec,
    InstanceState,
    RetryableError,
)
from activities.providers.fake import FakeProvider
from api import labels as L
from api.nodeclass import FakeClass
from sim.cloud import FakeCloud, FakeCloudServer

TOKEN = "s3cret-token"


@pytest.fixture
def cloud() -> Iterator[FakeCloud]:
    c = FakeCloud(boot_delay_s=0.1, delete_delay_s=0.1, token=TOKEN)
    server = FakeCloudServer(c).start()
    c.url = server.url  # type: ignore[attr-defined]
    try:
        yield c
    finally:
        server.stop()


def provider(cloud: FakeCloud, token: str | None = TOKEN) -> FakeProvider:
    return FakeProvider(FakeClass(endpoint=cloud.url), token)  # type: ignore[attr-defined]


def spec(name: str = "nodeclaim-burst-abc12", **kw: object) -> InstanceSpec:
    values: dict[str, object] = {
        "name": name,
        "cluster_id": "c1",
        "node_pool": "burst",
        "region": "sim-1",
        "instance_type": "fk-small",
        "user_data": "#!/bin/sh\necho 'hello' \"world\" $HOME\n",
        "labels": {"team": "a", L.CLUSTER: "spoofed"},
    }
    values.update(kw)
    return InstanceSpec.model_validate(values)


def test_lifecycle_is_idempotent(cloud: FakeCloud) -> None:
    p = provider(cloud)
    s = spec()
    inst = p.create(s)
    assert inst.id.startswith("fake/sim-1/i-")
    assert inst.provider == "fake" and inst.name == s.name and inst.state is InstanceState.PENDING
    assert inst.labels == {
        "team": "a",
        L.MANAGED: "true",
        L.CLUSTER: "c1",  # ours win over spec.labels
        L.NODEPOOL: "burst",
        L.NODECLAIM: s.name,
    }
    assert inst.created_at is not None and inst.private_ip

    got = p.get(inst.id)
    assert got is not None and got.id == inst.id

    owned = p.list_owned("c1")
    assert [i.id for i in owned] == [inst.id]
    assert p.list_owned("other-cluster") == []

    again = p.create(s)
    assert again.id == inst.id
    stats = cloud.stats()
    assert stats["created_by_name"] == {s.name: 1}
    assert stats["creates_attempted"] == 2

    # User data is kept byte for byte, but not returned by the normal API.
    raw = cloud.get_instance(inst.id.split("/")[-1], with_user_data=True)
    assert raw["user_data"] == s.user_data
    r = httpx.get(
        f"{cloud.url}/v1/instances/{raw['id']}",  # type: ignore[attr-defined]
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert "user_data" not in r.json()["instance"]

    time.sleep(0.15)
    got = p.get(inst.id)
    assert got is not None and got.state is InstanceState.RUNNING

    p.delete(inst.id)
    got = p.get(inst.id)
    assert got is None or got.state is InstanceState.STOPPING
    time.sleep(0.15)
    assert p.get(inst.id) is None
    p.delete(inst.id)  # already gone: fine
    assert cloud.stats()["deleted_instances"] == 1


def test_create_conflict_with_foreign_vm_is_fatal(cloud: FakeCloud) -> None:
    cloud.create_instance(
        name="nodeclaim-burst-x", region="sim-1", instance_type="fk-small", labels={}
    )
    with pytest.raises(FatalError, match="not this claim"):
        provider(cloud).create(spec("nodeclaim-burst-x"))


def test_list_owned_pages(cloud: FakeCloud) -> None:
    p = provider(cloud)
    for n in range(105):
        p.create(spec(f"nodeclaim-burst-{n:03d}"))
    assert len(p.list_owned("c1")) == 105


def test_catalog(cloud: FakeCloud) -> None:
    types = provider(cloud).instance_types()
    assert len(types) >= 12
    small = next(t for t in types if t.name == "fk-small")
    assert (small.vcpu, small.memory_gib, small.arch) == (2, 4, "x86_64")
    assert small.price_eur_per_hour == pytest.approx(0.012)
    assert small.regions == ["sim-1", "sim-2"]
    assert {t.arch for t in types} == {"x86_64", "arm64"}
    assert max(t.vcpu for t in types) == 32


@pytest.mark.parametrize("kind", ["unavailable", "capacity", "quota"])
def test_capacity_failures(cloud: FakeCloud, kind: str) -> None:
    cloud.inject_failure("create", kind, times=1)
    with pytest.raises(CapacityError):
        provider(cloud).create(spec())
    # One time only: the next attempt works.
    assert provider(cloud).create(spec()).name == spec().name


def test_throttle_is_retryable_with_retry_after(cloud: FakeCloud) -> None:
    cloud.inject_failure("get", "throttle", times=None)
    with pytest.raises(RetryableError) as err:
        provider(cloud).get("fake/sim-1/i-9999")
    assert err.value.retry_after_s == 1.0
    cloud.clear_failures()
    assert provider(cloud).get("fake/sim-1/i-9999") is None


def test_auth_failures_are_fatal_with_hint(cloud: FakeCloud) -> None:
    with pytest.raises(FatalError) as err:
        provider(cloud, token="wrong").list_owned("c1")
    assert "apiTokenSecretRef" in str(err.value)
    assert "wrong" not in str(err.value)
    with pytest.raises(FatalError):
        provider(cloud, token=None).instance_types()
    cloud.inject_failure("delete", "auth")
    with pytest.raises(FatalError, match="apiTokenSecretRef"):
        provider(cloud).delete("fake/sim-1/i-0001")


def test_failure_scoped_to_region_and_type(cloud: FakeCloud) -> None:
    cloud.inject_failure("create", "capacity", times=None, region="sim-2", instance_type="fk-large")
    p = provider(cloud)
    p.create(spec("a", region="sim-2", instance_type="fk-small"))
    p.create(spec("b", region="sim-1", instance_type="fk-large"))
    with pytest.raises(CapacityError):
        p.create(spec("c", region="sim-2", instance_type="fk-large"))


def test_invalid_input_is_fatal_and_names_field(cloud: FakeCloud) -> None:
    with pytest.raises(FatalError, match="instance_type"):
        provider(cloud).create(spec(instance_type="fk-huge"))
    with pytest.raises(FatalError, match="region"):
        provider(cloud).create(spec(region="mars-1"))


def test_unreachable_and_5xx_are_retryable() -> None:
    dead = FakeProvider(FakeClass(endpoint="http://127.0.0.1:9"), None)
    with pytest.raises(RetryableError, match="cannot reach"):
        dead.list_owned("c1")


def test_admin_http_failures_and_stats(cloud: FakeCloud) -> None:
    url = cloud.url  # type: ignore[attr-defined]
    r = httpx.post(f"{url}/_admin/failures", json={"op": "list", "kind": "unavailable"})
    assert r.status_code == 201
    with pytest.raises(CapacityError):
        provider(cloud).list_owned("c1")
    provider(cloud).list_owned("c1")
    httpx.post(f"{url}/_admin/failures", json={"op": "list", "kind": "quota", "times": None})
    httpx.delete(f"{url}/_admin/failures")
    provider(cloud).list_owned("c1")
    inst = provider(cloud).create(spec())
    native = inst.id.split("/")[-1]
    stats = httpx.get(f"{url}/_admin/stats").json()
    assert stats["live_instances"] == 1 and stats["created_by_name"] == {spec().name: 1}
    assert httpx.get(f"{url}/_admin/instances").json()["instances"][0]["user_data"]
    assert httpx.delete(f"{url}/_admin/instances/{native}").status_code == 200
    assert provider(cloud).get(inst.id) is None


def test_hold_and_release(cloud: FakeCloud) -> None:
    url = cloud.url  # type: ignore[attr-defined]
    httpx.post(f"{url}/_admin/hold", json={"op": "create"})
    results: list[object] = []

    def create() -> None:
        try:
            results.append(provider(cloud).create(spec()))
        except Exception as exc:
            results.append(exc)

    t = threading.Thread(target=create)
    t.start()
    deadline = time.monotonic() + 5
    while cloud.stats()["creates_in_flight"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # The VM exists already although the caller has no answer yet.
    assert cloud.stats()["live_instances"] == 1 and results == []
    r = httpx.post(f"{url}/_admin/release", json={})
    assert r.json()["creates_in_flight"] in (0, 1)
    t.join(5)
    assert len(results) == 1 and not isinstance(results[0], Exception)
    assert cloud.stats()["creates_in_flight"] == 0
    # The "crashed" caller retries: same VM.
    assert provider(cloud).create(spec()).id == results[0].id  # type: ignore[attr-defined]
    assert cloud.stats()["created_by_name"] == {spec().name: 1}
