"""Which changes of a launch concern people: the owner's mention, and the DMs.

Pure. :meth:`bot.store.launches.Launches.mutate` (and ``create``) compare a launch before and
after a change with :func:`classify`; the notices found ride on the last thread line
the change writes (``data["notices"]``, ``data["mention"]``). The notifier posts that
line with the mention (``bot.wording.thread`` words both), and after it is posted,
sends each person who wants one (the owner and the launch's watchers, by their
preferences) a DM that links to the thread, so a DM is never ahead of the line it
refers to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from bot.lifecycle.launch import Launch, Phase

Notice = Literal[
    "started", "checkpoint", "completed", "failed", "hung", "approval", "approved", "rejected",
    "cancelled",
]  # fmt: skip
NOTICES: tuple[Notice, ...] = get_args(Notice)
# The events a person may ask to get by DM (App Home), and the notices each covers.
DmEvent = Literal["start", "checkpoint", "finish", "failure", "hang"]
DM_EVENTS: tuple[DmEvent, ...] = get_args(DmEvent)
DM_EVENT_OF: dict[str, DmEvent] = {
    "started": "start",
    "checkpoint": "checkpoint",
    "completed": "finish",
    "cancelled": "finish",
    "rejected": "finish",
    "failed": "failure",
    "hung": "hang",
}
# What of a sweep member concerns its owner on its own: the start, checkpoints, approval
# and the end of each member are told by the sweep's table, and its comparison at the end
# mentions the owner once (bot.notify.sweep_notes). A cancel concerns them only when it was
# someone else's.
SWEEP_MEMBER_NOTICES: frozenset[str] = frozenset({"failed", "hung", "cancelled"})
URGENT: frozenset[str] = frozenset({"failed", "hung"})  # may break through quiet hours


@dataclass(frozen=True)
class Before:
    """What :func:`classify` needs to know of a launch before a change."""

    phase: Phase
    started: int  # attempts that started running
    checkpoints: int
    hangs: int  # attempts whose hang was reported

    @classmethod
    def of(cls, launch: Launch) -> Before:
        return cls(
            phase=launch.phase,
            started=sum(1 for a in launch.attempts if a.started_at),
            checkpoints=len(launch.checkpoints),
            hangs=sum(1 for a in launch.attempts if a.hang_reported),
        )


def classify(before: Before | None, after: Launch) -> tuple[list[Notice], bool]:
    """The notices of a change (``before`` is None for a new launch), and whether its
    owner is mentioned: when it needs them or ends (failed, hung, approval asked or
    answered, completed, cancelled by someone else); progress and checkpoints stay quiet."""
    found: list[Notice] = []
    was = before.phase if before is not None else None
    now = after.phase
    if was != now:
        if now == Phase.AWAITING_APPROVAL:
            found.append("approval")
        elif was == Phase.AWAITING_APPROVAL and now == Phase.QUEUED:
            found.append("approved")
        elif was == Phase.AWAITING_APPROVAL and now == Phase.REJECTED:
            found.append("rejected")
        elif now == Phase.REJECTED:  # pre-flight or submission refused it
            found.append("failed")
        elif now == Phase.DONE:
            outcome = after.outcome or ""
            found.append(
                "completed"  # a run that stopped early ends as a run does, not as a failure
                if outcome in ("COMPLETED", "STOPPED_EARLY")
                else "cancelled"
                if outcome == "CANCELLED"
                else "failed"
            )
    now_started = sum(1 for a in after.attempts if a.started_at)
    if before is not None and now_started > before.started and now == Phase.RUNNING:
        found.append("started")
    if before is not None and len(after.checkpoints) > before.checkpoints:
        found.append("checkpoint")
    hangs = sum(1 for a in after.attempts if a.hang_reported)
    if before is not None and hangs > before.hangs:
        found.append("hung")
    by_other = bool(after.cancelled_by) and after.cancelled_by != after.user_id
    if after.sweep:  # a member: its sweep's thread tells the rest, and its end mentions once
        found = [n for n in found if n in SWEEP_MEMBER_NOTICES and (n != "cancelled" or by_other)]
    mention = any(
        n in ("completed", "failed", "hung", "approval", "approved", "rejected") for n in found
    ) or ("cancelled" in found and by_other)
    return found, mention


def dm_lane(user_id: str, *, urgent: bool = False) -> str:
    """The notifier's lane of a person's DMs (those that break through quiet hours apart)."""
    return f"dm:{user_id}:urgent" if urgent else f"dm:{user_id}"


def tag(events: list[Any], notices: list[Notice], mention: bool) -> None:
    """Put ``notices`` on the last thread line of ``events`` (in place; nothing when the
    change says nothing in the thread)."""
    if not notices:
        return
    for event in reversed(events):
        if event.kind == "thread":
            event.data["notices"] = list(notices)
            if mention:
                event.data["mention"] = True
            return
