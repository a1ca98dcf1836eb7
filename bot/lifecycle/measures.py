"""Plain measures of a launch, in numbers and plain words, for every wording and every
room that reasons about a launch: how long something took, the step of a checkpoint,
why its job waits. No Slack markup: ``bot.wording`` says them in a channel."""

from __future__ import annotations

import re

from bot.lifecycle.launch import Launch, Phase
from cluster.slurm.reasons import PendingWhy, explain_pending


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def waiting(launch: Launch) -> PendingWhy | None:
    """Why the launch's job waits (squeue's reason, read), while it does."""
    attempt = launch.attempt
    if launch.phase != Phase.SUBMITTED or attempt is None or not attempt.pending_reason:
        return None
    return explain_pending(attempt.pending_reason)


def checkpoint_step(launch: Launch, name: str) -> int | None:
    """The step in one of the launch's checkpoint names, by its framework's rule (the
    tracking record's ``checkpoint_pattern``, group 1)."""
    for attempt in reversed(launch.attempts):
        if attempt.tracking is not None and attempt.tracking.checkpoint_pattern:
            match = re.search(attempt.tracking.checkpoint_pattern, name)
            return int(match.group(1)) if match else None
    return None


def checkpoint_label(launch: Launch, name: str) -> str:
    """``step 1,200`` for one of the launch's checkpoint names (the name when it has no step)."""
    step = checkpoint_step(launch, name)
    return name if step is None else f"step {step:,}"
