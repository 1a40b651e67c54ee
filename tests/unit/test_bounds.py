"""One model, enforced everywhere: the bounds of api/limits.py hold in the models, and the
generated CRDs (`deploy/base/crds`) refuse what the models refuse.

The CRD side is judged as an API server would: the openAPIV3Schema with `jsonschema`, then
each `x-kubernetes-validations` rule with a CEL interpreter (cel-python), with the two
Kubernetes CEL functions our rules use (`quantity()`, `compareTo()`) supplied here.
What a CRD schema cannot judge is listed in MODEL_ONLY and asserted to be model-only.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml
from celpy import celtypes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from api import NodeClass, NodePool
from api.limits import (
    BUDGET_NODES_PATTERN,
    CRON_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    DURATION_PATTERN,
    KUBERNETES_VERSION_PATTERN,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_BUDGET_WINDOW_S,
    MAX_CPU_CORES,
    MAX_GRACE_S,
    MAX_MEMORY_BYTES,
    MAX_NODES,
    MAX_POOL_NAME_LENGTH,
    MAX_REGISTRATION_TIMEOUT_S,
    MAX_TTL_S,
    MIN_EXPIRY_S,
    QUANTITY_PATTERN,
    SECRET_KEY_PATTERN,
)
from api.nodepool import Budget, parse_duration
from api.quantity import cpu_millis, memory_bytes, parse_quantity
from api.restricted_keys import POOL_LABEL, KeyKind, restricted_key_problem
from tests.deploy.test_crds import _as_json_schema

CRDS = Path(__file__).parents[2] / "deploy" / "base" / "crds"
MODELS: dict[str, type[BaseModel]] = {"NodePool": NodePool, "NodeClass": NodeClass}
FAST = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

POOL: dict[str, Any] = {
    "apiVersion": "cloudburst.io/v1alpha1",
    "kind": "NodePool",
    "metadata": {"name": "burst", "namespace": "default"},
    "spec": {
        "nodeClassRef": "burst-class",
        "requirements": {"arch": ["x86_64"], "allowedProviders": ["hetzner"]},
        "limits": {"maxNodes": 4, "minNodes": 0, "cpu": "64", "memory": "256Gi"},
        "template": {"labels": {"burst": "true"}},
        "disruption": {
            "ttlSecondsAfterEmpty": 60,
            "ttlSecondsUntilExpired": 86400,
            "budgets": [{"nodes": "10%"}],
            "consolidateAfter": "30s",
        },
        "weight": 10,
    },
}
NODE_CLASS: dict[str, Any] = {
    "apiVersion": "cloudburst.io/v1alpha1",
    "kind": "NodeClass",
    "metadata": {"name": "burst-class", "namespace": "default"},
    "spec": {
        "hetzner": {
            "location": "fsn1",
            "apiTokenSecretRef": {"name": "hetzner-api-token", "key": "HETZNER_API_TOKEN"},
        },
        "join": {"hostApiServer": "https://100.64.0.1:6443", "tokenTtlMinutes": 60},
        "bootstrap": {"kubernetesVersion": "1.34.3"},
    },
}

# Where the CRD schema cannot judge and the model alone refuses (each asserted below).
MODEL_ONLY = {
    # Several shapes (a word or a list): the CRD keeps it as x-kubernetes-preserve-unknown-fields.
    "spec.requirements.regionConstraint": "one of several shapes",
    # A structural schema cannot constrain a map's keys (no patternProperties).
    "spec.template.labels(key)": "label key grammar",
    # Only the NodePool's root sees its name, and a rule there is judged on every status write.
    "spec.template.labels(pool label)": "the pool label's value is the pool's own name",
    # The pattern says "five fields"; whether they are a schedule that fires, croniter says.
    "spec.disruption.budgets.schedule": "cron semantics",
    # metadata is the API server's own (ObjectMeta validation), not the CRD's.
    "metadata.name": "object name grammar",
}


# --- the API server's view -------------------------------------------------------------------


@functools.cache
def crd_schema(kind: str) -> dict[str, Any]:
    path = CRDS / f"cloudburst.io_{kind.lower()}{'es' if kind.endswith('s') else 's'}.yaml"
    crd = yaml.safe_load(path.read_text())
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def _re2_pattern(
    validator: Any, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    # RE2's `$` is the end of the text; Python's also matches before a final newline.
    anchored = pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern
    if validator.is_type(instance, "string") and not re.search(anchored, instance):
        yield jsonschema.ValidationError(f"does not match {pattern!r}")


_Validator = jsonschema.validators.extend(jsonschema.Draft4Validator, {"pattern": _re2_pattern})


class _Quantity:
    """Kubernetes CEL's Quantity (k8s.io/apiserver/pkg/cel/library/quantity.go), enough of it."""

    def __init__(self, value: Decimal) -> None:
        self.value = value


