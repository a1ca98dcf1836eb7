"""Checkpoint directories on the login node: deleting the ones a person chose to clear.

The command is built by a pure function that refuses anything but plain directory names
directly under the run's checkpoint directory whose name the framework's own rule reads a
step from: a name from a log (which anyone who can write to it could have shaped) never
becomes a path elsewhere, an option, or a glob.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import quote_path

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=+-]*")
DELETE_TIMEOUT_S = 120.0  # a checkpoint of a large model is many files on a shared FS


def delete_command(directory: str, names: Sequence[str], pattern: str) -> str:
    """``rm -rf`` of ``names`` inside ``directory``; ValueError when a name is not a plain
    checkpoint name (by ``pattern``, group 1 the step) or the directory is not a plain path."""
    parts = directory.rstrip("/").split("/")
    if not directory or ".." in parts or any(c in directory for c in "\n\0*?[]$`\\"):
        raise ValueError(f"not a checkpoint directory trainbot deletes in: {directory!r}")
    if not names:
        raise ValueError("no checkpoint to delete")
    for name in names:
        if not NAME_RE.fullmatch(name) or name in (".", "..") or not re.search(pattern, name):
            raise ValueError(f"not a checkpoint name trainbot deletes: {name!r}")
    quoted = " ".join(quote_path(f"{directory.rstrip('/')}/{name}") for name in names)
    return f"rm -rf -- {quoted}"


async def delete_checkpoints(
    pool: SSHPool, profile: ClusterProfile, directory: str, names: Sequence[str], pattern: str
) -> None:
    """Delete ``names`` under ``directory`` on the login node (as ``profile``'s user)."""
    command = delete_command(directory, names, pattern)
    await pool.run(profile.login, command, timeout_s=DELETE_TIMEOUT_S, cluster=profile.name)
    log.info("cluster=%s deleted %d checkpoints in %s", profile.name, len(names), directory)
