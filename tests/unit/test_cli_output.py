"""What the list, describe and show commands print: `-o table|wide|json|yaml`; in a pipe
(typer's CliRunner is not a terminal) whole values in plain columns; user text as written.

Commands that need Temporal are run end to end in tests/e2e/test_operator_cli.py; here the
offline `catalog show`, and the describe views from status objects.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from kubernetes import client as k8s
from typer.testing import CliRunner

from api import NodeClaimPhase, NodeClaimStatus, NodeClass, NodePool, Offering
from api.nodeclaim import Condition
from api.nodepool import Requirements
from api.nodepool.messages import BudgetStatus, PoolClaim, PoolStatus
from api.planning import Resources
from cli.commands.claims import print_claim
from cli.commands.pools import PoolDescription, print_pool
from cli.main import app
from cli.manual_claims import ClaimError, PoolContext, check_offering, price_offering
from cli.output import TableStream
from cli.timeline import PhaseSpan
from planner.catalog import Catalog
from tests.unit.test_bounds import NODE_CLASS, POOL

RUNNER = CliRunner()
# Text a user wrote (a reason, a message) that rich would otherwise read as markup or emoji.
USER_TEXT = "[bold red]not[/] a tag, :fire: not an emoji"
NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)


def show(*args: str) -> str:
    result = RUNNER.invoke(app, ["catalog", "show", *args], env={"COLUMNS": None})
    assert result.exit_code == 0, result.output
    return result.output


def test_catalog_show_in_a_pipe_prints_whole_values_in_plain_columns() -> None:
    lines = show("--limit", "5").splitlines()
    assert lines[0].split() == [
        "#", "PROVIDER", "REGION", "TYPE", "ARCH", "VCPU", "GIB", "USABLE", "CPU", "USABLE",
        "GIB", "EUR/H", "AS", "OF",
    ]  # fmt: skip
    listed = json.loads(show("--limit", "5", "-o", "json"))["items"]
    for line, item in zip(lines[1:], listed, strict=True):
        offering = Offering.model_validate(item["offering"])
        assert line.split()[1:4] == [offering.provider, offering.region, offering.instance_type]
        assert line.split()[-2] == f"{offering.price_eur_per_hour:.4f}"  # never "0.00…"
        # Every price says when it was read (the shipped catalog's are dated too).
        assert offering.price_as_of and line.split()[-1] == offering.price_as_of[:10]
        assert offering.price_source
    for line in lines:
        assert line == line.rstrip()
        assert not set(line) & set("…│─┃━┏┡"), line  # no ellipsis, no box drawing


def test_catalog_show_wide_adds_the_zone_and_the_price_source() -> None:
    header, *rows = show("--limit", "3", "--providers", "scaleway", "-o", "wide").splitlines()
    assert header.split()[-5:] == ["EUR/H", "AS", "OF", "ZONE", "SOURCE"]
    assert all(re.fullmatch(r"[a-z]+-[a-z]+-\d", row.split()[11]) for row in rows), rows
    shipped = {e.source for e in Catalog.load().entries if e.provider == "scaleway"}
    assert all(" ".join(row.split()[12:]) in shipped for row in rows), rows


def test_catalog_show_json_and_yaml_carry_the_full_offerings() -> None:
    data = json.loads(show("--limit", "3", "-o", "json"))
    assert yaml.safe_load(show("--limit", "3", "--output", "yaml")) == data
    assert [item["rank"] for item in data["items"]] == [1, 2, 3]
    first = data["items"][0]
    cheapest = Catalog.load().offerings(Requirements(arch=["x86_64"]), None)[0]
    assert Offering.model_validate(first["offering"]) == cheapest
    assert set(first) == {"rank", "offering", "usableCpu", "usableMemoryGib"}


def test_an_unknown_output_format_is_refused() -> None:
    result = RUNNER.invoke(app, ["catalog", "show", "-o", "xml"])
    assert result.exit_code == 2 and "xml" in result.output


def test_claims_describe_shows_the_price_and_user_text_as_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = NodeClaimStatus(
        phase=NodeClaimPhase.READY,
        provider="fake",
        region="sim-1",
        instance_type="fk-small",
        price_eur_per_hour=0.012,
        capacity={"cpu": "2", "memory": "4Gi"},
        conditions=[
            Condition(type="Ready", status="False", message=USER_TEXT, last_transition_time=NOW)
        ],
        deletion_reason=USER_TEXT,
    )
    timeline = [
        PhaseSpan("Pending", NOW - timedelta(seconds=30), NOW),
        PhaseSpan("Ready", NOW, None),
    ]
    print_claim("default", "pool-abcde", status, None, timeline, wide=True)
    out = capsys.readouterr().out
    assert "€0.0120/h" in out and "cpu=2, memory=4Gi" in out
    assert out.count(USER_TEXT) == 2, out  # the condition's message and the deletion reason
    assert "Provider ID" in out  # wide


def test_a_price_of_zero_is_a_price(capsys: pytest.CaptureFixture[str]) -> None:
    print_claim("default", "free-abcde", NodeClaimStatus(price_eur_per_hour=0.0), None, [])
    assert "€0.0000/h" in capsys.readouterr().out


def pool_status() -> PoolStatus:
    offering = Offering(provider="fake", region="sim-1", instance_type="fk-small")
    return PoolStatus(
        name="burst",
        namespace="default",
        pending_pods=1,
        blocked={"uid-1": USER_TEXT},
        claims=[
            PoolClaim(
                name="burst-aaaaa",
                phase=NodeClaimPhase.READY,
                offering=offering,
                allocatable=Resources(cpu_m=1900, memory_bytes=3 * 2**30, pods=110),
                started_at=NOW,
            ),
            PoolClaim(
                name="burst-bbbbb",
                phase=NodeClaimPhase.PROVISIONING,
                offering=offering,
                allocatable=Resources(cpu_m=1900, memory_bytes=3 * 2**30, pods=110),
                nominated=["uid-1"],
                started_at=NOW,
            ),
        ],
        failed_offerings={},
        disruption_blocked={"burst-aaaaa": USER_TEXT},
        budgets=[
            BudgetStatus(nodes="10%", reasons=None, schedule=None, duration=None, active=True)
        ],
        nodes=2,
        ready_nodes=1,
        cpu_m=3800,
        memory_bytes=6 * 2**30,
    )


def claim_rows(out: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("burst-")}


def test_pools_describe_counts_running_pods_apart_from_nominated_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    running = {
        "burst-aaaaa": ["default/web-1", "default/web-2", "default/web-3"],
        "burst-bbbbb": [],
    }
    print_pool(pool_status(), running, wide=False)
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("CLAIM"))
    assert header.split() == ["CLAIM", "PHASE", "OFFERING", "PODS", "NOMINATED"]
    rows = claim_rows(out)
    assert rows["burst-aaaaa"][3:] == ["3", "0"]  # a node running 3 pods
    assert rows["burst-bbbbb"][3:] == ["0", "1"]  # one pending pod expected there
    assert f"pod uid-1 waits: {USER_TEXT}" in out
    assert f"not disrupted: burst-aaaaa — {USER_TEXT}" in out


def test_pools_describe_without_the_cluster_says_it_does_not_know(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_pool(pool_status(), None, wide=True)
    rows = claim_rows(capsys.readouterr().out)
    assert rows["burst-aaaaa"][3:6] == ["?", "0", "1.9"]  # PODS unknown; wide: CPU


def test_pools_describe_json_keeps_the_status_and_the_pods() -> None:
    description = PoolDescription(status=pool_status(), running_pods={"burst-aaaaa": ["a/b"]})
    data = json.loads(description.model_dump_json(by_alias=True))
    assert data["running_pods"] == {"burst-aaaaa": ["a/b"]}
    assert PoolStatus.model_validate(data["status"]) == pool_status()


def test_a_table_stream_prints_the_header_once_and_each_batch_at_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream = TableStream(["NAME", "PHASE", "AGE"])
    stream.print([["a-1", "Pending", "1s"]])
    stream.print([])
    stream.print([["a-much-longer-name", "Ready", "9s"], ["a-1", "Deleted", "12s"]])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines] == [
        ["NAME", "PHASE", "AGE"],
        ["a-1", "Pending", "1s"],
        ["a-much-longer-name", "Ready", "9s"],
        ["a-1", "Deleted", "12s"],
    ]
    assert lines[2].index("Ready") == lines[3].index("Deleted")


# --- a manual claim's offering gets its price where the planner's claims get theirs -------


def context(max_price: float | None = None) -> PoolContext:
    pool = NodePool.model_validate(POOL)
    pool.spec.requirements.max_price_eur_per_hour = max_price
    return PoolContext(pool, "burst-class", NodeClass.model_validate(NODE_CLASS), pool.spec)


def test_a_real_cloud_offering_is_priced_from_the_catalog() -> None:
    wanted = Offering(provider="hetzner", region="fsn1", instance_type="cx23")
    priced, note = price_offering(k8s.ApiClient(), context(), wanted)
    listed = next(o for o in Catalog.load().all_offerings() if o.key == wanted.key)
    assert note is None and priced == listed
    assert priced.price_eur_per_hour and priced.vcpu == 2
    with pytest.raises(ClaimError, match=r"maxPriceEurPerHour 0\.001"):
        check_offering(context(max_price=0.001), priced)


def test_an_offering_missing_from_the_catalog_is_made_without_a_price() -> None:
    wanted = Offering(provider="hetzner", region="fsn1", instance_type="cx9000")
    priced, note = price_offering(k8s.ApiClient(), context(), wanted)
    assert priced == wanted and note is not None and "hetzner/fsn1/cx9000" in note
