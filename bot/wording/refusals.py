"""The words of a refusal that names whom to ask: a person refused a Unix user
(:class:`bot.gateway.identity.NoUser`) and a launch that may no longer go where it was
due (:class:`bot.gateway.authority.Readmission`) carry facts, worded here.

Facts: ``reason`` (plain text: the policy's or the identity map's answer, escaped here)
and ``ask`` (whom to ask and for what: ``users`` and ``groups``, the admins' Slack ids,
``oncall``, the on-call user group, and ``cluster``, whose identity map would add the
person). A thread line written before refusals carried facts holds its ``refusal``
already worded, and it is said as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.text.mrkdwn import escape

Facts = Mapping[str, Any]


def _ids(ask: Facts, key: str) -> list[str]:
    value = ask.get(key, [])
    return [v for v in value if isinstance(v, str) and v != "*"] if isinstance(value, list) else []


def whom(ask: Facts) -> str:
    """The admins and on-call to ask, as Slack mentions: ``<@U1> or <!subteam^S1>``."""
    names = [f"<@{escape(u)}>" for u in _ids(ask, "users")]
    names += [f"<!subteam^{escape(g)}>" for g in _ids(ask, "groups")]
    oncall = ask.get("oncall", "")
    if isinstance(oncall, str) and oncall:
        names.append(f"on-call (<!subteam^{escape(oncall)}>)")
    return " or ".join(names) if names else "a trainbot admin"


def no_user(facts: Facts) -> str:
    """``You have no user on a4: ... Ask <@U1> to add you under clusters.a4.identity.users.``"""
    text = escape(str(facts.get("reason", "")))
    ask = facts.get("ask")
    if isinstance(ask, Mapping):
        cluster = escape(str(ask.get("cluster", "")))
        text += f" Ask {whom(ask)} to add you under clusters.{cluster}.identity.users."
    return text


def refused(facts: Facts) -> str:
    """The policy's answer to a launch that moves (``reason``, and ``ask`` when the person
    has no user there); an older line's ``refusal`` was worded when it was written."""
    if "refusal" in facts:
        value = facts["refusal"]
        return value if isinstance(value, str) else ""
    return no_user(facts)