def _quantity(text: Any) -> _Quantity:
    return _Quantity(parse_quantity(str(text)))


def _compare_to(a: _Quantity, b: _Quantity) -> celtypes.IntType:
    return celtypes.IntType((a.value > b.value) - (a.value < b.value))


_CEL = celpy.Environment()
_K8S_FUNCTIONS: dict[str, Any] = {"quantity": _quantity, "compareTo": _compare_to}


@functools.cache
def _program(rule: str) -> Any:
    return _CEL.program(_CEL.compile(rule), functions=_K8S_FUNCTIONS)


def cel_holds(rule: str, value: Any) -> bool:
    """A rule as the API server evaluates it: null fields are absent; an error refuses."""
    try:
        return bool(_program(rule).evaluate({"self": celpy.json_to_cel(_present(value))}))
    except Exception:  # an evaluation error refuses the request, as the API server does
        return False


def _present(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _present(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_present(v) for v in value]
    return value


def cel_failures(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    if value is None:
        return []
    failures = [
        f"{path or '.'}: {rule['message']}"
        for rule in schema.get("x-kubernetes-validations", [])
        if not cel_holds(rule["rule"], value)
    ]
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name in value:
                failures += cel_failures(child, value[name], f"{path}.{name}")
        if isinstance(schema.get("additionalProperties"), dict):
            for child_value in value.values():
                failures += cel_failures(schema["additionalProperties"], child_value, path)
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            failures += cel_failures(schema["items"], item, f"{path}[{index}]")
    return failures


def api_server_refuses(document: dict[str, Any]) -> list[str]:
    schema = crd_schema(document["kind"])
    errors = [e.message for e in _Validator(_as_json_schema(schema)).iter_errors(document)]
    return errors or cel_failures(schema, document)


def model_refuses(document: dict[str, Any]) -> list[str]:
    try:
        MODELS[document["kind"]].model_validate(document)
    except ValidationError as err:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()]
    return []


def with_value(document: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    node: Any = changed
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
    node[path[-1]] = value
    return changed


# --- generated documents ---------------------------------------------------------------------

_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    st.text(max_size=6),
    st.lists(st.integers(-5, 5), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=2),
)


def ints(*bounds: int) -> st.SearchStrategy[Any]:
    edges = [b + d for b in bounds for d in (-1, 0, 1)]
    return st.one_of(
        st.integers(-3, 3), st.sampled_from(edges), st.integers(-(2**70), 2**70), _JUNK
    )


def strings(pattern: str, *samples: str) -> st.SearchStrategy[str]:
    grammar = st.from_regex(pattern, fullmatch=True).filter(lambda s: len(s) <= 400)
    noise = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)
    return st.one_of(grammar, noise, st.sampled_from(samples) if samples else noise)


def texts(pattern: str, *samples: str) -> st.SearchStrategy[Any]:
    return st.one_of(strings(pattern, *samples), _JUNK)


_DURATIONS = texts(DURATION_PATTERN, "30s", "1h30m", "99999999h", "87600h", "87600h1s", "59s")
_QUANTITIES = texts(
    QUANTITY_PATTERN, "1.5.3Gi", "1e999999999999", "1000000", "1000001", "1Ei", "1025Pi", "-1"
)
_CRONS = texts(CRON_PATTERN, "* * * * *", "0 0 31 2 *", "61 * * * *", "@daily", "@never")
_BUDGETS = st.fixed_dictionaries(
    {},
    optional={
        "nodes": texts(BUDGET_NODES_PATTERN, "10%", "101%", "10000", "10001"),
        "schedule": _CRONS,
        "duration": _DURATIONS,
        "reasons": st.one_of(st.lists(st.sampled_from(["Empty", "Drifted", "Bogus"])), _JUNK),
    },
)
_LIMITS = st.fixed_dictionaries(
    {},
    optional={
        "minNodes": ints(0, MAX_NODES),
        "maxNodes": ints(0, MAX_NODES),
        "cpu": _QUANTITIES,
        "memory": _QUANTITIES,
    },
)
_NAMES = st.from_regex(r"[a-z]([-a-z0-9]{0,70}[a-z0-9])?", fullmatch=True)
# Label and taint keys in and around the restricted domains (api/restricted_keys.py).
_DOMAIN_KEYS = st.builds(
    lambda sub, domain, name: f"{sub}{domain}/{name}",
    st.sampled_from(["", "topology.", "a.b."]),
    st.sampled_from(
        ["kubernetes.io", "k8s.io", "cloudburst.io", "karpenter.sh", "node.kubernetes.io",
         "node-restriction.kubernetes.io", "example.com", "notkubernetes.io"]
    ),
    st.sampled_from(["hostname", "instance-type", "zone", "team"]),
)  # fmt: skip

