"""The names the user CA may sign a certificate for, as a person.

A certificate for a person (a login reached with ``as_user``) is signed only for a
name that could be a person's account: never root, a well-known system account, the
shared account, a name of ``identity.reserved``, a name outside ``identity.name_pattern``,
and (asked of the login node, as the shared account, before the first connection) never
a user whose uid lies outside ``identity.uid_min``..``identity.uid_max``. Whatever a
launch record in Redis or an ask says, these checks sit where the CA signs, so no path
above them can get a certificate for such a name.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

# Never a person, whatever the config or a record says (the usual Debian/RHEL system users).
SYSTEM_USERS = frozenset(
    {
        "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp",
        "proxy", "www-data", "backup", "list", "irc", "gnats", "nobody", "systemd-network",
        "systemd-resolve", "messagebus", "sshd", "slurm", "munge", "mysql", "redis", "admin",
        "adm", "halt", "operator", "shutdown", "ftp", "postfix", "polkitd", "nfsnobody",
    }
)  # fmt: skip
UID_MIN_DEFAULT = 1000  # shadow-utils' UID_MIN default (accounts.py cites the source)
UID_MAX_DEFAULT = 60000
UID_SCRIPT = "getent passwd -- {name} | cut -d: -f3"


@dataclass(frozen=True)
class PersonRules:
    """Which names the CA signs for as a person on one cluster. ``shared_login`` is the
    shared account's login (the uid is asked there); ``shared`` its name."""

    shared: str
    shared_login: Any = field(compare=False, repr=False)  # a LoginLike (no cycle to connect.py)
    uid_min: int = UID_MIN_DEFAULT
    uid_max: int = UID_MAX_DEFAULT
    name_pattern: str = r"^[a-z_][a-z0-9_.-]{0,31}$"
    reserved: frozenset[str] = frozenset()

    def name_problem(self, name: str) -> str:
        """Why the CA must not sign for ``name`` as a person ("" when the name may be one)."""
        if not re.fullmatch(r"[a-z_][a-z0-9_.-]{0,31}", name):
            return f"{name!r} is not a Unix user name"
        if name in SYSTEM_USERS:
            return f"{name} is a system account"
        if name == self.shared:
            return f"{name} is the shared account, never a person's"
        if name in self.reserved:
            return f"{name} is reserved (identity.reserved)"
        if not re.fullmatch(self.name_pattern, name):
            return f"{name} does not match identity.name_pattern ({self.name_pattern})"
        return ""

    def uid_problem(self, name: str, uid: int | None) -> str:
        """Why the login node's answer about ``name`` rules it out ("" when it is a person)."""
        if uid is None:
            return f"there is no user {name} on the login node"
        if not self.uid_min <= uid <= self.uid_max:
            return (
                f"{name} has uid {uid}, outside the people's range {self.uid_min}..{self.uid_max} "
                "(identity.uid_min, identity.uid_max)"
            )
        return ""


def uid_command(name: str) -> str:
    """The command that prints ``name``'s uid (nothing for an unknown name)."""
    return UID_SCRIPT.format(name=shlex.quote(name))


def parse_uid(out: str) -> int | None:
    text = out.strip()
    return int(text) if text.isdigit() else None
