"""Approve and Reject: only by those the policy allows. Through the signed HTTP front end
(tests.bot.security.kit)."""

from __future__ import annotations

import pytest

from bot.lifecycle.launch import Phase
from bot.text.actions import ACTION_APPROVE, ACTION_REJECT
from support.slack_standin import SlackStandin
from tests.bot.security.kit import secure_bot

pytestmark = pytest.mark.devcluster


# -- approvals -----------------------------------------------------------------

# who clicks, which button, on a 3-node launch of alice on a4 -> allowed, text
APPROVALS = [
    ("U0BOB", ACTION_APPROVE, False, "Only a trainbot admin or an approver for a4"),
    ("U0LEAD", ACTION_APPROVE, False, "up to 2 nodes on a4; this one asks for 3"),
    ("U0ALICE", ACTION_APPROVE, False, "cannot approve your own launch"),
    ("U0CHIEF", ACTION_APPROVE, True, "Approved L-"),
    ("U0ADMIN", ACTION_APPROVE, True, "Approved L-"),
    ("U0BOB", ACTION_REJECT, False, "Only its owner, a trainbot admin or an approver for a4"),
    ("U0LEAD", ACTION_REJECT, True, "Rejected L-"),
    ("U0ALICE", ACTION_REJECT, True, "Rejected L-"),  # the asker withdraws
]


@pytest.mark.parametrize(("clicker", "action", "allowed", "says"), APPROVALS)
async def test_approve_and_reject_only_by_those_allowed(
    standin: SlackStandin, clicker: str, action: str, allowed: bool, says: str
) -> None:
    async with secure_bot(standin) as s:
        asked = await s.command("/train", "sft llama3p1_8b nodes=3 cluster=a4")
        assert "needs a second person's approval" in asked, asked
        launch_id = asked.split()[0]
        said = await s.click(action, launch_id, user=clicker)
        stored = await s.bot.store.launches.get(launch_id)
    assert says in said, said
    assert stored is not None
    if not allowed:
        assert stored.phase == Phase.AWAITING_APPROVAL
    elif action == ACTION_APPROVE:
        assert stored.phase == Phase.QUEUED
    else:
        assert stored.phase == Phase.REJECTED
