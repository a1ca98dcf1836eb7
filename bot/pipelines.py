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
from collections.abc import Awaitable, Callable

from bot.launches import Launch, Phase
from bot.slack_text import escape
from bot.store import Event, Store
from commands.budget import budget_for, check_budget, iso_week
from commands.policy import Policy
from commands.schedule import at_epoch, show

PARENT_LOOK_S = 5.0  # a child looks at its parent this often (a Redis read, no SSH)
MAX_CHAIN = 20  # steps of a chain looked through for a cycle
Mutate = Callable[[Launch, Callable[[Launch], list[Event]]], Awaitable[object]]


def waits_text(launch: Launch, parent: Launch | None = None) -> str:
    """What a launch waits for, as /jobs and its thread say it ("" when nothing)."""
    parts = []
    request = launch.request
    if request.at:
        parts.append(f"starts at {show(at_epoch(request.at), launch.tz)}")
    if launch.waits_for:
        cond = "ends" if request.after_any else "completes"
        now = f" (now {parent.phase.value})" if parent is not None and parent.active else ""
        parts.append(f"waits until {launch.waits_for} {cond}{now}")
    return "; ".join(parts)


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
    if parent_ok(outcome, item.request.after_any):
        return await _over_budget(store, item, mutate, policy)
    why = f" ({detail.rstrip('.')})" if detail else ""  # its detail is mrkdwn already
    text = (
        f"⛔ Not started, because {item.waits_for}, which this launch "
        f"waited for, ended {escape(outcome)}{why}. Nothing was submitted. "
        f"To run it whatever the end, `/train` again with after={item.waits_for}:any."
    )

    def ended(stored: Launch) -> list[Event]:
        if stored.phase != Phase.QUEUED:
            return []  # cancelled meanwhile
        stored.phase, stored.outcome = Phase.DONE, "PARENT_FAILED"
        stored.detail = f"{stored.waits_for} ended {outcome}"
        return [Event("thread", stored.id, text), Event("update", stored.id)]

    await mutate(item.id, ended)
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

    def ended(stored: Launch) -> list[Event]:
        if stored.phase != Phase.QUEUED:
            return []  # cancelled meanwhile
        stored.phase, stored.outcome = Phase.DONE, "OVER_BUDGET"
        stored.detail = "Over the GPU-hour budget when it was due."
        return [Event("thread", stored.id, text), Event("update", stored.id)]

    await mutate(item.id, ended)
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
