"""Checks for single values of the command language (``nodes=``, ``time=``, ...).

Each check takes the user's text and returns the canonical value or raises a
CommandError saying what is wrong and what is valid. The patterns here are also
used by the request models, so a request is safe however it was built: no value
can carry whitespace, quotes or shell metacharacters, and none starts with ``-``.
"""

from __future__ import annotations

import re

from cluster.site.framework_registry import frameworks
from cluster.site.image_refs import is_registry_ref
from cluster.site.profile_fields import IMAGE_NAME_PATTERN, SLURM_NAME_PATTERN
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import SLURM_TIME_FORMATS, slurm_time_seconds
from commands.errors import CommandError
from commands.suggest import did_you_mean, join_names, printable, quote

NAME_MAX_CHARS = 48
NAME_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9_-]{{0,{NAME_MAX_CHARS - 1}}}$"
PARTITION_PATTERN = SLURM_NAME_PATTERN
IMAGE_PATH_PATTERN = r"^(/|~/)[A-Za-z0-9._+@/-]{0,250}\.sqsh$"
LAUNCH_ID_PATTERN = r"^L-[0-9a-f]{4,12}$"
SLURM_JOB_ID_PATTERN = r"^[1-9][0-9]{0,9}$"
MAX_LOG_LINES = 5000
_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


def _digits(key: str, raw: str, low: int, high: int, example: int) -> int:
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        raise CommandError(
            f"{key}={printable(raw)[:40]} is not a whole number. "
            f"Give a number from {low} to {high}, for example {key}={example}.",
            field=key,
        )
    return int(raw)


def parse_node(raw: str) -> int:
    """``node=<n>``: a node of an allocation, counted from 0 (as ``nemorlinteractive n``)."""
    return _digits("node", raw, 0, 4095, 1)


def parse_nodes(raw: str, profile: ClusterProfile, user_max: int | None = None) -> int:
    """Nodes for a launch: 1 up to the cluster's (and, when given, the user's) maximum."""
    limit = profile.max_nodes if user_max is None else min(user_max, profile.max_nodes)
    nodes = _digits("nodes", raw, 1, limit, 1)
    if nodes < 1:
        raise CommandError(f"nodes={raw} is not valid: at least 1 node.", field="nodes")
    if nodes > limit:
        if user_max is not None and user_max < profile.max_nodes:
            why = f"max {limit} for you; the cluster allows {profile.max_nodes}"
        else:
            why = f"max {limit}"
        raise CommandError(
            f"nodes={nodes} is more than {profile.name} allows ({why}). "
            f"Give nodes=1 to nodes={limit}.",
            field="nodes",
            suggestion=str(limit),
        )
    return nodes


def check_name(raw: str) -> str:
    """A Slurm-safe job name: letters, digits, ``-`` and ``_``, at most 48, no leading punctuation.

    No ``.``: nemo-run puts the experiment name after a ``.`` in the Slurm job
    name, and the launch id is found again by the name's last ``-`` part."""
    if re.fullmatch(NAME_PATTERN, raw):
        return raw
    fixed = re.sub(r"[^A-Za-z0-9_-]+", "-", raw).strip("-_")[:NAME_MAX_CHARS]
    example = fixed if fixed and re.fullmatch(NAME_PATTERN, fixed) else "my-run"
    raise CommandError(
        f"name={quote(raw)} is not a valid job name: use letters, digits, '-' and '_', "
        f"starting with a letter or digit, at most {NAME_MAX_CHARS} characters. "
        f"For example name={example}.",
        field="name",
        suggestion=example,
    )


def check_time(raw: str) -> str:
    """A Slurm time limit in one of Slurm's formats, more than zero."""
    try:
        slurm_time_seconds(raw)
    except ValueError as exc:
        why = "only the digits 0-9 and : - are allowed" if not raw.isascii() else str(exc)
        raise CommandError(
            f"time={quote(raw)} is not a valid time limit: {why}. "
            f"Use {SLURM_TIME_FORMATS}, for example time=04:00:00.",
            field="time",
        ) from None
    return raw


def check_partition(raw: str) -> str:
    """A Slurm partition name. Whether it exists is checked on the cluster later."""
    if re.fullmatch(PARTITION_PATTERN, raw):
        return raw
    raise CommandError(
        f"partition={quote(raw)} is not a valid partition name: use letters, digits, '-' "
        "and '_', starting with a letter or digit.",
        field="partition",
    )


