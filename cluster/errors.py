"""The exception tree. One root; a few subclasses with keyword fields and a clear text.

Outside errors (asyncssh, OSError, redis) are translated into these where they enter.
"""

from __future__ import annotations


class TrainbotError(Exception):
    """Root of every error trainbot raises on purpose."""


class ConfigError(TrainbotError):
    """The configuration file or environment is invalid.

    ``source`` is the file (or "environment"), ``path`` the dotted field path.
    """

    def __init__(self, message: str, *, source: str = "", path: str = "") -> None:
        self.message = message
        self.source = source
        self.path = path
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.source
        if self.path:
            where = f"{where}: {self.path}" if where else self.path
        return f"{where}: {self.message}" if where else self.message


class ClusterError(TrainbotError):
    """Something on a cluster went wrong. ``cluster`` names the profile."""

    def __init__(self, message: str, *, cluster: str = "") -> None:
        self.message = message
        self.cluster = cluster
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.cluster}: {self.message}" if self.cluster else self.message


class ClusterUnreachable(ClusterError):
    """The login node cannot be reached or refused us (network, auth, host key)."""


class HostKeyMismatch(ClusterUnreachable):
    """The login node's host key is unknown or changed. Never silently accepted."""


class PersonRefused(ClusterUnreachable):
    """The login node refused a person's certificate: no such user there, or its sshd
    does not trust trainbot's user CA. Trying again will not help."""


class CommandTimeout(ClusterError):
    """A remote command did not finish within its timeout."""


class SlurmCommandFailed(ClusterError):
    """A remote command exited non-zero."""

    def __init__(self, *, command: str, returncode: int, stderr: str, cluster: str = "") -> None:
        self.command = command
        self.returncode = returncode
        self.stderr = stderr
        detail = stderr.strip().splitlines()[-1] if stderr.strip() else "no error output"
        super().__init__(f"'{command}' exited {returncode}: {detail}", cluster=cluster)
