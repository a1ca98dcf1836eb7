"""What a waiting launch waits for, as /jobs, App Home and the /train answer say it: its
``at=`` time (a ``<!date>`` each reader sees in their own zone) and the launch it waits
for, and the chain of launches it belongs to. Pure: a launch in, mrkdwn out."""

from __future__ import annotations

from collections.abc import Sequence

from bot.lifecycle.launch import Launch, Phase
from bot.text.mrkdwn import slack_date
from commands.schedule import at_epoch, show


def waits_text(launch: Launch, parent: Launch | None = None, *, own_zone: bool = False) -> str:
    """What a launch waits for, as /jobs and its thread say it ("" when nothing): mrkdwn,
    its ``at=`` time in each reader's own time zone (``own_zone``: in the owner's, as
    words, for an answer only the owner sees)."""
    parts = []
    request = launch.request
    if request.at:
        due = at_epoch(request.at)
        parts.append(f"starts at {show(due, launch.tz) if own_zone else slack_date(due)}")
    if launch.waits_for:
        cond = "ends" if request.after_any or launch.sweep else "completes"
        now = f" (now {parent.phase.value})" if parent is not None and parent.active else ""
        parts.append(f"waits until {launch.waits_for} {cond}{now}")
    return "; ".join(parts)


def chain_text(launch: Launch, others: Sequence[Launch]) -> str:
    """What /jobs and App Home add to a launch's line (mrkdwn: ids and a ``<!date>``
    only): when and for what it waits, the launch it starts from, and the launches among
    ``others`` that wait for it or start from it (``chain: L-a -> L-b``); "" when none."""
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
