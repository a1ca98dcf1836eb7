"""The SSH pool on the dev login node: sharing, caps, errors, host keys, reconnect."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import asyncssh
import pytest

from cluster.errors import (
    ClusterUnreachable,
    CommandTimeout,
    ConfigError,
    HostKeyMismatch,
    PersonRefused,
    SlurmCommandFailed,
)
from cluster.site.login import cert_key_id
from cluster.site.profiles import ClusterProfile
from cluster.ssh.connect import CERT_SKEW_S, check_ca_key, user_certificate
from cluster.ssh.pool import SSHPool
from tests.bot.botkit import match_in
from tests.conftest import SSHD_CONFIG, SSHD_PID

pytestmark = pytest.mark.devcluster


async def test_one_connection_shared_by_concurrent_commands(
    pool: SSHPool, dev_profile: ClusterProfile
) -> None:
    results = await asyncio.gather(
        *(pool.run(dev_profile.login, f"echo {i}", timeout_s=20) for i in range(40))
    )
    assert [r.stdout.strip() for r in results] == [str(i) for i in range(40)]
    assert pool.stats.connects == 1 and pool.stats.round_trips == 40


async def test_stdin_and_failure_translation(pool: SSHPool, dev_profile: ClusterProfile) -> None:
    result = await pool.run(dev_profile.login, "wc -c", input="x" * 100_000, timeout_s=20)
    assert result.stdout.strip() == "100000"
    with pytest.raises(SlurmCommandFailed) as info:
        await pool.run(dev_profile.login, "echo boom >&2; exit 7", timeout_s=20, cluster="a4")
    assert (info.value.returncode, info.value.stderr.strip()) == (7, "boom")
    assert str(info.value).startswith("a4: ")
    unchecked = await pool.run(dev_profile.login, "exit 3", timeout_s=20, check=False)
    assert unchecked.returncode == 3


async def test_connection_lost_mid_command_is_unreachable_not_a_failure(
    pool: SSHPool, dev_profile: ClusterProfile
) -> None:
    """No exit status came (the login node went away while the command ran): the command may
    have done its work, so this is ClusterUnreachable (an unknown outcome), not a failed
    command; the next command gets a fresh connection."""
    with pytest.raises(ClusterUnreachable, match="exit status"):
        # $PPID is this session's sshd process: killing it drops the connection.
        await pool.run(dev_profile.login, "kill -TERM $PPID; sleep 5", timeout_s=20)
    result = await pool.run(dev_profile.login, "echo back", timeout_s=20)
    assert result.stdout.strip() == "back"


async def test_channel_cap(dev_profile: ClusterProfile) -> None:
    async with SSHPool(max_channels=3) as pool:
        await pool.run(dev_profile.login, "true", timeout_s=20)
        started = time.monotonic()
        await asyncio.gather(
            *(pool.run(dev_profile.login, "sleep 0.3", timeout_s=20) for _ in range(9))
        )
        assert time.monotonic() - started >= 0.85  # three waves of three


async def test_timeout(pool: SSHPool, dev_profile: ClusterProfile) -> None:
    started = time.monotonic()
    with pytest.raises(CommandTimeout, match="within 0.5 s"):
        await pool.run(dev_profile.login, "sleep 10", timeout_s=0.5)
    assert time.monotonic() - started < 3
    assert (await pool.run(dev_profile.login, "echo ok", timeout_s=10)).stdout == "ok\n"


def _other_known_hosts(path: Path) -> Path:
    key = asyncssh.generate_private_key("ssh-ed25519")
    path.write_text("[127.0.0.1]:2222 " + key.export_public_key().decode())
    return path


@pytest.mark.parametrize("kind", ["different key", "empty file", "missing file"])
async def test_unknown_or_changed_host_key_refused(
    dev_profile: ClusterProfile, tmp_path: Path, kind: str
) -> None:
    known = tmp_path / "known_hosts"
    if kind == "different key":
        _other_known_hosts(known)
    elif kind == "empty file":
        known.write_text("")
    login = dev_profile.login.model_copy(update={"known_hosts_file": known})
    async with SSHPool() as pool:
        with pytest.raises(HostKeyMismatch, match="host key|known_hosts") as info:
            await pool.run(login, "touch /tmp/should-not-run", timeout_s=10, cluster="a4")
    assert info.value.cluster == "a4"


async def test_auth_refused_and_unreachable(dev_profile: ClusterProfile, tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_bytes(asyncssh.generate_private_key("ssh-ed25519").export_private_key())
    stranger = dev_profile.login.model_copy(update={"key_file": key})
    async with SSHPool(connect_attempts=1) as pool:
        with pytest.raises(ClusterUnreachable, match="authentication refused"):
            await pool.run(stranger, "true", timeout_s=10)
        closed = dev_profile.login.model_copy(update={"port": 1})
        with pytest.raises(ClusterUnreachable, match="cannot connect"):
            await pool.run(closed, "true", timeout_s=10)


def _sshd_running() -> bool:
    try:
        os.kill(int(SSHD_PID.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def _start_sshd() -> None:
    if not _sshd_running():
        subprocess.run(["/usr/sbin/sshd", "-f", str(SSHD_CONFIG)], check=True, timeout=10)
    for _ in range(40):
        if _sshd_running():
            return
        time.sleep(0.25)


@pytest.mark.skipif(os.geteuid() != 0, reason="stopping the login node's sshd needs root")
async def test_pool_reconnects_after_sshd_restart(dev_profile: ClusterProfile) -> None:
    login = dev_profile.login
    async with SSHPool(connect_attempts=2, backoff_s=0.2) as pool:
        # The sshd processes serving this pool's connection: the shell's parent and its parent.
        pids = (await pool.run(login, "ps -o ppid= -p $PPID; echo $PPID", timeout_s=10)).stdout
        try:
            os.kill(int(SSHD_PID.read_text()), signal.SIGTERM)
            for pid in pids.split():
                os.kill(int(pid), signal.SIGTERM)
            for _ in range(40):
                if not _sshd_running():
                    break
                await asyncio.sleep(0.1)
            with pytest.raises(ClusterUnreachable):
                await pool.run(login, "true", timeout_s=10)
        finally:
            _start_sshd()
        result = await pool.run(login, "echo back", timeout_s=20)
        assert result.stdout == "back\n"
        assert pool.stats.connects == 2


async def test_a_person_logs_in_with_a_short_lived_certificate(
    pool: SSHPool, dev_profile: ClusterProfile, tmp_path: Path
) -> None:
    alice = dev_profile.as_user("alice", cert_key_id("U0ALICE", "alice", "L-1a2b3c")).login
    assert alice.key_file is None and alice.user_ca_key_file == dev_profile.login.user_ca_key_file
    key, cert = user_certificate(alice)
    cert.write_certificate(str(tmp_path / "alice-cert.pub"))
    _, again = user_certificate(alice)
    again.write_certificate(str(tmp_path / "again-cert.pub"))
    listing = subprocess.run(
        ["ssh-keygen", "-L", "-f", str(tmp_path / "alice-cert.pub")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout  # as an admin reads it
    principals = re.search(r"Principals:\s*\n\s*(\S+)\s*\n\s*Critical", listing)
    assert principals is not None and principals.group(1) == "alice", listing
    # sshd logs the key id and serial with the login: whose, as whom, for which launch.
    assert 'Key ID: "trainbot:U0ALICE:alice:L-1a2b3c"' in listing
    serials = [
        match_in(r"Serial: (\d+)", open_listing(tmp_path / name), 1)
        for name in ("alice-cert.pub", "again-cert.pub")
    ]
    assert "0" not in serials and serials[0] != serials[1], serials
    assert re.search(r"Extensions: \(none\)", listing), listing  # no pty, no forwarding
    valid = re.search(r"Valid: from (\S+) to (\S+)", listing)
    assert valid is not None
    start, end = (datetime.fromisoformat(t) for t in valid.groups())
    assert (end - start).total_seconds() == alice.cert_ttl_s + CERT_SKEW_S
    result = await pool.run(alice, "id -un; echo ~", timeout_s=20)
    assert result.stdout.split() == ["alice", "/home/alice"]
    # A certificate for alice does not open bob's account.
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(
            alice.host,
            port=alice.port,
            username="bob",
            known_hosts=str(alice.known_hosts_file),
            client_keys=[(key, cert)],
            agent_path=None,
            config=None,
        )


def open_listing(path: Path) -> str:
    """``ssh-keygen -L`` of a certificate file, as an admin reads it."""
    return subprocess.run(
        ["ssh-keygen", "-L", "-f", str(path)], capture_output=True, text=True, check=True
    ).stdout


async def test_a_persons_idle_connection_closes(dev_profile: ClusterProfile) -> None:
    alice = dev_profile.as_user("alice", cert_key_id("U0ALICE", "alice", "L-1")).login
    async with SSHPool(person_idle_s=0.5) as pool:
        await pool.run(alice, "true", timeout_s=20)
        await pool.run(dev_profile.login, "true", timeout_s=20)
        link = pool._link(alice)
        conn = link.conn
        assert conn is not None and not conn.is_closed()
        await asyncio.sleep(1.5)
        assert conn.is_closed()  # alice's, unused for 0.5 s: closed and forgotten
        assert [key[2] for key in pool._links] == ["trainer"]  # the shared one stays
        await pool.run(alice, "true", timeout_s=20)  # a new one when needed again
        assert pool.stats.connects == 3


async def test_a_process_that_does_not_act_as_people_never_signs(
    dev_profile: ClusterProfile,
) -> None:
    alice = dev_profile.as_user("alice").login
    async with SSHPool(act_as_people=False, connect_attempts=1) as pool:
        with pytest.raises(PersonRefused, match="does not act as people"):
            await pool.run(alice, "true", timeout_s=10)
        shared = await pool.run(dev_profile.login, "id -un", timeout_s=20)
        assert shared.stdout.strip() == "trainer"


def test_a_ca_key_others_can_read_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "ca"
    key.write_bytes(asyncssh.generate_private_key("ssh-ed25519").export_private_key())
    for mode in (0o644, 0o640, 0o604, 0o660):
        key.chmod(mode)
        with pytest.raises(ConfigError, match=f"readable by it alone .* mode {mode:04o}"):
            check_ca_key(key)
    for mode in (0o600, 0o400):
        key.chmod(mode)
        check_ca_key(key)
    os.chown(key, 12345, -1)  # someone else's, even with 0600
    with pytest.raises(ConfigError, match="owned by uid 12345"):
        check_ca_key(key)


async def test_an_expired_certificates_connection_is_replaced(
    dev_profile: ClusterProfile,
) -> None:
    alice = dev_profile.as_user("alice").login
    async with SSHPool() as pool:
        await pool.run(alice, "true", timeout_s=20)
        link = pool._link(alice)
        first = link.conn
        # two: the shared account's (it asked alice's uid before the CA signed) and hers
        assert pool.stats.connects == 2 and link.expires_at < float("inf")
        link.expires_at = time.monotonic() - 1  # the certificate has run out
        await pool.run(alice, "true", timeout_s=20)
        assert pool.stats.connects == 3 and link.conn is not first
        assert first is not None and not first.is_closed()  # its commands may finish
        assert first in pool._retired
    assert first.is_closed()  # closing the pool closes the retired connection too


async def test_without_the_ca_key_the_person_is_refused_clearly(
    dev_profile: ClusterProfile, tmp_path: Path
) -> None:
    other_ca = tmp_path / "ca"
    other_ca.write_bytes(asyncssh.generate_private_key("ssh-ed25519").export_private_key())
    other_ca.chmod(0o600)
    untrusted = dev_profile.as_user("alice").login.model_copy(update={"user_ca_key_file": other_ca})
    missing = untrusted.model_copy(update={"user_ca_key_file": tmp_path / "nowhere"})
    async with SSHPool(connect_attempts=1) as pool:
        with pytest.raises(ClusterUnreachable, match="certificate from trainbot's CA"):
            await pool.run(untrusted, "true", timeout_s=10)
        with pytest.raises(ClusterUnreachable, match="cannot read the user CA key"):
            await pool.run(missing, "true", timeout_s=10)
