"""``cluster=auto``: which clusters could take a launch, and which of them Slurm says
starts it first. Pure: the caller asks Slurm (``sbatch --test-only``) and gives the
answers to :func:`choose`.

A cluster fits when the person may launch there (a policy rule covers them, or they
are an admin), the shape fits it (nodes within the cluster's and the person's limit),
and it has the image asked for (a name from its ``images``, or a custom path where
custom images are allowed). The recipe catalog is the same for every cluster; each
cluster's pre-flight still checks the recipe's file is there.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from cluster.site.profiles import ClusterProfile

AUTO = "auto"
NOW_TOLERANCE_S = 2.0  # Slurm's start time has whole seconds, read after the clock was
PlacementTarget = Annotated[str, Field(pattern=r"^(auto|[a-z0-9][a-z0-9_-]{0,31})$")]
PrincipalId = Annotated[str, Field(pattern=r"^(\*|[A-Za-z0-9][A-Za-z0-9._-]{0,63})$")]


class PlacementDefault(BaseModel):
    """Where a launch without ``cluster=`` goes for these people (Slack user ids, user
    group ids, ``*``): a cluster's name or ``auto``. The first matching entry wins."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    users: tuple[PrincipalId, ...] = ()
    """Slack user ids (`U...`) it covers, or `"*"` for everyone."""
    groups: tuple[PrincipalId, ...] = ()
    """Slack user group ids (`S...`) whose members it covers."""
    cluster: PlacementTarget
    """A cluster's name, or `auto`: of the clusters the person may use that fit the launch, the one
    where Slurm says it starts first."""

    def covers(self, user_id: str, group_ids: Collection[str]) -> bool:
        return (
            "*" in self.users
            or user_id in self.users
            or "*" in self.groups
            or any(group in self.groups for group in group_ids)
        )


class Placement(BaseModel):
    """``policy.placement``: per-team defaults for ``cluster=`` (a cluster's name, or
    ``auto``); the first entry that covers the person wins, and a launch that names its
    cluster keeps it. ``reroute_after_s`` (null: never, the default): a launch placed by
    ``cluster=auto`` still pending in Slurm this many seconds after its submit, while
    another cluster that fits would start it now, is moved there, once."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    defaults: tuple[PlacementDefault, ...] = ()
    """Per person or group, the cluster (or `auto`) of a launch without `cluster=`: the first entry
    covering the person wins."""
    reroute_after_s: float | None = Field(default=None, ge=10, le=7 * 86400)
    """A launch placed by `cluster=auto` still pending this long after submit, while another cluster
    that fits would start it now, is moved there once; null: never."""

    @property
    def groups(self) -> tuple[str, ...]:
        """The user groups the defaults name (see ``Policy.group_ids``)."""
        return tuple(g for entry in self.defaults for g in entry.groups)

    def default_for(self, user_id: str, group_ids: Collection[str]) -> str | None:
        """The ``cluster=`` a launch of this person gets when they give none (None: the
        config's default cluster)."""
        for entry in self.defaults:
            if entry.covers(user_id, group_ids):
                return entry.cluster
        return None


@dataclass(frozen=True)
class Fit:
    """A cluster ``cluster=auto`` may use, or (``why`` set) one it may not, and why."""

    cluster: str
    why: str = ""


def fits(
    profiles: Sequence[ClusterProfile],
    *,
    allowed: Collection[str],
    nodes: int,
    user_max: dict[str, int | None],
    image: str | None,
    custom_image_ok: Collection[str] = (),
) -> list[Fit]:
    """Each cluster in config order, with why it cannot take the launch ("" when it can).
    ``allowed``: the clusters a policy rule lets the person launch on; ``user_max``:
    their node limit per cluster; ``custom_image_ok``: where their custom image path is
    allowed."""
    found = []
    for profile in profiles:
        name = profile.name
        limit = min(profile.max_nodes, user_max.get(name) or profile.max_nodes)
        if name not in allowed:
            why = "you may not launch there"
        elif nodes > limit:
            why = f"at most {limit} nodes there"
        elif image is not None and image not in profile.images and name not in custom_image_ok:
            why = f"no image {image}"
        else:
            why = ""
        found.append(Fit(name, why))
    return found


@dataclass(frozen=True)
class Answer:
    """Slurm's answer for one cluster: seconds until the start (None: it cannot say),
    or the problem asking."""

    cluster: str
    wait_s: float | None
    problem: str = ""


def wait_words(answer: Answer) -> str:
    """``now``, ``in 2 h 10 min``, or ``n/a (why)``."""
    if answer.wait_s is None:
        return f"n/a ({answer.problem or 'Slurm cannot place it'})"
    if answer.wait_s <= NOW_TOLERANCE_S:
        return "now"
    return f"in {_duration(answer.wait_s)}"


def choose(answers: Sequence[Answer]) -> tuple[str, str] | None:
    """The cluster that starts first (ties: the first in ``answers``, config order) and
    why, as the thread says it (``a3u: now; a4: in 2 h 10 min``); None when Slurm
    could place it on none."""
    placed = [(a.wait_s, i, a) for i, a in enumerate(answers) if a.wait_s is not None]
    if not placed:
        return None
    # Waits said the same way tie ("now", "in 25 min"): each cluster's clock is read
    # to the second when asked, so the same start can come back a second apart.
    best = min(placed, key=lambda p: (_bucket(p[0]), p[1]))[2]
    why = "; ".join(f"{a.cluster}: {wait_words(a)}" for a in answers)
    return best.cluster, why


def _bucket(wait_s: float | None) -> float:
    if wait_s is None:
        return math.inf
    return 0.0 if wait_s <= NOW_TOLERANCE_S else float(max(1, math.ceil(wait_s / 60)))


def _duration(seconds: float) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
