"""Login nodes behind jump hosts, and OS Login style usernames."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bot.settings.config import parse_config
from cluster.errors import PersonRefused
from cluster.site.login import Identity, JumpHost, LoginNode, oslogin_username
from cluster.ssh.connect import user_certificate


def login(**fields: Any) -> LoginNode:
    base: dict[str, Any] = {
        "host": "10.0.0.5",
        "user": "trainer",
        "key_file": "/k",
        "known_hosts_file": "/kh",
        "user_ca_key_file": "/ca",
    }
    return LoginNode.model_validate({**base, **fields})


@pytest.mark.parametrize(
    ("text", "host", "port", "user"),
    [
        ("bastion.example.com", "bastion.example.com", 22, None),
        ("jump@bastion.example.com", "bastion.example.com", 22, "jump"),
        ("jump@127.0.0.1:2200", "127.0.0.1", 2200, "jump"),
        ("bastion:2200", "bastion", 2200, None),
        ("jump@[fd00::1]:2200", "fd00::1", 2200, "jump"),
    ],
)
def test_a_jump_host_as_text(text: str, host: str, port: int, user: str | None) -> None:
    hop = JumpHost.model_validate(text)
    assert (hop.host, hop.port, hop.user) == (host, port, user)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("jump@", "a jump host is user@host:port"),
        ("jump@bastion:port", "a jump host is user@host:port"),
        ("Jump;x@bastion", "String should match"),
        ("jump@bastion:70000", "less than or equal to 65535"),
        ("jump@bas tion", "a jump host is user@host:port"),
    ],
)
def test_bad_jump_hosts(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        login(jump=[text])
    assert message in str(caught.value)


def test_each_hop_takes_the_logins_user_key_and_known_hosts_unless_it_has_its_own() -> None:
    node = login(
        jump=["bastion:2200", {"host": "inner", "user": "hop", "key_file": "/hopkey"}],
    )
    first, second = node.hops()
    assert (first.user, first.key_file, first.known_hosts_file) == (
        "trainer",
        Path("/k"),
        Path("/kh"),
    )
    assert (second.user, second.key_file, second.known_hosts_file) == (
        "hop",
        Path("/hopkey"),
        Path("/kh"),
    )
    assert node.route == "trainer@bastion:2200 -> hop@inner:22 -> trainer@10.0.0.5:22"
    jumps = "trainer@bastion:2200,hop@inner:22"
    assert node.ssh_command() == f"ssh -t -J {jumps} -p 22 trainer@10.0.0.5"
    six = login(jump=["jump@[fd00::1]:2200"])
    assert six.ssh_command() == "ssh -t -J jump@[fd00::1]:2200 -p 22 trainer@10.0.0.5"


def test_a_person_goes_through_the_jump_hosts_as_themselves() -> None:
    alice = login(jump=["bastion", "svc@inner"]).as_user("alice", "trainbot:U0A:alice:L-1")
    first, second = alice.hops()
    assert (first.user, first.key_file, first.key_id) == ("alice", None, "trainbot:U0A:alice:L-1")
    assert (second.user, second.key_file) == ("svc", None)  # a certificate for svc
    assert alice.route.endswith("alice@10.0.0.5:22")


def test_jump_paths_start_at_the_config_file(tmp_path: Path) -> None:
    text = """
clusters:
  dgx:
    gpus_per_node: 8
    login:
      host: 10.0.0.5
      user: trainer
      key_file: keys/id
      known_hosts_file: keys/known_hosts
      jump: [jump@bastion:2200, {host: inner, key_file: keys/inner, known_hosts_file: ~/kh}]
    partition: gpu
    max_nodes: 2
"""
    config = parse_config(text, base_dir=tmp_path)
    first, second = config.clusters["dgx"].login.hops()
    assert first.key_file == tmp_path / "keys" / "id"
    assert first.known_hosts_file == tmp_path / "keys" / "known_hosts"
    assert second.key_file == tmp_path / "keys" / "inner"
    assert second.known_hosts_file == Path("~/kh").expanduser()


@pytest.mark.parametrize(
    ("email", "name"),
    [
        ("alice@example.com", "alice_example_com"),
        ("Alice.B@Example.com", "alice_b_example_com"),
        ("a-b+c@lab.example.com", "a_b_c_lab_example_com"),
    ],
)
def test_oslogin_usernames(email: str, name: str) -> None:
    local, _, domain = email.lower().partition("@")
    assert oslogin_username(local, domain) == name


def test_identity_maps_emails_to_oslogin_usernames() -> None:
    identity = Identity(
        users={"U0C": "carol_example_com"},
        from_email=True,
        email_domains=("example.com", "lab.example.com"),
        email_username="oslogin",
    )
    assert identity.username_for("U0A", "alice@example.com") == "alice_example_com"
    assert identity.username_for("U0B", "bob@lab.example.com") == "bob_lab_example_com"
    name, why = identity.resolve("U0X", "carol@example.com")
    assert name is None and "carol_example_com, who is someone else here" in why
    name, why = identity.resolve("U0Y", "a.very.long.name.indeed@example.com")
    assert name is None and "is not a username" in why  # over 32 characters
    assert (
        Identity(from_email=True, email_domains=("example.com",)).username_for(
            "U0A", "alice@example.com"
        )
        == "alice"
    )  # the default stays the local part


def test_a_persons_jump_host_is_signed_under_the_cas_rules_for_people() -> None:
    alice = login(jump=["bastion", "svc@inner"]).as_user("alice", "trainbot:U0A:alice:L-1")
    first, second = alice.hops()
    assert first.person_rules is not None and first.person_rules is alice.person_rules
    assert second.person_rules is None  # the config's own account on that hop
    root = login(jump=["bastion"]).as_user("root", "trainbot:U0X:root:L-1")
    with pytest.raises(PersonRefused, match="signs no certificate for root"):
        user_certificate(root.hops()[0], forwarding=True)
