"""``/checkpoints <job>``: a launch's complete checkpoints as the asker sees them, each
with its step, the validation loss the run logged at or before that step, its size (what
the poller measured when it first saw it complete), the best and the last marked, and the
``from=<job>@<step>`` that starts a new run from it; the launch's total and its owner's
total over the launches trainbot still knows of.

Pure: the launch's record in, a reply out. Every name shown came from the run's log
(the poller read it), so it is escaped and shown in code marks, never as a link.
"""

from __future__ import annotations

from bot.core import checkpoint_actions
from bot.gateway.asks import ClusterCalls
from bot.lifecycle import measures
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.planning import checkpoints
from bot.planning.after_training import exportable, following
from bot.planning.checkpoints import Saved
from bot.store.store import Store
from bot.text.actions import ACTION_PRUNE
from bot.text.front import Reply
from bot.text.mrkdwn import (
    actions,
    button,
    confirm_dialog,
    escape,
    evaluate_button,
    export_button,
    section,
)
from bot.wording import render, thread
from cluster.errors import ClusterError
from commands.context import User

PERSON_LAUNCHES = 200  # the owner's newest finished launches summed for their total
MAX_LISTED = 40  # a Slack message stays readable; the oldest beyond are counted, not listed


def best_of(points: list[Saved]) -> Saved | None:
    """The checkpoint of lowest validation loss (ties: the later step); None while none
    has a loss."""
    known = [p for p in points if p.val_loss is not None]
    return min(known, key=lambda p: (p.val_loss, -p.step)) if known else None


def size_text(size_bytes: int) -> str:
    """``812 MiB``, ``15.2 GiB``: binary units, three figures."""
    size = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" or size >= 100 else f"{size:.3g} {unit}"
        size /= 1024
    return f"{size_bytes} B"  # not reached


def launch_bytes(launch: Launch) -> int:
    """The measured size of the launch's checkpoints that are still listed."""
    listed = set(launch.checkpoints)
    return sum(b for n, b in launch.checkpoint_bytes.items() if n in listed)


async def person_bytes(store: Store, user_id: str) -> tuple[int, int]:
    """(bytes, launches): the measured checkpoints of the person's active launches and
    newest :data:`PERSON_LAUNCHES` finished ones whose records trainbot still keeps."""
    ids = set(await store.history.active_ids(user_id))
    ids |= {e.id for e in await store.history.entries(user_id=user_id, limit=PERSON_LAUNCHES)}
    launches = [x for x in await store.launches.get_many(sorted(ids)) if x is not None]
    sized = [launch_bytes(x) for x in launches]
    return sum(sized), sum(1 for b in sized if b > 0)


