"""Launches that wait: ``at=<time>`` (not before a time) and ``after=<job>`` (not before
another launch ends for good).

Both are held by trainbot, not by Slurm: a waiting launch stays QUEUED, and a worker
that takes it while it must wait puts it back as a deferred entry (the Redis sorted
set of due times the workers already use for backoff), due at its time or, for a
parent, at the next look. So a restart, another worker taking over, or a Redis
restart (with its append-only file) loses nothing, and the launch goes once: its
pre-flight runs when it is due, like any launch's.

Why not Slurm's ``--dependency=afterok:<job>``: a parent's launch may be retried
(a new Slurm job each time), and only trainbot knows when it has ended for good; a
Slurm dependency on a job that failed and was retried would cancel or hold the child
for ever. Waiting in trainbot follows the parent across its retries and works
across clusters. The cost: the child is submitted only once the parent ended, so it
queues in Slurm from then on.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

from bot.lifecycle import phases, render
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.store.store import Store
from bot.text.mrkdwn import escape, slack_date
from cluster.framework_base import Tracking
from cluster.profiles import ClusterProfile
from cluster.spec import framework
from commands.budget import budget_for, check_budget, iso_week
from commands.policy import Policy
from commands.requests import TrainRequest
from commands.schedule import at_epoch, show

PARENT_LOOK_S = 5.0  # a child looks at its parent this often (a Redis read, no SSH)
MAX_CHAIN = 20  # steps of a chain looked through for a cycle
Mutate = Callable[[str, Callable[[Launch], list[Event]]], Awaitable[tuple[Launch, list[Event]]]]


def waits_text(launch: Launch, parent: Launch | None = None, *, own_zone: bool = False) -> str:
    """What a launch waits for, as /jobs and its thread say it ("" when nothing): mrkdwn,
    its ``at=`` time in each reader's own time zone (``own_zone``: in the owner's, as
    words, for an answer only the owner sees)."""
    parts = []
    request = launch.request
    if request.at:
        due = at_epoch(request.at)
        parts.append(f"starts at {show(due, launch.tz) if own_zone else slack_date(due)}")
    if launch.waits_for:
        cond = "ends" if request.after_any or launch.sweep else "completes"
        now = f" (now {parent.phase.value})" if parent is not None and parent.active else ""
        parts.append(f"waits until {launch.waits_for} {cond}{now}")
    return "; ".join(parts)


def chain_text(launch: Launch, others: Sequence[Launch]) -> str:
    """What /jobs and App Home add to a launch's line (mrkdwn: ids and a ``<!date>``
    only): when and for what it waits, the launch it starts from, and the launches among
    ``others`` that wait for it or start from it (``chain: L-a -> L-b``); "" when none."""
    parts = []
    waits = waits_text(launch) if launch.phase == Phase.QUEUED else ""
    if waits:
        parts.append(f"⏳ {waits}")
    elif launch.waits_for:
        parts.append(f"after {launch.waits_for}")
    if launch.starts_from:
        parts.append(f"from {launch.starts_from}'s checkpoint")
    children = [o.id for o in others if launch.id in (o.waits_for, o.starts_from)]
    if children:
        parts.append(f"chain: {launch.id} -> {', '.join(children)}")
    return "".join(f" · {part}" for part in parts)


def parent_ok(outcome: str, any_end: bool) -> bool:
    return any_end or outcome == "COMPLETED"


async def must_wait(
    store: Store,
    item: Launch,
    mutate: Callable[..., Awaitable[object]],
    policy: Policy | None = None,
) -> bool:
    """True when ``item`` may not go yet (put back for later) or has ended here because
    its parent ended for good without completing. A dry run goes at once: it submits
    nothing, and its answer already said what the launch would wait for."""
    if item.phase != Phase.QUEUED or item.attempts or item.request.dry_run:
        return False
    now = time.time()
    if item.request.at and (due := at_epoch(item.request.at)) > now:
        await store.requeue(item.id, after_s=max(due - now, 0.05))
        return True
    if not item.waits_for:
        return await _over_budget(store, item, mutate, policy)
    parent = await store.get(item.waits_for)
    if parent is not None and parent.active:
        await store.requeue(item.id, after_s=PARENT_LOOK_S)
        return True
    if parent is not None:
        outcome, detail = parent.outcome or parent.phase.value.upper(), parent.detail
    else:  # its record expired: its history entry says how it ended
        entry = await store.finished(item.waits_for)
        outcome = (entry.outcome or entry.phase.upper()) if entry else "UNKNOWN"
        detail = entry.detail if entry else ""
    if parent_ok(outcome, item.request.after_any or bool(item.sweep)):  # a sweep's turn
        return await _over_budget(store, item, mutate, policy)
    why = f" ({detail.rstrip('.')})" if detail else ""  # its detail is mrkdwn already
    text = (
        f"⛔ Not started, because {item.waits_for}, which this launch "
        f"waited for, ended {escape(outcome)}{why}. Nothing was submitted. "
        f"To run it whatever the end, `/train` again with after={item.waits_for}:any."
    )

    detail = f"{item.waits_for} ended {outcome}"
    facts = phases.Facts(outcome="PARENT_FAILED", text=text, detail=detail)
    await mutate(item.id, phases.step(phases.not_started, facts))
    return True


async def _over_budget(
    store: Store, item: Launch, mutate: Callable[..., Awaitable[object]], policy: Policy | None
) -> bool:
    """A launch that waited is checked against its owner's budget again when it goes:
    the week and what was charged since may differ from when it was asked for. Its own
    estimate, held since then, is not counted twice. True when it ended here."""
    if policy is None or not (item.request.at or item.waits_for):
        return False
    if item.request.over_budget or item.request.dry_run:
        return False
    budget = budget_for(policy, item.user_id, item.groups, item.cluster)
    if budget is None:
        return False
    charged, held = await store.budget_use(item.user_id, item.cluster, iso_week(time.time()))
    estimate = item.estimate_gpu_hours
    decision = check_budget(
        budget=budget,
        charged=charged,
        active=max(held - (estimate or 0.0), 0.0),
        estimate=estimate,
        cluster=item.cluster,
        override=False,
    )
    if decision.allowed:
        return False
    text = f"⛔ Not started now that it is due: {escape(decision.reason)}"

    detail = "Over the GPU-hour budget when it was due."
    facts = phases.Facts(outcome="OVER_BUDGET", text=text, detail=detail)
    await mutate(item.id, phases.step(phases.not_started, facts))
    return True


async def resolve_parent(
    find: Callable[[], Awaitable[Launch]], get: Callable[[str], Awaitable[Launch | None]]
) -> Launch:
    """The launch a new one waits for, refused when it is part of a cycle or already
    ended in a way the new one could never start after."""
    parent = await find()
    seen = {parent.id}
    step = parent
    for _ in range(MAX_CHAIN):
        if not step.waits_for:
            break
        if step.waits_for in seen:
            raise ValueError(
                f"{parent.id} waits, through {step.id}, for itself ({step.waits_for}): a cycle. "
                "Nothing waiting on it could ever start."
            )
        seen.add(step.waits_for)
        found = await get(step.waits_for)
        if found is None:
            break
        step = found
    return parent


def newest_checkpoint(launch: Launch) -> tuple[Tracking, str, int] | None:
    """``from=``: the launch's newest complete checkpoint (the poller lists only those whose
    save finished) as (the tracking of the attempt that knows its directory, its name,
    its step); None when it has none."""
    known = [a.tracking for a in launch.attempts if a.tracking and a.tracking.checkpoint_dir]
    if not known or not launch.checkpoints:
        return None
    ranked = [
        (render.checkpoint_step(launch, name) or -1, order, name)
        for order, name in enumerate(launch.checkpoints)
    ]
    step, _, name = max(ranked)
    return known[-1], name, step


def start_key(request: TrainRequest, parent: Launch) -> str:
    """The recipe key ``request`` starts from ``parent``'s checkpoint with; ValueError
    saying why when the pair cannot."""
    theirs = parent.request
    if not isinstance(theirs, TrainRequest):
        raise ValueError(
            f"{parent.id} is an interactive allocation, whose checkpoints trainbot "
            "does not know; give a training launch"
        )
    try:
        return framework(request.framework).start_key(
            theirs.framework, theirs.workload == request.workload
        )
    except ValueError as exc:
        raise ValueError(
            f"{request.workload} on {request.framework} cannot start from {parent.id} "
            f"({theirs.workload} on {theirs.framework}): {exc}"
        ) from None


async def start_point(
    store: Store, item: Launch, mutate: Mutate, profile: ClusterProfile
) -> Launch | None:
    """``from=``: before its first attempt, the launch notes its parent's newest complete
    checkpoint (its thread says which) and goes on; None when it ended here (the parent
    has none: NO_CHECKPOINT). A retry keeps what the first attempt started from."""
    request = item.request
    if not (isinstance(request, TrainRequest) and item.starts_from) or item.start_key:
        return item
    parent = await store.get(item.starts_from)
    found = newest_checkpoint(parent) if parent is not None else None
    key, why = "", "it saved no complete checkpoint"
    if parent is None:
        why = "its record has expired, and with it where its checkpoints are"
    elif found is not None:
        try:
            key = start_key(request, parent)
        except ValueError as exc:
            why = str(exc)
    if parent is None or found is None or not key:
        text = (
            f"⛔ <@{item.user_id}>: not started (NO_CHECKPOINT): from={item.starts_from}, but "
            f"{escape(why)}. Nothing was submitted. `/train` again without from= to start "
            "from the recipe's own weights, or from a launch that saved a checkpoint."
        )

        detail = f"{item.starts_from} has no checkpoint to start from"
        facts = phases.Facts(outcome="NO_CHECKPOINT", text=text, detail=detail)
        await mutate(item.id, phases.step(phases.not_started, facts))
        return None
    tracking, name, step = found
    value = framework(request.framework).start_value(tracking, name, profile)
    text = (
        f"▶️ Starts from {parent.id}'s newest complete checkpoint, step {step:,} "
        f"(`{escape(name)}`): `{escape(key)}={escape(value)}`."
    )

    def noted(stored: Launch) -> list[Event]:
        if stored.phase != Phase.QUEUED or stored.start_key:
            return []
        stored.start_key, stored.start_path = key, value
        return [Event("thread", stored.id, text)]

    stored, _ = await mutate(item.id, noted)
    return stored if stored.start_key else None
