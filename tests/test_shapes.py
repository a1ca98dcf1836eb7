"""The shapes of the code that issue-sized limits keep, read with ``ast`` (beside
test_floors.py, which keeps the imports):

- no class of ``bot/``, ``commands/`` or ``cluster/`` has more than ``MAX_PUBLIC_METHODS``
  public methods, counting those it inherits from the project's own classes (a chain
  of mixins is one class to its callers): a bigger one is made of parts instead, as
  ``Store`` is of its sections;
- ``Store`` and ``Worker`` are compositions: they inherit from no class of the project;
- ``Launcher.train`` (``bot/core/train.py``) stays under ``MAX_TRAIN_LINES`` lines;
- the Redis keys stay inside the store: nothing of the shipped packages outside
  ``bot/store/`` imports ``bot.store.keys`` (callers ask a section, never name a key).

A broken rule names the class (file and line) and what it has, so a newcomer sees what
to split rather than a bare count.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
PACKAGES = ("bot", "commands", "cluster")
MAX_PUBLIC_METHODS = 40
MAX_TRAIN_LINES = 50
COMPOSITIONS = {"bot/store/store.py": "Store", "bot/engine/worker.py": "Worker"}


@dataclass
class ClassInfo:
    name: str
    where: str  # file:line
    bases: list[str]  # the bases' names as written (the last dotted part)
    methods: set[str] = field(default_factory=set)  # public: no leading underscore


def _classes() -> dict[str, list[ClassInfo]]:
    """Every class of the shipped packages, by name (a name may be defined twice)."""
    found: dict[str, list[ClassInfo]] = {}
    for package in PACKAGES:
        for path in sorted((PROJECT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = [
                    b.attr if isinstance(b, ast.Attribute) else b.id
                    for b in node.bases
                    if isinstance(b, ast.Attribute | ast.Name)
                ]
                info = ClassInfo(node.name, f"{path.relative_to(PROJECT)}:{node.lineno}", bases)
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        if not item.name.startswith("_"):
                            info.methods.add(item.name)
                found.setdefault(node.name, []).append(info)
    return found


def _public_methods(info: ClassInfo, classes: dict[str, list[ClassInfo]]) -> set[str]:
    """The class's own public methods and those of the project's classes it inherits from
    (a base of the same name anywhere in the project counts: an over-count, never an
    under-count)."""
    methods = set(info.methods)
    seen = {info.name}
    todo = list(info.bases)
    while todo:
        base = todo.pop()
        if base in seen:
            continue
        seen.add(base)
        for defined in classes.get(base, []):
            methods |= defined.methods
            todo.extend(defined.bases)
    return methods


def test_the_classes_are_read() -> None:
    """The reading itself works: it finds the store's sections and counts their methods."""
    classes = _classes()
    launches = _public_methods(classes["Launches"][0], classes)
    assert {"get", "create", "mutate"} <= launches
    assert len(classes) > 100


def test_no_class_has_more_than_40_public_methods() -> None:
    classes = _classes()
    too_big = []
    for infos in classes.values():
        for info in infos:
            methods = _public_methods(info, classes)
            if len(methods) > MAX_PUBLIC_METHODS:
                too_big.append(f"{info.where}: {info.name} has {len(methods)} public methods")
    assert not too_big, (
        f"classes over {MAX_PUBLIC_METHODS} public methods (their own and those they "
        "inherit from the project's classes); make them of parts (sections, a held "
        "object, functions) instead:\n" + "\n".join(too_big)
    )


def test_store_and_worker_are_compositions() -> None:
    classes = _classes()
    inherited = []
    for path, name in COMPOSITIONS.items():
        (info,) = [i for i in classes[name] if i.where.startswith(path + ":")]
        ours = [b for b in info.bases if b in classes]
        if ours:
            inherited.append(f"{info.where}: {name} inherits from {', '.join(ours)}")
    assert not inherited, (
        "Store and Worker hold their parts (store.launches, worker.hold) instead of "
        "inheriting them:\n" + "\n".join(inherited)
    )


def test_launcher_train_is_under_50_lines() -> None:
    path = PROJECT / "bot" / "core" / "train.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    (launcher,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Launcher"]
    (train,) = [
        n
        for n in launcher.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == "train"
    ]
    assert train.end_lineno is not None
    start = min([train.lineno, *(d.lineno for d in train.decorator_list)])
    lines = train.end_lineno - start + 1
    assert lines < MAX_TRAIN_LINES, (
        f"bot/core/train.py:{train.lineno}: Launcher.train is {lines} lines (at most "
        f"{MAX_TRAIN_LINES - 1}); move a step of it into a function of its own"
    )


def test_no_caller_names_a_redis_key() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((PROJECT / package).rglob("*.py")):
            where = path.relative_to(PROJECT)
            if where.parts[:2] == ("bot", "store"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ImportFrom) and node.module == "bot.store.keys":
                    found.append(f"{where}:{node.lineno}: from bot.store.keys import ...")
                elif isinstance(node, ast.ImportFrom) and node.module == "bot.store":
                    if any(alias.name == "keys" for alias in node.names):
                        found.append(f"{where}:{node.lineno}: from bot.store import keys")
                elif isinstance(node, ast.Import):
                    if any(alias.name == "bot.store.keys" for alias in node.names):
                        found.append(f"{where}:{node.lineno}: import bot.store.keys")
    assert not found, (
        "the Redis keys stay inside bot/store/: ask a section of the store "
        "(store.queue.length(), store.lanes.dead_letter_count()...) instead of naming "
        "a key:\n" + "\n".join(found)
    )


def test_no_two_classes_share_a_name() -> None:
    """A class name says one thing in the whole house: two classes of one name in two
    rooms (a store section and a gateway answer both called People) read as one."""
    where: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((PROJECT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ClassDef):
                    where.setdefault(node.name, []).append(str(path.relative_to(PROJECT)))
    twins = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twins, f"class names used twice: {twins}"
