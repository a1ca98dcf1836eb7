"""Fixed strings that every match of a regular expression contains, for a fast search.

The login node searches whole job logs (gigabytes) for the failure catalog's patterns.
A regular expression engine tries every pattern at every position (tens of seconds per
gigabyte for the whole catalog); ``grep -F`` finds fixed strings at disk speed. So each
pattern is reduced to a few fixed strings, one of which every line it matches contains
(case-insensitively); grep keeps those lines and only they are matched against the
patterns themselves. A pattern with no such string of ``MIN_KEYWORD`` characters or more
(``\\d+: Out``) makes the reduction fail: None, and the slower search is used.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

with warnings.catch_warnings():  # the parser of the re module, by its public old name
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants
    import sre_parse

MIN_KEYWORD = 3


def _best(options: Iterable[set[str] | None]) -> set[str] | None:
    """Of several sets one of which each match must hold, the one whose shortest string
    is longest (the most selective), or None when none is usable."""
    usable = [o for o in options if o and min(map(len, o)) >= MIN_KEYWORD]
    return max(usable, key=lambda o: (min(map(len, o)), -len(o)), default=None)


def _required(items: Any) -> set[str] | None:
    """Strings one of which every match of the parsed sequence ``items`` contains."""
    options: list[set[str] | None] = []
    run: list[str] = []
    for op, av in items:
        if op is sre_constants.LITERAL:
            run.append(chr(av).lower())
            continue
        options.append({"".join(run)} if run else None)
        run = []
        if op is sre_constants.SUBPATTERN:
            options.append(_required(av[-1]))
        elif op is sre_constants.BRANCH:
            branches = [_required(branch) for branch in av[1]]
            if all(branches):
                options.append(set().union(*branches))  # type: ignore[arg-type]
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT) and av[0] >= 1:
            options.append(_required(av[2]))
    options.append({"".join(run)} if run else None)
    return _best(options)


def keywords(patterns: Sequence[str]) -> list[str] | None:
    """Lower-case fixed strings such that every line any of ``patterns`` matches
    (case-insensitively) contains one of them; None when some pattern has none."""
    found: set[str] = set()
    for pattern in patterns:
        try:
            required = _required(sre_parse.parse(pattern, re.IGNORECASE))
        except (re.error, RecursionError):
            return None
        if required is None:
            return None
        found |= required
    return sorted(found)
