"""``/usage``: GPU-hours charged (and cost) per person, cluster and day, as text, a
bar chart (PNG) and, on request, a CSV file.

The figures are the charges :mod:`bot.engine.charging` took from ``sacct`` (``ElapsedRaw``
times the GPUs of ``AllocTRES``, every job of a launch), one record per ended launch
(:meth:`bot.store.budgets.Budgets.charges`), counted in the window by when the launch ended.
Who may see whose: their own (by Slack user id, never by the deprecated ``user_name``),
always; a team's lead (policy ``usage.teams``) their team's members; admins anyone, any
team and any cluster.
"""

from __future__ import annotations

import asyncio
import csv
import io
import logging
import re
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from bot.lifecycle.launch import Launch
from bot.planning.cost import Appraisal
from bot.store.budgets import Charge, OverBudget, OverTeamBudget, TeamGuard
from bot.store.store import Store
from bot.text.front import Front, FrontError, Reply
from bot.text.mrkdwn import escape
from cluster.site.profiles import ClusterProfile
from commands.budget import budget_window, team_alert, team_budgets_for, team_refusal
from commands.context import User
from commands.errors import CommandError
from commands.policy import Policy, TeamBudgetRule
from commands.requests import InteractiveRequest, TrainRequest, UsageRequest
from commands.rules import ANY

log = logging.getLogger(__name__)
CSV_FIELDS = ("day", "user_id", "user_name", "cluster", "launch_id", "outcome", "gpu_hours", "cost")
WIDTH_PX, HEIGHT_PX, DPI = 900, 450, 100
_CHARTS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="usage-chart")
SLACK_ID_RE = re.compile(r"[UW][A-Z0-9]{2,31}")
COLOURS = ("#08519c", "#e6550d", "#31a354", "#756bb1", "#636363", "#d6616b", "#8c6d31")


def window(request: UsageRequest, now: float) -> tuple[float, str]:
    """When the window starts (UTC) and how it reads."""
    today = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if request.window == "month":
        start = today.replace(day=1)
        return start.timestamp(), f"{start:%B %Y} so far"
    if request.window == "days":
        span = "day" if request.days == 1 else f"{request.days} days"
        return now - request.days * 86400, f"the last {span}"
    start = today - timedelta(days=today.weekday())
    year, week, _ = start.isocalendar()
    return start.timestamp(), f"week {year}-W{week:02d} so far"


def may_see(
    policy: Policy, user: User, request: UsageRequest, members: Collection[str] = ()
) -> None:
    """CommandError unless ``user`` may see what ``request`` asks for."""
    if policy.is_admin(user.id, user.groups):
        return
    led = policy.usage.led_by(user.id)
    own = request.target == user.id  # never by name: user_name is Slack's deprecated field
    if request.scope == "person" and (own or request.target in members):
        return
    if request.scope == "team" and request.target in led:
        return
    if request.scope == "cluster":
        raise CommandError("Only trainbot admins see a whole cluster's usage; /usage shows yours.")
    whose = "that team's" if request.scope == "team" else "other people's"
    teams = f" (you lead {', '.join(led)})" if led else ""
    raise CommandError(
        f"You may not see {whose} usage: people see their own, team leads their team's"
        f"{teams}, admins everyone's. /usage shows yours."
    )


def select(
    charges: Sequence[Charge], request: UsageRequest, members: Collection[str]
) -> list[Charge]:
    """The charges ``request`` is about (``members``: the team's user ids)."""
    if request.scope == "cluster":
        return [c for c in charges if c.cluster == request.target]
    if request.scope == "team":
        return [c for c in charges if c.user_id in members]
    if SLACK_ID_RE.fullmatch(request.target):  # an id is matched as an id only
        return [c for c in charges if c.user_id == request.target]
    target = request.target.lower()
    return [c for c in charges if target in (c.user_id.lower(), c.user_name.lower())]


def price(policy: Policy, profiles: dict[str, ClusterProfile], cluster: str) -> float | None:
    """The price of a GPU-hour on ``cluster`` (:meth:`ClusterProfile.gpu_hour_price`), or None."""
    profile = profiles.get(cluster)
    return None if profile is None else profile.gpu_hour_price(policy.usage.price_per_gpu_hour)


def hours(value: float) -> str:
    """GPU-hours as the text shows them: two decimals, three digits when smaller than 1."""
    return f"{value:,.2f}" if value >= 1 or value == 0 else f"{value:.3g}"


