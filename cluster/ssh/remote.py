"""Login-node paths and quoting for the login node's shell.

Every value that reaches a remote command line passes through here: words with
:func:`shlex.quote`, login-node paths with :func:`quote_path`, which keeps a
leading ``~`` working by turning it into ``"$HOME"`` outside the quotes.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from cluster.errors import ClusterError

if TYPE_CHECKING:
    from cluster.ssh.connect import LoginLike
    from cluster.ssh.pool import SSHPool

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


def join_remote(base: str, *parts: str) -> str:
    """Join login-node path parts with ``/`` (``~`` stays for the remote shell)."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


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


def remote_python_input(script: str, payload: object) -> str:
    """The stdin for ``python3 -``: the script, then a call of its ``main`` on ``payload``.

    The payload is embedded as a Python string literal of its JSON: data, never code.
    """
    data = json.dumps(payload)
    return (
        f"{script}\n\n"
        "import json as _json, sys as _sys\n"
        f"_sys.stdout.write(_json.dumps(main(_json.loads({data!r}))))\n"
    )


def load_script(name: str) -> str:
    """The text of a remote helper module shipped in cluster/, by its path there
    (``watching/collect_remote.py``)."""
    return resources.files("cluster").joinpath(*name.split("/")).read_text(encoding="utf-8")


async def run_remote_python(
    pool: SSHPool,
    login: LoginLike,
    script_name: str,
    payload: object,
    *,
    timeout_s: float,
    cluster: str = "",
) -> dict[str, Any]:
    """One round trip: ``python3 -`` on the login node, JSON in (on stdin), JSON out."""
    stdin = remote_python_input(load_script(script_name), payload)
    result = await pool.run(login, "python3 -", input=stdin, timeout_s=timeout_s, cluster=cluster)
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise ClusterError(
            f"{script_name} returned no JSON: {result.stdout[:200]!r} {result.stderr[-300:]!r}",
            cluster=cluster,
        ) from exc
    if not isinstance(data, dict):
        raise ClusterError(f"{script_name} returned {type(data).__name__}", cluster=cluster)
    return data


class RPath(str):
    """A login-node path inside an argv: quoted with :func:`quote_path` (``~`` kept)."""


class RSetting(str):
    """``key=<login-node path>`` inside an argv: the key shlex-quoted, the path with
    :func:`quote_path` (``~`` kept), so ``key="$HOME"/'dir'``."""


RemoteArg = str | RPath | RSetting


def join_argv(argv: Iterable[RemoteArg]) -> str:
    """A command line from argv words: paths with :func:`quote_path`, the rest shlex-quoted."""
    return " ".join(_quote_word(w) for w in argv)


def _quote_word(word: RemoteArg) -> str:
    if isinstance(word, RPath):
        return quote_path(word)
    if isinstance(word, RSetting):
        key, _, path = word.partition("=")
        return f"{shlex.quote(key)}={quote_path(path)}"
    return shlex.quote(word)
