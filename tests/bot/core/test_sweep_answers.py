"""/cancel <sweep id>: one question for the whole sweep, naming its active members;
none when nothing of it is left to cancel."""

from __future__ import annotations

from typing import Any

from bot.core.sweep_answers import confirm_cancel
from bot.lifecycle.launch import Launch, Phase, Sweep
from bot.text.actions import ACTION_CANCEL
from commands.requests import TrainRequest


def sweep() -> Sweep:
    return Sweep(
        user_id="U0ALICE",
        channel="C0TRAIN",
        title="sft · llama3p1_8b",
        text="/train sft llama3p1_8b optim.lr=1e-5,3e-5,1e-4",
        where="2 nodes × a4",
        keys=["optim.lr"],
        values=[["1e-5"], ["3e-5"], ["1e-4"]],
    )


def member(phase: Phase) -> Launch:
    request = TrainRequest(
        workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4", nodes=2
    )
    launch = Launch(request=request, user_id="U0ALICE", channel="C0TRAIN")
    launch.phase = phase
    return launch


def buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in blocks if b.get("type") == "actions" for e in b["elements"]]


def test_the_question_counts_the_active_members_and_cancels_by_the_sweep_id() -> None:
    of = sweep()
    members = [member(Phase.RUNNING), member(Phase.DONE), None, member(Phase.QUEUED)]
    reply = confirm_cancel(of, members)
    assert not reply.error
    assert reply.text == (
        f"Cancel sweep {of.id} (2 active launches) of sft · llama3p1_8b on 2 nodes × a4? "
        "Each member's job is cancelled once."
    )
    (cancel,) = buttons(reply.blocks or [])
    assert cancel["action_id"] == ACTION_CANCEL and cancel["value"] == of.id
    assert cancel["confirm"]["title"]["text"].startswith(f"Cancel sweep {of.id}")


def test_a_sweep_with_nothing_active_is_told_not_asked() -> None:
    of = sweep()
    reply = confirm_cancel(of, [member(Phase.DONE), None, member(Phase.REJECTED)])
    assert reply.error and reply.blocks == []
    assert reply.text == f"Sweep {of.id} has already ended: no member is active."
