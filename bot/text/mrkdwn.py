"""Slack text and Block Kit building blocks. Pure functions, no I/O.

Anything a person typed or a log printed goes through ``escape`` before it
reaches Slack; otherwise text such as ``<!channel>`` pings the whole channel.
Long text is cut to Block Kit's limits with a note that says how much was
left out and where to get the rest.
"""

from __future__ import annotations

import re
import time
from typing import Any, Literal

from bot.text.actions import (
    ACTION_APPROVE,
    ACTION_ATTACH,
    ACTION_CANCEL,
    ACTION_EDIT_RELAUNCH,
    ACTION_EVALUATE,
    ACTION_EXPORT,
    ACTION_HELP,
    ACTION_LOGS,
    ACTION_PREFIX,
    ACTION_REJECT,
    ACTION_RESUME,
    ACTION_RETRY,
    ACTION_RUN_AGAIN,
    ACTION_USE_PARTITION,
)

Block = dict[str, Any]

SECTION_TEXT_MAX = 3000
BLOCKS_MAX = 50
MESSAGE_TEXT_MAX = 40_000
BUTTON_TEXT_MAX = 75
BUTTON_VALUE_MAX = 2000


_FENCE = "```"
# A zero-width space between backticks keeps log text from closing our code block.
_BROKEN_FENCE = "`\u200b`\u200b`"


def escape(text: str) -> str:
    """Escape Slack's three control characters so the text shows as typed."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    """Undo ``escape`` (Slack sends typed ``&``, ``<``, ``>`` as entities)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


DATE_FORMAT = "{date_short_pretty} {time}"  # "Dec 24, 2026 08:00", in the reader's zone
DATE_PATTERN = re.compile(r"<!date\^\d+\^[^|>]*\|([^>]*)>")


def slack_date(when: float, fmt: str = DATE_FORMAT) -> str:
    """A time every reader sees in their own time zone (Slack's ``<!date^...>``); clients
    that cannot, and the console, show the UTC text after ``|`` (``2026-12-24 08:00 UTC``)."""
    fallback = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when))
    return f"<!date^{int(when)}^{fmt}|{fallback}>"


def date_fallbacks(text: str) -> str:
    """``text`` with each ``<!date^...>`` replaced by its UTC text (for a terminal)."""
    return DATE_PATTERN.sub(r"\1", text)


def cut_note(more_lines: int, hint: str = "") -> str:
    """The line added where text was cut, e.g. ``(cut: 1,234 more lines; use /logs 42 ...)``."""
    unit = "line" if more_lines == 1 else "lines"
    note = f"(cut: {more_lines:,} more {unit}"
    return f"{note}; {hint})" if hint else f"{note})"


def cut_lines(
    text: str,
    max_chars: int,
    *,
    keep: Literal["head", "tail"] = "head",
    hint: str = "",
) -> str:
    """Whole lines of ``text`` that fit in ``max_chars`` together with a cut note.

    ``keep="tail"`` keeps the last lines (what matters in a log) and puts the
    note first. A single line longer than the budget is cut mid-line.
    """
    if len(text) <= max_chars:
        return text
    lines = text.splitlines()
    kept: list[str] = []
    used = 0
    ordered = lines if keep == "head" else list(reversed(lines))
    for index, line in enumerate(ordered):
        note = cut_note(len(lines) - index, hint)
        if used + len(line) + 1 + len(note) > max_chars:
            break
        kept.append(line)
        used += len(line) + 1
    note = cut_note(len(lines) - len(kept), hint)
    if not kept:
        room = max(max_chars - len(note) - 2, 0)
        line = ordered[0]
        kept = [line[:room] + "…"] if keep == "head" else ["…" + line[len(line) - room :]]
    if keep == "head":
        return "\n".join([*kept, note])[:max_chars]
    return "\n".join([note, *reversed(kept)])[-max_chars:]


def code_block(
    text: str,
    *,
    max_chars: int = SECTION_TEXT_MAX,
    keep: Literal["head", "tail"] = "tail",
    hint: str = "",
) -> str:
    """``text`` escaped in a code block, cut to ``max_chars`` including the fences."""
    body = escape(text.rstrip("\n")).replace(_FENCE, _BROKEN_FENCE) or " "
    budget = max_chars - 2 * len(_FENCE) - 2
    return f"{_FENCE}\n{cut_lines(body, budget, keep=keep, hint=hint)}\n{_FENCE}"


def cut_text(text: str, max_chars: int = MESSAGE_TEXT_MAX, *, hint: str = "") -> str:
    """Already-formatted mrkdwn cut to ``max_chars`` (for message and section text)."""
    return cut_lines(text, max_chars, keep="head", hint=hint)


