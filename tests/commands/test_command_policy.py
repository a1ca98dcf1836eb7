"""The launch policy as a table: user x cluster x nodes x active launches."""

from __future__ import annotations

import pytest

from commands import (
    CancelRequest,
    Decision,
    InteractiveRequest,
    JobRef,
    Policy,
    PolicyRule,
    Principals,
    TrainRequest,
    decide,
    may_manage,
)
from commands.policy import (
    may_approve,
)

POLICY = Policy(
    admins=Principals(users=("U0ADMIN",), groups=("S0ADMINS",)),
    rules=(
        PolicyRule(users=("U0BANNED",), clusters=("*",), max_nodes=1, max_concurrent=1),
        PolicyRule(groups=("S0RESEARCH",), clusters=("a4", "a3u"), max_nodes=4, max_concurrent=5),
        PolicyRule(users=("*",), clusters=("a3m",), max_nodes=2, max_concurrent=2),
        PolicyRule(users=("U0BIG",), clusters=("*",), max_nodes=4, approval_above_nodes=3),
    ),
    approval_above_nodes=2,
)


def train(cluster: str, nodes: int, dry_run: bool = False) -> TrainRequest:
    return TrainRequest(
        workload="sft",
        model="llama3p1_8b",
        framework="nemo",
        cluster=cluster,
        nodes=nodes,
        dry_run=dry_run,
    )


# user, groups, cluster, nodes, active launches -> allowed, needs approval, reason
TABLE = [
    ("U0ALICE", (), "a3m", 1, 0, True, False, "Allowed by policy rule 3."),
    ("U0ALICE", (), "a3m", 2, 1, True, False, "Allowed by policy rule 3."),
    (
        "U0ALICE",
        (),
        "a3m",
        3,
        0,
        False,
        False,
        "nodes=3 is more than you may use on a3m (max 2 for you). Give nodes=2 or fewer.",
    ),
    (
        "U0ALICE",
        (),
        "a3m",
        1,
        2,
        False,
        False,
        "You already have 2 launches active (your limit is 2). Wait for one to finish or "
        "/cancel one.",
    ),
    (
        "U0ALICE",
        (),
        "a4",
        1,
        0,
        False,
        False,
        "You may not launch on a4: no policy rule covers you there. Ask a trainbot admin for "
        "access.",
    ),
    ("U0BOB", ("S0RESEARCH",), "a4", 2, 4, True, False, "Allowed by policy rule 2."),
    (
        "U0BOB",
        ("S0RESEARCH",),
        "a4",
        3,
        0,
        True,
        True,
        "3 nodes is more than 2, so a second person must approve this launch first.",
    ),
    (
        "U0BOB",
        ("S0RESEARCH",),
        "a4",
        1,
        5,
        False,
        False,
        "You already have 5 launches active (your limit is 5).",
    ),
    ("U0BOB", ("S0RESEARCH",), "a3m", 2, 0, True, False, "Allowed by policy rule 3."),
    ("U0BOB", ("S0RESEARCH",), "a3h", 1, 0, False, False, "no policy rule covers you there"),
    # first matching rule wins, even when a later one would allow more
    ("U0BANNED", (), "a3m", 2, 0, False, False, "(max 1 for you)"),
    ("U0BANNED", (), "a3m", 1, 1, False, False, "You already have 1 launch active"),
    # rule-level approval threshold overrides the policy's
    ("U0BIG", (), "a3h", 3, 0, True, False, "Allowed by policy rule 4."),
    ("U0BIG", (), "a3h", 4, 0, True, True, "4 nodes is more than 3"),
    # admins, by id or by group: no limits, no approval
    ("U0ADMIN", (), "a3h", 4, 99, True, False, "Allowed: you are a trainbot admin."),
    ("U0CAROL", ("S0ADMINS",), "a4", 4, 99, True, False, "Allowed: you are a trainbot admin."),
]


@pytest.mark.parametrize(
    ("user_id", "groups", "cluster", "nodes", "active", "allowed", "approval", "reason"), TABLE
)
def test_decide(
    user_id: str,
    groups: tuple[str, ...],
    cluster: str,
    nodes: int,
    active: int,
    allowed: bool,
    approval: bool,
    reason: str,
) -> None:
    decision = decide(
        POLICY, train(cluster, nodes), user_id=user_id, group_ids=groups, active_launches=active
    )
    assert (decision.allowed, decision.needs_approval) == (allowed, approval)
    assert reason in decision.reason


