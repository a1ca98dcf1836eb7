"""Whether a username on a login node is a person's account, asked of the login node.

An email-derived name (``identity.from_email``) must name a person: an existing
user whose uid lies in the site's range for people, ``UID_MIN`` to ``UID_MAX`` of
the login node's ``/etc/login.defs`` (shadow-utils' defaults 1000 and 60000 when
it sets none), never a system account such as ``daemon``, ``slurm`` or ``nobody``.
One SSH round trip as the shared account: ``getent passwd NAME`` prints the
passwd line (``name:x:uid:gid:...``, nothing and exit 2 for an unknown name).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from cluster.site.login import CLUSTER_USER_PATTERN
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool

# useradd's defaults when login.defs sets none: shadow-maint/shadow, lib/find_new_uid.c
# (commit 81078c57fb8aa38d3c49817abf8375d70b5943b5), getdef_ulong ("UID_MIN", 1000UL)
# and getdef_ulong ("UID_MAX", 60000UL).
UID_MIN_DEFAULT = 1000
UID_MAX_DEFAULT = 60000
_SCRIPT = (
    "getent passwd -- {name} | cut -d: -f3; echo '--'; "
    'awk \'$1=="UID_MIN"||$1=="UID_MAX"{{print $1, $2}}\' /etc/login.defs 2>/dev/null; true'
)


@dataclass(frozen=True)
class Account:
    """A name's uid on the login node (None: no such user) and the range for people."""

    name: str
    uid: int | None
    uid_min: int = UID_MIN_DEFAULT
    uid_max: int = UID_MAX_DEFAULT

    def problem(self) -> str:
        """Why this is not a person's account ("" when it is)."""
        if self.uid is None:
            return f"there is no user {self.name} on the login node"
        if not self.uid_min <= self.uid <= self.uid_max:
            return (
                f"{self.name} is a system account on the login node (uid {self.uid}; "
                f"people have {self.uid_min} to {self.uid_max})"
            )
        return ""


def parse_account(name: str, out: str) -> Account:
    """What :data:`_SCRIPT` printed: the uid, ``--``, then ``UID_MIN n`` / ``UID_MAX n``."""
    head, _, defs = out.partition("--")
    uid_text = head.strip()
    uid = int(uid_text) if uid_text.isdigit() else None
    limits = {"UID_MIN": UID_MIN_DEFAULT, "UID_MAX": UID_MAX_DEFAULT}
    for line in defs.splitlines():
        key, _, value = line.strip().partition(" ")
        if key in limits and value.strip().isdigit():
            limits[key] = int(value.strip())
    return Account(name, uid, limits["UID_MIN"], limits["UID_MAX"])


async def lookup_account(
    pool: SSHPool, profile: ClusterProfile, name: str, *, timeout_s: float = 20.0
) -> Account:
    """``name``'s account on the cluster's login node, asked as the shared account."""
    if not re.fullmatch(CLUSTER_USER_PATTERN, name):
        return Account(name, None)
    result = await pool.run(
        profile.login,
        _SCRIPT.format(name=shlex.quote(name)),
        timeout_s=timeout_s,
        check=False,
        cluster=profile.name,
    )
    return parse_account(name, result.stdout)
