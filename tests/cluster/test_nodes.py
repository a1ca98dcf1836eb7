"""Drain and resume command lines (pure), and a drain that Slurm really applies."""

from __future__ import annotations

import pytest

from cluster.errors import SlurmCommandFailed
from cluster.site.nodes import (
    build_node_state,
    build_node_update,
    clean_reason,
    parse_node_state,
    update_node,
)
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from tests.conftest import LoginShell


@pytest.mark.parametrize(
    ("node", "action", "reason", "expected"),
    [
        ("dev3", "resume", "", "scontrol update nodename=dev3 state=resume"),
        (
            "dev3",
            "drain",
            "Xid 79 twice",
            "scontrol update nodename=dev3 state=drain 'reason=Xid 79 twice'",
        ),
        (
            "a4-1",
            "drain",
            "x'; rm -rf / #\n`id`",
            "scontrol update nodename=a4-1 state=drain 'reason=x; rm -rf / # id'",
        ),
    ],
)
def test_update_lines(node: str, action: str, reason: str, expected: str) -> None:
    assert build_node_update(node, action, reason) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("node", "reason", "error"),
    [
        ("dev3;id", "r", "invalid node name"),
        ("-dev3", "r", "invalid node name"),
        ("dev3", "  ", "a drain needs a reason"),
        ("dev3", "'\"`$", "a drain needs a reason"),
    ],
)
def test_bad_drains_are_refused_with_what_would_be_right(
    node: str, reason: str, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        build_node_update(node, "drain", reason)


def test_state_line_and_reason() -> None:
    assert build_node_state("dev0") == "sinfo -h -N -n dev0 -o '%T|%E'"
    assert parse_node_state("drained|trainbot: failed 2 launches\n") == (
        "drained",
        "trainbot: failed 2 launches",
    )
    assert parse_node_state("idle|none\n") == ("idle", "")
    assert parse_node_state("") == ("", "")
    assert clean_reason("a\nb " * 200).count("\n") == 0 and len(clean_reason("a " * 500)) <= 200


@pytest.mark.devcluster
async def test_a_person_without_operator_rights_is_refused_by_slurm(
    pool: SSHPool, dev_profile: ClusterProfile, login: LoginShell
) -> None:
    """Slurm itself refuses a drain by a user who is not its operator (alice is not)."""
    alice = dev_profile.as_user("alice", "trainbot:U0ALICE:alice:drain")
    with pytest.raises(SlurmCommandFailed):
        await update_node(pool, alice, "dev3", "drain", "must be refused")
    shown = await login.run("sinfo -h -N -n dev3 -o %T")
    assert "drain" not in shown.stdout
