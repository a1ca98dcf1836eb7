"""The pool: one long-lived connection per login node (keepalive on), a cap on the
channels open on it at once, reconnects with backoff when it drops, and a timeout on
every command. A person's connection (a certificate signed here) is replaced once its
certificate has expired (the old one is closed after the commands on it had time to
finish), and closed once idle for ``person_idle_s``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

import asyncssh

from cluster.errors import (
    ClusterUnreachable,
    CommandTimeout,
    HostKeyMismatch,
    PersonRefused,
    SlurmCommandFailed,
)
from cluster.ssh.connect import LoginLike, open_connection, personal
from cluster.ssh.principals import parse_uid, uid_command

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    stdout: str
    stderr: str
    returncode: int


@dataclass
class PoolStats:
    """Counters for measurement: round trips (commands run) and connections made.

    ``observers`` are told ``(cluster, seconds)`` after each round trip that opened a
    channel (however it ended): how the service measures SSH latency without this
    package knowing about metrics."""

    round_trips: int = 0
    connects: int = 0
    by_cluster: dict[str, int] = field(default_factory=dict)
    observers: list[Callable[[str, float], None]] = field(default_factory=list)

    def timed(self, cluster: str, seconds: float) -> None:
        for observer in self.observers:
            try:
                observer(cluster, seconds)
            except Exception:
                log.exception("ssh timing observer failed")


_Key = tuple[str, int, str, str, str, str, str, str]
RETIRE_GRACE_S = 300.0  # an expired connection's commands get this long to finish
PERSON_IDLE_S = 60.0  # a person's connection unused this long is closed
UID_TTL_S = 600.0  # a person's uid, asked of the login node before the CA signs, is kept this long


class _Link:
    """One login node: its connection, the lock that guards (re)connecting, the channel cap."""

    def __init__(self, max_channels: int) -> None:
        self.conn: asyncssh.SSHClientConnection | None = None
        self.lock = asyncio.Lock()
        self.channels = asyncio.Semaphore(max_channels)
        self.failures = 0
        self.retry_at = 0.0
        self.expires_at = float("inf")  # when its certificate runs out (monotonic)
        self.busy = 0  # commands using or waiting for it
        self.idle: asyncio.TimerHandle | None = None


class SSHPool:
    """Shared SSH connections to login nodes. Use as ``async with SSHPool() as pool``."""

    def __init__(
        self,
        *,
        max_channels: int = 16,
        connect_timeout_s: float = 10.0,
        keepalive_interval_s: float = 15.0,
        keepalive_count_max: int = 3,
        connect_attempts: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        act_as_people: bool = True,
        person_idle_s: float = PERSON_IDLE_S,
    ) -> None:
        self.max_channels = max_channels
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_interval_s = keepalive_interval_s
        self.keepalive_count_max = keepalive_count_max
        self.connect_attempts = connect_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.act_as_people = act_as_people  # False: never reads a user CA key
        self.person_idle_s = person_idle_s
        self.stats = PoolStats()
        self._links: dict[_Key, _Link] = {}
        self._retired: set[asyncssh.SSHClientConnection] = set()
        self._uids: dict[tuple[str, int, str], tuple[float, int | None]] = {}

    async def __aenter__(self) -> SSHPool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection."""
        links, self._links = list(self._links.values()), {}
        for link in links:
            if link.idle is not None:
                link.idle.cancel()
        conns = [link.conn for link in links if link.conn is not None]
        conns += list(self._retired)
        self._retired.clear()
        for conn in conns:
            conn.close()
            await conn.wait_closed()

    async def run(
        self,
        login: LoginLike,
        command: str,
        *,
        input: str | None = None,
        timeout_s: float,
        check: bool = True,
        cluster: str = "",
    ) -> Result:
        """Run ``command`` on the login node; stdin gets ``input`` (then EOF).

        Raises ClusterUnreachable (HostKeyMismatch for host keys), CommandTimeout,
        and, when ``check`` is true, SlurmCommandFailed for a non-zero exit.
        """
        link = self._link(login)
        link.busy += 1
        try:
            return await self._run(link, login, command, input, timeout_s, check, cluster)
        finally:
            link.busy -= 1
            if personal(login):
                self._close_when_idle(link, login)

    async def _run(
        self,
        link: _Link,
        login: LoginLike,
        command: str,
        input: str | None,
        timeout_s: float,
        check: bool,
        cluster: str,
    ) -> Result:
        deadline = time.monotonic() + timeout_s
        async with link.channels:
            started = time.monotonic()
            process = await self._open(link, login, command, cluster, deadline)
            self.stats.round_trips += 1
            self.stats.by_cluster[cluster] = self.stats.by_cluster.get(cluster, 0) + 1
            try:
                remaining = max(deadline - time.monotonic(), 0.001)
                data = input.encode() if input is not None else None
                out, err = await asyncio.wait_for(process.communicate(data), remaining)
                await asyncio.wait_for(process.wait_closed(), max(deadline - time.monotonic(), 1))
            except asyncio.CancelledError:
                _stop(process)  # the caller gave up (a lost lock): the remote command ends too
                raise
            except TimeoutError:
                _stop(process)
                raise CommandTimeout(
                    f"command did not finish within {timeout_s:g} s: {_short(command)}",
                    cluster=cluster,
                ) from None
            except (asyncssh.Error, OSError) as exc:
                self._drop(link)
                raise ClusterUnreachable(
                    f"connection lost while running a command: {exc}", cluster=cluster
                ) from exc
            finally:
                self.stats.timed(cluster, time.monotonic() - started)
        stdout, stderr = _text(out), _text(err)
        rc = process.returncode
        if rc is None:
            # The channel closed without an exit status or signal: the connection went away
            # while the command ran. It may have done its work (an sbatch, say), so this is
            # an unknown outcome for the caller, never a command that failed.
            self._drop(link)
            raise ClusterUnreachable(
                f"connection lost before the command's exit status came: {_short(command)}",
                cluster=cluster,
            )
        if check and rc != 0:
            raise SlurmCommandFailed(
                command=_short(command), returncode=rc, stderr=stderr, cluster=cluster
            )
        return Result(stdout=stdout, stderr=stderr, returncode=rc)

    def _link(self, login: LoginLike) -> _Link:
        key: _Key = (
            login.host,
            login.port,
            login.user,
            str(login.key_file or ""),
            str(login.known_hosts_file or ""),
            str(login.user_ca_key_file or ""),
            login.key_id if personal(login) else "",
            ",".join(
                f"{hop.user}@{hop.host}:{hop.port}|{hop.key_file}|{hop.known_hosts_file}"
                for hop in login.hops()
            ),
        )
        if key not in self._links:
            self._links[key] = _Link(self.max_channels)
        return self._links[key]

    def _close_when_idle(self, link: _Link, login: LoginLike) -> None:
        """Close a person's connection, and forget it, once unused for ``person_idle_s``."""
        if link.idle is not None:
            link.idle.cancel()

        def close() -> None:
            link.idle = None
            if link.busy:
                return  # in use again: its own end sets the next timer
            self._drop(link)
            for key, known in list(self._links.items()):
                if known is link:
                    del self._links[key]
            log.debug("closed idle ssh connection as %s (%s)", login.user, login.key_id)

        link.idle = asyncio.get_running_loop().call_later(self.person_idle_s, close)

    def _drop(self, link: _Link) -> None:
        if link.conn is not None:
            link.conn.close()
            link.conn = None

    def _retire(self, link: _Link) -> None:
        """Stop handing out an expired connection; close it once its commands had time."""
        old, link.conn = link.conn, None
        if old is None:
            return
        self._retired.add(old)

        def close() -> None:
            self._retired.discard(old)
            old.close()

        asyncio.get_running_loop().call_later(RETIRE_GRACE_S, close)

    async def _open(
        self, link: _Link, login: LoginLike, command: str, cluster: str, deadline: float
    ) -> asyncssh.SSHClientProcess[bytes]:
        """A process channel; a broken pooled connection is replaced once before giving up."""
        for attempt in (1, 2):
            conn = await self._connection(link, login, cluster, deadline)
            try:
                return await conn.create_process(command, encoding=None)
            except (asyncssh.Error, OSError) as exc:
                self._drop(link)
                if attempt == 2:
                    raise ClusterUnreachable(
                        f"cannot open a channel: {exc}", cluster=cluster
                    ) from exc
                log.info("cluster=%s ssh channel failed (%s); reconnecting", cluster, exc)
        raise AssertionError("unreachable")

    async def _connection(
        self, link: _Link, login: LoginLike, cluster: str, deadline: float
    ) -> asyncssh.SSHClientConnection:
        async with link.lock:
            if link.conn is not None and time.monotonic() >= link.expires_at:
                self._retire(link)
            if link.conn is not None and not link.conn.is_closed():
                return link.conn
            link.conn = None
            await self._vet_person(login, cluster, deadline)
            last: ClusterUnreachable | None = None
            for attempt in range(self.connect_attempts):
                wait_s = link.retry_at - time.monotonic()
                if wait_s > 0:
                    if time.monotonic() + wait_s > deadline:
                        break
                    await asyncio.sleep(wait_s)
                try:
                    link.conn, link.expires_at = await open_connection(
                        login,
                        cluster,
                        keepalive_interval_s=self.keepalive_interval_s,
                        keepalive_count_max=self.keepalive_count_max,
                        connect_timeout_s=self.connect_timeout_s,
                        act_as_people=self.act_as_people,
                    )
                except (HostKeyMismatch, PersonRefused):
                    raise
                except ClusterUnreachable as exc:
                    last = exc
                    link.failures += 1
                    backoff = min(self.backoff_s * 2 ** (link.failures - 1), self.max_backoff_s)
                    link.retry_at = time.monotonic() + backoff
                    log.warning(
                        "cluster=%s ssh connect attempt %d failed: %s", cluster, attempt + 1, exc
                    )
                    continue
                link.failures, link.retry_at = 0, 0.0
                self.stats.connects += 1
                return link.conn
            raise last or ClusterUnreachable("login node not reachable", cluster=cluster)

    async def _vet_person(self, login: LoginLike, cluster: str, deadline: float) -> None:
        """Before the CA signs for a person: the login node, asked as the shared account,
        must say the name is a user whose uid lies in the people's range (cached a while)."""
        rules = login.person_rules
        if rules is None or not personal(login) or not self.act_as_people:
            return
        problem = rules.name_problem(login.user)  # signing refuses these too, saying so
        if problem:
            return
        key = (login.host, login.port, login.user)
        known = self._uids.get(key)
        if known is None or time.monotonic() - known[0] > UID_TTL_S:
            timeout_s = max(min(deadline - time.monotonic(), 20.0), 1.0)
            result = await self.run(
                rules.shared_login, uid_command(login.user), timeout_s=timeout_s, check=False,
                cluster=cluster,
            )  # fmt: skip
            known = (time.monotonic(), parse_uid(result.stdout))
            self._uids[key] = known
        problem = rules.uid_problem(login.user, known[1])
        if problem:
            log.warning(
                "cluster=%s the user CA refused to sign for %s (key id %s): %s",
                cluster,
                login.user,
                login.key_id,
                problem,
            )
            raise PersonRefused(
                f"trainbot's CA signs no certificate for {login.user}: {problem}", cluster=cluster
            )


def _text(data: object) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return str(data or "")


def _short(command: str, limit: int = 200) -> str:
    line = " ".join(command.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _stop(process: asyncssh.SSHClientProcess[bytes]) -> None:
    """End a remote command this side no longer waits for: SIGTERM to it (sshd delivers
    the channel's "signal" request, RFC 4254 section 6.9), then close the channel."""
    try:
        process.send_signal("TERM")
    except (asyncssh.Error, OSError):  # the channel is already gone
        pass
    process.close()
