"""The reference plug-in of examples/plugin-provider: what it shows of the contract beyond the
shared suite (a finite inventory, requests checked against the schema, one id per machine
life, hooks whose failures are typed, a state that survives restarts, the script kept
secret), and that it runs as the standalone program its README says."""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from activities.providers.base import CapacityError, FatalError, InstanceSpec, RetryableError
from activities.providers.plugin import PluginProvider
from api import labels as L
from api import plugin as contract
from api.nodeclass import PluginClass
from tests.providers.harness_plugin import (
    EXAMPLE,
    INSTANCE_TYPE,
    REGION,
    ReferencePlugin,
    inventory,
    reference_module,
    running_reference,
)

CLUSTER = "ref-cluster"
SCRIPT = "#!/bin/bash\n# join token abcdef.0123456789abcdef\necho 'Grüße' \"$HOME\"\n"


@pytest.fixture
def lab() -> Iterator[ReferencePlugin]:
    with running_reference(machines=2) as plugin:
        yield plugin


def provider(
    lab: ReferencePlugin, token: str | None = None, namespace: str | None = None
) -> PluginProvider:
    return PluginProvider(
        PluginClass(endpoint=lab.endpoint, region=REGION),
        lab.credential if token is None else token,
        namespace or lab.namespace,
    )


def spec(name: str, instance_type: str = INSTANCE_TYPE) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        cluster_id=CLUSTER,
        node_pool="burst",
        region=REGION,
        instance_type=instance_type,
        user_data=SCRIPT,
        labels=L.ownership_labels(name, node_pool="burst", cluster_id=CLUSTER),
    )


def available(p: PluginProvider) -> dict[str, int | None]:
    return {t.name: t.available for t in p.instance_types()}


