"""/sweep: many launches at once, every member checked as its own launch, with one
approval and one budget check of the total."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from bot.core import usage
from bot.core.rates import slow_down
from bot.core.train import Launcher
from bot.lifecycle import phases, sweeps
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Sweep
from bot.planning.cost import CostEstimate
from bot.store.budgets import BudgetGuard, OverBudget, OverTeamBudget, TeamGuard
from bot.text.front import Incoming, Reply
from bot.text.mrkdwn import escape
from commands.admission import Admission, admit
from commands.context import User
from commands.errors import CommandError
from commands.placement import AUTO
from commands.requests import SweepRequest, TrainRequest

log = logging.getLogger(__name__)


def _sweep_first_events(sweep: Sweep, first_id: str, approval: str | None) -> list[Event]:
    """The sweep's parent and first thread line: queued, or the one approval it asks."""
    if approval is None:
        queued = {"move": "queue", "by": sweep.user_id, "command": sweep.text}
        return [Event("parent", first_id), Event("thread", first_id, data=queued)]
    ask: dict[str, object] = {"move": "sweep_approval", "by": sweep.user_id, "sweep": sweep.id}
    ask |= {"members": len(sweep.members), "command": sweep.text, "reason": approval}
    ask |= {"buttons": ["approve", "reject"]}
    return [Event("parent", first_id), Event("thread", first_id, data=ask)]


async def start_sweep(
    launcher: Launcher, request: SweepRequest, incoming: Incoming, user: User
) -> Reply:
    """A sweep: every member admitted as its own launch (:func:`admit`: the policy, its
    budget with the members before it counted, an unknown estimate refused as /train
    refuses it), counted per member against the rate limit, one approval, all members
    written at once; those past the person's room under ``max_concurrent``, counted in
    the same transaction as the write, each wait for an earlier member to end, in order."""
    policy = launcher.context.policy
    members = request.members
    first = members[0]
    _one_launch_keys(first)
    active, _ = await launcher.store.budgets.active_counts(user.id)
    admissions, costs = await _admit_each(launcher, members, user, active)
    if refused := next((a for a in admissions if not a.allowed), None):
        if refused.field:
            raise CommandError(refused.reason, field=refused.field)
        return Reply(refused.reason, error=True)
    await slow_down(launcher.store, launcher.context, user.id, "launches", uses=len(members))
    cluster_user = await launcher.people.cluster_user(first.cluster, user)
    problem = await launcher.front.can_post(incoming.channel_id) if launcher.front else ""
    if problem:
        return Reply(problem, error=True)
    appraisals = [
        await launcher.planner.appraise(
            member, user, account=admissions[0].account or None, cluster_user=cluster_user,
            known=(cost, 0.0, 0.0),
        )
        for member, cost in zip(members, costs, strict=True)
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
    over = next((a.budget for a in admissions if a.over_budget), None)
    if over is not None and not request.dry_run:
        if total is not None:  # said as before: the whole sweep against what is left
            charged, held = await launcher.store.budgets.budget_use(
                user.id, first.cluster, whole.week
            )
            return Reply(f"{said}\n{escape(whole.refusal(charged, held))}", error=True)
        return Reply(f"{said}\n{escape(over.reason)}", error=True)
    head = admissions[0]
    budget = None
    if head.budget is not None and total is not None and not first.over_budget:
        budget = BudgetGuard(first.cluster, head.week, head.budget_total)
    if request.dry_run:
        lines = [f"{i + 1}. {escape(sweep.label(i))}" for i in range(len(members))]
        return Reply(f"{said}\nMembers:\n" + "\n".join(lines) + "\nNothing was launched.")
    approval = next((a for a in admissions if a.needs_approval), None)
    launches = [
        Launch(request=m, user_id=user.id, user_name=user.name, channel=incoming.channel_id)
        for m in members
    ]
    for launch, appraisal in zip(launches, appraisals, strict=True):
        launch.sweep = sweep.id
        launch.image_secrets, launch.cluster_user = head.image_secrets, cluster_user
        launch.slurm_account = head.account
        launch.estimate_gpu_hours = appraisal.cost.gpu_hours
        launch.tz, launch.groups = user.tz, sorted(user.groups)
        # queued, or waiting for the sweep's approval: said once, in the sweep's thread
        move = phases.queue if approval is None else phases.ask_approval
        move(launch, phases.Facts(by=user.id, reason=approval.reason if approval else ""))
    sweep.members = [launch.id for launch in launches]
    events = _sweep_first_events(
        sweep, launches[0].id, None if approval is None else approval.reason
    )
    teams = tuple(TeamGuard(t.team, t.window, t.limit) for t in head.teams)
    try:
        created = await launcher.store.launches.create_sweep(
            sweep, launches, events, enqueue=approval is None, max_active=head.max_concurrent,
            budget=budget, teams=teams,
        )  # fmt: skip
    except (OverBudget, OverTeamBudget) as exc:  # another launch took the room
        return Reply(usage.refused(exc, whole, policy, launches[0]) + "\n" + said, error=True)
    if not created:  # another launch or sweep took the room meanwhile
        limit = head.max_concurrent or 0
        return Reply(
            f"You already have {limit} active launch{'es' if limit != 1 else ''} (your limit "
            f"is {limit}). Wait for one to finish or /cancel one.\n{said}",
            error=True,
        )
    log.info("sweep %s queued by %s: %s", sweep.id, user.id, sweep.text)
    if approval is not None:
        return Reply(f"{said}\nIt needs a second person's approval; asked in its thread.")
    waiting = sum(1 for launch in launches if launch.waits_for)
    waits = f" {waiting} wait their turn (your max_concurrent)." if waiting else ""
    return Reply(f"{said}\nQueued; the table in its thread follows every member.{waits}")


async def _admit_each(
    launcher: Launcher, members: Sequence[TrainRequest], user: User, active: int
) -> tuple[list[Admission], list[CostEstimate]]:
    """Each member admitted as its own /train would be, the estimates of the members
    before it held against the budget as if they were already active."""
    admissions, costs = [], []
    earlier = 0.0
    for member in members:
        standing, cost = await launcher.standing(member, user, active)
        standing = replace(standing, held_gpu_hours=standing.held_gpu_hours + earlier)
        images = launcher.clusters.profile(member.cluster).images
        admissions.append(
            admit(launcher.context.policy, member, user, images=images, standing=standing)
        )
        costs.append(cost)
        earlier += cost.gpu_hours or 0.0
    return admissions, costs


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