POOL_FIELDS: dict[str, tuple[tuple[str | int, ...], st.SearchStrategy[Any]]] = {
    "spec.weight": (("spec", "weight"), ints(0, 100)),
    "spec.nodeClassRef": (("spec", "nodeClassRef"), texts(DNS_SUBDOMAIN_PATTERN, "[/red]")),
    "spec.requirements.arch": (
        ("spec", "requirements", "arch"),
        st.one_of(st.lists(st.sampled_from(["x86_64", "arm64", "sparc"]), max_size=20), _JUNK),
    ),
    "spec.requirements.allowedProviders": (
        ("spec", "requirements", "allowedProviders"),
        st.one_of(st.lists(st.sampled_from(["aws", "fake", "nosuchcloud"]), max_size=20), _JUNK),
    ),
    "spec.requirements.maxPriceEurPerHour": (
        ("spec", "requirements", "maxPriceEurPerHour"),
        st.one_of(st.floats(-1, 20_000), ints(0, 10_000)),
    ),
    "spec.requirements.regionConstraint": (
        ("spec", "requirements", "regionConstraint"),
        st.one_of(st.just("EU"), st.lists(st.text(max_size=300), max_size=20), _JUNK),
    ),
    "spec.limits": (("spec", "limits"), _LIMITS),
    "spec.template.labels": (
        ("spec", "template", "labels"),
        st.dictionaries(st.just("team"), texts(LABEL_VALUE_PATTERN, "a" * 64), max_size=1),
    ),
    "spec.template.labels(key)": (
        ("spec", "template", "labels"),
        st.dictionaries(strings(LABEL_KEY_PATTERN, "bad key!", "a/b/c"), st.just("v"), max_size=1),
    ),
    "spec.template.labels(domain)": (
        ("spec", "template", "labels"),
        st.dictionaries(_DOMAIN_KEYS, st.just("v"), max_size=2),
    ),
    "spec.template.labels(pool label)": (
        ("spec", "template", "labels"),
        st.fixed_dictionaries({POOL_LABEL: st.sampled_from(["burst", "another-pool"])}),
    ),
    "spec.template.taints(domain)": (
        ("spec", "template", "taints"),
        st.lists(
            st.fixed_dictionaries({"key": _DOMAIN_KEYS, "effect": st.just("NoSchedule")}),
            max_size=2,
        ),
    ),
    "spec.template.taints": (
        ("spec", "template", "taints"),
        st.lists(
            st.fixed_dictionaries(
                {
                    "key": texts(LABEL_KEY_PATTERN, "gpu", "bad key!"),
                    "effect": st.sampled_from(["NoSchedule", "Sometimes"]),
                },
                optional={"value": texts(LABEL_VALUE_PATTERN, "true", "a b")},
            ),
            max_size=2,
        ),
    ),
    "spec.disruption.ttlSecondsAfterEmpty": (
        ("spec", "disruption", "ttlSecondsAfterEmpty"),
        ints(0, MAX_TTL_S),
    ),
    "spec.disruption.ttlSecondsUntilExpired": (
        ("spec", "disruption", "ttlSecondsUntilExpired"),
        ints(MIN_EXPIRY_S, MAX_TTL_S, 2**62),
    ),
    "spec.disruption.terminationGracePeriodSeconds": (
        ("spec", "disruption", "terminationGracePeriodSeconds"),
        ints(0, MAX_GRACE_S, 10**15),
    ),
    "spec.disruption.nodeUnreachableGracePeriodSeconds": (
        ("spec", "disruption", "nodeUnreachableGracePeriodSeconds"),
        ints(0, MAX_GRACE_S),
    ),
    "spec.disruption.consolidateAfter": (("spec", "disruption", "consolidateAfter"), _DURATIONS),
    "spec.disruption.consolidationPolicy": (
        ("spec", "disruption", "consolidationPolicy"),
        st.sampled_from(["WhenEmpty", "WhenEmptyOrUnderutilized", "Always"]),
    ),
    "spec.disruption.budgets": (
        ("spec", "disruption", "budgets"),
        st.one_of(st.lists(_BUDGETS, max_size=3), _JUNK),
    ),
    "spec.disruption.budgets.schedule": (
        ("spec", "disruption", "budgets"),
        st.builds(lambda cron: [{"schedule": cron, "duration": "1h"}], _CRONS),
    ),
    "spec.limits.maxNode": (("spec", "limits", "maxNode"), ints(1)),
    "metadata.name": (("metadata", "name"), _NAMES),
}
CLASS_FIELDS: dict[str, tuple[tuple[str | int, ...], st.SearchStrategy[Any]]] = {
    "spec.join.tokenTtlMinutes": (("spec", "join", "tokenTtlMinutes"), ints(1, 24 * 60)),
    "spec.join.registrationTimeoutSeconds": (
        ("spec", "join", "registrationTimeoutSeconds"),
        ints(10, MAX_REGISTRATION_TIMEOUT_S),
    ),
    "spec.join.hostApiServer": (("spec", "join", "hostApiServer"), texts(".*", "", "x" * 3000)),
    "spec.bootstrap.kubernetesVersion": (
        ("spec", "bootstrap", "kubernetesVersion"),
        texts(KUBERNETES_VERSION_PATTERN, "1.34", "v1.34.3", "1.34.3; rm -rf /"),
    ),
    "spec.hetzner.location": (("spec", "hetzner", "location"), texts(".*", "x" * 300)),
    "spec.hetzner.networkID": (("spec", "hetzner", "networkID"), ints(1, 2**53 - 1)),
    "spec.hetzner.firewallIDs": (
        ("spec", "hetzner", "firewallIDs"),
        st.one_of(st.lists(ints(1), max_size=20), _JUNK),
    ),
    "spec.hetzner.apiTokenSecretRef.key": (
        ("spec", "hetzner", "apiTokenSecretRef", "key"),
        texts(SECRET_KEY_PATTERN, "", "a/b"),
    ),
    "spec.aws": (
        ("spec", "aws"),
        st.fixed_dictionaries(
            {"region": st.just("eu-central-1")}, optional={"rootVolumeGib": ints(8, 16384)}
        ),
    ),
    "spec.hetzner": (("spec", "hetzner"), st.none()),  # no provider left: the CEL rule
}


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(st.sampled_from(["NodePool", "NodeClass"]))
    fields = POOL_FIELDS if kind == "NodePool" else CLASS_FIELDS
    name = draw(st.sampled_from(sorted(fields)))
    path, values = fields[name]
    base = POOL if kind == "NodePool" else NODE_CLASS
    document = with_value(base, path, draw(values))
    if name == "spec.hetzner":
        del document["spec"]["hetzner"]
    return name, document


