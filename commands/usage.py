"""``/usage``: whose GPU-hours, over which window, as text, a chart or a CSV file.

``/usage [me|@person|team=<group>|cluster=C] [week|month|days=N] [csv=true]``.
``me`` (the default) is the asker; ``@person`` a Slack mention (``<@U123>``, or
``@name`` as typed); ``team=`` a Slack user group id (``S...``); ``cluster=`` one
cluster, everyone's use of it. ``week`` (the default) is the ISO week so far,
``month`` the calendar month so far (UTC), ``days=N`` the last N days. Pure: who may
see what is decided in :mod:`bot.core.usage` with the policy's ``usage.teams``.
"""

from __future__ import annotations

import re

from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.help import USAGE
from commands.parse import Args
from commands.requests import UsageRequest
from commands.suggest import did_you_mean, quote
from commands.train import check_keys
from commands.values import parse_days

USAGE_TEXT = USAGE["usage"]
_MENTION_RE = re.compile(r"<@([A-Z0-9]{2,32})(?:\|[^>]*)?>")
_NAME_RE = re.compile(r"@([A-Za-z0-9._-]{1,64})")
_GROUP_RE = re.compile(r"<!subteam\^([A-Z0-9]{2,32})(?:\|[^>]*)?>|([A-Z0-9]{2,32})")
_WINDOWS = ("week", "month")


def _person(word: str, user: User) -> str:
    """The user id (or typed name) a word names: ``me``, ``<@U123>`` or ``@name``."""
    if word.lower() == "me":
        return user.id
    if mention := _MENTION_RE.fullmatch(word):
        return mention.group(1)
    if name := _NAME_RE.fullmatch(word):
        # One's own name typed stands for one's own id: "own" is decided by id alone.
        return (
            user.id if user.name and name.group(1).lower() == user.name.lower() else name.group(1)
        )
    raise CommandError(
        f"Unexpected {quote(word)}. Usage: {USAGE_TEXT}."
        f"{did_you_mean(word.lower(), ['me', *_WINDOWS])}",
        field=word,
    )


def parse_usage(args: Args, user: User, context: CommandContext) -> UsageRequest:
    check_keys(args, ("team", "cluster", "days", "csv"), "/usage")
    scope, windows = "person", [w.lower() for w in args.words if w.lower() in _WINDOWS]
    people = [_person(w, user) for w in args.words if w.lower() not in _WINDOWS]
    target = people[0] if people else user.id
    if len(windows) + ("days" in args.pairs) > 1:
        raise CommandError(
            f"Give one window: week, month or days=N. Usage: {USAGE_TEXT}.", field="days"
        )
    window, days = (windows or ["week"])[0], 0
    if "days" in args.pairs:
        window, days = "days", parse_days(args.pairs["days"])
    chosen = [k for k in ("team", "cluster") if k in args.pairs]
    if len(people) + len(chosen) > 1:
        raise CommandError(
            f"Give one of me, @person, team=<group> or cluster=C. Usage: {USAGE_TEXT}.",
            field=chosen[0] if chosen else "",
        )
    if "team" in args.pairs:
        found = _GROUP_RE.fullmatch(args.pairs["team"])
        if found is None:
            raise CommandError(
                f"team={quote(args.pairs['team'])} is not a Slack user group: give its id, "
                "such as team=S0ML.",
                field="team",
            )
        scope, target = "team", found.group(1) or found.group(2)
    elif "cluster" in args.pairs:
        scope, target = "cluster", context.profile(args.pairs["cluster"]).name
    csv = args.pairs.get("csv", "false").lower()
    if csv not in ("true", "false"):
        raise CommandError(f"csv={quote(csv)}: give csv=true or csv=false.", field="csv")
    return UsageRequest(scope=scope, target=target, window=window, days=days, csv=csv == "true")
