"""The plug-in contract as data: its JSON Schema is the models' (and current), the NodeClass
block that points at a plug-in, and the node identity of its machines."""

from __future__ import annotations

import json
import os
from typing import Any, get_args

import jsonschema
import pytest
from pydantic import ValidationError

from api import NodeClass
from api import plugin as contract
from api.nodepool import ARCHITECTURES, CAPACITY_TYPES, PROVIDERS
from cluster.node_identity import is_claims_node
from cluster.tenancy import ENDPOINT_NOT_ALLOWED, Tenancy

ENDPOINT = "https://homelab-plugin.cloudburst-system.svc:8790"
REQUEST: dict[str, Any] = {
    "name": "nodeclaim-burst-x7k2p",
    "clusterID": "prod-eu",
    "nodePool": "burst",
    "region": "lab-1",
    "instanceType": "mini-4c16g",
    "capacityType": "on-demand",
    "labels": {"cloudburst.io/nodeclaim": "nodeclaim-burst-x7k2p"},
    "userData": "#!/bin/bash\necho 'Grüße' \"$HOME\"\n",
}
INSTANCE: dict[str, Any] = {
    "id": "mini-01.3",
    "name": "nodeclaim-burst-x7k2p",
    "region": "lab-1",
    "instanceType": "mini-4c16g",
    "state": "running",
    "labels": {"cloudburst.io/nodeclaim": "nodeclaim-burst-x7k2p"},
    "createdAt": "2026-11-29T10:00:00Z",
    "privateIP": "192.168.10.21",
}


def validator(definition: str) -> jsonschema.protocols.Validator:
    doc = json.loads(contract.SCHEMA_PATH.read_text())
    schema = {**doc, "$ref": f"#/$defs/{definition}"}
    return jsonschema.Draft202012Validator(schema)


# ---- the schema document ---------------------------------------------------------------------


def test_the_committed_schema_is_the_models() -> None:
    generated = contract.schema_text()
    if os.environ.get("CLOUDBURST_UPDATE_GOLDEN"):
        contract.write_schema()
    assert contract.SCHEMA_PATH.read_text() == generated, (
        f"{contract.SCHEMA_PATH} is stale (api/plugin.py changed): refresh it with "
        "CLOUDBURST_UPDATE_GOLDEN=1 and review the diff"
    )


def test_the_schema_is_json_schema_and_names_every_operation() -> None:
    doc = json.loads(contract.SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(doc)
    assert {(op["method"], op["path"]) for op in doc["x-operations"]} == {
        ("POST", "/v1/instances"),
        ("GET", "/v1/instances/{id}"),
        ("GET", "/v1/instances"),
        ("DELETE", "/v1/instances/{id}"),
        ("GET", "/v1/instance-types"),
    }
    for op in doc["x-operations"]:
        for answer in [op.get("request"), *op["answers"].values()]:
            assert answer is None or answer in doc["$defs"], answer
    assert set(doc["x-error-statuses"]) == {"capacity", "retryable", "fatal", "notFound"}


def test_a_request_and_an_answer_as_the_docs_show_them_are_valid() -> None:
    validator("CreateInstanceRequest").validate(REQUEST)
    validator("Instance").validate(INSTANCE)
    validator("InstanceTypeList").validate(
        {
            "instanceTypes": [
                {"name": "mini-4c16g", "vcpu": 4, "memoryGiB": 16, "arch": "x86_64",
                 "regions": ["lab-1"], "available": 2},
            ]
        }
    )  # fmt: skip
    validator("ErrorAnswer").validate(
        {"error": {"kind": "retryable", "message": "busy", "retryAfterSeconds": 10}}
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "Not_A_Hostname"}, "name"),
        ({"instanceType": "a/b"}, "instanceType"),  # a providerID path segment
        ({"region": "-lab"}, "region"),
        ({"capacityType": "preemptible"}, "capacityType"),
        ({"userData": None}, "userData"),
        ({"clusterID": ""}, "clusterID"),
    ],
)
def test_the_schema_and_the_model_refuse_the_same_request(
    change: dict[str, Any], field: str
) -> None:
    bad = {**REQUEST, **change}
    errors = list(validator("CreateInstanceRequest").iter_errors(bad))
    assert errors and any(field in list(e.absolute_path) for e in errors), errors
    with pytest.raises(ValidationError, match=field):
        contract.CreateInstanceRequest.model_validate(bad)


