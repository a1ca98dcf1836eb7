"""``/checkpoints <job>``: a launch's complete checkpoints as the asker sees them, each
with its step, the validation loss the run logged at or before that step, the best and
the last marked, and the ``from=<job>@<step>`` that starts a new run from it.

Pure: the launch's record in, a reply out. Every name shown came from the run's log
(the poller read it), so it is escaped and shown in code marks, never as a link.
"""

from __future__ import annotations

from bot.gateway.asks import ClusterCalls
from bot.lifecycle import measures
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.planning import checkpoints
from bot.planning.checkpoints import Saved
from bot.store.store import Store
from bot.text.front import Reply
from bot.text.mrkdwn import ACTION_PRUNE, actions, button, confirm_dialog, escape, section
from bot.wording import render, thread
from cluster.errors import ClusterError
from commands.context import User

MAX_LISTED = 40  # a Slack message stays readable; the oldest beyond are counted, not listed


def best_of(points: list[Saved]) -> Saved | None:
    """The checkpoint of lowest validation loss (ties: the later step); None while none
    has a loss."""
    known = [p for p in points if p.val_loss is not None]
    return min(known, key=lambda p: (p.val_loss, -p.step)) if known else None


def listing(launch: Launch, keep: int = 1) -> Reply:
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
        lines.append(f"• step {point.step:,}{loss}{mark} · `{escape(point.name)}`")
    lines.append(
        f"To start a new run from one: `/train <workload> <model> from={launch.id}@<step>` "
        f"(`from={launch.id}` alone: the newest)."
    )
    text = "\n".join(lines)
    doomed = checkpoints.prune_plan(points, keep)
    if launch.active or not doomed:
        return Reply(text)
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
    return Reply(text, blocks=[section(text), actions(prune)])


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
        return [said]

    await store.launches.mutate(launch.id, forget)
    return Reply(thread.line(said))
