"""The floors of docs/architecture.md as import contracts, read from the code's own imports.

Every ``import`` and ``from ... import`` of every module is read with ``ast`` (those inside
functions too: an import hidden in a function is still an arrow), resolved to the package
it names, and held against the rules below. A rule broken fails the test with each
offending file, line and arrow, so a newcomer sees what to move rather than a bare count.

The rules:
- the packages stand in floors, top down ``bot -> commands -> cluster``: a package imports
  only the floors below it; ``support`` (the Slack stand-in) and ``bench`` are never
  imported by what ships;
- inside ``bot/`` and ``cluster/`` the rooms stand in floors too (``ROOMS`` and
  ``CLUSTER_ROOMS``, top down), and a room imports only the rooms below it; ``core/`` and
  ``engine/`` are peers that never import each other (``PEERS``); the Slack edge and the
  console import only ``text/`` (runtime hands them the core);
- the rooms that decide what happens (``lifecycle/``, ``engine/``, ``planning/``,
  ``gateway/``, ``store/``) say it as facts: they import neither ``wording/`` (which words
  a launch's thread) nor ``text.mrkdwn`` (Slack markup);
- one owner per outside system: ``redis`` only in ``bot/store/``, ``asyncssh`` only in
  ``cluster/ssh/``, ``slack_bolt``/``slack_sdk`` only in ``bot/slack/``;
- ``commands/`` does no I/O: it imports no network, process or file-system module.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]

# The top-level floors, top down: each imports only those after it.
PACKAGES = ("bot", "commands", "cluster")
# Never imported by the shipped packages.
NOT_SHIPPED = ("support", "bench", "tests")

# bot/'s rooms, top down (docs/architecture.md): each imports only the rooms after it.
ROOMS = (
    "runtime",
    "api",
    "notify",
    "core",
    "engine",
    "planning",
    "gateway",
    "store",
    "slack",
    "console",
    "wording",
    "lifecycle",
    "settings",
    "text",
)
# cluster/'s rooms, top down (cluster/__init__.py, docs/architecture.md); errors.py is a room
# of one file on the ground floor.
CLUSTER_ROOMS = (
    "frameworks",
    "preflight",
    "images",
    "launching",
    "watching",
    "site",
    "ssh",
    "slurm",
    "errors",
)
FLOOR_PLANS = {"bot": ROOMS, "cluster": CLUSTER_ROOMS}
# Rooms that stand side by side: neither imports the other (the answers and the loops).
PEERS = {("bot", "core", "engine")}
# Rooms that may import only these rooms of bot/ (the edges are handed the core).
EDGE_ROOMS = {"slack": {"text"}, "console": {"text"}}
# The rooms that decide what happens say it as facts: they import neither the room that
# words it nor Slack markup (mrkdwn, Block Kit). ``bot.text`` keeps plots and the Front seam.
SPEAK_IN_FACTS = ("lifecycle", "engine", "planning", "gateway", "store")
MARKUP = (("bot", "wording"), ("bot", "text", "mrkdwn"))
# Outside systems and the one place that may import each.
OWNERS = {
    "redis": ("bot", "store"),
    "asyncssh": ("cluster", "ssh"),
    "slack_bolt": ("bot", "slack"),
    "slack_sdk": ("bot", "slack"),
}

# What commands/ may not import: it does no I/O.
IO_MODULES = frozenset(
    {
        "asyncio",
        "socket",
        "ssl",
        "subprocess",
        "shutil",
        "tempfile",
        "http",
        "urllib",
        "requests",
        "httpx",
        "aiohttp",
        "redis",
        "asyncssh",
        "slack_bolt",
        "slack_sdk",
        "nemo_run",
        "apscheduler",
    }
)


@dataclass(frozen=True)
class Arrow:
    """One import: the file it is written in, its line, the importer's and the imported parts."""

    path: str
    line: int
    source: tuple[str, ...]
    target: tuple[str, ...]
    names: tuple[str, ...] = ()  # ``from target import names``: what it takes of the target

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {'.'.join(self.source)} -> {'.'.join(self.target)}"


def module_parts(root: Path, path: Path) -> tuple[str, ...]:
    """``bot/store/keys.py`` -> ``("bot", "store", "keys")``; an ``__init__`` is its package."""
    parts = path.relative_to(root).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def arrows_of(root: Path, path: Path) -> list[Arrow]:
    """Every import of one file, relative ones resolved against its package."""
    source = module_parts(root, path)
    package = source if path.name == "__init__.py" else source[:-1]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = str(path.relative_to(root))
    found: list[Arrow] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Arrow(rel, node.lineno, source, tuple(alias.name.split("."))))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                named = tuple(node.module.split(".")) if node.module else ()
                target = base + named
                if not node.module:
                    # ``from . import x``: each name is a module of the package (or a name in it).
                    for alias in node.names:
                        found.append(Arrow(rel, node.lineno, source, target + (alias.name,)))
                    continue
            else:
                target = tuple((node.module or "").split("."))
            names = tuple(alias.name for alias in node.names)
            found.append(Arrow(rel, node.lineno, source, target, names))
    return found


