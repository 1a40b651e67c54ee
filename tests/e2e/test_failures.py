"""A claim that fails ends visibly, and its pool carries on.

The seed's disaster-recovery manifests with a missing `tailscale-auth` Secret used to leave a
NodeClaim "Provisioning" for good, with no condition and no Event; the pool counted it as a
node for 27 minutes, even after `kubectl delete nodeclaim`, its pod was never planned again,
and the workflow failed with a *different* Secret's name (its cleanup step's error).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio
from kubernetes import client as k8s
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from api import NodeClaimPhase
from api import search_attributes as sa
from api.messages import claim_workflow_id
from api.nodepool.messages import PoolStatus, pool_workflow_id
from tests.e2e.harness import (
    Stack,
    eventually,
    in_thread,
    make_pool,
    nodeclaims,
    pool_pod,
    serving,
)
from tests.e2e.test_operator_cli import cloudburst
from tests.histories import payload_data
from workflows.nodepool import NodePoolWorkflow


@pytest_asyncio.fixture(loop_scope="session")
async def stack(stack: Stack) -> AsyncIterator[Stack]:
    async with serving(stack):
        yield stack


def a_class_without_its_secrets(kube: k8s.ApiClient, name: str) -> None:
    """The sample NodeClass plus, as in the seed's DR manifests on a fresh cluster, a Hetzner
    block and a Tailscale key whose Secrets do not exist."""
    custom = k8s.CustomObjectsApi(kube)
    core = k8s.CoreV1Api(kube)
    for missing in ("tailscale-auth", "hetzner-api-token"):  # the cluster is the session's
        found = core.list_namespaced_secret("default", field_selector=f"metadata.name={missing}")
        assert not found.items, f"Secret default/{missing} was left by an earlier test"
    sample = custom.get_namespaced_custom_object(
        "cloudburst.io", "v1alpha1", "default", "nodeclasses", "sample"
    )
    spec = copy.deepcopy(sample["spec"])
    spec["tailscale"] = {"authKeySecretRef": {"name": "tailscale-auth", "key": "authkey"}}
    spec["hetzner"] = {
        "location": "fsn1",
        "apiTokenSecretRef": {"name": "hetzner-api-token", "key": "HETZNER_API_TOKEN"},
    }
    body = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodeClass",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }
    custom.create_namespaced_custom_object(
        "cloudburst.io", "v1alpha1", "default", "nodeclasses", body
    )
    return sample["spec"]


async def patch(stack: Stack, plural: str, name: str, body: dict[str, Any]) -> None:
    await in_thread(
        stack.custom.patch_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        "default",
        plural,
        name,
        body,
    )


async def sample_class_variant(
    stack: Stack, name: str, edit: Callable[[dict[str, Any]], None]
) -> None:
    """A NodeClass `name`: the sample's spec with `edit` applied."""
    sample = await in_thread(
        stack.custom.get_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodeclasses",
        "sample",
    )
    spec = copy.deepcopy(sample["spec"])
    edit(spec)
    body = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodeClass",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }
    await in_thread(
        stack.custom.create_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodeclasses",
        body,
    )


async def pool_status(stack: Stack, name: str) -> PoolStatus:
    handle = stack.temporal.get_workflow_handle_for(
        NodePoolWorkflow.run, pool_workflow_id("default", name)
    )
    return await handle.query(NodePoolWorkflow.status)


async def events_about(stack: Stack, name: str) -> list[k8s.CoreV1Event]:
    listing = await in_thread(
        stack.core.list_namespaced_event, "default", field_selector=f"involvedObject.name={name}"
    )
    return list(listing.items)


