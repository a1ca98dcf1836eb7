"""Quoting for the login node's shell.

Every value that reaches a remote command line passes through here: words with
:func:`shlex.quote`, login-node paths with :func:`quote_path`, which keeps a
leading ``~`` working by turning it into ``"$HOME"`` outside the quotes.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping

from pydantic import SecretStr

ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
REDACTED = "'<redacted>'"


def quote_path(path: str) -> str:
    """Quote a login-node path; ``~`` and ``~/x`` become ``"$HOME"`` and ``"$HOME"/'x'``.

    ``~user`` forms are not expanded: they are quoted as plain text.
    """
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        rest = path[2:]
        return '"$HOME"/' + shlex.quote(rest) if rest else '"$HOME"/'
    return shlex.quote(path)


def join_words(words: Iterable[str]) -> str:
    """Quote each word and join them with spaces."""
    return " ".join(shlex.quote(w) for w in words)


def check_env_name(name: str) -> str:
    if not ENV_NAME_RE.fullmatch(name):
        raise ValueError(f"not an environment variable name: {name!r}")
    return name


def export_lines(
    env: Mapping[str, str],
    secrets: Mapping[str, SecretStr],
    secret_files: Mapping[str, str],
    *,
    redact: bool,
) -> list[str]:
    """``export`` lines for a script sent on stdin (builtins: nothing shows in ``ps``).

    Secret values are written only when ``redact`` is false; secret files are read
    on the login node with ``$(cat path)``, so their content never leaves it.
    """
    lines = [f"export {check_env_name(k)}={shlex.quote(v)}" for k, v in sorted(env.items())]
    for name, value in sorted(secrets.items()):
        shown = REDACTED if redact else shlex.quote(value.get_secret_value())
        lines.append(f"export {check_env_name(name)}={shown}")
    for name, path in sorted(secret_files.items()):
        lines.append(f'export {check_env_name(name)}="$(cat {quote_path(path)})"')
    return lines
