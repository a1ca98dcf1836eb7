"""Pre-flight and discovery, remote half: run on the login node as ``python3 -`` (stdlib only).

``main(payload)`` answers in one go: ``sinfo`` (when asked), which paths exist as
files or directories, which directories are writable (or could be created), which
files are readable, what the recipes directory holds, the launcher's ``--help``
(when asked), and which lines of a sourced file assign the launch's secrets
without keeping the value exported before it (line numbers only: never a value).
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from typing import Any


def _writable(path: str) -> bool:
    """Writable, or missing with a writable nearest existing parent (it can be created)."""
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    return os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK)


def _listing(base: str, patterns: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for pattern in patterns:
        found += sorted(os.path.relpath(p, base) for p in glob.glob(os.path.join(base, pattern)))
    return found


def _keeps(name: str, value: str) -> bool:
    """Whether an assignment's value keeps what was exported before: ``${NAME:-x}``,
    ``${NAME-x}``, ``${NAME:=x}``, ``$NAME``, quoted or not."""
    value = value.strip().strip("\"'")
    n = re.escape(name)
    return bool(re.match(rf"\$(\{{{n}(:?[-=]|\}})|{n}\b)", value))


def _overwrites(path: str, names: list[str]) -> dict[str, Any]:
    """Lines of a shell file that set one of ``names`` unconditionally, or unset it."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return {"exists": False, "lines": []}
    except OSError as exc:
        return {"exists": True, "error": exc.strerror or "unreadable", "lines": []}
    found = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if line.startswith("#"):
            continue
        for name in names:
            n = re.escape(name)
            unset = re.search(rf"(^|[\s;])unset\s+(-v\s+)?([A-Za-z0-9_]+\s+)*{n}\b", line)
            assigns = re.finditer(rf"(?:^|[\s;])(?:export\s+|declare\s+-x\s+)?{n}=(\S*)", line)
            if unset or any(not _keeps(name, m.group(1)) for m in assigns):
                found.append({"name": name, "line": number})
    return {"exists": True, "lines": found}


def main(payload: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"files": {}, "dirs": {}, "writable": {}, "readable": {}}
    if payload.get("sinfo_argv"):
        try:
            done = subprocess.run(payload["sinfo_argv"], capture_output=True, text=True, timeout=20)
            out["sinfo"] = {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
        except (OSError, subprocess.TimeoutExpired) as exc:
            out["sinfo"] = {"rc": 127, "stdout": "", "stderr": str(exc)}
    for label, path in payload.get("files", {}).items():
        out["files"][label] = os.path.isfile(os.path.expanduser(path))
    for label, path in payload.get("dirs", {}).items():
        out["dirs"][label] = os.path.isdir(os.path.expanduser(path))
    for label, path in payload.get("writable", {}).items():
        out["writable"][label] = _writable(os.path.expanduser(path))
    for label, path in payload.get("readable", {}).items():
        full = os.path.expanduser(path)
        out["readable"][label] = os.path.isfile(full) and os.access(full, os.R_OK)
    if payload.get("help"):
        cwd = os.path.expanduser(payload["help"]["cwd"])
        try:
            done = subprocess.run(
                payload["help"]["argv"],
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=float(payload["help"].get("timeout_s", 15)),
            )
            out["help"] = {"rc": done.returncode, "stdout": done.stdout[:20000]}
            out["help"]["stderr"] = done.stderr[-2000:]
        except (OSError, subprocess.TimeoutExpired) as exc:
            out["help"] = {"rc": 127, "stdout": "", "stderr": str(exc)}
    if payload.get("assigns"):
        path = os.path.expanduser(payload["assigns"]["path"])
        out["assigns"] = _overwrites(path, list(payload["assigns"]["names"]))
    if payload.get("recipes_dir"):
        base = os.path.expanduser(payload["recipes_dir"])
        out["recipes"] = _listing(base, tuple(payload.get("recipe_globs", ())))
        out["images"] = _listing(base, tuple(payload.get("image_globs", ())))
        out["recipes_dir_exists"] = os.path.isdir(base)
    return out
