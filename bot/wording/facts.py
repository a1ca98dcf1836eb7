"""Reading an event's facts for the words: a fact as text, a count, a person's mention.
Who wrote each fact is the move that made the event, from what it was given."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.text.mrkdwn import escape

Facts = Mapping[str, Any]


def fact(facts: Facts, key: str) -> str:
    """A fact as text ("" when absent): who wrote it is the move, from what it was given."""
    value = facts.get(key, "")
    return value if isinstance(value, str) else str(value)


def count(facts: Facts, key: str) -> int:
    value = facts.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def number(facts: Facts, key: str) -> float:
    """A fact that is a number (seconds, hours, GPU-hours), 0.0 when absent or not one."""
    value = facts.get(key, 0)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def mention(user: str) -> str:
    """``<@U123>``: Slack shows the person's name. A user id is letters and digits."""
    return f"<@{escape(user)}>"
