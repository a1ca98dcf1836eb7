"""Check that the lock files still match pyproject.toml.

Every dependency pyproject.toml declares must be pinned in requirements.lock
(and, with the dev extra's, in requirements-dev.lock) at a version its
specifier allows, and every pin must carry a hash. Exit 1 with what is wrong
and the fix (scripts/lock) otherwise. Run by scripts/bootstrap and the tests.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PIN = re.compile(r"^([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==([^\s;\\]+)", re.MULTILINE)


def pins(text: str) -> dict[str, str]:
    """Package name -> pinned version, from a lock file's text."""
    return {canonicalize_name(name): version for name, version in PIN.findall(text)}


def problems(root: Path) -> list[str]:
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    runtime = [Requirement(r) for r in project["dependencies"]]
    dev = [Requirement(r) for r in project.get("optional-dependencies", {}).get("dev", [])]
    found: list[str] = []
    for lock, wanted in (("requirements.lock", runtime), ("requirements-dev.lock", runtime + dev)):
        path = root / lock
        if not path.is_file():
            found.append(f"{lock} is missing")
            continue
        text = path.read_text()
        pinned = pins(text)
        for req in wanted:
            if req.marker is not None and not req.marker.evaluate():
                continue
            version = pinned.get(canonicalize_name(req.name))
            if version is None:
                found.append(f"{lock}: {req.name} is not pinned (pyproject.toml: {req})")
            elif not req.specifier.contains(version, prereleases=True):
                found.append(f"{lock}: {req.name}=={version} does not satisfy {req}")
        entries = re.split(r"\n(?=\S)", text)
        unhashed = [e.split("==")[0] for e in entries if PIN.match(e) and "--hash=sha256:" not in e]
        if unhashed:
            found.append(f"{lock}: no hash for {', '.join(unhashed)}")
    return found


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    found = problems(root)
    for problem in found:
        print(f"lockcheck: {problem}", file=sys.stderr)
    if found:
        print("lockcheck: the lock files are out of date: run scripts/lock", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
