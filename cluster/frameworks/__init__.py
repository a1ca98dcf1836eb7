"""One job model per training framework, one module each: ``framework(name)`` gives its object.

A framework module defines a :class:`Framework` subclass and registers its one
object (``NEMO = register(NeMo())``). Importing this package imports every
module in it, in file name order, so a new framework is a new module here and
nothing else names it.
"""

from __future__ import annotations

import importlib
import pkgutil

from cluster.frameworks.base import (
    FRAMEWORKS,
    Framework,
    FrameworkName,
    Tracking,
    Workload,
    default_framework,
    framework,
    interactive_framework,
    register,
    workloads,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "FRAMEWORKS",
    "Framework",
    "FrameworkName",
    "Tracking",
    "Workload",
    "default_framework",
    "framework",
    "interactive_framework",
    "register",
    "workloads",
]