def all_arrows(root: Path) -> list[Arrow]:
    """The imports of every module of the shipped packages."""
    arrows: list[Arrow] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            arrows.extend(arrows_of(root, path))
    return arrows


def package_faults(arrow: Arrow) -> list[str]:
    """The rules between the top-level packages and the outside systems."""
    faults: list[str] = []
    top, to = arrow.source[0], arrow.target[0]
    if to in NOT_SHIPPED:
        faults.append(f"{arrow}: {to}/ is not shipped and is never imported by {top}/")
    if to in PACKAGES and to != top and PACKAGES.index(to) < PACKAGES.index(top):
        faults.append(f"{arrow}: {top}/ stands below {to}/ and may not import it")
    if to in OWNERS and arrow.source[: len(OWNERS[to])] != OWNERS[to]:
        faults.append(f"{arrow}: only {'/'.join(OWNERS[to])}/ imports {to}")
    if top == "commands" and to in IO_MODULES:
        faults.append(f"{arrow}: commands/ does no I/O and may not import {to}")
    return faults


def room_faults(arrow: Arrow) -> list[str]:
    """The rules between the rooms of bot/ and of cluster/."""
    src, dst = arrow.source, arrow.target
    package = src[0]
    if package not in FLOOR_PLANS or dst[0] != package or len(src) < 2 or len(dst) < 2:
        return []
    if src[1] == dst[1]:
        return []
    plan = FLOOR_PLANS[package]
    room, other = src[1], dst[1]
    unplanned = [named for named in (room, other) if named not in plan and named != "__main__"]
    if unplanned:
        return [
            f"{arrow}: {package}/{named} is not in the floor plan; "
            "place it in the plan here and in docs/architecture.md"
            for named in unplanned
        ]
    if room not in plan or other not in plan:
        return []
    if package == "bot" and room in EDGE_ROOMS and other not in EDGE_ROOMS[room]:
        allowed = ", ".join(sorted(EDGE_ROOMS[room]))
        return [f"{arrow}: the {room} edge imports only {allowed}/ of bot/"]
    if (package, room, other) in PEERS or (package, other, room) in PEERS:
        return [
            f"{arrow}: {package}/{room} and {package}/{other} are peers: neither imports the other"
        ]
    if plan.index(other) < plan.index(room):
        return [f"{arrow}: {package}/{room} stands below {package}/{other} and may not import it"]
    return markup_faults(arrow)


def markup_faults(arrow: Arrow) -> list[str]:
    """The rooms that decide what happens carry facts: no words of Slack's."""
    src, dst = arrow.source, arrow.target
    if src[0] != "bot" or len(src) < 2 or src[1] not in SPEAK_IN_FACTS:
        return []
    taken = [dst, *(dst + (name,) for name in arrow.names)]
    if any(t[: len(markup)] == markup for t in taken for markup in MARKUP):
        return [
            f"{arrow}: bot/{src[1]}/ says what happened as facts and imports no Slack "
            f"markup; word it in bot/wording/"
        ]
    return []


def broken(arrows: list[Arrow]) -> list[str]:
    """Each arrow that breaks a rule, with the rule it breaks."""
    return [fault for arrow in arrows for fault in package_faults(arrow) + room_faults(arrow)]


def test_the_code_keeps_every_floor() -> None:
    faults = broken(all_arrows(PROJECT))
    assert not faults, "imports that break docs/architecture.md's floors:\n" + "\n".join(faults)


def test_no_room_that_speaks_in_facts_imports_markup() -> None:
    """lifecycle/, engine/, planning/, gateway/ and store/ say what happened as facts: not
    one of their files imports bot.wording or Slack markup (bot.text.mrkdwn)."""
    wording = sorted({arrow.path for arrow in all_arrows(PROJECT) if markup_faults(arrow)})
    assert not wording, f"files of {SPEAK_IN_FACTS} that word lines: {wording}"


