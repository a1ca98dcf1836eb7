"""The user CA never signs a reserved name, whatever asks for it: root, system accounts
(by name, or by a uid outside ``identity.uid_min``..``uid_max`` as the login node says),
the shared account, names outside ``identity.name_pattern`` or in ``identity.reserved``.
Each refusal is logged and said; nothing is signed. Through the real SSH pool against the
dev cluster's login node (alice is uid 1002, bob 1003, postgres 101 there)."""

from __future__ import annotations

import re

import pytest

from cluster.errors import PersonRefused
from cluster.site.login import Identity, LoginNode, cert_key_id
from cluster.ssh.connect import user_certificate
from cluster.ssh.pool import SSHPool
from tests.bot.botkit import dev_config
from tests.bot.security.asks_kit import PEOPLE


def rules(**identity: object) -> tuple[LoginNode, Identity]:
    login = LoginNode(host="h", user="trainer", user_ca_key_file="/nonexistent/ca")
    return login, Identity(users={"U0ALICE": "alice"}, **identity)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("root", "root is a system account"),
        ("daemon", "daemon is a system account"),
        ("slurm", "slurm is a system account"),
        ("svc-backup", "svc-backup is reserved (identity.reserved)"),
        ("ops.bob", "does not match identity.name_pattern"),
        ("Bad!", "'Bad!' is not a Unix user name"),
    ],
)
def test_the_ca_refuses_to_sign_a_reserved_name(name: str, why: str) -> None:
    login, identity = rules(reserved=("svc-backup",), name_pattern=r"^[a-z][a-z0-9]{0,15}$")
    person = login.as_user(name, cert_key_id("U0EVE", name, "L-1"), identity.person_rules(login))
    with pytest.raises(PersonRefused, match="CA signs no certificate for .*" + re.escape(why)):
        user_certificate(person, "a4")  # refused before the CA key is even read


def test_the_shared_account_is_never_signed_for_as_a_person() -> None:
    login, identity = rules()
    assert login.as_user("trainer") is login  # its own login (its key), not a certificate
    shared = identity.person_rules(login).name_problem("trainer")
    assert shared == "trainer is the shared account, never a person's"


def test_the_uid_range_is_checked_as_configured() -> None:
    _, identity = rules(uid_min=1500, uid_max=2000)
    person = identity.person_rules(LoginNode(host="h", user="trainer"))
    assert person.uid_problem("alice", 1600) == ""
    assert "outside the people's range 1500..2000" in person.uid_problem("alice", 1002)
    assert "there is no user" in person.uid_problem("ghost", None)
    with pytest.raises(ValueError, match="uid_min .* is above identity.uid_max"):
        Identity(uid_min=2000, uid_max=1000)


@pytest.mark.devcluster
async def test_the_login_node_says_whose_uid_is_out_of_range_and_nothing_is_signed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO")
    config = dev_config(
        people=PEOPLE,
        edit=lambda text: text.replace("unmapped: shared", "unmapped: shared\n      uid_max: 1002"),
    )
    profile = config.clusters["a4"]
    async with SSHPool() as pool:
        alice = profile.as_user("alice", cert_key_id("U0ALICE", "alice", "test")).login
        assert (await pool.run(alice, "id -un", timeout_s=20)).stdout.strip() == "alice"
        for name, why in (
            ("bob", "bob has uid 1003, outside the people's range 1000..1002"),
            ("postgres", "postgres has uid 101, outside"),
            ("nosuchuser", "there is no user nosuchuser on the login node"),
            ("root", "root is a system account"),
        ):
            login = profile.as_user(name, cert_key_id("U0EVE", name, "test")).login
            with pytest.raises(PersonRefused, match=why):
                await pool.run(login, "id", timeout_s=20)
    said = caplog.text
    assert "signed a certificate for alice" in said
    for name in ("bob", "postgres", "nosuchuser", "root"):
        assert f"the user CA refused to sign for {name}" in said
        assert f"signed a certificate for {name}" not in said