def day(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d")


def csv_bytes(rows: Sequence[Charge], prices: dict[str, float | None]) -> bytes:
    """One row per charged launch; GPU-hours with enough digits to sum back exactly."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for c in rows:
        unit = prices.get(c.cluster)
        cost = "" if unit is None else f"{c.gpu_hours * unit:.4f}"
        writer.writerow(
            (
                day(c.ended_at),
                c.user_id,
                _cell(c.user_name),
                c.cluster,
                c.launch_id,
                _cell(c.outcome),
                repr(c.gpu_hours),
                cost,
            )
        )
    return out.getvalue().encode()


def _cell(text: str) -> str:
    """A text cell a spreadsheet will not run as a formula."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def chart_png(rows: Sequence[Charge], title: str, since: float, now: float) -> bytes:
    """GPU-hours per day as bars, stacked by cluster (matplotlib Agg, as :mod:`bot.text.plot`)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    days: list[str] = []
    at = datetime.fromtimestamp(since, UTC).date()
    while at <= datetime.fromtimestamp(now, UTC).date():
        days.append(at.isoformat())
        at += timedelta(days=1)
    per: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(days, 0.0))
    for c in rows:
        if day(c.ended_at) in per[c.cluster]:
            per[c.cluster][day(c.ended_at)] += c.gpu_hours
    figure = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    bottom = [0.0] * len(days)
    for number, (cluster, daily) in enumerate(sorted(per.items())):
        values = [daily[d] for d in days]
        axes.bar(days, values, bottom=bottom, label=cluster, color=COLOURS[number % len(COLOURS)])
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for x, total in enumerate(bottom):
        if total > 0:
            label = f"{total:,.0f}" if total >= 100 else hours(total)
            axes.annotate(label, (x, total), ha="center", va="bottom", fontsize=8)
    axes.set_title(title, fontsize=10)
    axes.set_ylabel("GPU-hours")
    axes.set_ylim(0, max(bottom + [0.0]) * 1.15 or 1.0)
    if len(days) > 8:  # month-day under each bar, the year in the axis label
        axes.set_xticks(range(len(days)), [d[5:] for d in days])
        axes.set_xlabel(f"day (UTC), {days[0][:4]}")
    axes.tick_params(axis="x", labelrotation=45 if len(days) > 8 else 0, labelsize=8)
    axes.grid(True, axis="y", color="#e0e0e0", linewidth=0.6)
    if per:
        axes.legend(loc="upper left", fontsize=8, frameon=False)
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()


def _totals(rows: Sequence[Charge], key: Callable[[Charge], str]) -> list[tuple[str, float]]:
    sums: dict[str, float] = defaultdict(float)
    for c in rows:
        sums[key(c)] += c.gpu_hours
    return sorted(sums.items(), key=lambda item: (-item[1], item[0]))


def _money(
    hours_by_cluster: dict[str, float], prices: dict[str, float | None], currency: str
) -> str:
    if not any(prices.get(c) is not None for c in hours_by_cluster):
        return ""
    cost = sum(h * (prices.get(c) or 0.0) for c, h in hours_by_cluster.items())
    return f" · {cost:,.2f} {currency}"


async def answer(
    store: Store,
    policy: Policy,
    profiles: dict[str, ClusterProfile],
    user: User,
    request: UsageRequest,
    members: Callable[[str], Awaitable[list[str]]],
    *,
    now: float | None = None,
) -> Reply:
    """The ``/usage`` reply: text, the chart as the file, and the CSV when asked."""
    now = time.time() if now is None else now
    team: list[str] = []
    if request.scope == "team":
        team = await members(request.target)
    led = [m for g in policy.usage.led_by(user.id) for m in await members(g)]
    may_see(policy, user, request, led)
    since, when = window(request, now)
    rows = select(await store.budgets.charges(since, now), request, team)
    prices = {name: price(policy, profiles, name) for name in profiles}
    mine = request.target == user.id
    who = {"person": "Your" if mine else f"{request.target}'s"}.get(
        request.scope, f"{request.scope.capitalize()} {request.target}'s"
    )
    title = f"{who} GPU-hours, {when}"
    total = sum(c.gpu_hours for c in rows)
    by_cluster = dict(_totals(rows, lambda c: c.cluster))
    lines = [
        f"*{escape(title)}*: {hours(total)} GPU-hours in {len(rows)} launch"
        f"{'es' if len(rows) != 1 else ''}{_money(by_cluster, prices, policy.usage.currency)}"
    ]
    if rows:
        people = _totals(rows, lambda c: c.user_name or c.user_id)
        days = sorted(_totals(rows, lambda c: day(c.ended_at)))
        lines.append("By person: " + ", ".join(f"{escape(n)} {hours(h)}" for n, h in people))
        lines.append("By cluster: " + ", ".join(f"{n} {hours(h)}" for n, h in by_cluster.items()))
        lines.append("By day: " + ", ".join(f"{d} {hours(h)}" for d, h in days))
    else:
        lines.append("Nothing was charged in this window.")
    lines += await budget_lines(store, policy, user, request, now)
    text = "\n".join(lines)
    if request.csv:
        return Reply(text, file_name="usage.csv", file_content=csv_bytes(rows, prices))
    # A year of bars takes seconds to draw: off the event loop (every ack waits on it),
    # one chart at a time (matplotlib is not thread-safe), charged to the person's
    # rate limit by the core.
    loop = asyncio.get_running_loop()
    png = await loop.run_in_executor(_CHARTS, chart_png, rows, title, since, now)
    return Reply(text, file_name="usage.png", file_content=png)


async def budget_lines(
    store: Store, policy: Policy, user: User, request: UsageRequest, now: float
) -> list[str]:
    """Used / held / left of the team budgets the request is about: a team's own, or the
    asker's teams' when they ask for their own usage."""
    if request.scope == "team":
        rules = [r for r in policy.team_budgets if r.group == request.target]
    elif request.scope == "person" and request.target == user.id:
        rules = [r for r in policy.team_budgets if r.group in user.groups]
    else:
        return []
    lines = []
    for rule in rules:
        window = budget_window(rule.window, now)
        used, held = await store.budgets.team_use(rule.team, window)
        left = max(rule.gpu_hours - used - held, 0.0)
        where = "" if ANY in rule.clusters else f" on {', '.join(rule.clusters)}"
        lines.append(
            f"Budget of team {rule.group}{where} ({window}): {hours(used)} used, {hours(held)} "
            f"held by active launches, {hours(left)} left of {hours(rule.gpu_hours)} GPU-hours"
        )
    return lines


ALERT_PERCENTS = (80, 100)
ALERT_KEEP_S = 40 * 86400  # longer than a month: each window's marks outlive it


def team_guards(
    policy: Policy, user: User, account: str, request: TrainRequest | InteractiveRequest, now: float
) -> tuple[TeamGuard, ...]:
    """The team budgets a launch of ``user`` must fit, in their window now (none for a dry
    run, nor for an admin's ``over_budget=true``)."""
    if request.dry_run or request.over_budget:
        return ()
    return tuple(
        TeamGuard(rule.team, budget_window(rule.window, now), rule.gpu_hours)
        for rule in team_budgets_for(policy, user.groups, account, request.cluster)
    )


def _rule(policy: Policy, team: str) -> TeamBudgetRule:
    return next(rule for rule in policy.team_budgets if rule.team == team)


def refused(
    over: OverBudget | OverTeamBudget, appraisal: Appraisal, policy: Policy, launch: Launch
) -> str:
    """The /train refusal (escaped) for a launch over its owner's budget or a team's,
    with used / held / left."""
    if isinstance(over, OverBudget):
        return escape(appraisal.refusal(over.charged, over.held))
    rule = _rule(policy, over.guard.team)
    estimate = launch.estimate_gpu_hours or 0.0
    return team_refusal(
        rule, used=over.used, held=over.held, estimate=estimate, cluster=launch.cluster
    )


async def team_alerts(
    store: Store, front: Front | None, policy: Policy, owner: str, guards: Sequence[TeamGuard]
) -> list[str]:
    """After a launch was accepted: a DM to its owner and the team's leads when a team
    budget reached 80% or 100% (used + held) for the first time in its window (marked in
    Redis, so once across every bot process). Returns the texts sent."""
    sent: list[str] = []
    for guard in guards:
        used, held = await store.budgets.team_use(guard.team, guard.window)
        share = 100.0 * (used + held) / guard.limit if guard.limit > 0 else 100.0
        crossed = [
            p
            for p in ALERT_PERCENTS
            if share >= p
            and await store.marks.first_seen(
                f"team-budget:{guard.team}:{guard.window}:{p}", ALERT_KEEP_S
            )
        ]
        if not crossed:
            continue
        rule = _rule(policy, guard.team)
        text = team_alert(rule, used=used, held=held, percent=crossed[-1])
        leads = [
            lead for team in policy.usage.teams if team.group == rule.group for lead in team.leads
        ]
        for person in dict.fromkeys([owner, *leads]):
            if front is not None:
                try:
                    await front.post_to_user(person, text)
                except FrontError as exc:
                    log.warning("team budget alert to %s not sent: %s", person, exc)
        sent.append(text)
    return sent
