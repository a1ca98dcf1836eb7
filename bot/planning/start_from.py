"""``from=<job>``: a launch that starts from another launch's newest complete checkpoint.

Who may (the parent's owner, or whom ``policy.start_from`` names; a running parent
only when the child waits for its end or says ``from_running=yes``), asked at /train
and again when the child goes; which checkpoint (the newest whose save finished, in a
directory the parent's cluster keeps jobs' files in); and, for a framework that goes on
writing where it starts (NeMo-RL), a copy of it in the child's own directory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from bot.gateway.authority import Authority
from bot.lifecycle import measures, phases
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.planning import checkpoints
from bot.store.store import Store
from cluster.errors import ClusterError
from cluster.launching.spec import Framework, framework
from cluster.site.profiles import ClusterProfile
from cluster.watching.tracking import Tracking
from commands.access import may_start_from
from commands.context import User
from commands.policy import Policy
from commands.requests import TrainRequest

CopyStart = Callable[[str, str], Awaitable[str]]  # (source, target) -> linked/copied/kept
Mutate = Callable[[str, Callable[[Launch], list[Event]]], Awaitable[tuple[Launch, list[Event]]]]


def newest_checkpoint(launch: Launch) -> tuple[Tracking, str, int] | None:
    """``from=``: the launch's newest complete checkpoint (the poller lists only those whose
    save finished) as (the tracking of the attempt that knows its directory, its name,
    its step); None when it has none."""
    known = [a.tracking for a in launch.attempts if a.tracking and a.tracking.checkpoint_dir]
    if not known or not launch.checkpoints:
        return None
    ranked = [
        (measures.checkpoint_step(launch, name) or -1, order, name)
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
    launch: Launch,
    mutate: Mutate,
    profile: ClusterProfile,
    authority: Authority | None = None,
    copy: CopyStart | None = None,
) -> Launch | None:
    """``from=``: before its first attempt, the launch notes its parent's newest complete
    checkpoint, or the one at ``from=<job>@<step>`` (its thread says which), and goes on;
    None when it ended here (the parent has none, or none at that step: NO_CHECKPOINT,
    or its checkpoint lies outside the parent's cluster's job directories). ``authority``:
    the person may still start from it (their own, or
    ``policy.start_from``; a running parent only with ``from_running=yes``), else it ends
    NOT_ALLOWED. Where the framework goes on writing where it starts (NeMo-RL), the
    child starts from ``copy`` of the checkpoint in a directory of its own, never in the
    parent's. A retry keeps what the first attempt started from."""
    request = launch.request
    if not (isinstance(request, TrainRequest) and launch.starts_from) or launch.start_key:
        return launch
    parent = await store.launches.get(launch.starts_from)
    step = request.start_step
    found = checkpoints.chosen(parent, step) if parent is not None else None
    key, why = "", "it saved no complete checkpoint"
    if parent is None:
        why = "its record has expired, and with it where its checkpoints are"
    elif step is not None and found is None:
        why = checkpoints.missing_step(parent, step).rstrip(".") or why
    elif authority is not None and (
        refused := start_refusal(
            authority.clusters.config.policy, request, parent, await authority.user(launch)
        )
    ):
        await _not_allowed(launch, mutate, refused)
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
        said = {"why": "no_checkpoint", "owner": launch.user_id, "start_from": launch.starts_from}
        said["error"] = why
        detail = f"{launch.starts_from} has no checkpoint to start from"
        facts = phases.Facts(outcome="NO_CHECKPOINT", detail=detail, data=said)
        await mutate(launch.id, phases.step(phases.not_started, facts))
        return None
    tracking, name, found_step = found
    fw = framework(request.framework)
    try:
        value, copied = await _start_value(fw, tracking, name, profile, launch, parent, copy)
    except ClusterError as exc:
        await _no_copy(launch, mutate, str(exc))
        return None
    told = {"move": "start_from", "parent": parent.id, "newest": step is None}
    told |= {"step": found_step, "checkpoint": name, "key": key, "value": value, **copied}

    def noted(stored: Launch) -> list[Event]:
        if stored.phase != Phase.QUEUED or stored.start_key:
            return []
        stored.start_key, stored.start_path = key, value
        return [Event("thread", stored.id, data=told)]

    stored, _ = await mutate(launch.id, noted)
    return stored if stored.start_key else None


async def _start_value(
    fw: Framework,
    tracking: Tracking,
    name: str,
    profile: ClusterProfile,
    launch: Launch,
    parent: Launch,
    copy: CopyStart | None,
) -> tuple[str, dict[str, object]]:
    """The value for the framework's start key, and the facts of a copy: where the
    framework goes on writing where it starts, the checkpoint is copied into the child's
    own directory first (ClusterError when it cannot be)."""
    if not fw.starts_in_copy:
        return fw.start_value(tracking, name, profile), {}
    source, target, value = fw.start_copy(tracking, name, profile, launch.id)
    if copy is None:
        raise ClusterError("no way to copy it here", cluster=launch.cluster)
    how = await copy(source, target)
    return value, {"copy": target, "linked": how == "linked"}


async def _not_allowed(launch: Launch, mutate: Mutate, why: str) -> None:
    """``from=`` is no longer the person's to use: the launch ends, saying why."""
    said = {"why": "not_allowed", "owner": launch.user_id, "start_from": launch.starts_from}
    detail = f"May not start from {launch.starts_from}."
    facts = phases.Facts(outcome="NOT_ALLOWED", detail=detail, data={**said, "error": why})
    await mutate(launch.id, phases.step(phases.not_started, facts))


async def _no_copy(launch: Launch, mutate: Mutate, why: str) -> None:
    """The copy of the parent's checkpoint could not be made: the launch ends, saying why."""
    said = {"why": "no_copy", "owner": launch.user_id, "start_from": launch.starts_from}
    detail = f"Could not copy {launch.starts_from}'s checkpoint."
    facts = phases.Facts(outcome="NO_CHECKPOINT", detail=detail, data={**said, "error": why})
    await mutate(launch.id, phases.step(phases.not_started, facts))