def test_the_base_documents_are_valid_on_both_sides() -> None:
    for document in (POOL, NODE_CLASS):
        assert model_refuses(document) == []
        assert api_server_refuses(document) == []


@FAST
@given(mutated())
def test_model_and_crd_agree(case: tuple[str, dict[str, Any]]) -> None:
    field, document = case
    by_model, by_crd = model_refuses(document), api_server_refuses(document)
    if by_model and not by_crd and field in MODEL_ONLY:
        return  # listed: the CRD cannot judge it
    assert bool(by_model) == bool(by_crd), (
        f"{field}: model refuses {by_model}, API server refuses {by_crd}"
    )


@pytest.mark.parametrize(
    ("field", "path", "value"),
    [
        ("spec.requirements.regionConstraint", ("spec", "requirements", "regionConstraint"), 7),
        ("spec.template.labels(key)", ("spec", "template", "labels"), {"bad key!": "x"}),
        ("spec.template.labels(pool label)", ("spec", "template", "labels"), {POOL_LABEL: "x"}),
        (
            "spec.disruption.budgets.schedule",
            ("spec", "disruption", "budgets"),
            [{"schedule": "0 0 31 2 *", "duration": "1h"}],
        ),
        ("metadata.name", ("metadata", "name"), "Not_A_Name"),
    ],
)
def test_what_only_the_model_judges(field: str, path: tuple[str, ...], value: Any) -> None:
    assert field in MODEL_ONLY
    document = with_value(POOL, path, value)
    assert model_refuses(document)
    assert not api_server_refuses(document)


# --- every CEL rule, listed and tested -------------------------------------------------------


def _reason(kind: KeyKind) -> str:
    """Why keys are restricted, as the CEL rule's static message says it."""
    problem = restricted_key_problem("k8s.io/x", kind)
    return (problem or "").removeprefix(f"{kind} k8s.io/x is restricted: ")


def _taint(key: str) -> dict[str, str]:
    return {"key": key, "value": "true", "effect": "NoSchedule"}


