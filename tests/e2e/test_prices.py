"""Live prices on the real dev server: the worker's Schedule refreshes the ECB's USD rate (its
stand-in) and a provider's prices from its price API (the Hetzner stand-in) into the catalog
ConfigMap, a failing API keeps the last good prices and says why, and `cloudburst catalog
status` / `catalog show --live` show it all.

A cluster of its own: the catalog ConfigMap it writes changes what every planner of that
cluster reads, which the session's shared clusters must not see.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes import client as k8s
from temporalio.client import Client
from temporalio.service import RPCError

from activities.planning.config import PriceSettings
from api.prices import (
    CATALOG_CONFIGMAP,
    PRICE_CREDENTIALS_SECRET,
    PRICE_SCHEDULE_ID,
    PriceRefreshInput,
)
from planner.catalog import Catalog
from sim.clouds.exchange import EcbStandin
from sim.cluster import SimulatedCluster
from tests.e2e.harness import Stack, eventually, in_process_worker, in_thread, new_task_queue
from worker.kube_client import kube_api_client
from worker.price_schedule import ensure_price_schedule
from worker.settings import Settings
from workflows.prices import PriceRefreshWorkflow

WORKER_NS = "cloudburst-system"
CLI = Path(sys.executable).parent / "cloudburst"


@pytest.fixture(scope="module")
def hetzner_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatedCluster]:
    cluster = SimulatedCluster(cloud_token=secrets.token_hex(8), clouds=["hetzner"])
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    temporal_client: Client, hetzner_cluster: SimulatedCluster, tmp_path: Path
) -> AsyncIterator[Stack]:
    kubeconfig = hetzner_cluster.write_kubeconfig(tmp_path / "kubeconfig")
    settings = Settings(kubeconfig=kubeconfig, task_queue=new_task_queue())
    kube = kube_api_client(settings)
    yield Stack(temporal_client, kube, hetzner_cluster, settings.task_queue, settings)
    core = k8s.CoreV1Api(kube)
    with contextlib.suppress(k8s.ApiException):
        core.delete_namespaced_config_map(CATALOG_CONFIGMAP, WORKER_NS)
    with contextlib.suppress(k8s.ApiException):
        core.delete_namespaced_secret(PRICE_CREDENTIALS_SECRET, WORKER_NS)
    kube.close()


def catalog_data(stack: Stack) -> dict[str, str]:
    try:
        return stack.core.read_namespaced_config_map(CATALOG_CONFIGMAP, WORKER_NS).data or {}
    except k8s.ApiException as err:
        if err.status == 404:
            return {}
        raise


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """A `cloudburst` command as an operator runs it, against this cluster."""
    assert stack.settings.kubeconfig is not None
    return subprocess.run(
        [str(CLI), "catalog", *args, "--kubeconfig", str(stack.settings.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def status_of(stack: Stack, provider: str) -> dict[str, Any]:
    result = cli(stack, "status", "-o", "json")
    [row] = [r for r in json.loads(result.stdout)["items"] if r["provider"] == provider]
    return dict(row)


async def test_the_schedule_refreshes_prices_and_a_failure_keeps_the_last_good_ones(
    stack: Stack,
) -> None:
    hetzner = stack.cluster.standins["hetzner"]
    token = base64.b64encode(hetzner.credential.encode()).decode()
    await in_thread(
        stack.core.create_namespaced_secret,
        WORKER_NS,
        k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=PRICE_CREDENTIALS_SECRET), data={"HCLOUD_TOKEN": token}),
    )  # fmt: skip
    ecb = EcbStandin(dollars_per_euro=1.25).start()
    prices = PriceSettings(  # enabled here: the session's conftest turns it off for others
        enabled=True,
        providers=["hetzner", "digitalocean"],
        endpoints={"hetzner": hetzner.endpoint},
        exchange_rate_url=ecb.daily_url,
    )
    schedule = stack.temporal.get_schedule_handle(PRICE_SCHEDULE_ID)
    try:
        async with in_process_worker(stack):
            # Created with its first run at once: a new install does not wait hours.
            await ensure_price_schedule(stack.temporal, stack.settings, prices)
            data = await eventually(
                lambda: in_thread(catalog_data, stack),
                lambda d: {"hetzner.status.json", "digitalocean.status.json"} <= set(d),
            )
            desc = await schedule.describe()
            assert [i.every for i in desc.schedule.spec.intervals] == [timedelta(hours=6)]

            refreshed = json.loads(data["hetzner.json"])["instance_types"]
            names = {t["name"] for t in refreshed}
            assert names and all(t["source"] and t["as_of"] for t in refreshed)

            status = await in_thread(status_of, stack, "hetzner")
            assert status["outcome"] == "refreshed" and status["instanceTypes"] == len(names)
            good_since = status["refreshedAt"]
            # No credential in the Secret: said, not counted as a failure.
            unconfigured = await in_thread(status_of, stack, "digitalocean")
            assert unconfigured["outcome"] == "unconfigured"
            assert "DIGITALOCEAN_TOKEN" in unconfigured["error"]

            # USD prices are converted at the ECB's rate of the day (1.25 USD per EUR).
            rate = await in_thread(status_of, stack, "exchange-rate")
            assert rate["outcome"] == "refreshed" and "0.8 EUR per USD" in rate["source"]
            aws = await in_thread(cli, stack, "show", "--live", "--providers", "aws", "--limit", "1", "-o", "json")  # fmt: skip
            [cheapest] = json.loads(aws.stdout)["items"]
            usd = Catalog.load().entries
            [entry] = [e for e in usd if e.name == cheapest["offering"]["instanceType"]]
            region = cheapest["offering"]["region"]
            assert cheapest["offering"]["priceEurPerHour"] == round(entry.prices[region] * 0.8, 5)

            # The planner's view: every Hetzner row now carries the API's source and date.
            shown = await in_thread(cli, stack, "show", "--live", "--providers", "hetzner",
                                    "--region-constraint", "ANY", "-o", "json")  # fmt: skip
            rows = json.loads(shown.stdout)["items"]
            assert rows and {r["offering"]["instanceType"] for r in rows} <= names
            assert {r["offering"]["priceSource"] for r in rows} == {refreshed[0]["source"]}
            assert all(r["offering"]["priceAsOf"] == refreshed[0]["as_of"] for r in rows)

            # The price API fails: the run says so, the prices in use stay as they were.
            hetzner.cloud.inject_failure("catalog", "unavailable", times=None)
            ecb.set_rate(2.0)
            report = await stack.temporal.execute_workflow(
                PriceRefreshWorkflow.run,
                PriceRefreshInput(
                    providers=["hetzner"],
                    endpoints={"hetzner": hetzner.endpoint},
                    exchange_rate_url=ecb.daily_url,
                ),
                id=f"prices-test-{uuid.uuid4().hex[:8]}",
                task_queue=stack.task_queue,
                execution_timeout=timedelta(minutes=3),
            )
            assert report.failed == ["hetzner"]
            assert (await in_thread(catalog_data, stack))["hetzner.json"] == data["hetzner.json"]
            result = await in_thread(cli, stack, "status")
            assert result.returncode == 1, result.stdout + result.stderr
            failed = await in_thread(status_of, stack, "hetzner")
            assert failed["outcome"] == "failed" and failed["refreshedAt"] == good_since
            assert "/server_types" in failed["error"] and "503" in failed["error"]
            # The rate refreshed meanwhile (a new day's rate: 0.5 EUR per USD).
            assert (
                "0.5 EUR per USD" in (await in_thread(status_of, stack, "exchange-rate"))["source"]
            )
    finally:
        ecb.stop()
        hetzner.cloud.clear_failures()
        with contextlib.suppress(RPCError):
            await schedule.delete()
