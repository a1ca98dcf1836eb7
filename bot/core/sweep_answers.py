"""Answers about sweeps: /cancel <sweep id> asks once for the whole sweep."""

from __future__ import annotations

from bot.lifecycle.launch import Launch, Sweep
from bot.text.front import Reply
from bot.text.mrkdwn import actions, cancel_button, section


def confirm_cancel(sweep: Sweep, members: list[Launch | None]) -> Reply:
    """/cancel <sweep id> asks first; one confirm cancels every active member."""
    live = [m for m in members if m is not None and m.active]
    if not live:
        return Reply(f"Sweep {sweep.id} has already ended: no member is active.", error=True)
    label = f"sweep {sweep.id} ({len(live)} active launches)"
    text = f"Cancel {label} of {sweep.title} on {sweep.where}? Each member's job is cancelled once."
    return Reply(text, blocks=[section(text), actions(cancel_button(sweep.id, job_label=label))])