_TS_KEY = {"name": "tailscale-auth", "key": "authkey"}
_TS_OAUTH = {"name": "tailscale-oauth"}

# Per rule (by its message): a document it lets through and one it refuses, and the model
# agrees on both. A new rule in the CRDs without a case here fails the test below.
RULE_CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "minNodes must not exceed maxNodes": (
        with_value(POOL, ("spec", "limits"), {"minNodes": 2, "maxNodes": 2}),
        with_value(POOL, ("spec", "limits"), {"minNodes": 3, "maxNodes": 2}),
    ),
    "In and NotIn need values; Exists and DoesNotExist take none": (
        with_value(
            POOL,
            ("spec", "namespaceSelector"),
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]},
        ),
        with_value(
            POOL,
            ("spec", "namespaceSelector"),
            {"matchExpressions": [{"key": "team", "operator": "Exists", "values": ["a"]}]},
        ),
    ),
    f"cpu must be at most {MAX_CPU_CORES} cores": (
        with_value(POOL, ("spec", "limits", "cpu"), "1000000"),
        with_value(POOL, ("spec", "limits", "cpu"), "1000001"),
    ),
    "memory must be at most 1Ei": (
        with_value(POOL, ("spec", "limits", "memory"), "1Ei"),
        with_value(POOL, ("spec", "limits", "memory"), "1025Pi"),
    ),
    "schedule and duration go together: set both or neither": (
        with_value(
            POOL, ("spec", "disruption", "budgets"), [{"schedule": "@daily", "duration": "1h"}]
        ),
        with_value(POOL, ("spec", "disruption", "budgets"), [{"schedule": "@daily"}]),
    ),
    "duration must be between 1m and 8760h (a year)": (
        with_value(
            POOL, ("spec", "disruption", "budgets"), [{"schedule": "@daily", "duration": "8760h"}]
        ),
        with_value(
            POOL,
            ("spec", "disruption", "budgets"),
            [{"schedule": "* * * * *", "duration": "99999999h"}],
        ),
    ),
    "consolidateAfter must be at most 87600h (10 years)": (
        with_value(POOL, ("spec", "disruption", "consolidateAfter"), "87600h"),
        with_value(POOL, ("spec", "disruption", "consolidateAfter"), "87600h1s"),
    ),
    f"a NodePool's name is at most {MAX_POOL_NAME_LENGTH} characters (its claims are named "
    "<pool>-<5 characters>, a label value of at most 63)": (
        with_value(POOL, ("metadata", "name"), "p" * MAX_POOL_NAME_LENGTH),
        with_value(POOL, ("metadata", "name"), "p" * (MAX_POOL_NAME_LENGTH + 1)),
    ),
    "a label key is restricted: " + _reason("label"): (
        with_value(POOL, ("spec", "template", "labels"), {"node.kubernetes.io/team": "a"}),
        with_value(POOL, ("spec", "template", "labels"), {"kubernetes.io/hostname": "node-1"}),
    ),
    "a taint key is restricted: " + _reason("taint"): (
        with_value(POOL, ("spec", "template", "taints"), [_taint("example.com/dedicated")]),
        with_value(POOL, ("spec", "template", "taints"), [_taint("cloudburst.io/tenant")]),
    ),
    "configure at least one provider block (e.g. hetzner, scaleway, fake)": (
        NODE_CLASS,
        {**NODE_CLASS, "spec": {k: v for k, v in NODE_CLASS["spec"].items() if k != "hetzner"}},
    ),
    "set exactly one of authKeySecretRef (a reusable key) and oauthClientSecretRef "
    "(a per-node key minted through the Tailscale API)": (
        with_value(NODE_CLASS, ("spec", "tailscale"), {"authKeySecretRef": _TS_KEY}),
        with_value(
            NODE_CLASS,
            ("spec", "tailscale"),
            {"authKeySecretRef": _TS_KEY, "oauthClientSecretRef": _TS_OAUTH, "tags": ["tag:a"]},
        ),
    ),
    "oauthClientSecretRef needs tags: a key minted by an OAuth client must be tagged": (
        with_value(
            NODE_CLASS,
            ("spec", "tailscale"),
            {"oauthClientSecretRef": _TS_OAUTH, "tags": ["tag:a"]},
        ),
        with_value(NODE_CLASS, ("spec", "tailscale"), {"oauthClientSecretRef": _TS_OAUTH}),
    ),
    "tags, tailnet and apiEndpoint go with oauthClientSecretRef": (
        with_value(
            NODE_CLASS,
            ("spec", "tailscale"),
            {"oauthClientSecretRef": _TS_OAUTH, "tags": ["tag:a"], "tailnet": "example.com"},
        ),
        with_value(
            NODE_CLASS, ("spec", "tailscale"), {"authKeySecretRef": _TS_KEY, "tailnet": "-"}
        ),
    ),
}
_PROXMOX: dict[str, Any] = {
    "endpoint": "https://pve.example:8006",
    "apiTokenSecretRef": {"name": "pve-token", "key": "token"},
    "nodes": ["pve1"],
    "vmidRange": {"lower": 1200, "upper": 1299},
    "template": 9000,
    "shapes": [{"name": "small", "cpu": 2, "memoryGiB": 4}],
}
_MACHINE: dict[str, Any] = {
    "name": "rack1-07",
    "bmc": "https://10.0.9.21/redfish/v1",
    "credentialsSecretRef": {"name": "bmc", "key": "rack1-07"},
}
_REDFISH: dict[str, Any] = {"machines": [_MACHINE], "seedUrl": "https://netboot.example/seed"}
RULE_CASES.update(
    {
        "vmidRange.lower must not exceed vmidRange.upper": (
            with_value(NODE_CLASS, ("spec", "proxmox"), _PROXMOX),
            with_value(
                NODE_CLASS,
                ("spec", "proxmox"),
                {**_PROXMOX, "vmidRange": {"lower": 1300, "upper": 1299}},
            ),
        ),
        "set exactly one of template (the VM id to clone) and netboot: true "
        "(a VM that boots from the network)": (
            with_value(
                NODE_CLASS,
                ("spec", "proxmox"),
                {k: v for k, v in _PROXMOX.items() if k != "template"} | {"netboot": True},
            ),
            with_value(NODE_CLASS, ("spec", "proxmox"), {**_PROXMOX, "netboot": True}),
        ),
        "endpoint must be an https:// URL: the Proxmox VE API is served over TLS": (
            with_value(NODE_CLASS, ("spec", "proxmox"), _PROXMOX),
            with_value(
                NODE_CLASS, ("spec", "proxmox"), {**_PROXMOX, "endpoint": "http://pve:8006"}
            ),
        ),
        "shape names must be unique": (
            with_value(NODE_CLASS, ("spec", "proxmox"), _PROXMOX),
            with_value(
                NODE_CLASS,
                ("spec", "proxmox"),
                {**_PROXMOX, "shapes": _PROXMOX["shapes"] * 2},
            ),
        ),
        "imageUrl goes with boot: Cd (the virtual media to boot), and boot: Cd needs it": (
            with_value(
                NODE_CLASS,
                ("spec", "redfish"),
                {**_REDFISH, "boot": "Cd", "imageUrl": "https://netboot.example/live.iso"},
            ),
            with_value(NODE_CLASS, ("spec", "redfish"), {**_REDFISH, "boot": "Cd"}),
        ),
        "machine names must be unique": (
            with_value(NODE_CLASS, ("spec", "redfish"), _REDFISH),
            with_value(
                NODE_CLASS, ("spec", "redfish"), {**_REDFISH, "machines": [_MACHINE, _MACHINE]}
            ),
        ),
        "redfish has no endpoint: each machine's bmc and seedUrl are its addresses": (
            with_value(NODE_CLASS, ("spec", "redfish"), _REDFISH),
            with_value(
                NODE_CLASS,
                ("spec", "redfish"),
                {**_REDFISH, "endpoint": "https://10.0.9.21/redfish/v1"},
            ),
        ),
    }
)
# NodeClaims are written by our own code, not by users: their rules are tested on the claim.
CLAIM_RULES = {
    f"cpu must be at most {MAX_CPU_CORES} cores",
    "memory must be at most 1Ei",
    "a NodeClaim's name is a node name and a label value: at most 63 characters",
}