def check_image(raw: str, profile: ClusterProfile) -> str:
    """An image: a name from the cluster's ``images`` list, a ``.sqsh`` path, or a registry
    reference (:mod:`cluster.site.image_refs`; pyxis imports it when the job starts).

    Names are the safe default: the cluster's operators chose those images. Where custom
    images are allowed, another plain name is an image ``/images import`` or ``fetch`` made
    in the cluster's image directory (``<image_dir>/<name>.sqsh``), a path like any other.
    A path is accepted only when the profile allows custom images, only as an
    absolute or ``~/`` path to a squashfs file of plain characters: pyxis then
    runs a file that already sits on the cluster, never pulls from a registry,
    and the path is safe in a shell line without quoting.
    """
    if raw in profile.images:
        return raw
    names = join_names(list(profile.images))
    if not profile.allow_custom_images:
        raise CommandError(
            f"image={quote(raw)} is not an image of {profile.name}. "
            f"Images there: {names}.{did_you_mean(raw, list(profile.images))}",
            field="image",
        )
    if re.fullmatch(IMAGE_PATH_PATTERN, raw) and ".." not in raw.split("/"):
        return raw
    if is_registry_ref(raw):  # pyxis imports it at the job's start
        return raw
    looks_like_path = "/" in raw or raw.endswith(".sqsh")
    if looks_like_path and not raw.startswith(("/", "~/")):
        raise CommandError(
            f"image={quote(raw)} is a relative path: start it with / or ~/, "
            f"for example image=~/{raw.lstrip('./')}.",
            field="image",
        )
    if re.fullmatch(IMAGE_NAME_PATTERN, raw) and not looks_like_path:
        # An image /images import or fetch made: <image_dir>/<name>.sqsh. Pre-flight says
        # when it is not there; the custom-image policy holds for it as for any path.
        return profile.resolve_image(raw, "")
    raise CommandError(
        f"image={quote(raw)} is not valid: give an image name ({names}), an absolute "
        "or ~/ path to a .sqsh file of letters, digits and . _ + @ - /, or a registry "
        "reference such as nvcr.io/nvidia/nemo:26.02, nvcr.io#nvidia/nemo:26.02 or "
        "docker://nvcr.io#nvidia/nemo-rl:v0.5.0.",
        field="image",
    )


def parse_bool(key: str, raw: str) -> bool:
    """``true|false|yes|no|1|0``, any case."""
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise CommandError(
        f"{key}={quote(raw)} is not valid: use {key}=true or {key}=false "
        "(yes/no and 1/0 work too).",
        field=key,
    )


def parse_framework(raw: str) -> str:
    """A framework's name, or one of its aliases (``nemo_rl`` is read as ``nemo-rl``)."""
    lowered = raw.lower()
    known = frameworks()
    for framework in known.values():
        if lowered == framework.name or lowered in framework.aliases:
            return framework.name
    names = list(known)
    raise CommandError(
        f"framework={quote(raw)} is not known. Frameworks: {join_names(names)}."
        f"{did_you_mean(lowered, names)}",
        field="framework",
    )


MAX_HISTORY_DAYS = 400


def parse_days(raw: str) -> int:
    """How far back ``/jobs history`` looks: 1 to :data:`MAX_HISTORY_DAYS` days."""
    return _count("days", raw, MAX_HISTORY_DAYS, 7)


def parse_lines(raw: str) -> int:
    """Lines of log to show: 1 to :data:`MAX_LOG_LINES`."""
    return _count("lines", raw, MAX_LOG_LINES, 50)


MAX_KEEP_BEST = 100


def parse_keep(raw: str) -> int:
    """``/checkpoints keep=K``: how many of the best checkpoints to keep, 1 to 100."""
    return _count("keep", raw, MAX_KEEP_BEST, 2)


def _count(key: str, raw: str, high: int, example: int) -> int:
    """``key=raw`` as a whole number from 1 to ``high``, or a CommandError saying which."""
    value = _digits(key, raw, 1, high, example)
    if not 1 <= value <= high:
        raise CommandError(
            f"{key}={value} is out of range: give 1 to {high}.",
            field=key,
            suggestion=str(max(1, min(value, high))),
        )
    return value