def listing(launch: Launch, keep: int = 1, person: tuple[int, int] | None = None) -> Reply:
    """The list, oldest first, or why there is none yet; with, when some would go, the
    button that deletes all but the best ``keep`` and the last (behind a confirm that
    names the steps)."""
    points = checkpoints.with_losses(checkpoints.saved(launch), dict(launch.validation_history))
    _, word = render.status_label(launch)
    if not points:
        return Reply(
            f"{launch.id} ({escape(launch.title)}, {escape(word)}) has no complete checkpoint "
            "yet. Its thread says each one as it is saved."
        )
    best = best_of(points)
    last = points[-1]
    lines = [
        f"*Checkpoints of {launch.id}* ({escape(launch.title)} on {escape(launch.cluster)}, "
        f"{escape(word)}): {len(points)}"
    ]
    shown = points[-MAX_LISTED:]
    if len(points) > len(shown):
        lines.append(f"… {len(points) - len(shown)} older ones not listed")
    for point in shown:
        loss = "" if point.val_loss is None else f" · val loss {point.val_loss:.4g}"
        marks = [m for m, p in (("best", best), ("last", last)) if p is not None and p is point]
        mark = f" · *{' and '.join(marks)}*" if marks else ""
        size = launch.checkpoint_bytes.get(point.name, 0)
        sized = f" · {size_text(size)}" if size else ""
        lines.append(f"• step {point.step:,}{loss}{sized}{mark} · `{escape(point.name)}`")
    totals = []
    if total := launch_bytes(launch):
        totals.append(f"{size_text(total)} for {launch.id}")
    if person is not None and person[0]:
        owner = f"<@{launch.user_id}>" if launch.user_id[:1] in ("U", "W") else "its owner"
        runs = "launch" if person[1] == 1 else "launches"
        totals.append(f"{size_text(person[0])} for {owner} over {person[1]} {runs}")
    if totals:
        lines.append("Total: " + "; ".join(totals))
    lines.append(
        f"To start a new run from one: `/train <workload> <model> from={launch.id}@<step>` "
        f"(`from={launch.id}` alone: the newest)."
    )
    text = "\n".join(lines)
    doomed = checkpoints.prune_plan(points, keep)
    after = []
    can_export = launch.outcome == "COMPLETED" and exportable(launch) and not following(launch)
    if can_export:
        after = [export_button(launch.id), evaluate_button(launch.id)]  # the newest one
    each = checkpoint_actions.buttons(launch, export=can_export)  # the newest few, one by one
    if launch.active or not doomed:
        if not after and not each:
            return Reply(text)
        return Reply(text, blocks=[section(text), *each, *([actions(*after)] if after else [])])
    steps = checkpoints.steps_text(doomed)
    label = (
        f"Delete all but the best {keep} and the last"
        if keep > 1
        else ("Delete all but the best and the last")
    )
    dialog = confirm_dialog(
        f"Delete {len(doomed)} checkpoints?",
        f"The checkpoints of {launch.id} at steps {steps} are deleted from "
        f"{escape(launch.cluster)}'s file system for good. The best and the last stay.",
        confirm="Delete them",
        deny="Keep them",
    )
    prune = button(label, f"{ACTION_PRUNE}{keep}", launch.id, style="danger", confirm=dialog)
    return Reply(text, blocks=[section(text), *each, actions(*after, prune)])


def pruned_names(launch: Launch, keep: int) -> tuple[list[Saved], list[str]]:
    """What the delete removes now: the checkpoints (by step) and every name the launch
    lists for those steps (a NeMo ``-last`` copy of a deleted step goes with it)."""
    points = checkpoints.with_losses(checkpoints.saved(launch), dict(launch.validation_history))
    doomed = checkpoints.prune_plan(points, keep)
    steps = {p.step for p in doomed}
    names = [n for n in launch.checkpoints if measures.checkpoint_step(launch, n) in steps]
    return doomed, names


async def prune(store: Store, calls: ClusterCalls, launch: Launch, user: User, keep: int) -> Reply:
    """Delete all but the best ``keep`` and the last of an ended launch's checkpoints (the
    caller checked the person is its owner or an admin); the plan is made again from the
    record as it is now, and the thread records who deleted which."""
    if launch.active:
        return Reply(
            f"{launch.id} is still {launch.phase.value}: it may save or prune checkpoints "
            "itself. Delete old ones once it has ended.",
            error=True,
        )
    doomed, names = pruned_names(launch, keep)
    tracking = next(
        (a.tracking for a in reversed(launch.attempts) if a.tracking and a.tracking.checkpoint_dir),
        None,
    )
    if not doomed or tracking is None:
        return Reply(f"Nothing to delete: {launch.id} keeps all its checkpoints already.")
    directory, pattern = tracking.checkpoint_dir, tracking.checkpoint_pattern
    try:
        await calls.delete_checkpoints(launch, directory, names, pattern)
    except (ClusterError, ValueError) as exc:
        return Reply(f"Could not delete them: {escape(str(exc))}", error=True)
    gone = set(names)
    facts = {"move": "pruned", "by": user.id, "count": len(doomed), "launch": launch.id}
    facts |= {"steps": checkpoints.steps_text(doomed), "keep": keep, "directory": directory}
    said = Event("thread", launch.id, data=facts)

    def forget(stored: Launch) -> list[Event]:
        stored.checkpoints = [n for n in stored.checkpoints if n not in gone]
        stored.checkpoint_bytes = {
            n: b for n, b in stored.checkpoint_bytes.items() if n not in gone
        }
        return [said]

    await store.launches.mutate(launch.id, forget)
    return Reply(thread.line(said))