def _rules(node: Any) -> Iterator[dict[str, str]]:
    if isinstance(node, dict):
        yield from node.get("x-kubernetes-validations", [])
        for value in node.values():
            yield from _rules(value)
    elif isinstance(node, list):
        for value in node:
            yield from _rules(value)


def test_every_cel_rule_has_a_case() -> None:
    for kind in ("NodePool", "NodeClass"):
        for rule in _rules(crd_schema(kind)):
            assert rule["message"] in RULE_CASES, f"{kind}: no case for {rule}"
    for rule in _rules(crd_schema("NodeClaim")):
        assert rule["message"] in CLAIM_RULES, f"NodeClaim: no case for {rule}"


@pytest.mark.parametrize("message", sorted(RULE_CASES))
def test_each_cel_rule_and_its_model_counterpart(message: str) -> None:
    good, bad = RULE_CASES[message]
    assert model_refuses(good) == [] and api_server_refuses(good) == []
    assert model_refuses(bad)
    refused = api_server_refuses(bad)
    assert any(message in failure for failure in refused), refused


def test_claim_rules_hold_on_claims() -> None:
    from api.claims import new_claim
    from api.nodeclaim import NodeClaim, Offering
    from api.nodepool import NodePoolSpec

    claim = new_claim(
        name="burst-abcde",
        namespace="default",
        pool_name="burst",
        pool=NodePoolSpec(),
        node_class_name="burst-class",
        offerings=[Offering(provider="fake", region="sim-1", instance_type="fk-small")],
        cpu_m=MAX_CPU_CORES * 1000,
        memory_bytes=MAX_MEMORY_BYTES,
    )
    document = claim.model_dump(mode="json", exclude_none=True)
    assert cel_failures(crd_schema("NodeClaim"), document) == []
    too_big = with_value(document, ("spec", "resources", "requests", "cpu"), "1000001")
    assert cel_failures(crd_schema("NodeClaim"), too_big)
    with pytest.raises(ValidationError):
        NodeClaim.model_validate(too_big)
    long_name = with_value(document, ("metadata", "name"), "c" * 64)
    assert cel_failures(crd_schema("NodeClaim"), long_name)
    with pytest.raises(ValidationError):
        NodeClaim.model_validate(long_name)


