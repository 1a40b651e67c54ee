"""A pool may not label or taint its nodes with Kubernetes', Cloudburst's or Karpenter's keys.

The one list (api/restricted_keys.py) judged by its pure function; the NodePool model naming
the field; the NodePool CRD's CEL rules agreeing with the function key by key; and what must
keep reading such keys: the spec sent to a pool's workflow (Cloudburst's own tenant label and
taint) and recorded histories whose pools use them.
"""

from __future__ import annotations

from typing import Any

import celpy
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from api import NodeClaim, NodePool, NodePoolSpec
from api.labels import TENANT_LABEL
from api.limits import LABEL_KEY_PATTERN
from api.nodeclass import NodeClassSpec
from api.nodepool import NodeTemplate, Taint
from api.nodepool.messages import NodePoolInput, PoolSpecs, PoolState
from api.problems import field_errors
from api.restricted_keys import (
    LABEL_DOMAIN_EXCEPTIONS,
    OUR_LABELS_IN_EXCEPTIONS,
    POOL_LABEL,
    POOL_LABEL_MESSAGE,
    RESTRICTED_DOMAINS,
    KeyKind,
    restricted_key_problem,
)
from cluster.tenancy import Tenancy
from tests.unit.test_bounds import FAST, POOL, cel_holds, crd_schema, with_value
from worker.payload_codec import DATA_CONVERTER

# (key, restricted as a label, restricted as a taint)
KEYS = [
    # each restricted domain, and a subdomain of each
    ("kubernetes.io/hostname", True, True),
    ("kubernetes.io/arch", True, True),
    ("topology.kubernetes.io/zone", True, True),
    ("k8s.io/anything", True, True),
    ("kops.k8s.io/instancegroup", True, True),  # Karpenter's exception, not ours
    ("cloudburst.io/nodeclaim", True, True),
    ("cloudburst.io/tenant", True, True),
    ("bench.cloudburst.io/pool", True, True),
    ("karpenter.sh/capacity-type", True, True),
    ("a.b.karpenter.sh/x", True, True),
    # the label exceptions, and what is restricted in them
    ("node.kubernetes.io/exclude-from-external-load-balancers", False, True),
    ("team.node.kubernetes.io/x", False, True),
    ("node.kubernetes.io/instance-type", True, True),
    ("node.kubernetes.io/not-ready", False, True),  # the node controller's taint
    ("node-restriction.kubernetes.io/cloudburst-tenant", True, True),  # Karpenter allows it
    ("kubelet.kubernetes.io/x", True, True),
    # the pool label: its value is judged with the pool's name
    (POOL_LABEL, False, True),
    # anyone's own
    ("example.com/team", False, False),
    ("notkubernetes.io/x", False, False),  # ends with the domain, but is not a subdomain
    ("kubernetes.io.example.com/x", False, False),
    ("mycloudburst.io/x", False, False),
    ("team", False, False),
    ("gpu", False, False),
    ("burst", False, False),
    ("kubernetes.io", False, False),  # no prefix: a name of the user's own
]


@pytest.mark.parametrize(("key", "as_label", "as_taint"), KEYS)
def test_which_keys_are_restricted(key: str, as_label: bool, as_taint: bool) -> None:
    assert (restricted_key_problem(key, "label") is not None) == as_label
    assert (restricted_key_problem(key, "taint") is not None) == as_taint


def test_the_lists() -> None:
    assert RESTRICTED_DOMAINS == ("kubernetes.io", "k8s.io", "cloudburst.io", "karpenter.sh")
    assert LABEL_DOMAIN_EXCEPTIONS == ("node.kubernetes.io",)
    assert {"node.kubernetes.io/instance-type"} == OUR_LABELS_IN_EXCEPTIONS


def test_the_message_names_the_key_why_and_what_instead() -> None:
    assert restricted_key_problem("kubernetes.io/hostname", "label") == (
        "label kubernetes.io/hostname is restricted: keys under kubernetes.io, k8s.io, "
        "cloudburst.io and karpenter.sh are set by Kubernetes and Cloudburst (allowed: "
        "node.kubernetes.io/*, but not node.kubernetes.io/instance-type, which Cloudburst sets "
        "from the offering); use a key of your own domain, e.g. example.com/team"
    )
    assert restricted_key_problem("cloudburst.io/tenant", "taint") == (
        "taint cloudburst.io/tenant is restricted: keys under kubernetes.io, k8s.io, "
        "cloudburst.io and karpenter.sh are set by Kubernetes and Cloudburst; use a key of "
        "your own domain, e.g. example.com/dedicated"
    )


# --- the model -------------------------------------------------------------------------------


