"""``/checkpoints <job>``: a launch's complete checkpoints as the asker sees them, each
with its step, the validation loss the run logged at or before that step, the best and
the last marked, and the ``from=<job>@<step>`` that starts a new run from it.

Pure: the launch's record in, a reply out. Every name shown came from the run's log
(the poller read it), so it is escaped and shown in code marks, never as a link.
"""

from __future__ import annotations

from bot.engine import checkpoints
from bot.engine.checkpoints import Saved
from bot.lifecycle import render
from bot.lifecycle.launch import Launch
from bot.text.front import Reply
from bot.text.mrkdwn import escape

MAX_LISTED = 40  # a Slack message stays readable; the oldest beyond are counted, not listed


def best_of(points: list[Saved]) -> Saved | None:
    """The checkpoint of lowest validation loss (ties: the later step); None while none
    has a loss."""
    known = [p for p in points if p.val_loss is not None]
    return min(known, key=lambda p: (p.val_loss, -p.step)) if known else None


def listing(launch: Launch) -> Reply:
    """The list, oldest first, or why there is none yet."""
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
    return Reply("\n".join(lines))