# --- every spec field is bounded -------------------------------------------------------------


def _unbounded(node: dict[str, Any], where: str) -> Iterator[str]:
    if node.get("x-kubernetes-preserve-unknown-fields") or "enum" in node:
        return
    kind = node.get("type")
    if kind in ("integer", "number") and "maximum" not in node:
        yield f"{where}: no maximum"
    if kind == "integer" and "minimum" not in node:
        yield f"{where}: no minimum"
    if kind == "string" and "maxLength" not in node:
        yield f"{where}: no maxLength"
    if kind == "array":
        if "maxItems" not in node:
            yield f"{where}: no maxItems"
        yield from _unbounded(node["items"], f"{where}[]")
    if kind == "object":
        for name, child in node.get("properties", {}).items():
            yield from _unbounded(child, f"{where}.{name}")
        if isinstance(node.get("additionalProperties"), dict):
            if "maxProperties" not in node:
                yield f"{where}: no maxProperties"
            yield from _unbounded(node["additionalProperties"], f"{where}.*")


@pytest.mark.parametrize("kind", ["NodePool", "NodeClass", "NodeClaim"])
def test_every_spec_field_is_bounded(kind: str) -> None:
    spec = crd_schema(kind)["properties"]["spec"]
    assert list(_unbounded(spec, "spec")) == []


# --- the crashes of the issue, at the model --------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "disruption", "budgets"), [{"schedule": "* * * * *", "duration": "99999999h"}]),
        (("spec", "disruption", "terminationGracePeriodSeconds"), 1_000_000_000_000_000),
        (("spec", "disruption", "ttlSecondsUntilExpired"), 4611686018427387904),
        (("spec", "disruption", "ttlSecondsUntilExpired"), 1),
        (("spec", "limits", "cpu"), "1e999999999999"),
        (("spec", "limits", "cpu"), "1.5.3Gi"),
        (("spec", "requirements", "allowedProviders"), ["nosuchcloud"]),
        (("spec", "limits"), {"minNodes": 5, "maxNodes": 1}),
    ],
)
def test_values_that_looped_a_workflow_are_refused_on_both_sides(
    path: tuple[str, ...], value: Any
) -> None:
    document = with_value(POOL, path, value)
    assert model_refuses(document)  # a ValidationError, not decimal.Overflow or OverflowError
    assert api_server_refuses(document)


def test_expiry_has_a_floor_of_ten_minutes() -> None:
    assert MIN_EXPIRY_S == 600
    assert not model_refuses(
        with_value(POOL, ("spec", "disruption", "ttlSecondsUntilExpired"), 600)
    )
    assert model_refuses(with_value(POOL, ("spec", "disruption", "ttlSecondsUntilExpired"), 599))


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    schedule=st.sampled_from(["* * * * *", "0 2 * * *", "@daily", "@annually", "0 0 29 2 *"]),
    seconds=st.integers(60, MAX_BUDGET_WINDOW_S),
    now=st.datetimes(datetime(2000, 1, 1), datetime(2200, 1, 1), timezones=st.just(UTC)),
)
def test_a_valid_budget_is_active_or_not_at_any_time(
    schedule: str, seconds: int, now: datetime
) -> None:
    budget = Budget(schedule=schedule, duration=f"{seconds}s")
    assert budget.active(now) in (True, False)


