"""Opening one connection to a login node, through its jump hosts when it has them
(each hop an SSH connection tunnelled through the one before): at every hop the host
key checked against its known_hosts (an unknown or changed key is refused), then a
key file, or a certificate signed here for that one username (:func:`user_certificate`);
asyncssh's and OSError's exceptions translated into :mod:`cluster.errors`, naming the
hop that failed."""

from __future__ import annotations

import logging
import os
import secrets
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import asyncssh

from cluster.errors import ClusterUnreachable, ConfigError, HostKeyMismatch, PersonRefused
from cluster.ssh.principals import PersonRules

log = logging.getLogger(__name__)

CERT_SKEW_S = 60  # a certificate is valid from a minute ago: clocks differ a little


class HopLike(Protocol):
    """One SSH connection of a route: a jump host or the login node
    (``cluster.site.login.Hop`` and ``cluster.site.login.LoginNode`` fit)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def key_file(self) -> Path | None: ...
    @property
    def known_hosts_file(self) -> Path | None: ...
    @property
    def user_ca_key_file(self) -> Path | None: ...
    @property
    def cert_ttl_s(self) -> int: ...
    @property
    def key_id(self) -> str: ...
    @property
    def person_rules(self) -> PersonRules | None: ...


class LoginLike(HopLike, Protocol):
    """What the pool needs to know about a login node (``cluster.site.login.LoginNode`` fits):
    the node itself and the jump hosts in front of it."""

    def hops(self) -> Sequence[HopLike]: ...


def personal(login: HopLike) -> bool:
    """Whether the pool logs in as ``login`` with a certificate it signs."""
    return login.key_file is None and login.user_ca_key_file is not None


async def open_connection(
    login: LoginLike,
    cluster: str,
    *,
    keepalive_interval_s: float,
    keepalive_count_max: int,
    connect_timeout_s: float,
    act_as_people: bool,
) -> tuple[asyncssh.SSHClientConnection, float]:
    """A new connection, and when it must be replaced (monotonic; inf: never): through
    each jump host in turn, then to the login node. Closing it closes the hops too.
    ``act_as_people``: False refuses a login that needs a certificate (no CA key read)."""
    options = {
        "keepalive_interval": keepalive_interval_s,
        "keepalive_count_max": keepalive_count_max,
        "connect_timeout": connect_timeout_s,
    }
    tunnel: asyncssh.SSHClientConnection | None = None
    expires_at = float("inf")
    hops = [*login.hops(), login]
    try:
        for number, hop in enumerate(hops):
            conn, until = await connect_hop(
                hop,
                cluster,
                tunnel,
                describe_hop(hops, number),
                act_as_people,
                options,
                forwards=hop is not login,
            )
            conn.set_tunnel(tunnel)  # closing this connection closes the ones it rides on
            tunnel, expires_at = conn, min(expires_at, until)
    except BaseException:
        if tunnel is not None:
            tunnel.close()
        raise
    assert tunnel is not None
    return tunnel, expires_at


def _where(hop: HopLike) -> str:
    return f"{hop.user}@{hop.host}:{hop.port}"


def describe_hop(hops: Sequence[HopLike], number: int) -> str:
    """``trainer@login:22`` alone; with jump hosts, which hop and through which one."""
    hop = hops[number]
    if len(hops) == 1:
        return _where(hop)
    if number == len(hops) - 1:
        role = "login node"
    else:
        role = f"jump host {number + 1} of {len(hops) - 1}"
    before = hops[number - 1]
    via = f" through {before.host}:{before.port}" if number else ""
    return f"{role} {_where(hop)}{via}"


async def connect_hop(
    login: HopLike,
    cluster: str,
    tunnel: asyncssh.SSHClientConnection | None,
    where: str,
    act_as_people: bool,
    timing: dict[str, float],
    *,
    forwards: bool,
) -> tuple[asyncssh.SSHClientConnection, float]:
    """One SSH connection of a route (``tunnel``: the hop before it, or None); a jump
    host ``forwards`` to the next hop, so a certificate for it permits port forwarding."""
    known_hosts = login.known_hosts_file
    if known_hosts is None or not Path(known_hosts).is_file():
        raise HostKeyMismatch(
            f"no known_hosts file for {where} (got {known_hosts}); host keys are always checked",
            cluster=cluster,
        )
    options: dict[str, Any] = {
        **timing,
        "tunnel": tunnel or (),
        "port": login.port,
        "username": login.user,
        "known_hosts": str(known_hosts),
        "agent_path": None,
        "config": None,
    }
    expires_at = float("inf")
    if login.key_file is not None:
        options["client_keys"] = [str(login.key_file)]
    elif login.user_ca_key_file is not None:
        if not act_as_people:
            raise PersonRefused(
                f"this process does not act as people (it holds no user CA key), so it "
                f"cannot log in as {login.user}; a worker or poller process does that",
                cluster=cluster,
            )
        options["client_keys"] = [user_certificate(login, cluster, forwarding=forwards)]
        expires_at = time.monotonic() + login.cert_ttl_s
    try:
        conn = await asyncssh.connect(login.host, **options)
    except asyncssh.HostKeyNotVerifiable as exc:
        raise HostKeyMismatch(
            f"host key of {where} is unknown or changed; not in {known_hosts} ({exc})",
            cluster=cluster,
        ) from exc
    except asyncssh.PermissionDenied as exc:
        if login.key_file is None and login.user_ca_key_file is not None:
            raise PersonRefused(
                f"authentication refused by {where} (a certificate from trainbot's CA): "
                f"there may be no user {login.user} there, or its sshd does not trust the "
                "CA (TrustedUserCAKeys); ask a trainbot admin",
                cluster=cluster,
            ) from exc
        raise ClusterUnreachable(
            f"authentication refused by {where}: {exc}", cluster=cluster
        ) from exc
    except (asyncssh.Error, OSError, TimeoutError) as exc:
        raise ClusterUnreachable(f"cannot connect to {where}: {exc}", cluster=cluster) from exc
    return conn, expires_at


def check_ca_key(path: Path) -> None:
    """Refuse a user CA key file that is not the running user's own, or that others may
    read or write (as sshd refuses a private host key with loose permissions)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"cannot read the user CA key {path}: {exc.strerror}") from exc
    loose = stat.S_IMODE(info.st_mode) & 0o077
    owner = os.geteuid()
    if info.st_uid != owner or loose:
        raise ConfigError(
            f"the user CA key {path} must be owned by the user trainbot runs as (uid "
            f"{owner}) and readable by it alone (mode 0600 or 0400); it is owned by uid "
            f"{info.st_uid} with mode {stat.S_IMODE(info.st_mode):04o}: anyone who reads it "
            f"can log in as any person. Fix: chown {owner} {path}; chmod 600 {path}"
        )


