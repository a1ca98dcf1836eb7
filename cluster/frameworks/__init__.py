"""One job model per training framework: ``framework(name)`` gives its object.

Adding a framework means one module here (a :class:`Framework` subclass) and its
entry in :data:`FRAMEWORKS`.
"""

from __future__ import annotations

from cluster.frameworks.base import Framework, FrameworkName, Tracking
from cluster.frameworks.nemo import NEMO
from cluster.frameworks.nemo_rl import NEMO_RL

FRAMEWORKS: dict[FrameworkName, Framework] = {fw.name: fw for fw in (NEMO, NEMO_RL)}

__all__ = ["FRAMEWORKS", "Framework", "FrameworkName", "Tracking", "framework"]


def framework(name: str) -> Framework:
    for known in FRAMEWORKS.values():
        if known.name == name:
            return known
    raise ValueError(f"unknown framework {name!r}; known: {', '.join(FRAMEWORKS)}")
