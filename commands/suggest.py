"""Closest-name suggestions for misspelt names ("Did you mean a4?")."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

#: Similarity needed for a suggestion. Low enough that "a5" finds "a4".
CUTOFF = 0.5


def closest(word: str, choices: Sequence[str], *, cutoff: float = CUTOFF) -> str | None:
    """The choice most like ``word`` (case-insensitive), or None when none is close."""
    if not word or not choices:
        return None
    lowered = {c.lower(): c for c in choices}
    found = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[found[0]] if found else None


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """`` Did you mean X?`` (with the leading space), or an empty string."""
    match = closest(word, choices)
    return f" Did you mean {match}?" if match else ""


def printable(value: str) -> str:
    """``value`` with a newline, tab or other unprintable character shown as its escape."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in value)


def quote(value: str, limit: int = 40) -> str:
    """``'value'`` for messages, cut to ``limit`` characters; a newline, tab or other
    unprintable character shown as its escape (``\\n``), so the message stays one line."""
    value = printable(value)
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return f"'{value}'"


def join_names(names: Sequence[str]) -> str:
    """``a, b, c`` or ``(none)``."""
    return ", ".join(names) if names else "(none)"