def user_certificate(
    login: HopLike, cluster: str = "", *, forwarding: bool = False
) -> tuple[asyncssh.SSHKey, asyncssh.SSHCertificate]:
    """A fresh key pair and a certificate for it, signed by the login's user CA: valid
    for ``login.user`` alone, for ``cert_ttl_s``, with no pty and no forwarding (port
    forwarding only with ``forwarding``: a jump host's, which forwards to the next hop),
    a random serial and ``login.key_id`` as its key id (sshd logs both with the login). A
    person's login (``login.person_rules``) is signed only for a name those rules allow."""
    assert login.user_ca_key_file is not None
    rules = login.person_rules
    problem = rules.name_problem(login.user) if rules is not None else ""
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
    try:
        check_ca_key(login.user_ca_key_file)
    except ConfigError as exc:
        raise PersonRefused(str(exc), cluster=cluster) from exc
    try:
        ca = asyncssh.read_private_key(str(login.user_ca_key_file))
    except (OSError, asyncssh.KeyImportError) as exc:
        raise ClusterUnreachable(
            f"cannot read the user CA key {login.user_ca_key_file}: {exc}", cluster=cluster
        ) from exc
    key = asyncssh.generate_private_key("ssh-ed25519")
    now = time.time()
    serial = secrets.randbits(63) + 1
    cert = ca.generate_user_certificate(
        key,
        login.key_id,
        serial=serial,
        principals=[login.user],
        valid_after=int(now - CERT_SKEW_S),
        valid_before=int(now + login.cert_ttl_s),
        permit_x11_forwarding=False,
        permit_agent_forwarding=False,
        permit_port_forwarding=forwarding,
        permit_pty=False,
        permit_user_rc=False,
    )
    log.info(
        "cluster=%s signed a certificate for %s: serial %d, key id %s",
        cluster,
        login.user,
        serial,
        login.key_id,
    )
    return key, cert
