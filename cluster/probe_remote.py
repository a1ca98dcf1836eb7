"""Pre-flight and discovery, remote half: run on the login node as ``python3 -`` (stdlib only).

``main(payload)`` answers in one go: ``sinfo`` (when asked), which paths exist as
files or directories, which directories are writable (or could be created), which
files are readable, and what the recipes directory holds.
"""

from __future__ import annotations

import glob
import os
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
    if payload.get("recipes_dir"):
        base = os.path.expanduser(payload["recipes_dir"])
        out["recipes"] = _listing(base, tuple(payload.get("recipe_globs", ())))
        out["images"] = _listing(base, tuple(payload.get("image_globs", ())))
        out["recipes_dir_exists"] = os.path.isdir(base)
    return out