def gone(p: PluginProvider, instance_id: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while p.get(instance_id) is not None:
        assert time.monotonic() < deadline, f"{instance_id} is still there"
        time.sleep(0.05)


# ---- a finite inventory ------------------------------------------------------------------------


def test_the_inventory_is_finite_and_says_so(lab: ReferencePlugin) -> None:
    p = provider(lab)
    assert available(p) == {INSTANCE_TYPE: 2, "pl-large": 1}
    first = p.create(spec("claim-a"))
    second = p.create(spec("claim-b"))
    assert available(p) == {INSTANCE_TYPE: 0, "pl-large": 1}
    with pytest.raises(CapacityError, match="all 2 machines of type pl-small in lab-1 are in use"):
        p.create(spec("claim-c"))
    assert p.create(spec("claim-c", "pl-large")).instance_type == "pl-large"
    # The same name again is the same instance, not one more machine.
    assert p.create(spec("claim-a")).id == first.id
    p.delete(second.id)
    gone(p, second.id)
    assert available(p)[INSTANCE_TYPE] == 1
    third = p.create(spec("claim-d"))
    # The machine's next life is another instance: the old id never names it again.
    assert third.id != second.id and third.id.rsplit(".", 1)[0] == second.id.rsplit(".", 1)[0]
    assert p.get(second.id) is None


def test_the_seed_carries_the_script_privately_and_the_provider_id(lab: ReferencePlugin) -> None:
    made = provider(lab).create(spec("claim-seed"))
    native = made.id.split("/", 2)[2]
    record = lab.record(native)
    seed = lab.seeds / record.machine
    assert (seed / "user-data").read_text() == SCRIPT
    assert stat.S_IMODE(seed.stat().st_mode) == 0o700
    assert stat.S_IMODE((seed / "user-data").stat().st_mode) == 0o600
    assert f'content: "plugin:///{REGION}/{native}"' in (seed / "vendor-data").read_text()
    assert f"instance-id: {native}" in (seed / "meta-data").read_text()
    provider(lab).delete(made.id)
    gone(provider(lab), made.id)
    assert not seed.exists()  # the script (and its join token) leave with the machine


def test_the_script_is_never_kept_nor_logged(
    lab: ReferencePlugin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    lab.inject("capacity")
    with pytest.raises(CapacityError):
        provider(lab).create(spec("claim-log"))
    made = provider(lab).create(spec("claim-log"))
    assert made.state.value == "running"
    assert "abcdef.0123456789abcdef" not in caplog.text
    assert "abcdef.0123456789abcdef" not in (lab.root / "state.json").read_text()


# ---- hooks ------------------------------------------------------------------------------------


def test_hook_exit_statuses_are_the_typed_errors(lab: ReferencePlugin) -> None:
    p = provider(lab)
    lab.inject("capacity")  # exit 69
    with pytest.raises(CapacityError, match="exited 69: machine m-01 did not power on"):
        p.create(spec("claim-h"))
    lab.inject("throttle")  # exit 75
    with pytest.raises(RetryableError, match="exited 75") as caught:
        p.create(spec("claim-h"))
    assert caught.value.retry_after_s == 10.0
    # The failed creates let their machine go again.
    assert available(p)[INSTANCE_TYPE] == 2
    assert lab.created_count("claim-h") == 0


def test_a_failed_delete_stays_stopping_and_is_retried(lab: ReferencePlugin) -> None:
    p = provider(lab)
    made = p.create(spec("claim-del"))
    lab.fail_next_delete()
    p.delete(made.id)
    time.sleep(0.5)
    still = p.get(made.id)
    assert still is not None and still.state.value == "stopping"
    # A create of its name waits for it to be gone; another claim gets no half-deleted machine.
    with pytest.raises(RetryableError, match="stopping"):
        p.create(spec("claim-del"))
    p.delete(made.id)  # re-asked, as the claim does every 30 s
    gone(p, made.id)


# ---- requests are checked against the contract ----------------------------------------------------


def raw(lab: ReferencePlugin, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {lab.credential}",
        contract.NAMESPACE_HEADER: lab.namespace,
        **kw.pop("headers", {}),
    }
    return httpx.request(method, f"{lab.endpoint}{path}", headers=headers, timeout=10, **kw)


def request_body(**change: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "claim-raw",
        "clusterID": CLUSTER,
        "nodePool": "burst",
        "instanceType": INSTANCE_TYPE,
        "labels": {},
        "userData": SCRIPT,
    }
    body.update(change)
    return body


def test_a_request_that_is_not_the_contract_is_refused(lab: ReferencePlugin) -> None:
    answer = raw(lab, "POST", "/v1/instances", json=request_body(name="Bad_Name", userData=None))
    assert answer.status_code == 400
    said = answer.json()["error"]
    assert said["kind"] == "fatal" and "name: must match" in said["message"]
    assert "userData: must be string" in said["message"]
    answer = raw(lab, "POST", "/v1/instances", content=b"{not json")
    assert answer.status_code == 400 and "not JSON" in answer.json()["error"]["message"]
    answer = raw(lab, "POST", "/v1/instances", json=request_body(instanceType="pl-huge"))
    assert answer.status_code == 400 and "pl-small" in answer.json()["error"]["message"]
    assert lab.homelab.records() == []


def test_the_name_of_another_clusters_instance_is_refused(lab: ReferencePlugin) -> None:
    assert raw(lab, "POST", "/v1/instances", json=request_body()).status_code == 201
    again = raw(lab, "POST", "/v1/instances", json=request_body())
    assert again.status_code == 200
    theirs = raw(lab, "POST", "/v1/instances", json=request_body(clusterID="other"))
    assert theirs.status_code == 409 and theirs.json()["error"]["kind"] == "fatal"


def test_answers_are_the_contracts(lab: ReferencePlugin) -> None:
    made = raw(lab, "POST", "/v1/instances", json=request_body()).json()
    contract.Instance.model_validate(made)
    listed = raw(lab, "GET", "/v1/instances", params={"cluster": CLUSTER}).json()
    assert [i.id for i in contract.InstanceList.model_validate(listed).instances] == [made["id"]]
    types = raw(lab, "GET", "/v1/instance-types").json()
    contract.InstanceTypeList.model_validate(types)
    assert raw(lab, "GET", "/v1/instances").json()["error"]["kind"] == "fatal"  # no cluster
    missing = raw(lab, "GET", "/v1/instances/m-01.99")
    assert missing.status_code == 404 and missing.json()["error"]["kind"] == "notFound"
    elsewhere = raw(lab, "GET", "/v2/instances")
    assert elsewhere.status_code == 404 and elsewhere.json()["error"]["kind"] == "fatal"
    unauthenticated = httpx.get(f"{lab.endpoint}/v1/instance-types", timeout=10)
    assert unauthenticated.status_code == 401


@pytest.mark.parametrize(
    "body",
    [
        request_body(),
        request_body(region="lab-1", zone="a", capacityType="spot", image="x", extra=1),
        request_body(name="x" * 64),
        request_body(nodePool=""),
        request_body(labels={"k": 1}),
        request_body(labels={str(i): "v" for i in range(65)}),
        request_body(capacityType="reserved"),
        request_body(region=None),
        {"name": "claim-raw"},
        [],
        "a string",
    ],
)
def test_the_examples_validator_agrees_with_json_schema(body: Any) -> None:
    doc = json.loads(contract.SCHEMA_PATH.read_text())
    reference = jsonschema.Draft202012Validator(
        {**doc, "$ref": "#/$defs/CreateInstanceRequest"}
    ).is_valid(body)
    ours = reference_module().Contract(doc).problems("CreateInstanceRequest", body)
    assert (not ours) == reference, ours


# ---- restarts ---------------------------------------------------------------------------------


def test_instances_survive_a_restart_and_an_interrupted_create_is_let_go(tmp_path: Path) -> None:
    with ReferencePlugin(tmp_path, machines=2) as first:
        made = provider(first).create(spec("claim-kept"))
    state = json.loads((tmp_path / "state.json").read_text())
    # A create under way when the server stopped (its hook's outcome unknown).
    state["instances"].append(
        {**state["instances"][0], "id": "m-02.1", "name": "claim-cut", "machine": "m-02",
         "state": "pending"}
    )  # fmt: skip
    state["lives"]["m-02"] = 1
    (tmp_path / "state.json").write_text(json.dumps(state))
    with ReferencePlugin(tmp_path, machines=2) as second:
        p = provider(second)
        kept = p.get(made.id)
        assert kept is not None and kept.state.value == "running"
        gone(p, "plugin/lab-1/m-02.1")
        assert p.create(spec("claim-new")).id == "plugin/lab-1/m-02.2"


# ---- tenancy: a credential per namespace ---------------------------------------------------------


def test_a_call_with_another_namespaces_credential_is_refused(lab: ReferencePlugin) -> None:
    """Issue #55: requests carried no namespace and the plug-in's one token served every
    tenant, so any holder listed and deleted every instance. Fails on that server (made to
    accept these tokens as it accepted its one): team-b's create of `claim-x` answers
    team-a's instance, and team-a's token is served for team-b."""
    tokens = {"team-a": secrets.token_hex(16), "team-b": secrets.token_hex(16)}
    lab.server.tokens = tokens
    team_a = provider(lab, tokens["team-a"], "team-a")
    team_b = provider(lab, tokens["team-b"], "team-b")
    # The same claim name in two namespaces: two instances, each its namespace's.
    mine = team_a.create(spec("claim-x"))
    theirs = team_b.create(spec("claim-x"))
    assert mine.id != theirs.id

    # team-a's token, for team-b's namespace: refused, whatever the operation.
    thief = provider(lab, tokens["team-a"], "team-b")
    refusals = [
        lambda: thief.list_owned(CLUSTER),
        lambda: thief.get(theirs.id),
        lambda: thief.delete(theirs.id),
        lambda: thief.create(spec("claim-y")),
        lambda: thief.instance_types(),
    ]
    for call in refusals:
        with pytest.raises(FatalError, match="HTTP 403") as refused:
            call()
        assert "team-a" not in str(refused.value)  # names no other tenant
    with pytest.raises(FatalError, match="HTTP 401"):
        provider(lab, secrets.token_hex(16), "team-b").list_owned(CLUSTER)
    with pytest.raises(FatalError, match="HTTP 400"):  # no namespace named: none served
        PluginProvider(
            PluginClass(endpoint=lab.endpoint, region=REGION), tokens["team-b"]
        ).list_owned(CLUSTER)

    # Each namespace sees its own instances alone; another's id is none of its business.
    assert [i.id for i in team_a.list_owned(CLUSTER)] == [mine.id]
    assert [i.id for i in team_b.list_owned(CLUSTER)] == [theirs.id]
    assert team_a.get(theirs.id) is None
    team_a.delete(theirs.id)  # notFound: nothing happens
    still = team_b.get(theirs.id)
    assert still is not None and still.state.value == "running"
    record = lab.record(theirs.id.split("/", 2)[2])
    assert record is not None and record.namespace == "team-b"


def test_an_instance_made_before_namespaces_is_still_its_claims_to_delete(tmp_path: Path) -> None:
    """An upgrade leaks no machine: an instance of the state from before requests named their
    namespace is read and deleted by id (its claim holds the id), and listed to no namespace
    (whose orphan GC would take it for its own)."""
    with ReferencePlugin(tmp_path, machines=2) as first:
        made = provider(first).create(spec("claim-old"))
    state = json.loads((tmp_path / "state.json").read_text())
    for instance in state["instances"]:
        del instance["namespace"]  # as the earlier release wrote it
    (tmp_path / "state.json").write_text(json.dumps(state))
    with ReferencePlugin(tmp_path, machines=2) as second:
        p = provider(second)
        assert p.list_owned(CLUSTER) == []
        kept = p.get(made.id)
        assert kept is not None and kept.state.value == "running"
        p.delete(made.id)
        gone(p, made.id)


# ---- the program ------------------------------------------------------------------------------


def test_it_runs_as_the_readme_says(tmp_path: Path) -> None:
    (tmp_path / "machines.json").write_text(json.dumps(inventory(1, {"SEED_DIR": "/nonexistent"})))
    token = "tok-123-0123456789abcdef"
    (tmp_path / "tokens.json").write_text(json.dumps({"shop": token}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLE / "plugin_server.py"),
            "--inventory",
            str(tmp_path / "machines.json"),
            "--state",
            str(tmp_path / "state" / "state.json"),
            "--listen",
            f"127.0.0.1:{port}",
            "--tokens-file",
            str(tmp_path / "tokens.json"),
        ],
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/v1/instance-types",
                    headers={"Authorization": f"Bearer {token}", "Cloudburst-Namespace": "shop"},
                    timeout=2,
                )
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.1)
        assert answer.status_code == 200
        assert [t["available"] for t in answer.json()["instanceTypes"]] == [1, 1]
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr.decode()
    assert b"serving contract v1 on http://127.0.0.1" in stderr


def test_the_shipped_example_inventory_loads() -> None:
    module = reference_module()
    loaded = module.Inventory.from_json(json.loads((EXAMPLE / "machines.example.json").read_text()))
    assert {m.instance_type for m in loaded.machines.values()} <= set(loaded.types)
