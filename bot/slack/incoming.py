"""What Slack sends, as the core's ``Incoming``: slash commands, button clicks, modal
submissions; and which workspace a request comes from."""

from __future__ import annotations

from typing import Any

from bot.text.front import Incoming
from bot.text.mrkdwn import unescape


def incoming_from_command(body: dict[str, Any]) -> Incoming:
    """A slash command form (HTTP) or payload (Socket Mode) as ``Incoming``.

    Slack sends typed ``&``, ``<``, ``>`` as entities; ``text`` is what was typed.
    """
    return Incoming(
        user_id=str(body.get("user_id", "")),
        channel_id=str(body.get("channel_id", "")),
        command=str(body.get("command", "")),
        text=unescape(str(body.get("text", ""))).strip(),
        user_name=str(body.get("user_name", "")),
        team_id=str(body.get("team_id", "")),
        trigger_id=str(body.get("trigger_id", "")),
    )


def incoming_from_action(body: dict[str, Any]) -> Incoming:
    """A ``block_actions`` payload (its first action) as ``Incoming``."""
    action = (body.get("actions") or [{}])[0]
    value = action.get("value") or (action.get("selected_option") or {}).get("value", "")
    user = body.get("user") or {}
    container = body.get("container") or {}
    channel = (body.get("channel") or {}).get("id") or container.get("channel_id", "")
    message_ts = container.get("message_ts") or (body.get("message") or {}).get("ts", "")
    return Incoming(
        user_id=str(user.get("id", "")),
        channel_id=str(channel),
        user_name=str(user.get("username") or user.get("name", "")),
        team_id=str((body.get("team") or {}).get("id") or user.get("team_id", "")),
        action_id=str(action.get("action_id", "")),
        action_value=str(value),
        thread_ts=str(message_ts),
        trigger_id=str(body.get("trigger_id", "")),
    )


def incoming_from_shortcut(body: dict[str, Any]) -> Incoming:
    """A global shortcut used, as ``Incoming``: its callback id as the action."""
    user = body.get("user") or {}
    return Incoming(
        user_id=str(user.get("id", "")),
        channel_id="",
        user_name=str(user.get("username") or user.get("name", "")),
        team_id=str((body.get("team") or {}).get("id") or user.get("team_id", "")),
        action_id=str(body.get("callback_id", "")),
        trigger_id=str(body.get("trigger_id", "")),
    )


def incoming_from_view(body: dict[str, Any]) -> Incoming:
    """A ``view_submission`` as ``Incoming``: its callback id as the action, the block id
    of its first input as the value, and what was typed there as the text."""
    view = body.get("view") or {}
    user = body.get("user") or {}
    block_id, typed = "", ""
    for block, inputs in ((view.get("state") or {}).get("values") or {}).items():
        for field in (inputs or {}).values():
            block_id, typed = str(block), str((field or {}).get("value") or "")
            break
        break
    return Incoming(
        user_id=str(user.get("id", "")),
        channel_id="",
        user_name=str(user.get("username") or user.get("name", "")),
        team_id=str((body.get("team") or {}).get("id") or user.get("team_id", "")),
        action_id=str(view.get("callback_id", "")),
        action_value=block_id,
        text=typed.strip(),
        trigger_id=str(body.get("trigger_id", "")),
    )


def team_of(body: dict[str, Any]) -> str:
    """The workspace a request comes from: slash commands, interactivity and events."""
    team = body.get("team_id") or (body.get("team") or {}).get("id")
    if not team:
        team = (body.get("user") or {}).get("team_id", "")
    return str(team or "")
