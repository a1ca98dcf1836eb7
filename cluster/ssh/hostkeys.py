"""The host keys along a route to a login node, for an admin to confirm
(``trainbot doctor --known-hosts``): each jump host's, then the login node's, as
known_hosts lines, each said to be in that hop's known_hosts file or not.

A hop's key is read without logging in (``asyncssh.get_server_host_key``). To read the
next hop's key the route must go through this one, which means logging in to it: that
happens only once its key is already in its known_hosts file (never to a host whose
key nobody confirmed), so a new route is confirmed one hop per run.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from cluster.errors import TrainbotError
from cluster.ssh.connect import HopLike, LoginLike, connect_hop, describe_hop


@dataclass(frozen=True)
class SeenKey:
    """One hop's host key: its known_hosts line, and whether that hop's known_hosts file
    already trusts it (None: the key could not be read; ``note`` says why)."""

    hop: str
    line: str
    known: bool | None
    note: str = ""
    fingerprint: str = ""


def known_hosts_line(host: str, port: int, key: asyncssh.SSHKey) -> str:
    """``host ssh-ed25519 AAAA...`` (``[host]:port`` off port 22), as OpenSSH writes it."""
    name = host if port == 22 else f"[{host}]:{port}"
    return f"{name} {key.get_algorithm()} {base64.b64encode(key.public_data).decode()}"


def trusted(known_hosts: Path | None, host: str, port: int, key: asyncssh.SSHKey) -> bool:
    """Whether ``known_hosts`` (a file) holds ``key`` for ``host`` at ``port``."""
    if known_hosts is None or not known_hosts.is_file():
        return False
    try:
        keys = asyncssh.read_known_hosts(str(known_hosts)).match(host, "", port)[0]
    except (OSError, ValueError, asyncssh.Error):
        return False
    return any(k.public_data == key.public_data for k in keys)


async def route_host_keys(
    login: LoginLike, cluster: str = "", *, connect_timeout_s: float = 10.0
) -> list[SeenKey]:
    """The host keys seen along ``login``'s route, first hop first; it stops at the
    first hop whose key is not trusted yet (the next one cannot be reached safely)."""
    hops: list[HopLike] = [*login.hops(), login]
    seen: list[SeenKey] = []
    tunnel: asyncssh.SSHClientConnection | None = None
    timing = {"connect_timeout": connect_timeout_s}
    try:
        for number, hop in enumerate(hops):
            where = describe_hop(hops, number)
            try:
                key = await asyncio.wait_for(
                    asyncssh.get_server_host_key(hop.host, hop.port, tunnel=tunnel or ()),
                    connect_timeout_s,
                )
            except (asyncssh.Error, OSError, TimeoutError) as exc:
                seen.append(SeenKey(where, "", None, f"cannot read its host key: {exc}"))
                break
            if key is None:
                seen.append(SeenKey(where, "", None, "it showed no host key"))
                break
            known = trusted(hop.known_hosts_file, hop.host, hop.port, key)
            line = known_hosts_line(hop.host, hop.port, key)
            seen.append(SeenKey(where, line, known, fingerprint=key.get_fingerprint()))
            if hop is login:
                break
            if not known:
                seen.append(
                    SeenKey(
                        describe_hop(hops, number + 1),
                        "",
                        None,
                        f"not read: confirm the key above, add it to {hop.known_hosts_file}, "
                        "and run this again",
                    )
                )
                break
            try:
                conn, _ = await connect_hop(
                    hop, cluster, tunnel, where, True, dict(timing), forwards=True
                )
            except TrainbotError as exc:
                note = f"not read: cannot go through {hop.host}:{hop.port} ({exc})"
                seen.append(SeenKey(describe_hop(hops, number + 1), "", None, note))
                break
            conn.set_tunnel(tunnel)
            tunnel = conn
    finally:
        if tunnel is not None:
            tunnel.close()
    return seen