def section(text: str) -> Block:
    """A mrkdwn section; ``text`` must already be escaped. Cut to 3000 characters."""
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut_text(text, SECTION_TEXT_MAX)}}


def context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": cut_text(text, 2000)}]}


def fit_blocks(blocks: list[Block]) -> list[Block]:
    """Blocks within Slack's limits: at most 50, section texts at most 3000 characters."""
    fitted = [_fit_block(block) for block in blocks]
    if len(fitted) <= BLOCKS_MAX:
        return fitted
    dropped = len(fitted) - (BLOCKS_MAX - 1)
    unit = "block" if dropped == 1 else "blocks"
    return [*fitted[: BLOCKS_MAX - 1], context(f"(cut: {dropped:,} more {unit})")]


def _fit_block(block: Block) -> Block:
    text = block.get("text")
    if block.get("type") != "section" or not isinstance(text, dict):
        return block
    value = text.get("text")
    if not isinstance(value, str) or len(value) <= SECTION_TEXT_MAX:
        return block
    return {**block, "text": {**text, "text": cut_text(value, SECTION_TEXT_MAX)}}


def _plain(text: str, max_chars: int) -> dict[str, Any]:
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return {"type": "plain_text", "text": text, "emoji": True}


def confirm_dialog(title: str, text: str, *, confirm: str, deny: str) -> dict[str, Any]:
    """A confirm dialog; ``text`` is mrkdwn and must already be escaped."""
    return {
        "title": _plain(title, 100),
        "text": {"type": "mrkdwn", "text": cut_text(text, 300)},
        "confirm": _plain(confirm, 30),
        "deny": _plain(deny, 30),
        "style": "danger",
    }


def button(
    text: str,
    action_id: str,
    value: str,
    *,
    style: Literal["", "primary", "danger"] = "",
    confirm: dict[str, Any] | None = None,
) -> Block:
    """A button element. ``value`` comes back as ``Incoming.action_value``."""
    if not action_id.startswith(ACTION_PREFIX):
        raise ValueError(f"action_id {action_id!r} must start with {ACTION_PREFIX!r}")
    if len(value) > BUTTON_VALUE_MAX:
        raise ValueError(f"button value is {len(value)} characters; Slack allows 2000")
    element: Block = {
        "type": "button",
        "text": _plain(text, BUTTON_TEXT_MAX),
        "action_id": action_id,
        "value": value,
    }
    if style:
        element["style"] = style
    if confirm is not None:
        element["confirm"] = confirm
    return element


def cancel_button(value: str, *, job_label: str) -> Block:
    """Cancel, behind a confirm dialog. ``job_label`` (e.g. "job 4187") is plain text."""
    label = escape(job_label)
    dialog = confirm_dialog(
        f"Cancel {job_label}?",
        f"Slurm will stop {label}. Checkpoints already written are kept.",
        confirm="Cancel it",
        deny="Keep it running",
    )
    return button("Cancel", ACTION_CANCEL, value, style="danger", confirm=dialog)


def logs_button(value: str) -> Block:
    return button("Logs", ACTION_LOGS, value)


def attach_button(value: str) -> Block:
    return button("Attach", ACTION_ATTACH, value, style="primary")


def retry_button(value: str) -> Block:
    return button("Retry", ACTION_RETRY, value, style="primary")


def resume_button(value: str) -> Block:
    return button("Resume from checkpoint", ACTION_RESUME, value, style="primary")


def run_again_button(value: str) -> Block:
    return button("Run again", ACTION_RUN_AGAIN, value)


def edit_relaunch_button(value: str) -> Block:
    return button("Edit & relaunch", ACTION_EDIT_RELAUNCH, value)


def export_button(value: str) -> Block:
    return button("Export", ACTION_EXPORT, value)


def evaluate_button(value: str) -> Block:
    return button("Evaluate", ACTION_EVALUATE, value)


def text_input(
    block_id: str, label: str, initial: str, hint: str = "", *, check_as: str = ""
) -> Block:
    """A one-line text input of a modal; ``block_id`` comes back with its value. With
    ``check_as`` (an action id) Slack sends what is typed as it is typed, to be checked."""
    element: Block = {
        "type": "plain_text_input",
        "action_id": check_as or "text",
        "initial_value": initial[:3000],
        "max_length": 3000,
    }
    block: Block = {
        "type": "input",
        "block_id": block_id[:255],
        "label": _plain(label, 2000),
        "element": element,
    }
    if check_as:
        block["dispatch_action"] = True
        element["dispatch_action_config"] = {"trigger_actions_on": ["on_character_entered"]}
    if hint:
        block["hint"] = _plain(hint, 2000)
    return block