def test_unknown_fields_are_ignored_both_ways() -> None:
    """A later v1 may add optional fields: neither side refuses them."""
    validator("CreateInstanceRequest").validate({**REQUEST, "spotMaxPrice": 1})
    parsed = contract.Instance.model_validate({**INSTANCE, "hypervisor": "kvm-3"})
    assert parsed.id == "mini-01.3"


def test_the_contract_names_what_the_api_names() -> None:
    arch = contract.InstanceType.model_fields["arch"].annotation
    assert set(get_args(arch)) == set(ARCHITECTURES)
    for model in (contract.CreateInstanceRequest, contract.Instance):
        capacity = model.model_fields["capacity_type"].annotation
        assert set(get_args(capacity)) == set(CAPACITY_TYPES)
    assert "plugin" in PROVIDERS


def test_the_first_boot_script_is_said_to_be_a_secret() -> None:
    doc = json.loads(contract.SCHEMA_PATH.read_text())
    said = doc["$defs"]["CreateInstanceRequest"]["properties"]["userData"]["description"]
    assert "secret" in said.lower() and "never logged" in said


# ---- the NodeClass block ---------------------------------------------------------------------


def node_class(plugin: dict[str, Any]) -> NodeClass:
    return NodeClass.model_validate(
        {
            "apiVersion": "cloudburst.io/v1alpha1",
            "kind": "NodeClass",
            "metadata": {"name": "homelab", "namespace": "default"},
            "spec": {"plugin": plugin, "join": {"hostApiServer": "https://100.64.0.1:6443"}},
        }
    )


def test_a_plugin_block_is_a_provider_of_its_own() -> None:
    nc = node_class(
        {
            "endpoint": ENDPOINT,
            "tokenSecretRef": {"name": "homelab-plugin", "key": "token"},
            "region": "lab-1",
        }
    )
    assert nc.spec.configured_providers() == ["plugin"]
    block = nc.spec.provider_block("plugin")
    ref = block.credential_ref()
    assert ref is not None and (ref.name, ref.key) == ("homelab-plugin", "token")
    assert block.credential_field() == "tokenSecretRef"
    assert ("spec.plugin.tokenSecretRef", ref) in nc.spec.secret_refs()
    assert nc.spec.endpoints() == [("plugin", "spec.plugin.endpoint", ENDPOINT)]


@pytest.mark.parametrize(
    ("plugin", "field"),
    [
        ({}, "endpoint"),
        ({"endpoint": ""}, "endpoint"),
        ({"endpoint": ENDPOINT, "region": "lab 1"}, "region"),
        ({"endpoint": ENDPOINT, "token": "inline"}, "token"),  # a Secret reference only
        (
            {"endpoint": ENDPOINT, "tokenSecretRef": {"name": "t", "key": "k", "namespace": "x"}},
            "namespace",
        ),
    ],
)
def test_a_bad_plugin_block_is_refused(plugin: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        node_class(plugin)


def test_the_plugin_endpoint_is_always_the_operators_to_allow() -> None:
    spec = node_class({"endpoint": ENDPOINT}).spec
    refusal = Tenancy().refusal("default", spec, services=("plugin",))
    assert refusal is not None and refusal.reason == ENDPOINT_NOT_ALLOWED
    assert "CLOUDBURST_ALLOWED_ENDPOINTS[plugin]" in refusal.message
    allowed = Tenancy(allowed_endpoints={"plugin": (ENDPOINT,)})
    assert allowed.refusal("default", spec, services=("plugin",)) is None
    # Another plug-in than the one allowed is not.
    other = node_class({"endpoint": "https://elsewhere.example:8790"}).spec
    assert allowed.refusal("default", other, services=("plugin",)) is not None


# ---- node identity ---------------------------------------------------------------------------


def test_a_plugin_machine_is_its_claims_node_by_its_instance_id() -> None:
    assert is_claims_node("plugin:///lab-1/mini-01.3", "plugin/lab-1/mini-01.3")
    # The machine's earlier or later life is another instance, not this claim's node.
    assert not is_claims_node("plugin:///lab-1/mini-01.2", "plugin/lab-1/mini-01.3")
    assert not is_claims_node("fake:///lab-1/mini-01.3", "plugin/lab-1/mini-01.3")
    assert not is_claims_node("plugin:///lab-1/mini-01.3", "fake/lab-1/mini-01.3")