def written_events(source: str, path: str) -> list[str]:
    """Each ``Event(...)`` of ``source`` built with words (a third argument, or ``text=``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Event":
            if len(node.args) > 2 or any(k.arg == "text" for k in node.keywords):
                found.append(f"{path}:{node.lineno}")
    return found


def test_no_event_is_written_as_words() -> None:
    """A thread event carries its move and facts (bot.wording words them): the rooms that
    decide what happens, and the core, build no Event with text. (notify/ words a DM or a
    sweep member's line as it posts it; an entry an older version wrote may hold text, and
    the wording posts it as it is.)"""
    faults = [
        fault
        for room in (*SPEAK_IN_FACTS, "core")
        for path in sorted((PROJECT / "bot" / room).rglob("*.py"))
        for fault in written_events(path.read_text(), str(path.relative_to(PROJECT)))
        if room != "store"  # (it stores an event as it was given, redacted)
    ]
    assert not faults, f"events built with words: {faults}"
    assert written_events('Event("thread", "L-1", "Done.")', "x.py") == ["x.py:1"]
    assert written_events('Event("thread", "L-1", text="Done.")', "x.py") == ["x.py:1"]
    assert written_events('Event("thread", "L-1", data={"move": "x"})', "x.py") == []


def test_every_room_of_bot_is_in_the_floor_plan() -> None:
    rooms = {p.name for p in (PROJECT / "bot").iterdir() if (p / "__init__.py").is_file()}
    assert rooms == set(ROOMS), f"rooms on disk {sorted(rooms)} against the plan {list(ROOMS)}"


def test_every_room_of_cluster_is_in_the_floor_plan() -> None:
    rooms = {
        p.stem if p.is_file() else p.name
        for p in (PROJECT / "cluster").iterdir()
        if (p / "__init__.py").is_file() or (p.suffix == ".py" and p.stem != "__init__")
    }
    assert rooms == set(CLUSTER_ROOMS), f"rooms on disk {sorted(rooms)} against {CLUSTER_ROOMS}"


def test_cluster_says_its_floor_plan_in_its_own_words() -> None:
    face = (PROJECT / "cluster" / "__init__.py").read_text(encoding="utf-8")
    positions = [face.index(f"``{room}") for room in CLUSTER_ROOMS]
    assert positions == sorted(positions), "cluster/__init__.py lists its rooms in another order"


def test_the_floor_plan_is_the_one_the_architecture_page_draws() -> None:
    page = (PROJECT / "docs" / "architecture.md").read_text(encoding="utf-8")
    drawn = [room for room in ROOMS if f"{room}/" in page]
    assert drawn == list(ROOMS)
    positions = [page.index(f"  {room}/") for room in ROOMS]
    assert positions == sorted(positions), "the page lists bot/'s rooms in another order"


@pytest.mark.parametrize(
    ("path", "text", "rule"),
    [
        ("cluster/x.py", "from bot.store import keys\n", "may not import"),
        ("cluster/x.py", "def f():\n    import commands.parse\n", "may not import"),
        ("commands/x.py", "import subprocess\n", "does no I/O"),
        ("bot/core/x.py", "import redis\n", "only bot/store/ imports redis"),
        ("cluster/slurm/x.py", "import asyncssh\n", "only cluster/ssh/ imports asyncssh"),
        ("bot/store/x.py", "from bot.engine import worker\n", "stands below bot/engine"),
        ("bot/store/x.py", "from ..core import train\n", "stands below bot/core"),
        ("bot/core/x.py", "from bot.engine import worker\n", "are peers"),
        ("bot/gateway/x.py", "from bot.planning import cost\n", "stands below bot/planning"),
        ("cluster/slurm/x.py", "from cluster.site import profiles\n", "stands below cluster/site"),
        ("cluster/watching/x.py", "from ..launching import spec\n", "stands below"),
        ("cluster/ssh/x.py", "from cluster.frameworks import nemo\n", "stands below"),
        ("cluster/attic/x.py", "from cluster.ssh import pool\n", "not in the floor plan"),
        ("bot/slack/x.py", "from bot.lifecycle import launch\n", "the slack edge imports only"),
        ("bot/core/x.py", "from support import slack_standin\n", "is not shipped"),
        ("bot/attic/x.py", "from bot.text import mrkdwn\n", "not in the floor plan"),
        ("bot/engine/x.py", "from bot.text.mrkdwn import escape\n", "imports no Slack markup"),
        ("bot/lifecycle/x.py", "from bot.text import mrkdwn\n", "imports no Slack markup"),
        ("bot/store/x.py", "from bot.wording import thread\n", "imports no Slack markup"),
        ("bot/engine/x.py", "from ..wording.thread import line\n", "imports no Slack markup"),
    ],
)
def test_each_rule_fails_on_an_arrow_that_breaks_it(
    tmp_path: Path, path: str, text: str, rule: str
) -> None:
    """The contracts can fail: an arrow that breaks each rule is named, with the rule."""
    file = tmp_path / path
    file.parent.mkdir(parents=True)
    file.write_text(text, encoding="utf-8")
    faults = broken(arrows_of(tmp_path, file))
    assert len(faults) == 1 and rule in faults[0], faults


def test_arrows_that_keep_the_rules_pass(tmp_path: Path) -> None:
    ok = {
        "bot/core/a.py": (
            "from bot.store import keys\nfrom commands import parse\nimport cluster.ssh\n"
        ),
        "bot/store/b.py": "import redis\nfrom . import keys\nfrom ..lifecycle import launch\n",
        "commands/c.py": "import re\nfrom cluster import profiles\n",
        "cluster/ssh/d.py": "import asyncssh\n",
        "bot/slack/e.py": "import slack_bolt\nfrom bot.text import front\n",
        "bot/notify/f.py": "from bot.wording import thread\nfrom bot.text.mrkdwn import escape\n",
        "bot/wording/g.py": "from bot.lifecycle import launch\nfrom bot.text import mrkdwn\n",
        "bot/engine/h.py": "from bot.text.plot import reduce_per_column\n",
    }
    arrows: list[Arrow] = []
    for path, text in ok.items():
        file = tmp_path / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text, encoding="utf-8")
        arrows.extend(arrows_of(tmp_path, file))
    assert len(arrows) == 16
    assert broken(arrows) == []
