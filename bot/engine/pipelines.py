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

from bot.engine.authority import Authority
from bot.lifecycle import phases, render
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.store.store import Store
from bot.text.mrkdwn import escape
from cluster.framework_base import Tracking
from cluster.profiles import ClusterProfile
from cluster.spec import framework
from commands.access import may_start_from
from commands.context import User
from commands.policy import Policy
from commands.requests import TrainRequest
from commands.schedule import at_epoch, show

PARENT_LOOK_S = 5.0  # a child looks at its parent this often (a Redis read, no SSH)
MAX_CHAIN = 20  # steps of a chain looked through for a cycle
Mutate = Callable[[str, Callable[[Launch], list[Event]]], Awaitable[tuple[Launch, list[Event]]]]


def waits_text(launch: Launch, parent: Launch | None = None) -> str:
    """What a launch waits for, as /jobs and its thread say it ("" when nothing)."""
    parts = []
    request = launch.request
    if request.at:
        parts.append(f"starts at {show(at_epoch(request.at), launch.tz)}")
    if launch.waits_for:
        cond = "ends" if request.after_any or launch.sweep else "completes"
        now = f" (now {parent.phase.value})" if parent is not None and parent.active else ""
        parts.append(f"waits until {launch.waits_for} {cond}{now}")
    return "; ".join(parts)


def chain_text(launch: Launch, others: Sequence[Launch]) -> str:
    """What /jobs and App Home add to a launch's line: when and for what it waits, the
    launch it starts from, and the launches among ``others`` that wait for it or start
    from it (``chain: L-a -> L-b``); "" when none."""
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
    authority: Authority | None = None,
) -> bool:
    """True when ``item`` may not go yet (put back for later) or has ended here: its
    parent ended for good without completing, or, now that it is due, the policy, the
    person's groups, the identity map or the budget no longer let it go (``authority``
    asks :func:`commands.admission.admit` again). A dry run goes at once: it submits
    nothing, and its answer already said what the launch would wait for."""
    if item.phase != Phase.QUEUED or item.attempts or item.request.dry_run:
        return False
    now = time.time()
    if item.request.at and (due := at_epoch(item.request.at)) > now:
        await store.requeue(item.id, after_s=max(due - now, 0.05))
        return True
    if not item.waits_for:
        return await _no_longer_allowed(item, mutate, authority)
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
        return await _no_longer_allowed(item, mutate, authority)
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


def waited(item: Launch) -> bool:
    """Whether the launch waited since it was admitted: for a time (``at=``), another
    launch (``after=``, a sweep member's turn), or a second person's approval."""
    return bool(item.request.at or item.waits_for or item.sweep or item.approved_by)


async def _no_longer_allowed(
    item: Launch, mutate: Callable[..., Awaitable[object]], authority: Authority | None
) -> bool:
    """A launch that waited is admitted again when it goes: the policy, the person's
    groups, the identity map, the week and what was charged since may differ from when
    it was asked for. When the answer is now no it ends here, saying why (True); when
    its Unix user, account or image secrets are now others, it goes with those."""
    if authority is None or not waited(item):
        return False
    answer = await authority.readmit(item)
    if answer.allowed:
        if answer.differs(item):
            answer.apply(item)

            def rederived(stored: Launch) -> list[Event]:
                answer.apply(stored)
                return []

            await mutate(item.id, rederived)
        return False
    if answer.outcome == "OVER_BUDGET":
        text = f"⛔ Not started now that it is due: {answer.why}"
        detail = "Over the GPU-hour budget when it was due."
    else:
        text = (
            f"⛔ <@{item.user_id}>: not started now that it is due: {answer.why} "
            "Nothing was submitted."
        )
        detail = "No longer allowed when it was due."
    facts = phases.Facts(outcome=answer.outcome, text=text, detail=detail)
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


