"""The registry of training frameworks: their names, the workloads they run, the
checks of a ``framework=`` or ``workload=`` value, and each one's built-in recipes.

It knows a framework by the facts of :class:`Registered` alone, so the modules that
read it (profiles, recipes, stored records) stand below the job model
(:class:`cluster.launching.spec.Framework`) that every framework module subclasses. Each
framework module ends with ``register(TheFramework())``; the first read of the
registry imports every module of :mod:`cluster.frameworks`, in file name order, so a new
framework is a new module there and nothing else names it.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Mapping
from typing import Annotated, Literal, Protocol, Required, TypedDict, TypeVar

from pydantic import AfterValidator

NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_PACKAGE = "cluster.frameworks"


class RecipeFields(TypedDict, total=False):
    """One built-in recipe of a framework: the fields of ``cluster.launching.recipes.RecipeEntry``
    but ``framework``."""

    workload: Required[str]
    model: Required[str]
    script: str
    job_script: str
    args: tuple[str, ...]
    overrides: dict[str, str]
    default_nodes: int
    description: str


class Registered(Protocol):
    """What the registry, the recipe catalog and the cluster profiles ask of a framework."""

    @property
    def name(self) -> str: ...

    @property
    def label(self) -> str: ...

    @property
    def aliases(self) -> tuple[str, ...]: ...

    @property
    def workloads(self) -> tuple[str, ...]: ...

    @property
    def default_for(self) -> tuple[str, ...]: ...

    @property
    def interactive(self) -> bool: ...

    @property
    def export_tool(self) -> str: ...

    @property
    def subdir(self) -> str: ...

    @property
    def recipe_globs(self) -> tuple[str, ...]: ...

    @property
    def recipe_field(self) -> Literal["script", "job_script"]: ...

    def default_image(self, recipes_dir: str) -> str: ...

    def default_recipes(self) -> tuple[RecipeFields, ...]: ...


_REGISTERED: dict[str, Registered] = {}
_loaded = False


def frameworks() -> Mapping[str, Registered]:
    """Every framework by name, in the order their ``listed`` numbers say (then the order
    their modules register them: file name order); the first call imports the modules."""
    global _loaded
    if not _loaded:
        _loaded = True
        package = importlib.import_module(_PACKAGE)
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{_PACKAGE}.{module.name}")
        ordered = sorted(_REGISTERED.values(), key=lambda fw: getattr(fw, "listed", 100))
        _REGISTERED.clear()
        _REGISTERED.update((fw.name, fw) for fw in ordered)
    return _REGISTERED


def check_framework_name(value: str) -> str:
    known = frameworks()
    if value not in known:
        raise ValueError(f"unknown framework {value!r}; known: {', '.join(known)}")
    return value


def workloads() -> tuple[str, ...]:
    """Every workload some framework runs, in registration order."""
    return tuple(dict.fromkeys(w for fw in frameworks().values() for w in fw.workloads))


def check_workload(value: str) -> str:
    known = workloads()
    if value not in known:
        raise ValueError(f"unknown workload {value!r}; known: {', '.join(known)}")
    return value


#: A registered framework's name (checked when a request or record is built or read back).
FrameworkName = Annotated[str, AfterValidator(check_framework_name)]
#: A workload some registered framework runs.
Workload = Annotated[str, AfterValidator(check_workload)]


def registered(name: str) -> Registered:
    """The registered framework called ``name`` (ValueError naming the known ones)."""
    return frameworks()[check_framework_name(name)]


def default_framework(workload: str) -> str | None:
    """The framework a workload runs on when the user names none."""
    return _default_in(frameworks(), workload)


def _default_in(known: Mapping[str, Registered], workload: str) -> str | None:
    return next((fw.name for fw in known.values() if workload in fw.default_for), None)


R = TypeVar("R", bound=Registered)


def register(fw: R) -> R:
    """Add a framework to the registry (its module calls this once, for its object)."""
    if not NAME_RE.fullmatch(fw.name):
        raise ValueError(f"framework name {fw.name!r}: use lower case letters, digits, - and _")
    taken = {n: o.name for o in _REGISTERED.values() for n in (o.name, *o.aliases)}
    for name in (fw.name, *fw.aliases):
        if name in taken:
            raise ValueError(f"framework name {name!r} is taken by {taken[name]}")
    for workload in fw.default_for:
        if workload not in fw.workloads:
            raise ValueError(f"{fw.name} is the default for {workload} but does not run it")
        if (other := _default_in(_REGISTERED, workload)) is not None:
            raise ValueError(f"{workload} already runs on {other} by default")
    _REGISTERED[fw.name] = fw
    return fw
