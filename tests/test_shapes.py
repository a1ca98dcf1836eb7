"""The shapes of the code that issue-sized limits keep, read with ``ast`` (beside
test_floors.py, which keeps the imports):

- no class of ``bot/``, ``commands/`` or ``cluster/`` has more than ``MAX_PUBLIC_METHODS``
  public methods, counting those it inherits from the project's own classes (a chain
  of mixins is one class to its callers): a bigger one is made of parts instead, as
  ``Store`` is of its sections;
- ``Store`` and ``Worker`` are compositions: they inherit from no class of the project;
- ``Launcher.train`` (``bot/core/train.py``) stays under ``MAX_TRAIN_LINES`` lines;
- the Redis keys stay inside the store: nothing of the shipped packages outside
  ``bot/store/`` imports ``bot.store.keys`` (callers ask a section, never name a key);
- no module of ``bot/``, ``cluster/``, ``commands/`` (or ``api/``, where it exists) is
  over ``MAX_MODULE_LINES`` lines, but for those still in ``SIZE_PENDING``.

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
MAX_MODULE_LINES = 400
SIZED = (*PACKAGES, "api")  # api/: once the HTTP API is a top-level package of its own
# Modules over MAX_MODULE_LINES that are still to be split. This set may only shrink:
# remove a module once it is split, never add one (split the new one instead).
SIZE_PENDING = {
    # sent whole to the login node as one ``python3 -`` script (cluster.ssh.remote):
    # splitting it needs a sender that joins several files
    "cluster/watching/collect_remote.py",
}


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


def _module_lines() -> dict[str, int]:
    """Every module of the sized packages and its number of lines, by its path."""
    return {
        str(path.relative_to(PROJECT)): len(path.read_text().splitlines())
        for package in SIZED
        if (PROJECT / package).is_dir()
        for path in sorted((PROJECT / package).rglob("*.py"))
    }


def test_no_module_is_over_400_lines() -> None:
    lines = _module_lines()
    assert "bot/store/launches.py" in lines and len(lines) > 100  # the reading works
    over = [
        f"{path}: {count} lines"
        for path, count in sorted(lines.items())
        if count > MAX_MODULE_LINES and path not in SIZE_PENDING
    ]
    assert not over, (
        f"modules over {MAX_MODULE_LINES} lines; split each along a seam of its own (a "
        "section, a step, a table of constants) into a module named for what it holds:\n"
        + "\n".join(over)
    )


def test_the_modules_pending_a_split_exist() -> None:
    """SIZE_PENDING names real modules: one renamed or removed is taken off it."""
    gone = sorted(path for path in SIZE_PENDING if not (PROJECT / path).is_file())
    assert not gone, f"SIZE_PENDING names modules that do not exist; remove them: {gone}"
