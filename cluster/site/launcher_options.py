"""What a site's launcher accepts, read from its ``--help``: the flags, and whether it
takes words after its options (NeMo's recipe overrides after ``--``).

Sites keep their own ``run.py``; the flags trainbot may send differ between
them (the guide's launch line names ``-e --slurm-type --partition -d -i -s -n
--experiment-name`` and the mounts ``--log-dir --cache-dir --data-dir``, and no
more). :func:`parse_help` reads the help argparse prints (python/cpython
``Lib/argparse.py`` at 8ea6cc14a5178b456278c35f63b0859c6b5f4f64: a ``usage:``
block, then groups headed ``positional arguments:`` and ``options:``, called
``optional arguments:`` before Python 3.10, one option per line indented by two
spaces, its spellings comma-separated before the help text).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_FLAG_RE = re.compile(r"(?:^|(?<=[\s\[|,]))(--?[A-Za-z0-9][A-Za-z0-9_-]*)")
_HEADING_RE = re.compile(r"^(\S[^:]*):\s*$")
_POSITIONAL_HEADINGS = ("positional arguments",)


@dataclass(frozen=True)
class LauncherOptions:
    """The flags a launcher's ``--help`` lists, and whether it takes positional words."""

    flags: frozenset[str]
    positionals: bool

    def first(self, *spellings: str) -> str | None:
        """The first of ``spellings`` the launcher has (None: it has none of them)."""
        return next((s for s in spellings if s in self.flags), None)

    def encode(self) -> str:
        return json.dumps({"flags": sorted(self.flags), "positionals": self.positionals})

    @classmethod
    def decode(cls, raw: str) -> LauncherOptions | None:
        """Read back :meth:`encode`'s text; None when it is not that."""
        try:
            data = json.loads(raw)
            flags = frozenset(str(f) for f in data["flags"])
            return cls(flags=flags, positionals=bool(data["positionals"]))
        except (ValueError, TypeError, KeyError):
            return None


def parse_help(text: str) -> LauncherOptions | None:
    """The options in argparse-style help text; None when it has no ``usage:`` line (the
    launcher printed something else, so nothing can be concluded)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lower().startswith("usage:")), None)
    if start is None:
        return None
    flags: set[str] = set()
    positionals = False
    heading = ""
    in_usage = True
    for line in lines[start:]:
        if in_usage:
            if not line.strip():
                in_usage = False
                continue
            usage = line.split(":", 1)[1] if line.lower().startswith("usage:") else line
            flags.update(_FLAG_RE.findall(usage))
            continue
        if match := _HEADING_RE.match(line):
            heading = match.group(1).strip().lower()
            continue
        entry = line[2:] if line.startswith("  ") and not line.startswith("   ") else ""
        if not entry:
            continue
        if heading in _POSITIONAL_HEADINGS:
            positionals = True
        elif entry.startswith("-"):
            spellings = re.split(r"\s{2,}", entry, maxsplit=1)[0]
            flags.update(_FLAG_RE.findall(spellings))
    return LauncherOptions(flags=frozenset(flags), positionals=positionals)