def start_refusal(policy: Policy, request: TrainRequest, parent: Launch, user: User) -> str:
    """Why ``user`` may not start ``request`` from ``parent`` ("": they may): it is not
    theirs (nor does ``policy.start_from`` name them), or it still runs and they neither
    wait for its end (``after=`` it) nor said ``from_running=yes``. Asked at /train and
    again when the launch goes."""
    decision = may_start_from(
        policy,
        user_id=user.id,
        group_ids=user.groups,
        owner_id=parent.user_id,
        owner_name=parent.user_name,
        launch_id=parent.id,
        cluster=parent.cluster,
    )
    if not decision.allowed:
        return decision.reason
    jobs = {a.job_id for a in parent.attempts if a.job_id}
    waits = request.after is not None and request.after in {parent.id, *jobs}
    if parent.active and not request.from_running and not waits:
        return (
            f"{parent.id} is still {parent.phase.value}: a checkpoint of a run that goes on "
            "may be replaced or pruned under the new one. Give from_running=yes to start "
            "from its newest complete checkpoint when this launch goes, or wait until it ends."
        )
    return ""


def checkpoint_outside(path: str, parent: Launch, profile: ClusterProfile) -> str:
    """Why ``path`` (a checkpoint of ``parent``, as trainbot found it in its log) is not
    one trainbot may start from ("": it is): it must lie under the directories the
    parent's cluster configures for its jobs (``recipes_dir``, ``nemorun_home``,
    ``log_dir``), with no ``..``; a root under ``~`` is the home of the Unix user the
    parent ran as (any absolute directory named after them)."""
    roots = [r for r in (profile.recipes_dir, profile.nemorun_home, profile.log_dir) if r]
    owner = parent.cluster_user or profile.login.user
    if _under_roots(path, roots, owner):
        return ""
    return (
        f"its checkpoint {path} is not under the directories {parent.cluster} keeps jobs' "
        f"files in ({', '.join(roots)}), so trainbot does not start from it"
    )


def _under_roots(path: str, roots: Sequence[str], owner: str) -> bool:
    parts = path.split("/")
    if ".." in parts or "." in parts[1:] or "//" in path:
        return False
    for root in roots:
        base = root.rstrip("/") + "/"
        if path.startswith(base):
            return True
        if root.startswith("~/") and path.startswith("/"):
            rest = "/" + root[2:].rstrip("/") + "/"
            home, found, _ = path.partition(rest)
            if found and home.rsplit("/", 1)[-1] == owner and home.count("/") <= 3:
                return True
    return False


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
    store: Store,
    item: Launch,
    mutate: Mutate,
    profile: ClusterProfile,
    authority: Authority | None = None,
) -> Launch | None:
    """``from=``: before its first attempt, the launch notes its parent's newest complete
    checkpoint (its thread says which) and goes on; None when it ended here (the parent
    has none: NO_CHECKPOINT, or its checkpoint lies outside the parent's cluster's job
    directories). ``authority``: the person may still start from it (their own, or
    ``policy.start_from``; a running parent only with ``from_running=yes``), else it ends
    NOT_ALLOWED. A retry keeps what the first attempt started from."""
    request = item.request
    if not (isinstance(request, TrainRequest) and item.starts_from) or item.start_key:
        return item
    parent = await store.get(item.starts_from)
    found = newest_checkpoint(parent) if parent is not None else None
    key, why = "", "it saved no complete checkpoint"
    if parent is None:
        why = "its record has expired, and with it where its checkpoints are"
    elif authority is not None and (
        refused := start_refusal(
            authority.clusters.config.policy, request, parent, await authority.user(item)
        )
    ):
        await _not_allowed(item, mutate, refused)
        return None
    elif found is not None:
        try:
            key = start_key(request, parent)
        except ValueError as exc:
            why = str(exc)
        base = profile if authority is None else authority.clusters.profile(parent.cluster)
        if key and (outside := checkpoint_outside(found[0].checkpoint_dir, parent, base)):
            key, why = "", outside
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


async def _not_allowed(item: Launch, mutate: Mutate, why: str) -> None:
    """``from=`` is no longer the person's to use: the launch ends, saying why."""
    text = (
        f"⛔ <@{item.user_id}>: not started (NOT_ALLOWED): from={item.starts_from}: "
        f"{escape(why)} Nothing was submitted."
    )
    detail = f"May not start from {item.starts_from}."
    facts = phases.Facts(outcome="NOT_ALLOWED", text=text, detail=detail)
    await mutate(item.id, phases.step(phases.not_started, facts))
