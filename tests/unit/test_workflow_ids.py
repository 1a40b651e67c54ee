"""Workflow ids name an object by namespace and name, and no two objects share one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from api.limits import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN
from api.messages import claim_key_of, claim_workflow_id
from api.nodepool.messages import pool_key_of, pool_workflow_id

namespaces = st.from_regex(DNS_LABEL_PATTERN, fullmatch=True).filter(lambda s: len(s) <= 63)
names = st.from_regex(DNS_SUBDOMAIN_PATTERN, fullmatch=True).filter(lambda s: len(s) <= 253)


def test_pools_that_shared_an_id_have_one_each() -> None:
    # `nodepool-{namespace}-{name}` made these one workflow.
    assert pool_workflow_id("team", "b-web") != pool_workflow_id("team-b", "web")
    assert claim_workflow_id("team", "b-web-x") != claim_workflow_id("team-b", "web-x")


@given(namespaces, names, namespaces, names)
def test_two_objects_never_share_an_id(ns1: str, n1: str, ns2: str, n2: str) -> None:
    if (ns1, n1) != (ns2, n2):
        assert pool_workflow_id(ns1, n1) != pool_workflow_id(ns2, n2)
        assert claim_workflow_id(ns1, n1) != claim_workflow_id(ns2, n2)


@given(namespaces, names)
def test_an_id_says_which_object_it_is(namespace: str, name: str) -> None:
    assert pool_key_of(pool_workflow_id(namespace, name)) == (namespace, name)
    assert claim_key_of(claim_workflow_id(namespace, name)) == (namespace, name)
    # A pool's id is no claim's, and the reverse.
    assert claim_key_of(pool_workflow_id(namespace, name)) is None
    assert pool_key_of(claim_workflow_id(namespace, name)) is None


def test_other_ids_are_nobodys() -> None:
    for other in ("cloudburst-orphan-gc", "nodeclaim-web-abcde", "nodepool/x", "nodeclaim//a"):
        assert claim_key_of(other) is None and pool_key_of(other) is None
