"""Orphan garbage collection on the real dev server, the simulated cluster and the fake cloud.

The workflow is run directly (not by the schedule's timer); one test checks that the worker
creates the schedule with the configured interval. Each test uses its own cluster id, so
it sees only the VMs it made, whatever else the session left in the fake cloud.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes import client as k8s
from temporalio.client import (
    Client,
    ScheduleActionStartWorkflow,
    ScheduleOverlapPolicy,
)
from temporalio.service import RPCError

from activities.providers.base import InstanceSpec
from activities.providers.digitalocean import DigitalOceanProvider
from activities.providers.ovh import OvhProvider
from api import NodeClaimPhase, labels
from api.gc import GC_SCHEDULE_ID, OrphanGcInput, OrphanGcReport
from api.messages import ScaleDownRequest
from api.nodeclass import DigitalOceanClass, OvhClass
from cli.manual_claims import build_claim, load_pool, new_claim_name, start_claim
from sim.clouds.digitalocean import DigitalOceanStandin
from sim.clouds.ovh import OvhStandin
from sim.cluster import SimulatedCluster
from tests.e2e.harness import (
    FAST,
    Stack,
    eventually,
    fake_offering,
    in_process_worker,
    in_thread,
    make_pool,
    new_task_queue,
    running_watcher,
    stack_on,
    wait_for_phase,
)
from worker.main import run_worker
from worker.settings import Settings
from workflows.gc import OrphanGcWorkflow
from workflows.nodeclaim import NodeClaimWorkflow

WORKER_NS = "cloudburst-system"


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    temporal_client: Client, kube: k8s.ApiClient, sim_cluster: SimulatedCluster, kubeconfig: Path
) -> Stack:
    cluster_id = f"gc-{uuid.uuid4().hex[:8]}"
    return stack_on(temporal_client, kube, sim_cluster, kubeconfig, cluster_id=cluster_id)


async def run_gc(stack: Stack, grace_s: float, **kw: Any) -> OrphanGcReport:
    return await stack.temporal.execute_workflow(
        OrphanGcWorkflow.run,
        OrphanGcInput(
            cluster_id=stack.settings.cluster_id,
            grace_period_s=grace_s,
            delete_timeout_s=30,
            **kw,
        ),
        id=f"gc-test-{uuid.uuid4().hex[:8]}",
        task_queue=stack.task_queue,
        execution_timeout=timedelta(minutes=3),
    )


def labelled_vm(stack: Stack, claim: str, pool: str = "gc") -> str:
    """A VM in the fake cloud labelled as ours for `claim`, made behind Cloudburst's back."""
    vm = stack.cluster.cloud.create_instance(
        name=claim,
        region="sim-1",
        instance_type="fk-small",
        user_data="#!/bin/sh\n",
        labels={
            labels.MANAGED: "true",
            labels.CLUSTER: stack.settings.cluster_id,
            labels.NODEPOOL: pool,
            labels.NODECLAIM: claim,
        },
    )
    return f"fake/sim-1/{vm['id']}"


def vm_exists(stack: Stack, instance_id: str) -> bool:
    native = instance_id.rsplit("/", 1)[1]
    return stack.cluster.cloud.peek(native) is not None


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def make_secret(
    stack: Stack,
    namespace: str,
    name: str,
    purpose: str,
    claim: str,
    expires_at: datetime | None = None,
    annotations: dict[str, str] | None = None,
) -> None:
    data = {"userdata": _b64("#!/bin/sh\n")}
    if purpose == "bootstrap-token":
        data = {
            "token-id": _b64(uuid.uuid4().hex[:6]),
            "token-secret": _b64(uuid.uuid4().hex[:16]),
            "expiration": _b64(_rfc3339(expires_at)),
        }
    stack.core.create_namespaced_secret(
        namespace,
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(
                name=name,
                namespace=namespace,
                # As the bootstrap labels them: the claim's namespace, name and the purpose.
                labels=labels.ownership_labels(claim, namespace="default", purpose=purpose),
                annotations=annotations,
            ),
            data=data,
        ),
    )