def test_interactive_is_a_launch() -> None:
    request = InteractiveRequest(cluster="a4", nodes=1)
    decision = decide(POLICY, request, user_id="U0ALICE", group_ids=(), active_launches=0)
    assert not decision.allowed


def test_dry_run_skips_concurrency_and_approval() -> None:
    decision = decide(
        POLICY,
        train("a4", 3, dry_run=True),
        user_id="U0BOB",
        group_ids=("S0RESEARCH",),
        active_launches=5,
    )
    assert decision == Decision(
        allowed=True,
        reason="Allowed (dry run) by policy rule 2. A real launch of 3 nodes would need approval.",
    )


def test_dry_run_still_checks_access_and_nodes() -> None:
    denied = decide(POLICY, train("a4", 1, True), user_id="U0X", group_ids=(), active_launches=0)
    assert not denied.allowed


def test_no_rules_means_only_admins() -> None:
    empty = Policy()
    assert not decide(empty, train("a4", 1), user_id="U1", group_ids=(), active_launches=0).allowed


def test_other_requests_are_not_limited() -> None:
    request = CancelRequest(job=JobRef(id="4187"))
    decision = decide(POLICY, request, user_id="U0X", group_ids=(), active_launches=99)
    assert decision.allowed


ADMIN_CANCELS = "a trainbot admin may cancel it."


@pytest.mark.parametrize(
    ("user_id", "groups", "owner", "name", "allowed", "reason"),
    [
        ("U1", (), "U1", "", True, "Allowed: it is your launch."),
        ("U2", (), "U1", "alice", False, "Only alice (who launched L-1) or " + ADMIN_CANCELS),
        ("U2", (), "U1", "", False, "Only U1 (who launched L-1) or " + ADMIN_CANCELS),
        ("U0ADMIN", (), "U1", "", True, "Allowed: you are a trainbot admin."),
        ("U2", ("S0ADMINS",), "U1", "", True, "Allowed: you are a trainbot admin."),
    ],
)  # fmt: skip
def test_may_manage(
    user_id: str, groups: tuple[str, ...], owner: str, name: str, allowed: bool, reason: str
) -> None:
    decision = may_manage(
        POLICY, user_id=user_id, group_ids=groups, owner_id=owner, owner_name=name,
        launch_id="L-1", verb="cancel",
    )  # fmt: skip
    assert (decision.allowed, decision.reason) == (allowed, reason)


def test_max_nodes_for() -> None:
    assert POLICY.max_nodes_for("U0ALICE", (), "a3m") == 2
    assert POLICY.max_nodes_for("U0ALICE", (), "a4") is None
    assert POLICY.max_nodes_for("U0ADMIN", (), "a3m") is None


# approver, groups, owner, cluster -> allowed, reason
APPROVALS = [
    (
        "U0ALICE",
        (),
        "U0ALICE",
        "a3m",
        False,
        "You cannot approve your own launch: a second person has to.",
    ),
    ("U0BOB", (), "U0ALICE", "a3m", True, "Approved: you may launch on a3m yourself."),
    (
        "U0BOB",
        (),
        "U0ALICE",
        "a4",
        False,
        "Only a trainbot admin or someone who may launch on a4 can approve it.",
    ),
    ("U0BOB", ("S0RESEARCH",), "U0ALICE", "a4", True, "Approved: you may launch on a4 yourself."),
    ("U0ADMIN", (), "U0ALICE", "a4", True, "Approved: you are a trainbot admin."),
    (
        "U0ADMIN",
        (),
        "U0ADMIN",
        "a4",
        False,
        "You cannot approve your own launch: a second person has to.",
    ),
]


@pytest.mark.parametrize(("user_id", "groups", "owner", "cluster", "allowed", "reason"), APPROVALS)
def test_may_approve(
    user_id: str, groups: tuple[str, ...], owner: str, cluster: str, allowed: bool, reason: str
) -> None:
    decision = may_approve(
        POLICY, user_id=user_id, group_ids=groups, owner_id=owner, cluster=cluster
    )
    assert (decision.allowed, decision.reason) == (allowed, reason)