async def test_a_claim_failing_on_a_missing_secret_ends_visibly_and_the_pool_carries_on(
    stack: Stack,
) -> None:
    a_class_without_its_secrets(stack.kube, "wedged")
    make_pool(stack.kube, "wedge")
    await patch(
        stack,
        "nodepools",
        "wedge",
        {"spec": {"nodeClassRef": "wedged", "requirements": {"allowedProviders": ["hetzner"]}}},
    )
    await in_thread(stack.core.create_namespaced_pod, "default", pool_pod("wedge-0", "wedge"))

    # The NodeClaim says it failed, and why: the first cause, the Tailscale key's Secret.
    [claim] = await eventually(
        lambda: nodeclaims(stack, "wedge"),
        lambda found: len(found) == 1 and found[0].get("status", {}).get("phase") == "Failed",
    )
    name = claim["metadata"]["name"]
    ready = next(c for c in claim["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "InvalidConfiguration", ready
    assert "tailscale-auth" in ready["message"], ready
    warnings = await eventually(
        lambda: events_about(stack, name), lambda found: any(e.type == "Warning" for e in found)
    )
    assert any("tailscale-auth" in (e.message or "") for e in warnings), warnings

    # Its workflow failed with that same cause, not a cleanup step's error; the Web UI and
    # `claims list` see the phase Failed.
    handle = stack.temporal.get_workflow_handle(claim_workflow_id("default", name))
    try:
        await asyncio.wait_for(handle.result(), timeout=60)
        raise AssertionError("the claim's workflow did not fail")
    except WorkflowFailureError as err:
        assert "tailscale-auth" in str(err.cause), err.cause
    described = await handle.describe()
    assert described.status == WorkflowExecutionStatus.FAILED
    assert described.typed_search_attributes.get(sa.PHASE) == NodeClaimPhase.FAILED.value

    # The pool forgot it, holds new claims back on the configuration error, and the pod
    # is told why it waits.
    status = await eventually(
        lambda: pool_status(stack, "wedge"), lambda s: not s.claims and bool(s.config_error)
    )
    assert "tailscale-auth" in status.config_error
    told = await eventually(
        lambda: events_about(stack, "wedge-0"),
        lambda found: any("tailscale-auth" in (e.message or "") for e in found),
    )
    assert any(e.type == "Warning" for e in told)
    # Its NodeClaim stays, Failed, without a finalizer (`kubectl delete` takes it at once);
    # a later failure of the pool would replace it.
    [kept] = [c for c in await nodeclaims(stack, "wedge") if c["status"]["phase"] == "Failed"]
    assert not kept["metadata"].get("finalizers"), kept["metadata"]

    # The operator fixes the NodeClass (and, having no Hetzner account, the pool): the pod
    # is planned again at once, and runs.
    await patch(stack, "nodeclasses", "wedged", {"spec": {"tailscale": None}})
    await patch(
        stack, "nodepools", "wedge", {"spec": {"requirements": {"allowedProviders": ["fake"]}}}
    )
    await eventually(
        lambda: in_thread(stack.core.read_namespaced_pod, "wedge-0", "default"),
        lambda pod: pod.status.phase == "Running",
        timeout_s=90,
    )
    status = await pool_status(stack, "wedge")
    assert len(status.claims) == 1 and not status.config_error
    await in_thread(stack.core.delete_namespaced_pod, "wedge-0", "default")


async def test_a_secret_created_after_the_failure_is_used_at_the_operators_word(
    stack: Stack,
) -> None:
    """The NodeClass names a Tailscale key Secret that does not exist yet: the claim fails on
    it and the pool holds new claims back. The operator creates the Secret — no spec changes,
    nothing tells the pool — and runs `cloudburst pools retry`: the pod is planned again at
    once (not when the back-off's 30 s are up), and runs."""

    def later_key(spec: dict[str, Any]) -> None:
        spec["tailscale"] = {"authKeySecretRef": {"name": "tailscale-later", "key": "authkey"}}

    await sample_class_variant(stack, "keyless", later_key)
    make_pool(stack.kube, "keyless")
    await patch(stack, "nodepools", "keyless", {"spec": {"nodeClassRef": "keyless"}})
    await in_thread(stack.core.create_namespaced_pod, "default", pool_pod("keyless-0", "keyless"))
    await eventually(
        lambda: pool_status(stack, "keyless"),
        lambda s: "tailscale-later" in s.config_error and not s.claims,
        timeout_s=60,
    )

    described = await cloudburst(stack, "pools", "describe", "keyless")
    assert "New claims held back: " in described.output, described.output
    assert "tried again at " in described.output
    assert "cloudburst pools retry keyless --namespace default" in described.output

    tailnet = stack.cluster.tailnet
    assert tailnet is not None
    key = tailnet.admin_key(reusable=True, tags=["tag:cloudburst"])  # made in the console
    secret = k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(name="tailscale-later", namespace="default"),
        string_data={"authkey": key},
    )
    await in_thread(stack.core.create_namespaced_secret, "default", secret)
    done = await cloudburst(stack, "pools", "retry", "keyless")
    assert done.exit_code == 0, done.output
    assert "NodePool default/keyless plans its waiting pods again now" in done.output

    await eventually(
        lambda: in_thread(stack.core.read_namespaced_pod, "keyless-0", "default"),
        lambda pod: pod.status.phase == "Running",
        timeout_s=60,
    )
    # At the operator's word: the back-off's timer was cancelled, never fired.
    handle = stack.temporal.get_workflow_handle(pool_workflow_id("default", "keyless"))
    history = await handle.fetch_history()
    backoff = {
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
        and b"retry after config error" in payload_data(e.user_metadata.summary)
    }
    assert backoff, "the pool never backed off"
    fired = {
        e.timer_fired_event_attributes.started_event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_TIMER_FIRED
    }
    assert not backoff & fired
    missing = await cloudburst(stack, "pools", "retry", "no-such-pool")
    assert missing.exit_code == 1
    assert "no running workflow for NodePool default/no-such-pool" in missing.output
    await in_thread(stack.core.delete_namespaced_pod, "keyless-0", "default")
    await in_thread(stack.core.delete_namespaced_secret, "tailscale-later", "default")


async def test_a_plan_that_failed_is_tried_again_without_news(stack: Stack) -> None:
    """The cloud's token Secret is missing, so planning fails; the operator creates it — no
    spec changes, nothing tells the pool — and the pool plans again on its own, soon."""

    def later_token(spec: dict[str, Any]) -> None:
        spec["fake"]["apiTokenSecretRef"] = {"name": "token-later", "key": "token"}

    await sample_class_variant(stack, "tokenless", later_token)
    make_pool(stack.kube, "patient")
    await patch(stack, "nodepools", "patient", {"spec": {"nodeClassRef": "tokenless"}})
    await in_thread(stack.core.create_namespaced_pod, "default", pool_pod("patient-0", "patient"))
    await eventually(
        lambda: events_about(stack, "patient-0"),
        lambda found: any("planning failed" in (e.message or "") for e in found),
    )
    secret = k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(name="token-later", namespace="default"),
        string_data={"token": stack.cluster.cloud.token or ""},
    )
    await in_thread(stack.core.create_namespaced_secret, "default", secret)
    await eventually(
        lambda: in_thread(stack.core.read_namespaced_pod, "patient-0", "default"),
        lambda pod: pod.status.phase == "Running",
        timeout_s=60,
    )
    await in_thread(stack.core.delete_namespaced_pod, "patient-0", "default")