def _rfc3339(at: datetime | None) -> str:
    return (at or datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def leftover_bootstrap(
    stack: Stack, claim: str, token: str, expires_at: datetime | None = None
) -> str:
    """What a claim that died before its cleanup leaves: its token in kube-system (which the
    worker may not read or list) and its script Secret, naming the token, in the worker's
    namespace. Returns the script Secret's name."""
    make_secret(stack, "kube-system", token, "bootstrap-token", claim, expires_at)
    script = f"{claim}-bootstrap"
    annotations = {labels.TOKEN_SECRET: token, labels.TOKEN_EXPIRES: _rfc3339(expires_at)}
    make_secret(stack, WORKER_NS, script, "bootstrap-script", claim, annotations=annotations)
    return script


def secret_exists(stack: Stack, namespace: str, name: str) -> bool:
    try:
        stack.core.read_namespaced_secret(name, namespace)
    except k8s.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def deleted_ids(report: OrphanGcReport) -> set[str]:
    return {vm.instance_id for vm in report.vms_deleted}


def deleted_secrets(report: OrphanGcReport) -> dict[str, str]:
    return {f"{s.namespace}/{s.name}": s.reason for s in report.secrets_deleted}


async def test_gc_removes_orphans_and_leaves_live_claims_alone(stack: Stack) -> None:
    make_pool(stack.kube, "gc", empty_ttl=3600)
    async with in_process_worker(stack), running_watcher(stack.temporal, stack.kube):
        context = load_pool(stack.kube, "default", "gc")
        claim = build_claim(context, [fake_offering()], new_claim_name("gc"))
        live = claim.metadata.name
        handle = await start_claim(
            stack.temporal,
            stack.kube,
            context,
            claim,
            task_queue=stack.task_queue,
            cluster_id=stack.settings.cluster_id,
            timings=FAST,
        )
        status = await wait_for_phase(handle, NodeClaimPhase.READY)
        assert status.instance_id
        live_vm = status.instance_id

        orphan = labelled_vm(stack, f"gc-orphan-{uuid.uuid4().hex[:5]}")
        await asyncio.sleep(1.2)  # let the orphan grow older than the 1 s grace period
        report = await run_gc(stack, grace_s=1.0)

        assert deleted_ids(report) == {orphan}, report
        assert report.vms_deleted[0].reason.startswith("claim workflow unknown")
        assert not vm_exists(stack, orphan)
        assert vm_exists(stack, live_vm)
        assert report.vms_kept_live == 1 and report.vms_seen == 2
        assert any(p.startswith("fake (default/") for p in report.providers)
        desc = await stack.temporal.get_workflow_handle(handle.id).describe()
        assert desc.status is not None and desc.status.name == "RUNNING"

        # Once the claim has ended, what is left labelled for it is garbage: a Secret at
        # once (the claim cannot come back), a VM after the grace period.
        assert (
            await handle.execute_update(
                NodeClaimWorkflow.request_scale_down, ScaleDownRequest(reason="gc test")
            )
        ).accepted
        await asyncio.wait_for(handle.result(), timeout=60)
        assert not vm_exists(stack, live_vm)
        token = f"bootstrap-token-gc{uuid.uuid4().hex[:4]}"
        script = await in_thread(leftover_bootstrap, stack, live, token)
        leftover = labelled_vm(stack, live)
        report = await run_gc(stack, grace_s=3600)
        assert deleted_secrets(report).get(f"kube-system/{token}") == "claim workflow closed"
        assert deleted_secrets(report).get(f"{WORKER_NS}/{script}") == "claim workflow closed"
        assert not await in_thread(secret_exists, stack, "kube-system", token)
        assert not await in_thread(secret_exists, stack, WORKER_NS, script)
        assert deleted_ids(report) == set() and report.vms_kept_young == 1
        assert vm_exists(stack, leftover)
        report = await run_gc(stack, grace_s=0)
        assert deleted_ids(report) == {leftover}
        assert report.vms_deleted[0].reason.startswith("claim workflow closed")
        assert not vm_exists(stack, leftover)


async def test_young_orphan_is_left_alone(stack: Stack) -> None:
    async with in_process_worker(stack):
        young = labelled_vm(stack, f"gc-young-{uuid.uuid4().hex[:5]}")
        try:
            report = await run_gc(stack, grace_s=600)
            assert report.vms_seen == 1 and report.vms_kept_young == 1
            assert report.vms_deleted == [] and report.orphan_vms == []
            assert vm_exists(stack, young)
            # A dry run past the grace period names it but removes nothing.
            dry = await run_gc(stack, grace_s=0, dry_run=True)
            assert [o.vm.instance_id for o in dry.orphan_vms] == [young]
            assert dry.vms_deleted == [] and vm_exists(stack, young)
        finally:
            stack.cluster.cloud.delete_behind_our_back(young.rsplit("/", 1)[1])


async def test_stale_bootstrap_secrets_are_removed(stack: Stack) -> None:
    suffix = uuid.uuid4().hex[:6]
    gone_claim = f"gc-gone-{suffix}"
    expired = f"bootstrap-token-x{suffix[:5]}"
    fresh = f"bootstrap-token-f{suffix[:5]}"
    past = datetime.now(UTC) - timedelta(minutes=5)
    expired_script = await in_thread(leftover_bootstrap, stack, f"gc-x-{suffix}", expired, past)
    script = await in_thread(leftover_bootstrap, stack, gone_claim, fresh)
    # What an older worker left in a pool's namespace is not the worker's to read any more.
    legacy = f"gc-legacy-{suffix}-bootstrap"
    await in_thread(make_secret, stack, "default", legacy, "bootstrap-script", gone_claim)
    try:
        async with in_process_worker(stack):
            # Inside the grace period only the expired token goes.
            report = await run_gc(stack, grace_s=600)
            removed = deleted_secrets(report)
            assert removed.get(f"kube-system/{expired}") == "token expired"
            assert f"kube-system/{fresh}" not in removed
            assert f"{WORKER_NS}/{script}" not in removed
            assert not await in_thread(secret_exists, stack, "kube-system", expired)
            assert await in_thread(secret_exists, stack, "kube-system", fresh)

            # Past it, Secrets of a claim that has no workflow go too.
            report = await run_gc(stack, grace_s=0)
            removed = deleted_secrets(report)
            assert removed.get(f"kube-system/{fresh}") == "no claim workflow"
            assert removed.get(f"{WORKER_NS}/{script}") == "no claim workflow"
            assert not await in_thread(secret_exists, stack, "kube-system", fresh)
            assert not await in_thread(secret_exists, stack, WORKER_NS, script)
            assert f"default/{legacy}" not in removed
    finally:
        for ns, name in (
            ("kube-system", expired),
            ("kube-system", fresh),
            (WORKER_NS, script),
            (WORKER_NS, expired_script),
            ("default", legacy),
        ):
            with contextlib.suppress(k8s.ApiException):
                await in_thread(stack.core.delete_namespaced_secret, name, ns)


async def test_gc_reaches_every_configured_provider(stack: Stack) -> None:
    """NodeClasses naming DigitalOcean and OVH (their stand-ins, through the real SDKs): an
    orphan on each is found with the credential from the NodeClass' Secret and deleted."""
    suffix = uuid.uuid4().hex[:6]
    secret, node_class = f"gc-clouds-{suffix}", f"gc-clouds-{suffix}"
    custom = k8s.CustomObjectsApi(stack.kube)
    cluster_id = stack.settings.cluster_id
    with (
        DigitalOceanStandin(boot_delay_s=0.1, delete_delay_s=0.1) as do,
        OvhStandin(boot_delay_s=0.1, delete_delay_s=0.1) as ovh,
    ):
        await in_thread(
            stack.core.create_namespaced_secret,
            "default",
            k8s.V1Secret(
                metadata=k8s.V1ObjectMeta(name=secret),
                string_data={"do": do.credential, "ovh": ovh.credential},
            ),
        )
        body = {
            "apiVersion": "cloudburst.io/v1alpha1",
            "kind": "NodeClass",
            "metadata": {"name": node_class, "namespace": "default"},
            "spec": {
                "digitalocean": do.nodeclass_block(secret, "do"),
                "ovh": ovh.nodeclass_block(secret, "ovh"),
                "join": {"hostApiServer": "https://127.0.0.1:6443"},
            },
        }
        await in_thread(
            custom.create_namespaced_custom_object,
            "cloudburst.io",
            "v1alpha1",
            "default",
            "nodeclasses",
            body,
        )
        try:
            made = []
            for provider in (
                DigitalOceanProvider(
                    DigitalOceanClass.model_validate(do.nodeclass_block(secret, "do")),
                    do.credential,
                ),
                OvhProvider(
                    OvhClass.model_validate(ovh.nodeclass_block(secret, "ovh")), ovh.credential
                ),
            ):
                orphan = f"gc-{provider.name[:3]}-{suffix}"
                inst = provider.create(
                    InstanceSpec(
                        name=orphan,
                        cluster_id=cluster_id,
                        node_pool="gc",
                        region=do.region if provider.name == "digitalocean" else ovh.region,
                        instance_type=(
                            do.instance_type
                            if provider.name == "digitalocean"
                            else ovh.instance_type
                        ),
                        user_data="#!/bin/sh\n",
                    )
                )
                made.append(inst.id)
            # The operator allows these two stand-ins as well.
            allowed = {
                **stack.settings.allowed_endpoints,
                "digitalocean": [do.url],
                "ovh": [ovh.url],
            }
            settings = stack.settings.model_copy(update={"allowed_endpoints": allowed})
            allowing = Stack(stack.temporal, stack.kube, stack.cluster, stack.task_queue, settings)
            async with in_process_worker(allowing):
                report = await run_gc(allowing, grace_s=0)
            assert deleted_ids(report) == set(made), report
            assert do.instance_states() == {} and ovh.instance_states() == {}
            assert {f"digitalocean (default/{node_class})", f"ovh (default/{node_class})"} <= set(
                report.providers
            )
        finally:
            with contextlib.suppress(k8s.ApiException):
                await in_thread(
                    custom.delete_namespaced_custom_object,
                    "cloudburst.io",
                    "v1alpha1",
                    "default",
                    "nodeclasses",
                    node_class,
                )
            with contextlib.suppress(k8s.ApiException):
                await in_thread(stack.core.delete_namespaced_secret, secret, "default")


async def delete_schedule(client: Client) -> None:
    with contextlib.suppress(RPCError):
        await client.get_schedule_handle(GC_SCHEDULE_ID).delete()


async def test_worker_creates_the_gc_schedule(
    temporal_client: Client,
    temporal_address: str,
    kubeconfig: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue = new_task_queue()
    settings = Settings(
        temporal_address=temporal_address,
        kubeconfig=kubeconfig,
        task_queue=queue,
        cluster_id="gc-schedule-test",
        health_port=0,
        metrics_port=0,
        sdk_metrics_port=0,
    )
    handle = temporal_client.get_schedule_handle(GC_SCHEDULE_ID)

    async def start_and_stop_worker() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(run_worker(settings, stop))
        try:
            await eventually(handle.describe, lambda d: d is not None, timeout_s=30)
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=30)

    await delete_schedule(temporal_client)
    try:
        await start_and_stop_worker()
        desc = await handle.describe()
        assert [i.every for i in desc.schedule.spec.intervals] == [timedelta(minutes=5)]
        assert desc.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
        action = desc.schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow)
        assert action.workflow == "OrphanGcWorkflow"
        assert action.task_queue == queue
        [arg] = await temporal_client.data_converter.decode(action.args, [OrphanGcInput])
        assert arg == OrphanGcInput(cluster_id="gc-schedule-test", grace_period_s=600)

        # A restart with other settings updates the schedule instead of failing.
        monkeypatch.setenv("CLOUDBURST_GC_INTERVAL_SECONDS", "120")
        await start_and_stop_worker()
        desc = await handle.describe()
        assert [i.every for i in desc.schedule.spec.intervals] == [timedelta(minutes=2)]
    finally:
        # Never let it fire later in the session against a task queue nobody polls.
        await delete_schedule(temporal_client)
