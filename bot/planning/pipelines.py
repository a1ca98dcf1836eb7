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

from bot.gateway.authority import Authority
from bot.lifecycle import phases
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.store.store import Store
from commands.schedule import at_epoch

PARENT_LOOK_S = 5.0  # a child looks at its parent this often (a Redis read, no SSH)
MAX_CHAIN = 20  # steps of a chain looked through for a cycle
# A child whose parent still awaits approval this long after it was asked ends (its
# place among its owner's active launches is not held for ever): PARENT_UNAPPROVED.
APPROVAL_PATIENCE_S = 24 * 3600.0
UNSURE_LOOK_S = 60.0  # a due launch whose person's groups Slack did not say: asked again then
Mutate = Callable[[str, Callable[[Launch], list[Event]]], Awaitable[tuple[Launch, list[Event]]]]


def parent_ok(outcome: str, any_end: bool) -> bool:
    return any_end or outcome == "COMPLETED"


async def must_wait(
    store: Store,
    launch: Launch,
    mutate: Callable[..., Awaitable[object]],
    authority: Authority | None = None,
) -> bool:
    """True when ``launch`` may not go yet (put back for later) or has ended here: its
    parent ended for good without completing, or, now that it is due, the policy, the
    person's groups, the identity map or the budget no longer let it go (``authority``
    asks :func:`commands.admission.admit` again). A dry run goes at once: it submits
    nothing, and its answer already said what the launch would wait for."""
    if launch.phase != Phase.QUEUED or launch.attempts or launch.request.dry_run:
        return False
    now = time.time()
    if launch.request.at and (due := at_epoch(launch.request.at)) > now:
        await store.queue.requeue(launch.id, after_s=max(due - now, 0.05))
        return True
    if not launch.waits_for:
        return await _no_longer_allowed(store, launch, mutate, authority)
    parent = await store.launches.get(launch.waits_for)
    if parent is not None and parent.phase == Phase.AWAITING_APPROVAL:
        if now - parent.created_at > APPROVAL_PATIENCE_S:
            return await _unapproved(launch, parent, mutate)
    if parent is not None and parent.active:
        await store.queue.requeue(launch.id, after_s=PARENT_LOOK_S)
        return True
    if parent is not None:
        outcome, detail = parent.outcome or parent.phase.value.upper(), parent.detail
        ending = parent.ending
    else:  # its record expired: its history entry says how it ended
        entry = await store.history.finished(launch.waits_for)
        outcome = (entry.outcome or entry.phase.upper()) if entry else "UNKNOWN"
        detail = entry.detail if entry else ""
        ending = entry.ending if entry else {}
    if parent_ok(outcome, launch.request.after_any or bool(launch.sweep)):  # a sweep's turn
        return await _no_longer_allowed(store, launch, mutate, authority, parent)
    said: dict[str, object] = {"why": "parent_ended", "parent": launch.waits_for}
    said["parent_outcome"] = outcome
    said["parent_ending"] = ending  # how it ended, as facts (bot.wording.endings)
    said["parent_detail"] = detail  # a record's sentence, written before ends had facts
    detail = f"{launch.waits_for} ended {outcome}"
    facts = phases.Facts(outcome="PARENT_FAILED", detail=detail, data=said)
    await mutate(launch.id, phases.step(phases.not_started, facts))
    return True


async def _unapproved(
    launch: Launch, parent: Launch, mutate: Callable[..., Awaitable[object]]
) -> bool:
    """``launch`` waited ``APPROVAL_PATIENCE_S`` for a parent that still awaits approval: it
    ends here, giving back the place it held among its owner's active launches (their
    ``max_concurrent``) and its budget hold, and says how to go on."""
    hours = APPROVAL_PATIENCE_S / 3600
    said = {"why": "parent_unapproved", "parent": parent.id, "hours": hours}
    detail = f"{parent.id} still awaited approval after {hours:g} h"
    facts = phases.Facts(outcome="PARENT_UNAPPROVED", detail=detail, data=said)
    await mutate(launch.id, phases.step(phases.not_started, facts))
    return True


def waited(launch: Launch) -> bool:
    """Whether the launch waited since it was admitted: for a time (``at=``), another
    launch (``after=``, a sweep member's turn), or a second person's approval."""
    return bool(launch.request.at or launch.waits_for or launch.sweep or launch.approved_by)


async def _no_longer_allowed(
    store: Store,
    launch: Launch,
    mutate: Callable[..., Awaitable[object]],
    authority: Authority | None,
    parent: Launch | None = None,
) -> bool:
    """A launch that waited is admitted again when it goes: the policy, the person's
    groups, the identity map, the week and what was charged since may differ from when
    it was asked for, and the launch it waited for (``after=``) must still be one they
    may see. When the answer is now no it ends here, saying why (True); when its Unix
    user, account or image secrets are now others, it goes with those."""
    if authority is None or not waited(launch):
        return False
    answer = await authority.readmit(launch, follows=parent)
    if answer.outcome == "UNSURE":  # Slack did not answer: nothing ends for want of it
        await store.queue.requeue(launch.id, after_s=UNSURE_LOOK_S)
        return True
    if answer.allowed:
        if answer.differs(launch):
            answer.apply(launch)

            def rederived(stored: Launch) -> list[Event]:
                answer.apply(stored)
                return []

            await mutate(launch.id, rederived)
        return False
    # answer.facts(): the policy's answer and whom to ask, worded by bot.wording.refusals
    if answer.outcome == "OVER_BUDGET":
        said = {"why": "over_budget", **answer.facts()}
        detail = "Over the GPU-hour budget when it was due."
    else:
        said = {"why": "no_longer_allowed", "owner": launch.user_id, **answer.facts()}
        detail = "No longer allowed when it was due."
    facts = phases.Facts(outcome=answer.outcome, detail=detail, data=said)
    await mutate(launch.id, phases.step(phases.not_started, facts))
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
