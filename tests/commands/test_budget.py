"""GPU-hour budgets: week keys, which rule applies, and the decision. Pure."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from commands.budget import budget_for, check_budget, iso_week
from commands.policy import BudgetRule, Policy, Principals


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("when", "week"),
    [
        ("2026-12-03T10:00:00", "2026-W49"),  # a Thursday
        ("2026-11-30T00:00:00", "2026-W49"),  # Monday 00:00 UTC starts the week
        ("2026-11-29T23:59:59", "2026-W48"),  # the Sunday before
        ("2026-12-31T12:00:00", "2026-W53"),  # 2026 has 53 ISO weeks
        ("2027-01-03T23:59:59", "2026-W53"),  # still the last week of 2026
        ("2027-01-04T00:00:00", "2027-W01"),
        ("2025-12-29T08:00:00", "2026-W01"),  # ISO week 1 of 2026 starts in 2025
    ],
)
def test_iso_week_keys(when: str, week: str) -> None:
    assert iso_week(at(when)) == week


def test_the_first_covering_budget_rule_decides() -> None:
    policy = Policy(
        budgets=(
            BudgetRule(users=("U0ALICE",), clusters=("a4",), gpu_hours_per_week=10),
            BudgetRule(groups=("S0VISION",), gpu_hours_per_week=100),
            BudgetRule(users=("*",), clusters=("a4",), gpu_hours_per_week=50),
        ),
        admins=Principals(users=("U0ADMIN",)),
    )
    assert budget_for(policy, "U0ALICE", set(), "a4") == 10
    assert budget_for(policy, "U0ALICE", {"S0VISION"}, "a3m") == 100
    assert budget_for(policy, "U0BOB", set(), "a4") == 50
    assert budget_for(policy, "U0BOB", set(), "a3m") is None  # no rule: no limit
    assert budget_for(policy, "U0ADMIN", set(), "a4") == 50  # admins too, unless they override


def test_a_negative_budget_is_refused_by_the_config() -> None:
    with pytest.raises(ValidationError, match="gpu_hours_per_week"):
        BudgetRule(users=("*",), gpu_hours_per_week=-1)


def test_a_launch_that_fits_is_allowed() -> None:
    decision = check_budget(
        budget=100, charged=40, active=20, estimate=40, cluster="a4", override=False
    )
    assert decision.allowed and decision.reason == "Fits your budget (40.0 GPU-hours left)."


def test_a_launch_over_the_budget_is_refused_with_what_is_used_and_left() -> None:
    decision = check_budget(
        budget=100, charged=70, active=16, estimate=32, cluster="a4", override=False
    )
    assert not decision.allowed
    assert decision.reason.startswith(
        "This launch needs about 32.0 GPU-hours, but only 14.0 GPU-hours of your 100.0 "
        "GPU-hours weekly budget on a4 are left (70.0 GPU-hours used and 16.0 GPU-hours "
        "held by active launches this week"
    )
    assert "over_budget=true" in decision.reason and "fewer nodes" in decision.reason
    forced = check_budget(
        budget=100, charged=70, active=16, estimate=32, cluster="a4", override=True
    )
    assert forced.allowed and "allowed by over_budget=true" in forced.reason


def test_no_estimate_under_a_budget_asks_for_a_time_limit() -> None:
    decision = check_budget(
        budget=100, charged=0, active=0, estimate=None, cluster="a4", override=False
    )
    assert not decision.allowed and "Give time=HH:MM:SS" in decision.reason
    assert check_budget(
        budget=100, charged=0, active=0, estimate=None, cluster="a4", override=True
    ).allowed


def test_team_budgets_cover_a_group_or_a_slurm_account_on_their_clusters() -> None:
    from commands.budget import budget_window, team_budgets_for
    from commands.policy import Policy, TeamBudgetRule

    group = TeamBudgetRule(group="S0ML", gpu_hours=10, window="month")
    account = TeamBudgetRule(account="proj-a", clusters=("a4",), gpu_hours=5)
    policy = Policy(team_budgets=(group, account))
    assert team_budgets_for(policy, {"S0ML"}, "proj-a", "a4") == [group, account]
    assert team_budgets_for(policy, {"S0ML"}, "proj-a", "a3m") == [group]
    assert team_budgets_for(policy, set(), "proj-b", "a4") == []
    assert (group.team, account.team) == ("group:S0ML", "account:proj-a")
    when = 1796342400.0  # 2026-12-04 00:00 UTC, a Friday
    assert (budget_window("month", when), budget_window("week", when)) == ("2026-12", "2026-W49")