# --- durations and quantities: only ValueError, whatever the text ----------------------------


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.one_of(st.text(), st.from_regex(r"[0-9]{1,12}[hms]([0-9]{1,12}[ms])?", fullmatch=True)))
def test_parse_duration_refuses_with_value_error_only(text: str) -> None:
    try:
        seconds = parse_duration(text)
    except ValueError:
        return
    assert 0 <= seconds <= MAX_TTL_S


def test_parse_duration_bounds() -> None:
    assert parse_duration("1h30m") == 5400 and parse_duration("45s") == 45
    assert parse_duration("87600h") == MAX_TTL_S
    for text in ("99999999h", "87600h1s", "9" * 5000 + "s", "\u0661\u0660m", "", "h", "1d"):
        with pytest.raises(ValueError):
            parse_duration(text)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(
    st.one_of(
        st.text(),
        st.from_regex(r"[+-]?[0-9.]{0,30}([eE][+-]?[0-9]{1,15})?(Ki|Mi|Ei|m|k|E)?", fullmatch=True),
    )
)
def test_quantities_raise_nothing_but_value_error(text: str) -> None:
    for parse in (parse_quantity, cpu_millis, memory_bytes):
        with contextlib.suppress(ValueError):
            parse(text)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.from_regex(QUANTITY_PATTERN, fullmatch=True).filter(lambda s: len(s) <= 64))
def test_every_quantity_of_the_crd_pattern_parses(text: str) -> None:
    assert parse_quantity(text) >= 0
    assert cpu_millis(text) >= 0 and memory_bytes(text) >= 0


@pytest.mark.parametrize(
    ("text", "value"),
    [("1500m", Decimal("1.5")), ("2Gi", Decimal(2**31)), (".5", Decimal("0.5")),
     ("1e3", Decimal(1000)), ("1E", Decimal(10**18)), ("5.", Decimal(5))],
)  # fmt: skip
def test_kubernetes_quantity_grammar(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["1.5.3Gi", "1e999999999999", "1e1000", "Gi", "1 Gi", "1gi", "\u0661", "0x10", "1e"]
)
def test_not_quantities(text: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def test_huge_and_odd_numbers_are_value_errors() -> None:
    assert cpu_millis(10**5000) > 0  # an int is exact, however large
    for value in (float("inf"), float("nan")):
        with pytest.raises(ValueError):
            cpu_millis(value)


def test_budget_window_bounds_are_a_year() -> None:
    assert MAX_BUDGET_WINDOW_S == 365 * 24 * 3600
    ok = with_value(
        POOL, ("spec", "disruption", "budgets"), [{"schedule": "@daily", "duration": "8760h"}]
    )
    assert not model_refuses(ok)
    later = datetime(2200, 1, 1, tzinfo=UTC) + timedelta(days=1)
    assert Budget(schedule="@daily", duration="8760h").active(later)


# --- quantities as Kubernetes reads them ---------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "held"),
    [
        (("spec", "limits", "cpu"), 1000, "1000"),
        (("spec", "limits", "memory"), 68719476736, "68719476736"),
        (("spec", "limits", "cpu"), 0, "0"),
    ],
)
def test_an_integer_quantity_is_accepted_on_both_sides(
    path: tuple[str, ...], value: int, held: str
) -> None:
    """`limits.cpu: 1000` is a quantity to Kubernetes (int-or-string): the model and the CRD
    (schema and CEL) take it, and the model holds it as the string its digits spell. Without
    the int-or-string Quantity both refused it ("Input should be a valid string", "must be of
    type string")."""
    document = with_value(POOL, path, value)
    assert not model_refuses(document)
    assert not api_server_refuses(document)
    pool = NodePool.model_validate(document)
    assert getattr(pool.spec.limits, path[-1]) == held


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "limits", "cpu"), -1),
        (("spec", "limits", "cpu"), MAX_CPU_CORES + 1),
        (("spec", "limits", "memory"), 2**60 + 1),
        (("spec", "limits", "cpu"), True),
        (("spec", "limits", "cpu"), 1.5),
    ],
)
def test_an_integer_quantity_out_of_bounds_is_refused_on_both_sides(
    path: tuple[str, ...], value: object
) -> None:
    """An integer quantity is bounded as its string is: below zero (the schema's minimum,
    which a string's pattern cannot say for an integer) and above the bound (the CEL rule
    reads `string(self.cpu)`; `self.cpu.matches` fails on an integer)."""
    document = with_value(POOL, path, value)
    assert model_refuses(document)
    assert api_server_refuses(document)