def use_partition_button(partition: str, value: str) -> Block:
    return button(f"Use {partition}", ACTION_USE_PARTITION, value, style="primary")


def hour_select(action_id: str, name: str, hour: int) -> Block:
    """A choice of the 24 hours (values ``<name>:<hour>``), ``hour`` selected."""
    options = [{"text": _plain(f"{h:02d}:00", 75), "value": f"{name}:{h}"} for h in range(24)]
    return {
        "type": "static_select",
        "action_id": action_id,
        "options": options,
        "initial_option": options[hour],
    }


def actions(*elements: Block) -> Block:
    """An actions block holding buttons (at most 25)."""
    return {"type": "actions", "elements": list(elements[:25])}


def approve_button(value: str) -> Block:
    return button("Approve", ACTION_APPROVE, value, style="primary")


def reject_button(value: str) -> Block:
    return button("Reject", ACTION_REJECT, value, style="danger")


# -- the help card, posted when the app joins a channel ------------------------

HELP_CARD_TEXT = (
    "*trainbot* is in this channel: launch NeMo and NeMo-RL training on the team's Slurm "
    "clusters from here, e.g. `/train sft llama3p1_8b nodes=2`. Each launch gets one "
    "thread in this channel, and its owner is mentioned only when it needs them or ends. "
    "`/jobs` lists your launches, `/logs &lt;job&gt;` shows a log, `/cancel &lt;job&gt;` "
    "stops one. "
    "The buttons answer only you."
)
HELP_TOPICS = {  # a help button's value -> the command it answers as
    "train": ("/train", "help train"),
    "recipes": ("/train", "recipes"),
    "jobs": ("/jobs", ""),
    "commands": ("/train", "help"),
}


def help_card() -> list[Block]:
    """The card: what trainbot does here, and buttons for the first things to ask."""
    return [
        section(HELP_CARD_TEXT),
        actions(
            button("How to /train", ACTION_HELP, "train", style="primary"),
            button("Recipes", ACTION_HELP, "recipes"),
            button("My launches", ACTION_HELP, "jobs"),
            button("All commands", ACTION_HELP, "commands"),
        ),
    ]


# -- when a channel refuses the bot ---------------------------------------------

INVITE = "`/invite @trainbot`"
_CHANNEL_ID = re.compile(r"^[CG][A-Z0-9]{2,}$")


def channel_ref(channel: str) -> str:
    """``<#C0123>`` (Slack shows the channel's name) for a channel id, else the text escaped."""
    if _CHANNEL_ID.match(channel):
        return f"<#{channel}>"
    return "this conversation" if channel.startswith("D") else escape(channel)


def cannot_post_text(channel: str, error: str) -> str:
    """Why a /train was refused because the bot cannot post in ``channel``, and what to do."""
    where = channel_ref(channel)
    if error == "not_in_channel":
        why = f"I'm not in {where}, so no one could follow the launch's thread there."
        fix = f"Invite me with {INVITE} and run the command again, or run it in a channel I'm in."
    elif error == "channel_not_found":
        why = (
            f"I can't see {where} (a private channel I'm not in, or a direct message between "
            "other people), so no one could follow the launch's thread there."
        )
        fix = (
            f"In a private channel, invite me with {INVITE} and run the command again; "
            "otherwise run it in a channel I'm in, or in your direct message with me."
        )
    elif error == "is_archived":
        why = f"{where} is archived, so I can't post the launch's thread there."
        fix = "Run the command in a channel I'm in."
    else:
        why = f"I can't post in {where} (Slack says `{escape(error)}`)."
        fix = "Run the command in a channel where I may post."
    return f"{why} {fix} Nothing was queued."


def undeliverable_text(*, channel: str, error: str, launch_id: str, title: str) -> str:
    """The direct message to a launch's owner when its channel refused the bot."""
    where = channel_ref(channel)
    text = (
        f":warning: I could not post the thread of your launch {escape(launch_id)} "
        f"({escape(title)}) in {where}: Slack says `{escape(error)}`."
    )
    if error in ("not_in_channel", "channel_not_found"):
        text += (
            f" Invite me there with {INVITE} and the thread carries on from its next "
            "message; next time, run /train in a channel I'm in."
        )
    else:
        text += " Next time, run /train in a channel where I may post."
    return text + (
        f" The launch itself goes on: /jobs shows it, `/cancel {escape(launch_id)}` stops it."
    )
