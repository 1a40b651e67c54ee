"""Bad input gets a clear error where the user looks, and harms nothing else.

An invalid NodePool or NodeClass — one the API server stored (our CRDs cannot judge a label
key or a region list) — gets `ValidationSucceeded=False` and `Ready=False` reason
`InvalidSpec` with the field path, a Warning Event, and the pods it would have served are told
why; a healthy pool beside it keeps serving; nothing reaches a workflow task as an error.
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
import pytest_asyncio
from kubernetes import client as k8s
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType

from api import NodePool
from api.messages import claim_task_queue
from tests.e2e.harness import (
    Stack,
    delete_cloudburst_object,
    eventually,
    in_thread,
    make_pool,
    pool_pod,
    serving,
)


@pytest_asyncio.fixture(loop_scope="session")
async def stack(stack: Stack) -> AsyncIterator[Stack]:
    async with serving(stack):
        yield stack


async def get(stack: Stack, plural: str, name: str) -> dict[str, Any]:
    found = await in_thread(
        stack.custom.get_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        "default",
        plural,
        name,
    )
    assert isinstance(found, dict)
    return found


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    listed = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in listed if c.get("type") == type_), None)


def invalid(obj: dict[str, Any]) -> bool:
    verdict = condition(obj, "ValidationSucceeded")
    ready = condition(obj, "Ready")
    return bool(
        verdict
        and verdict["status"] == "False"
        and ready
        and ready["status"] == "False"
        and ready["reason"] == "InvalidSpec"
    )


async def events_about(stack: Stack, name: str, reason: str) -> list[k8s.CoreV1Event]:
    listing = await in_thread(
        stack.core.list_namespaced_event,
        "default",
        field_selector=f"involvedObject.name={name},reason={reason}",
    )
    return list(listing.items)


async def test_an_invalid_pool_says_why_on_itself_and_its_pods_and_a_healthy_one_serves(
    stack: Stack,
) -> None:
    make_pool(stack.kube, "healthy")
    make_pool(stack.kube, "crooked")
    # A label key the API server stores (a CRD cannot check map keys) but a node could never
    # carry: the model refuses it.
    await in_thread(
        stack.custom.patch_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodepools",
        "crooked",
        {"spec": {"template": {"labels": {"bad key!": "x"}}}},
    )
    pool = await eventually(lambda: get(stack, "nodepools", "crooked"), invalid)
    ready = condition(pool, "Ready")
    assert ready is not None and "spec.template.labels" in ready["message"], ready
    [warning] = await eventually(
        lambda: events_about(stack, "crooked", "InvalidSpec"), lambda found: len(found) == 1
    )
    assert warning.type == "Warning" and "spec.template.labels" in (warning.message or "")

    # Its pod is told about the pool's own error; the healthy pool's pod runs.
    await in_thread(stack.core.create_namespaced_pod, "default", pool_pod("crooked-0", "crooked"))
    await in_thread(stack.core.create_namespaced_pod, "default", pool_pod("healthy-0", "healthy"))
    [told] = await eventually(
        lambda: events_about(stack, "crooked-0", "NoMatchingNodePool"),
        lambda found: len(found) == 1,
    )
    assert "default/crooked: the NodePool is invalid: spec.template.labels" in (told.message or "")
    await eventually(
        lambda: in_thread(stack.core.read_namespaced_pod, "healthy-0", "default"),
        lambda pod: pod.status.phase == "Running",
        timeout_s=90,
    )

    # Fixed: valid again, and its pod is served.
    await in_thread(
        stack.custom.patch_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodepools",
        "crooked",
        {"spec": {"template": {"labels": {"bad key!": None}}}},
    )
    fixed = await eventually(
        lambda: get(stack, "nodepools", "crooked"),
        lambda p: (condition(p, "ValidationSucceeded") or {}).get("status") == "True",
    )
    assert (condition(fixed, "Ready") or {}).get("reason") != "InvalidSpec", fixed["status"]
    await eventually(
        lambda: in_thread(stack.core.read_namespaced_pod, "crooked-0", "default"),
        lambda pod: pod.status.phase == "Running",
        timeout_s=90,
    )
    for name in ("crooked-0", "healthy-0"):
        await in_thread(stack.core.delete_namespaced_pod, name, "default")


async def test_a_pool_without_a_class_ref_among_several_classes_says_so(stack: Stack) -> None:
    sample = await get(stack, "nodeclasses", "sample")
    other = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodeClass",
        "metadata": {"name": "another", "namespace": "default"},
        "spec": sample["spec"],
    }
    await in_thread(
        stack.custom.create_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodeclasses",
        other,
    )
    make_pool(stack.kube, "unreferenced")
    await in_thread(
        stack.custom.patch_namespaced_custom_object,
        "cloudburst.io",
        "v1alpha1",
        "default",
        "nodepools",
        "unreferenced",
        {"spec": {"nodeClassRef": None}},
    )
    await in_thread(
        stack.core.create_namespaced_pod, "default", pool_pod("unreferenced-0", "unreferenced")
    )
    [told] = await eventually(
        lambda: events_about(stack, "unreferenced-0", "NoMatchingNodePool"),
        lambda found: len(found) == 1 and "nodeClassRef" in (found[0].message or ""),
    )
    message = told.message or ""
    assert "has no spec.nodeClassRef and namespace default has" in message, message
    assert "another" in message and "sample" in message
    await in_thread(stack.core.delete_namespaced_pod, "unreferenced-0", "default")
    for plural, name in (("nodepools", "unreferenced"), ("nodeclasses", "another")):
        await in_thread(delete_cloudburst_object, stack.kube, plural, name)


def broken_variants(valid: dict[str, Any], count: int, seed: int) -> list[dict[str, Any]]:
    """Valid manifests with one field broken, the way people break them."""
    rng = random.Random(seed)
    breakages: list[tuple[list[str], Any]] = [
        (["spec", "weight"], 500),
        (["spec", "weight"], "heavy"),
        (["spec", "limits", "cpu"], "1e999999999999"),
        (["spec", "limits", "cpu"], "1.5.3Gi"),
        (["spec", "limits"], {"minNodes": 3, "maxNodes": 2}),
        (["spec", "limits", "maxNodes"], -1),
        (["spec", "disruption", "ttlSecondsAfterEmpty"], "soon"),
        (["spec", "disruption", "ttlSecondsUntilExpired"], 1),
        (["spec", "disruption", "ttlSecondsUntilExpired"], 4611686018427387904),
        (["spec", "disruption", "terminationGracePeriodSeconds"], 1000000000000000),
        (
            ["spec", "disruption", "budgets"],
            [{"nodes": "1", "schedule": "* * * * *", "duration": "99999999h"}],
        ),
        (
            ["spec", "disruption", "budgets"],
            [{"nodes": "1", "schedule": "not cron", "duration": "1h"}],
        ),
        (["spec", "requirements", "allowedProviders"], ["nosuchcloud"]),
        (["spec", "requirements", "arch"], ["sparc"]),
        (["spec", "template", "labels"], {"bad key!": "x"}),
        (["spec", "template", "labels"], {"ok": "[/red] markup"}),
        (["spec", "template", "taints"], [{"key": "k", "effect": "Sometimes"}]),
        (["spec", "requirements", "regionConstraint"], ["x" * 300]),
    ]
    variants = []
    for index in range(count):
        path, value = (
            breakages[index % len(breakages)] if index < len(breakages) else rng.choice(breakages)
        )
        body = copy.deepcopy(valid)
        body["metadata"] = {"name": f"broken-{index}", "namespace": "default"}
        target = body
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
        variants.append(body)
    return variants


@pytest.mark.timeout(600)
async def test_many_broken_pools_harm_nothing(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    make_pool(stack.kube, "steady")
    valid = await get(stack, "nodepools", "steady")
    valid = {"apiVersion": valid["apiVersion"], "kind": "NodePool", "spec": valid["spec"]}
    stored: list[str] = []
    refused = 0
    caplog.set_level(logging.WARNING)
    for body in broken_variants(valid, 40, seed=12):
        try:
            await in_thread(
                stack.custom.create_namespaced_custom_object,
                "cloudburst.io",
                "v1alpha1",
                "default",
                "nodepools",
                body,
            )
            stored.append(body["metadata"]["name"])
        except k8s.ApiException as err:
            assert err.status in (400, 422), err  # refused as a real API server would
            refused += 1
    assert refused > 0 and stored, (refused, stored)

    # Every broken pool the API server stored is marked invalid, with an Event.
    for name in stored:
        obj = await get(stack, "nodepools", name)
        try:
            NodePool.model_validate(obj)
            continue  # this breakage is a valid value after all (markup in a label value)
        except ValidationError:
            pass
        await eventually(partial(get, stack, "nodepools", name), invalid)
        assert await eventually(
            partial(events_about, stack, name, "InvalidSpec"), lambda found: len(found) == 1
        )
    # The healthy pool still serves, and nothing failed a workflow task or the trigger.
    await in_thread(stack.core.create_namespaced_pod, "default", pool_pod("steady-0", "steady"))
    await eventually(
        lambda: in_thread(stack.core.read_namespaced_pod, "steady-0", "default"),
        lambda pod: pod.status.phase == "Running",
        timeout_s=90,
    )
    queues = (
        f"TaskQueue = '{stack.task_queue}' OR TaskQueue = '{claim_task_queue(stack.task_queue)}'"
    )
    async for execution in stack.temporal.list_workflows(queues):
        history = await stack.temporal.get_workflow_handle(execution.id).fetch_history()
        failed = [
            e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
        assert not failed, execution.id
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    await in_thread(stack.core.delete_namespaced_pod, "steady-0", "default")
    for name in stored:
        await in_thread(delete_cloudburst_object, stack.kube, "nodepools", name)
