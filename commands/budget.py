"""GPU-hour budgets: how much each person may use per ISO week on a cluster.

``policy.budgets`` is a list of :class:`~commands.policy.BudgetRule`, tried in
order; the first whose people (Slack user ids, user group ids or ``*``) and
clusters both match gives the asking person their own budget of
``gpu_hours_per_week`` on that cluster (a group's rule gives each member that
budget, not one shared pot). No matching rule means no budget: launches there
are not limited by GPU-hours.

A week is the ISO week (Monday 00:00 UTC on). What counts against it: the
GPU-hours charged for launches that finished in it (what they really used, from
Slurm's accounting) and the estimates of the person's launches still active.
Pure: the numbers come in, the decision goes out.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime

from commands.policy import Decision, Policy, TeamBudgetRule

OVER_BUDGET_KEY = "over_budget"


def iso_week(when: float) -> str:
    """``2026-W49``: the ISO week (UTC) of an epoch time; weeks start on Monday."""
    year, week, _ = datetime.fromtimestamp(when, UTC).isocalendar()
    return f"{year}-W{week:02d}"


def budget_for(
    policy: Policy, user_id: str, group_ids: Collection[str], cluster: str
) -> float | None:
    """The person's weekly GPU-hours on ``cluster``, or None when no budget rule covers them."""
    for rule in policy.budgets:
        if rule.covers(user_id, group_ids, cluster):
            return rule.gpu_hours_per_week
    return None


def check_budget(
    *,
    budget: float,
    charged: float,
    active: float,
    estimate: float | None,
    cluster: str,
    override: bool,
) -> Decision:
    """Whether a launch estimated at ``estimate`` GPU-hours fits: ``charged`` (finished
    this week) plus ``active`` (estimates of launches still running) plus it, at most
    ``budget``. ``override`` (an admin's ``over_budget=true``) lets it go anyway."""
    left = budget - charged - active
    used = f"{_hours(charged)} used and {_hours(active)} held by active launches"
    if estimate is None:
        if override:
            return Decision(allowed=True, reason="Allowed over the budget (over_budget=true).")
        return Decision(
            allowed=False,
            reason=f"Your GPU-hour budget on {cluster} is {_hours(budget)} a week, but this "
            "launch has no estimate (no time limit and no earlier runs to go by). "
            "Give time=HH:MM:SS so it can be checked.",
        )
    if estimate <= left:
        return Decision(allowed=True, reason=f"Fits your budget ({_hours(left)} left).")
    if override:
        return Decision(
            allowed=True,
            reason=f"Over your budget on {cluster} ({_hours(left)} left, this needs "
            f"{_hours(estimate)}); allowed by over_budget=true.",
        )
    return Decision(
        allowed=False,
        reason=f"This launch needs about {_hours(estimate)}, but only {_hours(max(left, 0))} "
        f"of your {_hours(budget)} weekly budget on {cluster} are left ({used} this week, "
        f"ISO week from Monday 00:00 UTC). Ask for fewer nodes, fewer steps or a shorter "
        f"time=, or wait for the next week; a trainbot admin may add "
        f"{OVER_BUDGET_KEY}=true.",
    )


def _hours(value: float) -> str:
    return f"{value:,.1f} GPU-hours"


def budget_window(window: str, when: float) -> str:
    """The window a team budget counts in: ``2026-W49`` (ISO week) or ``2026-12`` (month)."""
    if window == "month":
        return datetime.fromtimestamp(when, UTC).strftime("%Y-%m")
    return iso_week(when)


def team_budgets_for(
    policy: Policy, group_ids: Collection[str], account: str, cluster: str
) -> list[TeamBudgetRule]:
    """Every team budget a launch by a member of ``group_ids`` (with Slurm ``account``) on
    ``cluster`` counts against: all must have room (the tightest decides)."""
    return [rule for rule in policy.team_budgets if rule.covers(group_ids, account, cluster)]


def team_refusal(
    rule: TeamBudgetRule, *, used: float, held: float, estimate: float, cluster: str
) -> str:
    """Why a launch does not fit its team's budget, with used / held / left."""
    left = max(rule.gpu_hours - used - held, 0.0)
    period = "monthly" if rule.window == "month" else "weekly"
    return (
        f"The {period} budget of {_team_name(rule)} on {cluster} has no room for this "
        f"launch (about {_hours(estimate)}): {_hours(used)} used, {_hours(held)} held by "
        f"active launches, {_hours(left)} left of {_hours(rule.gpu_hours)}. Wait for the "
        f"next {'month' if rule.window == 'month' else 'week'}, ask for less, or ask "
        "the team's lead or a trainbot admin."
    )


def team_alert(rule: TeamBudgetRule, *, used: float, held: float, percent: int) -> str:
    """The DM to a launch's owner and the team's leads at 80% and 100% of a team budget."""
    period = "monthly" if rule.window == "month" else "weekly"
    left = max(rule.gpu_hours - used - held, 0.0)
    return (
        f"The {period} GPU-hour budget of {_team_name(rule)} is at {percent}%: "
        f"{_hours(used)} used, {_hours(held)} held by active launches, {_hours(left)} left "
        f"of {_hours(rule.gpu_hours)}. /usage shows who used what."
    )


def _team_name(rule: TeamBudgetRule) -> str:
    return f"team <!subteam^{rule.group}>" if rule.group else f"Slurm account {rule.account}"
