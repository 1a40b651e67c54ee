"""Disruption budgets, decided without a clock: Karpenter's budget rules, one by one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api.nodepool import Budget
from workflows.decisions.budgets import (
    budget_identity,
    disruptions_allowed,
    latest_window_start,
    next_window_start,
    window_end,
)


def test_no_budget_allows_every_node_not_yet_disrupting() -> None:
    assert disruptions_allowed([], "Empty", total_nodes=5, disrupting=2) == 3


def test_the_strictest_budget_that_covers_the_reason_wins() -> None:
    budgets = [Budget(nodes="50%"), Budget(nodes="1", reasons=["Drifted"])]
    assert disruptions_allowed(budgets, "Drifted", total_nodes=10, disrupting=0) == 1
    assert disruptions_allowed(budgets, "Empty", total_nodes=10, disrupting=0) == 5


def test_percentages_round_up_so_a_small_pool_still_moves() -> None:
    assert disruptions_allowed([Budget(nodes="10%")], "Empty", total_nodes=3, disrupting=0) == 1


def test_nodes_already_disrupting_count_against_the_budget_never_below_zero() -> None:
    assert disruptions_allowed([Budget(nodes="2")], "Empty", total_nodes=10, disrupting=2) == 0
    assert disruptions_allowed([Budget(nodes="2")], "Empty", total_nodes=10, disrupting=5) == 0


def test_a_zero_budget_blocks_its_reasons_only() -> None:
    never = Budget(nodes="0", reasons=["Underutilized"])
    assert disruptions_allowed([never], "Underutilized", total_nodes=4, disrupting=0) == 0
    assert disruptions_allowed([never], "Empty", total_nodes=4, disrupting=0) == 4


def nightly() -> Budget:
    return Budget(nodes="0", schedule="0 22 * * *", duration="8h")


def test_windows_follow_the_schedule_in_utc() -> None:
    budget = nightly()
    at = datetime(2026, 11, 24, 23, 30, tzinfo=UTC)
    start = latest_window_start(budget, at)
    assert start == datetime(2026, 11, 24, 22, 0, tzinfo=UTC)
    assert window_end(budget, start) == datetime(2026, 11, 25, 6, 0, tzinfo=UTC)
    assert next_window_start(budget, start) == datetime(2026, 11, 25, 22, 0, tzinfo=UTC)


def test_a_moment_on_a_schedule_hit_is_in_the_window_it_opens() -> None:
    budget = nightly()
    hit = datetime(2026, 11, 24, 22, 0, tzinfo=UTC)
    assert latest_window_start(budget, hit) == hit
    assert latest_window_start(budget, hit - timedelta(seconds=1)) == hit - timedelta(days=1)


def test_a_new_schedule_is_a_new_identity() -> None:
    assert budget_identity(0, nightly()) != budget_identity(
        0, Budget(nodes="0", schedule="0 23 * * *", duration="8h")
    )
    assert budget_identity(0, nightly()) != budget_identity(1, nightly())
