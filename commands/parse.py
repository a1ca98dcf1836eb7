"""Turning command text into words and ``key=value`` pairs.

Rules, in order:

1. Text longer than :data:`MAX_TEXT_CHARS` is refused.
2. Unicode is NFKC-normalised (full-width letters, non-breaking spaces and the
   like become their plain forms) and typographic quotes become ``"`` and ``'``
   (chat clients put them in on their own).
3. Control characters (other than tab and newline, which count as spaces),
   invisible formatting characters (zero-width spaces, bidi overrides, soft
   hyphens) and private-use or unassigned code points are refused, naming the
   character and its position: they make text read differently than it runs.
4. Words are split on whitespace. Double or single quotes may wrap any part of
   a word (``name="run-1"``) and are removed; an unclosed quote is refused.
   No valid value contains spaces, so quotes only ever help people who paste
   quoted values; a quoted value is checked like any other.
5. A word with ``=`` is a pair. Keys are case-insensitive; a key may appear once.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

from commands.errors import CommandError
from commands.suggest import printable, quote

MAX_TEXT_CHARS = 1000
MAX_WORDS = 40
MAX_WORD_CHARS = 256

_QUOTE_TABLE = str.maketrans(
    {"“": '"', "”": '"', "„": '"', "‟": '"', "″": '"', "‘": "'", "’": "'", "‚": "'", "‛": "'"}
)
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_KEY_RE = re.compile(r"[a-z][a-z0-9_.]{0,63}")


@dataclass(frozen=True)
class Args:
    """The words of a command: positional ``words`` and ``pairs`` (keys lower-case)."""

    words: tuple[str, ...] = ()
    pairs: dict[str, str] = field(default_factory=dict)


def describe_char(ch: str) -> str:
    """``U+200B ZERO WIDTH SPACE`` (or just ``U+0007`` for nameless characters)."""
    name = unicodedata.name(ch, "")
    code = f"U+{ord(ch):04X}"
    return f"{code} {name}" if name else code


def normalise(text: str) -> str:
    """NFKC-normalised text with plain quotes, or CommandError for odd characters."""
    if len(text) > MAX_TEXT_CHARS:
        raise CommandError(
            f"That command is too long ({len(text)} characters; the limit is {MAX_TEXT_CHARS})."
        )
    text = unicodedata.normalize("NFKC", text).translate(_QUOTE_TABLE)
    for index, ch in enumerate(text):
        _check_char(ch, text[:index])
    if len(text) > MAX_TEXT_CHARS:
        raise CommandError(
            f"That command is too long once normalised ({len(text)} characters; "
            f"the limit is {MAX_TEXT_CHARS})."
        )
    return text


def _check_char(ch: str, before: str) -> None:
    if ch in "\t\n\r":
        return
    category = unicodedata.category(ch)
    if category[0] != "C":
        return
    shown = before.rsplit(None, 1)[-1] if before.strip() else ""
    place = f"right after {quote(shown[-30:])}" if shown else "at the start"
    where = f"({describe_char(ch)}) {place}"
    if category == "Cc":
        raise CommandError(
            f"Your text has a control character {where}. Retype the command without it."
        )
    if ch in _BIDI:
        raise CommandError(
            f"Your text has a hidden text-direction character {where}; it makes text "
            "read differently than it runs. Retype the command without it."
        )
    if category == "Cf":
        raise CommandError(
            f"Your text has an invisible character {where}, often left by copy and paste. "
            "Retype the command without it."
        )
    if category in ("Co", "Cs", "Cn"):
        raise CommandError(
            f"Your text has a character trainbot cannot read {where}. "
            "Retype the command with plain letters and digits."
        )


def split_words(text: str) -> list[str]:
    """Whitespace-separated words of normalised text, quotes removed."""
    words: list[str] = []
    buf: list[str] = []
    in_word = False
    open_quote = ""
    word_start = 0
    for index, ch in enumerate(text):
        if open_quote:
            if ch == open_quote:
                open_quote = ""
            else:
                buf.append(ch)
            continue
        if not in_word and not ch.isspace():
            word_start, in_word = index, True
        if ch in "\"'":
            open_quote = ch
        elif ch.isspace():
            if in_word:
                words.append("".join(buf))
                buf, in_word = [], False
        else:
            buf.append(ch)
    if open_quote:
        raise CommandError(
            f"Unbalanced quote: the {open_quote} in {quote(text[word_start:].rstrip())} "
            "is never closed. Close it, or leave the quotes out (no value needs them)."
        )
    if in_word:
        words.append("".join(buf))
    return words


def parse_args(text: str) -> Args:
    """Words and ``key=value`` pairs of a command's text, or CommandError."""
    words = split_words(normalise(text))
    if len(words) > MAX_WORDS:
        raise CommandError(f"Too many words ({len(words)}; at most {MAX_WORDS}).")
    positional: list[str] = []
    pairs: dict[str, str] = {}
    for word in words:
        if len(word) > MAX_WORD_CHARS:
            raise CommandError(
                f"{quote(word)} is too long ({len(word)} characters; at most {MAX_WORD_CHARS})."
            )
        if "=" not in word:
            if word.startswith("-"):
                raise CommandError(
                    f"{quote(word)} looks like a command-line option. "
                    f"Write {_dashless(word)}=<value> instead (no dashes, no space).",
                    field=_dashless(word),
                )
            positional.append(word)
            continue
        key, value = _split_pair(word)
        if key in pairs:
            first, second = printable(pairs[key]), printable(value)
            raise CommandError(
                f"{key} is given twice ({key}={first} and {key}={second}). Give each key once.",
                field=key,
            )
        pairs[key] = value
    return Args(words=tuple(positional), pairs=pairs)


def _dashless(word: str) -> str:
    return word.lstrip("-").split("=", 1)[0].lower() or "key"


def _split_pair(word: str) -> tuple[str, str]:
    raw_key, _, value = word.partition("=")
    key = raw_key.lower()
    if not key:
        raise CommandError(
            f"{quote(word)} has no key before '='. Write key=value, for example nodes=2."
        )
    if key.startswith("-"):
        raise CommandError(
            f"{quote(word)} looks like a command-line option. "
            f"Write keys without dashes: {_dashless(key)}={printable(value)[:40] or 'value'}.",
            field=_dashless(key),
        )
    if not _KEY_RE.fullmatch(key):
        raise CommandError(
            f"{quote(raw_key)} is not a valid key: keys are letters, digits, '_' and '.', "
            "starting with a letter.",
        )
    if not value:
        raise CommandError(
            f"{key}= has no value. Write {key}=<value> with no space after '='.", field=key
        )
    return key, value
