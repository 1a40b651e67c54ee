"""The `plugin` provider's edges, against a plug-in that answers what each test tells it to:
the request it sends, how every answer is classified, and answers that are not the contract.

The contract suite (`test_contract.py`, harness_plugin.py) runs it against the reference
plug-in; these are the answers a reference plug-in would never give.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from activities.providers import plugin as plugin_module
from activities.providers import provider_class
from activities.providers.base import (
    CapacityError,
    FatalError,
    InstanceSpec,
    ProviderError,
    RetryableError,
)
from activities.providers.plugin import PluginProvider
from api import labels as L
from api.nodeclass import PluginClass
from sim.clouds.base import Request, Response, StandinHTTPServer

TOKEN = "plugin-token-0123456789abcdef"
CLAIM = "nodeclaim-burst-x7k2p"
CLUSTER = "prod-eu"
SCRIPT = "#!/bin/bash\necho 'Grüße' \"$HOME\" \\\\ `id`\nTAILSCALE_AUTHKEY=tskey-auth-secret\n"


def instance(**change: Any) -> dict[str, Any]:
    body = {
        "id": "mini-01.3",
        "name": CLAIM,
        "region": "lab-1",
        "instanceType": "mini-4c16g",
        "state": "running",
        "labels": {L.NODECLAIM: CLAIM, L.CLUSTER: CLUSTER, L.MANAGED: "true"},
        "createdAt": "2026-11-29T10:00:00Z",
        "privateIP": "192.168.10.21",
    }
    body.update(change)
    return body


def error(kind: str, message: str = "said the plug-in", **extra: Any) -> dict[str, Any]:
    return {"error": {"kind": kind, "message": message, **extra}}


class Scripted:
    """A plug-in whose next answers are set by the test; it records what it was sent."""

    def __init__(self) -> None:
        self.answers: list[Response] = []
        self.seen: list[Request] = []
        self.delay_s = 0.0
        self._http = StandinHTTPServer(self._route, name="scripted-plugin").start()

    @property
    def url(self) -> str:
        return self._http.url

    def answer(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        self.answers.append(Response(status, body, headers or {}))

    def _route(self, request: Request) -> Response:
        self.seen.append(request)
        time.sleep(self.delay_s)
        return self.answers.pop(0) if self.answers else Response(500, error("fatal", "unset"))

    def stop(self) -> None:
        self._http.stop()


@pytest.fixture
def plugin() -> Iterator[Scripted]:
    server = Scripted()
    try:
        yield server
    finally:
        server.stop()


def provider(url: str, token: str | None = TOKEN, region: str | None = "lab-1") -> PluginProvider:
    return PluginProvider(PluginClass(endpoint=url, region=region), token)


def spec(**change: Any) -> InstanceSpec:
    values: dict[str, Any] = {
        "name": CLAIM,
        "cluster_id": CLUSTER,
        "node_pool": "burst",
        "region": "lab-1",
        "instance_type": "mini-4c16g",
        "user_data": SCRIPT,
        "labels": {"team": "ml"},
    }
    values.update(change)
    return InstanceSpec.model_validate(values)


# ---- what a plug-in is sent ------------------------------------------------------------------


def test_it_is_the_registered_plugin_provider() -> None:
    assert provider_class("plugin") is PluginProvider


def test_create_sends_the_contract_request(plugin: Scripted) -> None:
    plugin.answer(201, instance(state="pending"))
    made = provider(plugin.url + "/").create(spec(image="ubuntu-24.04"))
    assert made.id == "plugin/lab-1/mini-01.3" and made.state.value == "pending"
    assert made.private_ip == "192.168.10.21" and made.created_at is not None
    (sent,) = plugin.seen
    assert (sent.method, sent.path) == ("POST", "/v1/instances")
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["user-agent"] == "cloudburst-plugin-client/v1"
    body = json.loads(sent.body)
    assert body == {
        "name": CLAIM,
        "clusterID": CLUSTER,
        "nodePool": "burst",
        "region": "lab-1",
        "instanceType": "mini-4c16g",
        "capacityType": "on-demand",
        "image": "ubuntu-24.04",
        "labels": {
            "team": "ml",
            L.MANAGED: "true",
            L.CLUSTER: CLUSTER,
            L.NODEPOOL: "burst",
            L.NODECLAIM: CLAIM,
        },
        "userData": SCRIPT,
    }


def test_without_a_region_the_blocks_then_the_plugins_default(plugin: Scripted) -> None:
    plugin.answer(201, instance())
    plugin.answer(201, instance())
    provider(plugin.url, region="lab-2").create(spec(region=""))
    provider(plugin.url, region=None).create(spec(region=""))
    first, second = (json.loads(r.body) for r in plugin.seen)
    assert first["region"] == "lab-2"
    assert "region" not in second  # the plug-in's own default


def test_no_token_no_authorization_header(plugin: Scripted) -> None:
    plugin.answer(200, {"instanceTypes": []})
    assert provider(plugin.url, token=None).instance_types() == []
    assert "authorization" not in plugin.seen[0].headers


def test_get_list_delete_and_types_go_where_the_contract_says(plugin: Scripted) -> None:
    p = provider(plugin.url)
    plugin.answer(200, instance())
    plugin.answer(
        200,
        {
            "instances": [
                instance(),
                instance(id="m-9.1", name="theirs", labels={L.CLUSTER: "another"}),
            ]
        },
    )
    plugin.answer(202, instance(state="stopping"))
    plugin.answer(
        200,
        {
            "instanceTypes": [
                {"name": "mini-4c16g", "vcpu": 4, "memoryGiB": 16, "arch": "x86_64",
                 "regions": ["lab-1"], "priceEurPerHour": 0.01, "available": 2},
                {"name": "pi5", "vcpu": 4, "memoryGiB": 8, "arch": "arm64", "regions": ["lab-1"]},
            ]
        },
    )  # fmt: skip
    got = p.get("plugin/lab-1/mini-01.3")
    assert got is not None and got.labels[L.NODECLAIM] == CLAIM
    owned = p.list_owned(CLUSTER)
    assert [i.id for i in owned] == ["plugin/lab-1/mini-01.3"]  # another cluster's left out
    p.delete("plugin/lab-1/mini-01.3")
    types = {t.name: t for t in p.instance_types()}
    assert types["mini-4c16g"].available == 2 and types["mini-4c16g"].price_eur_per_hour == 0.01
    assert types["pi5"].available is None and types["pi5"].price_eur_per_hour is None
    assert [(r.method, r.path, r.query) for r in plugin.seen] == [
        ("GET", "/v1/instances/mini-01.3", {}),
        ("GET", "/v1/instances", {"cluster": [CLUSTER]}),
        ("DELETE", "/v1/instances/mini-01.3", {}),
        ("GET", "/v1/instance-types", {}),
    ]


def test_an_endpoint_below_a_path_keeps_it(plugin: Scripted) -> None:
    plugin.answer(200, {"instanceTypes": []})
    provider(f"{plugin.url}/plugins/homelab").instance_types()
    assert plugin.seen[0].path == "/plugins/homelab/v1/instance-types"


# ---- how answers are classified ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "headers", "expected", "retry_after"),
    [
        (503, error("capacity", "all 2 machines are in use"), {}, CapacityError, None),
        (429, error("retryable", "busy", retryAfterSeconds=12), {}, RetryableError, 12.0),
        (503, error("retryable", "hook timed out"), {"Retry-After": "3"}, RetryableError, 3.0),
        (409, error("fatal", "name held", fix="delete it"), {}, FatalError, None),
        # No contract body (a proxy's answer): by status.
        (429, None, {"Retry-After": "7"}, RetryableError, 7.0),
        (502, None, {}, RetryableError, None),
        (504, "<html>gateway</html>", {}, RetryableError, None),
        (500, None, {}, RetryableError, None),
        (503, None, {}, CapacityError, None),
        (400, None, {}, FatalError, None),
        (404, None, {}, FatalError, None),  # no contract v1 there
        (302, None, {"Location": "https://elsewhere.example/v1/instances"}, FatalError, None),
    ],
)
def test_a_create_answer_is_classified(
    plugin: Scripted,
    status: int,
    body: Any,
    headers: dict[str, str],
    expected: type[ProviderError],
    retry_after: float | None,
) -> None:
    plugin.answer(status, body, headers)
    with pytest.raises(ProviderError) as caught:
        provider(plugin.url).create(spec())
    err = caught.value
    assert type(err) is expected, repr(err)
    assert err.provider == "plugin" and f"HTTP {status}" in str(err)
    if isinstance(err, RetryableError):
        assert err.retry_after_s == retry_after
    if isinstance(err, FatalError):
        assert err.fix
        if status == 409:
            assert err.fix == "delete it"
    if status == 302:
        assert "not followed" in str(err) and len(plugin.seen) == 1
    assert SCRIPT not in str(err) and "tskey" not in str(err)


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_are_fatal_and_name_the_secret(plugin: Scripted, status: int) -> None:
    # Whatever kind the body claims: a wrong token does not get better by retrying.
    plugin.answer(status, error("retryable", "who are you?"))
    with pytest.raises(FatalError) as caught:
        provider(plugin.url).create(spec())
    assert "spec.plugin.tokenSecretRef" in caught.value.fix
    assert TOKEN not in str(caught.value)


def test_only_a_create_has_a_next_offering(plugin: Scripted) -> None:
    """Capacity (or a bare 503) on a get or a delete is an outage to wait out."""
    p = provider(plugin.url)
    plugin.answer(503, error("capacity", "the hypervisor is full"))
    with pytest.raises(RetryableError):
        p.get("plugin/lab-1/mini-01.3")
    plugin.answer(503, None)
    with pytest.raises(RetryableError):
        p.delete("plugin/lab-1/mini-01.3")


def test_the_contracts_404_is_gone_and_any_other_is_an_error(plugin: Scripted) -> None:
    p = provider(plugin.url)
    plugin.answer(404, error("notFound", "no instance mini-01.3"))
    assert p.get("plugin/lab-1/mini-01.3") is None
    plugin.answer(404, error("notFound", "no instance mini-01.3"))
    p.delete("plugin/lab-1/mini-01.3")  # already gone: fine
    # A 404 without the contract's body: the endpoint is wrong, the instance may well live.
    plugin.answer(404, "<html>Not Found</html>")
    with pytest.raises(FatalError, match="no contract v1"):
        p.get("plugin/lab-1/mini-01.3")
    plugin.answer(404, error("notFound", "no such thing"))
    with pytest.raises(FatalError, match="404 notFound where a InstanceList"):
        p.list_owned(CLUSTER)


def test_an_unreachable_plugin_is_retryable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RetryableError, match="cannot reach"):
        provider(f"http://127.0.0.1:{port}").create(spec())


def test_a_plugin_that_does_not_answer_in_time_is_retryable(
    plugin: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugin_module, "TIMEOUT", httpx.Timeout(0.3))
    plugin.delay_s = 1.0
    plugin.answer(201, instance())
    with pytest.raises(RetryableError, match="did not answer in time"):
        provider(plugin.url).create(spec())


# ---- answers that are not the contract ---------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ("<html>login</html>", "the body"),
        ({"instance": instance()}, "id"),  # wrapped: not an Instance
        (instance(state="exploded"), "state"),
        (instance(id="a/b"), "id"),  # not one providerID path segment
        (instance(region=None), "region"),
    ],
)
def test_a_malformed_create_answer_is_fatal_and_says_what(
    plugin: Scripted, body: Any, named: str
) -> None:
    plugin.answer(201, body)
    with pytest.raises(FatalError) as caught:
        provider(plugin.url).create(spec())
    said = str(caught.value)
    assert "not a contract v1 Instance" in said and named in said
    assert "api/plugin_contract.schema.json" in caught.value.fix


def test_a_malformed_answer_is_reported_without_its_values(plugin: Scripted) -> None:
    leaked = "s3cr3t-from-the-plugin"
    plugin.answer(
        200,
        {"instanceTypes": [{"name": leaked + "/x", "vcpu": -1, "memoryGiB": 1, "arch": "x86_64",
                            "regions": ["lab-1"]}]},
    )  # fmt: skip
    with pytest.raises(FatalError) as caught:
        provider(plugin.url).instance_types()
    said = str(caught.value)
    assert "instanceTypes.0.name" in said and "instanceTypes.0.vcpu" in said
    assert leaked not in said


@pytest.mark.parametrize(
    "answered",
    [
        instance(name="another-claim"),
        instance(labels={L.NODECLAIM: CLAIM, L.CLUSTER: "another-cluster"}),
        instance(labels={}),
    ],
)
def test_a_create_answered_with_another_claims_instance_is_fatal(
    plugin: Scripted, answered: dict[str, Any]
) -> None:
    plugin.answer(200, answered)
    with pytest.raises(FatalError, match="not this claim's"):
        provider(plugin.url).create(spec())


def test_a_create_that_finds_its_earlier_instance_stopping_is_retried(plugin: Scripted) -> None:
    plugin.answer(200, instance(state="stopping"))
    with pytest.raises(RetryableError, match="stopping"):
        provider(plugin.url).create(spec())


def test_an_offering_the_contract_cannot_carry_is_fatal_before_any_call(plugin: Scripted) -> None:
    with pytest.raises(FatalError, match="instance_type") as caught:
        provider(plugin.url).create(spec(instance_type="too/deep"))
    assert SCRIPT not in str(caught.value)
    assert plugin.seen == []


def test_instance_ids_of_other_providers_are_refused(plugin: Scripted) -> None:
    with pytest.raises(FatalError, match="not a plug-in instance"):
        provider(plugin.url).get("fake/sim-1/i-1")
    with pytest.raises(FatalError, match="malformed"):
        provider(plugin.url).delete("mini-01.3")
    assert plugin.seen == []


def test_one_provider_serves_threads_at_once(plugin: Scripted) -> None:
    p = provider(plugin.url)
    for _ in range(8):
        plugin.answer(200, instance())
    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(p.get("plugin/lab-1/mini-01.3")))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and all(r is not None for r in results)
    p.close()
