"""The fake cloud's HTTP API directly (status codes and bodies the provider relies on)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from sim.cloud import FakeCloud, FakeCloudServer


@pytest.fixture
def api() -> Iterator[tuple[FakeCloud, httpx.Client]]:
    cloud = FakeCloud(boot_delay_s=0.05, delete_delay_s=0.05, token="tok")
    server = FakeCloudServer(cloud).start()
    with httpx.Client(base_url=server.url, headers={"Authorization": "Bearer tok"}) as client:
        yield cloud, client
    server.stop()


def _create(client: httpx.Client, name: str = "vm-1", **kw: object) -> httpx.Response:
    body: dict[str, object] = {
        "name": name,
        "region": "sim-1",
        "instance_type": "fk-small",
        "image": "ubuntu-24.04",
        "user_data": "#cloud-config\n",
        "labels": {"app": "x", "tier": "web"},
    }
    body.update(kw)
    return client.post("/v1/instances", json=body)


def test_create_get_list_delete(api: tuple[FakeCloud, httpx.Client]) -> None:
    cloud, client = api
    r = _create(client)
    assert r.status_code == 201
    inst = r.json()["instance"]
    assert inst["state"] == "pending" and inst["created_at"].endswith("Z")
    assert "user_data" not in inst
    assert _create(client).json()["error"]["code"] == "uniqueness_error"
    assert _create(client).status_code == 409
    assert client.get(f"/v1/instances/{inst['id']}").status_code == 200
    listed = client.get("/v1/instances", params={"label_selector": "app=x,tier=web"}).json()
    assert [i["id"] for i in listed["instances"]] == [inst["id"]]
    assert client.get("/v1/instances", params={"label_selector": "app=y"}).json()["instances"] == []
    assert len(client.get("/v1/instances", params={"name": "vm-1"}).json()["instances"]) == 1
    assert client.delete(f"/v1/instances/{inst['id']}").status_code == 202
    assert client.get(f"/v1/instances/{inst['id']}").json()["instance"]["state"] == "stopping"
    import time

    time.sleep(0.1)
    r = client.get(f"/v1/instances/{inst['id']}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert client.delete(f"/v1/instances/{inst['id']}").status_code == 404
    # The name is free again once the VM is gone.
    assert _create(client).status_code == 201
    assert cloud.stats()["created_by_name"] == {"vm-1": 2}


def test_validation_and_auth(api: tuple[FakeCloud, httpx.Client]) -> None:
    _, client = api
    r = _create(client, instance_type="nope")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_input"
    assert r.json()["error"]["details"]["fields"][0]["name"] == "instance_type"
    r = httpx.get(f"{client.base_url}/v1/instances")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    r = httpx.get(f"{client.base_url}/v1/instances", headers={"Authorization": "Bearer x"})
    assert r.status_code == 401


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [
        ("unavailable", 503, "unavailable"),
        ("capacity", 412, "resource_unavailable"),
        ("quota", 403, "resource_limit_exceeded"),
        ("auth", 401, "unauthorized"),
        ("throttle", 429, "rate_limit_exceeded"),
    ],
)
def test_injected_failures(
    api: tuple[FakeCloud, httpx.Client], kind: str, status: int, code: str
) -> None:
    cloud, client = api
    cloud.inject_failure("create", kind, times=2)
    for _ in range(2):
        r = _create(client)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code)
    if kind == "throttle":
        assert r.headers["Retry-After"] == "1"
    assert _create(client).status_code == 201


def test_running_instances_and_paging(api: tuple[FakeCloud, httpx.Client]) -> None:
    import time

    cloud, client = api
    for n in range(5):
        _create(client, f"vm-{n}")
    assert cloud.running_instances() == []
    time.sleep(0.08)
    running = cloud.running_instances()
    assert len(running) == 5 and running[0]["user_data"] == "#cloud-config\n"
    page = client.get("/v1/instances", params={"per_page": 2, "page": 3}).json()
    assert len(page["instances"]) == 1 and page["meta"]["pagination"]["next_page"] is None
    page = client.get("/v1/instances", params={"per_page": 2}).json()
    assert page["meta"]["pagination"]["next_page"] == 2
    assert cloud.terminate(running[0]["id"])
    assert cloud.instance_states()[running[0]["id"]] == "terminated"
    assert cloud.delete_behind_our_back(running[1]["id"])
    assert running[1]["id"] not in cloud.instance_states()
