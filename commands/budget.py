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

from commands.policy import Decision, Policy

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
