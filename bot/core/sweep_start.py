"""/sweep: many launches at once, every member checked as its own launch, with one
approval and one budget check of the total."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from bot.core import usage
from bot.core.rates import slow_down
from bot.core.train import Launcher
from bot.engine import sweeps
from bot.engine.cost import appraise
from bot.lifecycle import phases
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Sweep
from bot.store.budgets import BudgetGuard, OverBudget, OverTeamBudget
from bot.text.front import Incoming, Reply
from bot.text.mrkdwn import escape
from commands.access import slurm_account
from commands.context import User
from commands.errors import CommandError
from commands.placement import AUTO
from commands.policy import decide
from commands.requests import SweepRequest, TrainRequest

log = logging.getLogger(__name__)


def _sweep_first_events(sweep: Sweep, first_id: str, approval: str | None) -> list[Event]:
    """The sweep's parent and first thread line: queued, or the one approval it asks."""
    if approval is None:
        said = f"Queued by <@{sweep.user_id}>: `{escape(sweep.text)}`"
        return [Event("parent", first_id), Event("thread", first_id, said)]
    ask = (
        f"✋ <@{sweep.user_id}> asks for sweep {sweep.id} ({len(sweep.members)} launches): "
        f"`{escape(sweep.text)}`. {escape(approval)} A trainbot admin or an approver can "
        "approve the whole sweep."
    )
    return [
        Event("parent", first_id),
        Event("thread", first_id, ask, data={"buttons": ["approve", "reject"], "sweep": sweep.id}),
    ]


async def start_sweep(
    launcher: Launcher, request: SweepRequest, incoming: Incoming, user: User
) -> Reply:
    """A sweep: every member checked as its own launch, one approval, one budget check
    of the total, all members written at once; those past the person's room under
    ``max_concurrent`` each wait for an earlier member to end, in order."""
    policy = launcher.context.policy
    members = request.members
    first = members[0]
    _one_launch_keys(first)
    active, _ = await launcher.store.active_counts(user.id)
    decisions = [
        decide(policy, m, user_id=user.id, group_ids=user.groups, active_launches=active)
        for m in members
    ]
    if refused := next((d for d in decisions if not d.allowed), None):
        return Reply(refused.reason, error=True)
    await slow_down(launcher.store, launcher.context, user.id, "launches")
    image_secrets = launcher.check_image(first, user)
    cluster_user = await launcher.people.cluster_user(first.cluster, user)
    problem = await launcher.front.can_post(incoming.channel_id) if launcher.front else ""
    if problem:
        return Reply(problem, error=True)
    account = slurm_account(policy, user_id=user.id, group_ids=user.groups, cluster=first.cluster)
    if first.over_budget and not policy.is_admin(user.id, user.groups):
        raise CommandError(
            "over_budget=true is for trainbot admins only; leave it out (the sweep is "
            "then checked against your weekly GPU-hour budget) or ask an admin.",
            field="over_budget",
        )
    appraisals = [
        await appraise(
            launcher.store, launcher.clusters, launcher.calls, policy, member, user,
            account=account, estimates=launcher.start_estimates, cluster_user=cluster_user,
            timeout_s=launcher.start_estimate_timeout_s,
        )
        for member in members
    ]  # fmt: skip
    known = [a.cost.gpu_hours for a in appraisals if a.cost.gpu_hours is not None]
    total = sum(known) if len(known) == len(appraisals) else None
    whole = replace(
        appraisals[0], cost=replace(appraisals[0].cost, gpu_hours=total, basis="all members")
    )
    sweep = Sweep(
        user_id=user.id,
        channel=incoming.channel_id,
        title=f"{first.workload} · {first.model}",
        text=request.to_text(),
        where=sweeps.where(request),
        keys=[key for key, _ in request.axes],
        values=[[v for _, v in request.values_of(i)] for i in range(len(members))],
        estimate_gpu_hours=total,
    )
    each = "" if total is None else f", about {total:,.1f} GPU-hours in all"
    said = (
        f"Sweep {sweep.id}: {len(members)} launches of {escape(sweep.title)} on "
        f"{escape(sweep.where)}{each}.\n{escape(appraisals[0].start)}"
    )
    budget = None
    if whole.budget_total and total is not None and not first.over_budget:
        charged, held = await launcher.store.budget_use(user.id, first.cluster, whole.week)
        if charged + held + total > whole.budget_total:
            return Reply(f"{said}\n{escape(whole.refusal(charged, held))}", error=True)
        budget = BudgetGuard(first.cluster, whole.week, whole.budget_total)
    if request.dry_run:
        lines = [f"{i + 1}. {escape(sweep.label(i))}" for i in range(len(members))]
        return Reply(f"{said}\nMembers:\n" + "\n".join(lines) + "\nNothing was launched.")
    approval = next((d for d in decisions if d.needs_approval), None)
    room = max(1, (decisions[0].max_concurrent or len(members)) - active)
    launches = [
        Launch(request=m, user_id=user.id, user_name=user.name, channel=incoming.channel_id)
        for m in members
    ]
    for index, (launch, appraisal) in enumerate(zip(launches, appraisals, strict=True)):
        launch.sweep = sweep.id
        launch.image_secrets, launch.cluster_user = image_secrets, cluster_user
        launch.slurm_account = account or ""
        launch.estimate_gpu_hours = appraisal.cost.gpu_hours
        launch.tz, launch.groups = user.tz, sorted(user.groups)
        if index >= room:  # max_concurrent: each waits for the member ``room`` before it
            launch.waits_for = launches[index - room].id
        # queued, or waiting for the sweep's approval: said once, in the sweep's thread
        move = phases.queue if approval is None else phases.ask_approval
        move(launch, phases.Facts(by=user.id, reason=approval.reason if approval else ""))
    sweep.members = [launch.id for launch in launches]
    events = _sweep_first_events(
        sweep, launches[0].id, None if approval is None else approval.reason
    )
    teams = usage.team_guards(policy, user, account or "", first, time.time())
    try:
        await launcher.store.create_sweep(
            sweep, launches, events, enqueue=approval is None, budget=budget, teams=teams
        )
    except (OverBudget, OverTeamBudget) as exc:  # another launch took the room
        return Reply(usage.refused(exc, whole, policy, launches[0]) + "\n" + said, error=True)
    log.info("sweep %s queued by %s: %s", sweep.id, user.id, sweep.text)
    if approval is not None:
        return Reply(f"{said}\nIt needs a second person's approval; asked in its thread.")
    waits = (
        f" {len(members) - room} wait their turn (your max_concurrent)."
        if len(members) > room
        else ""
    )
    return Reply(f"{said}\nQueued; the table in its thread follows every member.{waits}")


def _one_launch_keys(first: TrainRequest) -> None:
    """CommandError for a key that makes sense for one launch only, given to a sweep."""
    if first.cluster == AUTO:
        raise CommandError(
            "cluster=auto places one launch, not a sweep: give the sweep a cluster "
            "(cluster=a4), or start its members one by one with cluster=auto.",
            field="cluster",
        )
    if first.start_from is not None:
        raise CommandError(
            f"from={first.start_from} starts one launch from a checkpoint, not a sweep: "
            "leave from= out, or start each value as a launch of its own.",
            field="from",
        )
