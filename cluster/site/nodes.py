"""Drain a faulty node and resume it: ``scontrol update nodename=<node> state=drain
reason=<why>`` and ``state=resume``, run on the login node like every other Slurm call.

Slurm lets only its operators and administrators do this (``scontrol`` refuses anyone
else with "Invalid user id" / "Access/permission denied"): the Unix user the call runs as
needs ``AdminLevel=Operator`` in Slurm's accounting (``sacctmgr modify user <name> set
adminlevel=Operator``). The command lines are built here, pure; the SSH call is one line.
"""

from __future__ import annotations

import logging
import re
import shlex
from typing import Literal

from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import HOSTNAME_RE
from cluster.ssh.pool import SSHPool

log = logging.getLogger(__name__)

NodeAction = Literal["drain", "resume"]
REASON_MAX = 200
UPDATE_TIMEOUT_S = 30.0
_REASON_UNSAFE = re.compile(r"[^\w .,:;()/@#+=-]")


def clean_reason(text: str) -> str:
    """A drain reason Slurm keeps as typed: one line, no quotes or shell characters."""
    return _REASON_UNSAFE.sub("", " ".join(text.split()))[:REASON_MAX].strip()


def build_node_update(node: str, action: NodeAction, reason: str = "") -> str:
    """The ``scontrol update`` line for ``action`` on ``node`` (a drain needs a reason)."""
    if not HOSTNAME_RE.fullmatch(node):
        raise ValueError(f"invalid node name {node!r}")
    argv = ["scontrol", "update", f"nodename={node}", f"state={action}"]
    if action == "drain":
        why = clean_reason(reason)
        if not why:
            raise ValueError("a drain needs a reason (letters, digits and punctuation)")
        argv.append(f"reason={why}")
    return shlex.join(argv)


def build_node_state(node: str) -> str:
    """``sinfo`` for one node: its state and reason, ``state|reason`` (``%T|%E``)."""
    if not HOSTNAME_RE.fullmatch(node):
        raise ValueError(f"invalid node name {node!r}")
    return shlex.join(["sinfo", "-h", "-N", "-n", node, "-o", "%T|%E"])


def parse_node_state(stdout: str) -> tuple[str, str]:
    """(state, reason) of the first line of :func:`build_node_state`'s output."""
    for line in stdout.splitlines():
        state, _, reason = line.strip().partition("|")
        if state:
            return state, "" if reason == "none" else reason
    return "", ""


async def update_node(
    pool: SSHPool, profile: ClusterProfile, node: str, action: NodeAction, reason: str = ""
) -> str:
    """Drain or resume ``node`` as ``profile``'s login user; Slurm's state for it after.
    Raises SlurmCommandFailed when Slurm refuses (a user without operator rights)."""
    command = build_node_update(node, action, reason)
    await pool.run(profile.login, command, timeout_s=UPDATE_TIMEOUT_S, cluster=profile.name)
    log.info("node=%s cluster=%s %s as %s", node, profile.name, action, profile.login.user)
    shown = await pool.run(
        profile.login, build_node_state(node), timeout_s=UPDATE_TIMEOUT_S, cluster=profile.name
    )
    return parse_node_state(shown.stdout)[0]
