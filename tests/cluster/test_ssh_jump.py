"""The SSH pool through the dev cluster's bastion: the login node behind it is reached
only that way, each hop's host key is checked, and a person goes through as well."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cluster.errors import ClusterUnreachable, HostKeyMismatch
from cluster.site.login import cert_key_id
from cluster.site.profiles import ClusterProfile
from cluster.ssh.connect import user_certificate
from cluster.ssh.hostkeys import route_host_keys
from cluster.ssh.pool import SSHPool

pytestmark = pytest.mark.devcluster


async def test_the_hidden_login_node_is_reached_through_the_bastion(
    pool: SSHPool, bastion_profile: ClusterProfile
) -> None:
    login = bastion_profile.login
    # Port 2201 is open only inside the bastion's network namespace (the next test).
    assert login.route == "jump@127.0.0.1:2200 -> trainer@127.0.0.1:2201"
    result = await pool.run(login, "sinfo -h -o %P", timeout_s=30)
    assert "a4" in result.stdout.split()
    again = await pool.run(login, "echo again", timeout_s=30)
    assert again.stdout.strip() == "again" and pool.stats.connects == 1


async def test_the_hidden_login_node_refuses_a_direct_connection(
    pool: SSHPool, bastion_profile: ClusterProfile
) -> None:
    direct = bastion_profile.login.model_copy(update={"jump": ()})
    with pytest.raises(ClusterUnreachable, match=r"cannot connect to trainer@127.0.0.1:2201"):
        await pool.run(direct, "true", timeout_s=30, cluster="hpc")


async def test_an_unknown_bastion_host_key_is_refused_naming_the_hop(
    pool: SSHPool, bastion_profile: ClusterProfile, tmp_path: Path
) -> None:
    login = bastion_profile.login
    assert login.known_hosts_file is not None
    only_login = tmp_path / "known_hosts"
    lines = login.known_hosts_file.read_text().splitlines()
    only_login.write_text("\n".join(line for line in lines if ":2201 " in line) + "\n")
    hop = login.jump[0].model_copy(update={"known_hosts_file": only_login})
    with pytest.raises(HostKeyMismatch) as caught:
        await pool.run(
            login.model_copy(update={"jump": (hop,)}), "true", timeout_s=30, cluster="hpc"
        )
    assert "host key of jump host 1 of 1 jump@127.0.0.1:2200 is unknown" in str(caught.value)


async def test_a_person_goes_through_with_certificates_at_each_hop(
    pool: SSHPool, bastion_profile: ClusterProfile
) -> None:
    alice = bastion_profile.as_user("alice", cert_key_id("U0ALICE", "alice", "test")).login
    hop = alice.hops()[0]
    assert (hop.user, hop.key_file, alice.key_file) == ("jump", None, None)
    result = await pool.run(alice, "id -un", timeout_s=30, cluster="hpc")
    assert result.stdout.strip() == "alice"


async def test_doctor_prints_each_hops_key_and_stops_at_one_not_confirmed(
    bastion_profile: ClusterProfile, tmp_path: Path
) -> None:
    login = bastion_profile.login
    assert login.known_hosts_file is not None
    lines = login.known_hosts_file.read_text().splitlines()
    seen = await route_host_keys(login, "hpc")
    assert [(s.line, s.known) for s in seen] == [(line, True) for line in lines]
    assert [s.fingerprint.startswith("SHA256:") for s in seen] == [True, True]
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    fresh = login.model_copy(update={"known_hosts_file": empty})
    first, stop = await route_host_keys(fresh, "hpc")
    assert (first.line, first.known) == (lines[0], False)  # shown, not trusted yet
    assert stop.known is None and stop.line == "" and "add it to" in stop.note


def test_only_a_jump_hosts_certificate_permits_port_forwarding(
    bastion_profile: ClusterProfile, tmp_path: Path
) -> None:
    alice = bastion_profile.as_user("alice", cert_key_id("U0ALICE", "alice", "test")).login
    listings = {}
    for name, hop, forwarding in (("jump", alice.hops()[0], True), ("login", alice, False)):
        _, cert = user_certificate(hop, forwarding=forwarding)
        cert.write_certificate(str(tmp_path / f"{name}-cert.pub"))
        listings[name] = subprocess.run(
            ["ssh-keygen", "-L", "-f", str(tmp_path / f"{name}-cert.pub")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    jump = re.search(r"Extensions:\s*\n((?:\s+\S+\n?)*)", listings["jump"])
    assert jump is not None and jump.group(1).split() == ["permit-port-forwarding"], listings
    assert re.search(r"Extensions: \(none\)", listings["login"]), listings


async def test_a_hop_that_does_not_answer_is_said_not_guessed(
    bastion_profile: ClusterProfile,
) -> None:
    login = bastion_profile.login
    closed = login.jump[0].model_copy(update={"port": 1})
    seen = await route_host_keys(login.model_copy(update={"jump": (closed,)}), "hpc")
    assert len(seen) == 1 and seen[0].known is None and seen[0].line == ""
    assert seen[0].hop == "jump host 1 of 1 jump@127.0.0.1:1"
    assert "cannot read its host key" in seen[0].note