def _pool_errors(document: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as refused:
        NodePool.model_validate(document)
    return field_errors(refused.value)


def test_the_pool_model_names_each_field() -> None:
    document = with_value(
        POOL,
        ("spec", "template"),
        {
            "labels": {
                "team": "a",
                "kubernetes.io/hostname": "node-1",
                "node.kubernetes.io/x": "y",
            },
            "taints": [
                {"key": "gpu", "effect": "NoSchedule"},
                {"key": "cloudburst.io/tenant", "value": "other", "effect": "NoSchedule"},
            ],
        },
    )
    assert _pool_errors(document) == [
        (
            "spec.template.labels.kubernetes.io/hostname",
            restricted_key_problem("kubernetes.io/hostname", "label"),
        ),
        ("spec.template.taints.1.key", restricted_key_problem("cloudburst.io/tenant", "taint")),
    ]


def test_a_pool_may_state_its_own_name_under_the_pool_label_only() -> None:
    own = with_value(POOL, ("spec", "template", "labels"), {POOL_LABEL: POOL["metadata"]["name"]})
    assert NodePool.model_validate(own).spec.template.labels == {POOL_LABEL: "burst"}
    other = with_value(POOL, ("spec", "template", "labels"), {POOL_LABEL: "someone-elses"})
    assert _pool_errors(other) == [(f"spec.template.labels.{POOL_LABEL}", POOL_LABEL_MESSAGE)]


def test_what_cloudburst_itself_carries_still_reads() -> None:
    # The spec a tenant's pool workflow is sent carries the tenant label and taint
    # (cluster/tenancy.py); a claim copies them; neither is a user's manifest.
    template = {
        "labels": {"node-restriction.kubernetes.io/cloudburst-tenant": "team-a"},
        "taints": [{"key": "cloudburst.io/tenant", "value": "team-a", "effect": "NoSchedule"}],
    }
    assert NodeTemplate.model_validate(template).taints[0].key == "cloudburst.io/tenant"
    assert NodePoolSpec.model_validate({"template": template}).template.labels
    assert Taint(key="cloudburst.io/unregistered", value="true", effect="NoSchedule")
    claim = {
        "metadata": {"name": "p-abcde", "namespace": "team-a"},
        "spec": {
            "nodePool": "p",
            "nodeClass": "c",
            "offerings": [{"provider": "fake", "region": "sim-1", "instanceType": "fk-small"}],
            **template,
        },
    }
    assert NodeClaim.model_validate(claim).spec.taints[0].key == "cloudburst.io/tenant"


def test_a_pools_input_with_keys_of_ours_reads_back() -> None:
    """The spec a pool's workflow gets carries our own keys (a tenant's label and taint): the
    restriction is the NodePool resource's, never the payloads' (a workflow task that could
    not read its input would fail on every retry)."""
    spec = Tenancy(namespaces=frozenset({"team-a"})).node_spec("team-a", NodePoolSpec())
    assert TENANT_LABEL in spec.template.labels
    pool = NodePoolInput(
        namespace="team-a",
        name="web",
        state=PoolState(
            specs=PoolSpecs(
                pool=spec,
                node_class_name="c",
                node_class=NodeClassSpec.model_validate(
                    {"fake": {}, "join": {"hostApiServer": "https://10.0.0.1:6443"}}
                ),
            )
        ),
    )
    [payload] = DATA_CONVERTER.payload_converter.to_payloads([pool])
    [read] = DATA_CONVERTER.payload_converter.from_payloads([payload], [NodePoolInput])
    assert read == pool


# --- the CRD: its CEL rules agree with the function, key by key -------------------------------


def _rule(field: str) -> dict[str, str]:
    """The rule on the template's labels (the map), or on each of its taints (an item)."""
    template = crd_schema("NodePool")["properties"]["spec"]["properties"]["template"]
    schema = template["properties"][field]
    (rule,) = (schema["items"] if field == "taints" else schema)["x-kubernetes-validations"]
    return dict(rule)


_NAMES = st.sampled_from(["hostname", "instance-type", "zone", "team", "x", "not-ready"])
_DOMAINS = st.sampled_from(
    [
        *RESTRICTED_DOMAINS,
        *LABEL_DOMAIN_EXCEPTIONS,
        "node-restriction.kubernetes.io",
        "kops.k8s.io",
        "kubelet.kubernetes.io",
        "example.com",
        "notkubernetes.io",
        "kubernetes.io.example.com",
        "k8s.io.evil",
    ]
)
_SUBDOMAINS = st.one_of(
    st.just(""), st.from_regex(r"[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?\.", fullmatch=True)
)
KEYS_TO_JUDGE = st.one_of(
    st.builds(lambda sub, domain, name: f"{sub}{domain}/{name}", _SUBDOMAINS, _DOMAINS, _NAMES),
    st.sampled_from([key for key, _, _ in KEYS] + sorted(OUR_LABELS_IN_EXCEPTIONS)),
    st.from_regex(LABEL_KEY_PATTERN, fullmatch=True).filter(lambda key: len(key) <= 100),
    st.text(max_size=40),  # not even a key: the two must still agree
)


def _message(rule: dict[str, str], value: Any) -> str:
    env = celpy.Environment()
    program = env.program(env.compile(rule["messageExpression"]))
    return str(program.evaluate({"self": celpy.json_to_cel(value)}))


def _judged(kind: KeyKind, key: str) -> Any:
    """A template's labels with `key` beside a key of the pool's own; a taint with `key`."""
    if kind == "label":
        return {"team": "a", key: "v"}
    return {"key": key, "effect": "NoSchedule"}


@FAST
@given(KEYS_TO_JUDGE)
def test_the_crd_rules_agree_with_the_function(key: str) -> None:
    kinds: tuple[KeyKind, ...] = ("label", "taint")
    for kind in kinds:
        rule, value = _rule(f"{kind}s"), _judged(kind, key)
        problem = restricted_key_problem(key, kind)
        assert cel_holds(rule["rule"], value) == (problem is None), (kind, key)
        if problem is not None:
            assert _message(rule, value) == problem


@pytest.mark.parametrize("kind", ["label", "taint"])
def test_the_crd_messages_are_the_models(kind: KeyKind) -> None:
    rule = _rule(f"{kind}s")
    assert rule["message"] == f"a {kind} key is restricted: " + (
        restricted_key_problem("k8s.io/x", kind) or ""
    ).removeprefix(f"{kind} k8s.io/x is restricted: ")
