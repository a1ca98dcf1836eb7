"""A launch's checkpoints by step: which one ``from=<job>@<step>`` starts from, and which
ones "delete all but the best k and the last" may remove.

Pure: the names come from the launch's record (the poller lists only checkpoints whose
save finished), their steps from the framework's own naming rule (NeMo's
``...-step=N-...``, NeMo-RL's ``step_N``, Megatron-Bridge's ``iter_NNNNNNN``), through
the tracking record's ``checkpoint_pattern``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.lifecycle import measures
from bot.lifecycle.launch import Launch
from cluster.watching.tracking import Tracking


@dataclass(frozen=True)
class Saved:
    """One complete checkpoint: its directory name, its step, and its validation loss
    when the run said one near that step (None: not known)."""

    name: str
    step: int
    val_loss: float | None = None


def saved(launch: Launch) -> list[Saved]:
    """The launch's complete checkpoints whose step its framework's rule reads, oldest
    first; one per step (a NeMo ``-last`` copy of a step is the same step: the first
    name listed for it stands)."""
    found: dict[int, str] = {}
    for name in launch.checkpoints:
        step = measures.checkpoint_step(launch, name)
        if step is not None and step not in found:
            found[step] = name
    return [Saved(name, step) for step, name in sorted(found.items())]


def steps_text(points: Sequence[Saved]) -> str:
    """``100, 200 and 300`` (``none`` when empty): the steps a person may pick from."""
    steps = [f"{p.step}" for p in points]
    if not steps:
        return "none"
    return steps[0] if len(steps) == 1 else ", ".join(steps[:-1]) + " and " + steps[-1]


def missing_step(launch: Launch, step: int) -> str:
    """Why ``from=<launch>@<step>`` cannot start ("": it can): no complete checkpoint of
    that step, said with the steps that do exist."""
    points = saved(launch)
    if any(p.step == step for p in points):
        return ""
    return (
        f"{launch.id} has no complete checkpoint at step {step:,}; its complete checkpoints "
        f"are at steps {steps_text(points)}. Give one of those after @, or leave @ out for "
        "the newest."
    )


def chosen(launch: Launch, step: int | None) -> tuple[Tracking, str, int] | None:
    """The checkpoint ``from=`` starts from: the one at ``step``, or the newest complete one
    when ``step`` is None; as (the tracking of the attempt that knows its directory, its
    name, its step). None when there is none (or none at that step)."""
    known = [a.tracking for a in launch.attempts if a.tracking and a.tracking.checkpoint_dir]
    if not known or not launch.checkpoints:
        return None
    if step is None:
        ranked = [
            (measures.checkpoint_step(launch, name) or -1, order, name)
            for order, name in enumerate(launch.checkpoints)
        ]
        newest, _, name = max(ranked)
        return known[-1], name, newest
    for point in saved(launch):
        if point.step == step:
            return known[-1], point.name, point.step
    return None


def prune_plan(points: Sequence[Saved], keep_best: int) -> list[Saved]:
    """What "delete all but the best ``keep_best`` and the last" removes: every checkpoint
    except the last (highest step), the ``keep_best`` of lowest validation loss (ties:
    the later step), and, while no loss is known, the best one stays too: the newest
    stands for it. Never the last, never the best; oldest first."""
    if not points:
        return []
    last = max(points, key=lambda p: p.step)
    known = sorted(
        (p for p in points if p.val_loss is not None),
        key=lambda p: (p.val_loss, -p.step),
    )
    best = known[: max(keep_best, 1)]
    keep = {last.step, *(p.step for p in best)}
    return sorted((p for p in points if p.step not in keep), key=lambda p: p.step)


def with_losses(points: Sequence[Saved], losses: Mapping[int, float]) -> list[Saved]:
    """``points`` with the validation loss the run logged at (or, failing that, nearest
    below) each checkpoint's step; None where the run logged none at or before it."""
    steps = sorted(losses)
    out = []
    for point in points:
        below = [s for s in steps if s <= point.step]
        loss = losses[below[-1]] if below else None
        out.append(Saved(point.name, point.step, loss))
    return out
