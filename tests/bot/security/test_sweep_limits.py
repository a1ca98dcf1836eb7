"""A sweep obeys what /train obeys: two sweeps sent together stay within max_concurrent,
each member counts against the launch rate, and a budget refuses a sweep whose members
have no estimate as it refuses such a /train. Through the signed HTTP front end
(tests.bot.security.kit)."""

from __future__ import annotations

import asyncio
import urllib.parse

import pytest

from bot.slack.app import WORKING_TEXT
from commands.policy import BudgetRule, Limits, PolicyRule
from support.slack_requests import post_signed, slash_command_fields
from support.slack_standin import SlackStandin
from tests.bot.security.kit import Secure, new_trigger, secure_bot

pytestmark = pytest.mark.devcluster

SWEEP = "sft llama3p1_8b cluster=a4 optim.config.lr=1e-5,3e-5,5e-5"  # three members


async def send_together(s: Secure, texts: list[str]) -> list[str]:
    """``texts`` as /train at once; every answer, ack or later ephemeral."""

    async def train(text: str) -> str:
        form = slash_command_fields("/train", text, trigger_id=new_trigger())
        answer = await post_signed(s.url, urllib.parse.urlencode(form))
        return str(answer.json()["text"])

    answers = list(await asyncio.gather(*(train(t) for t in texts)))
    late = answers.count(WORKING_TEXT)
    for _ in range(400):  # answers after the ack arrive as ephemerals
        if len(s._ephemerals("U0ALICE")) >= late:
            break
        await asyncio.sleep(0.05)
    return [a for a in answers if a != WORKING_TEXT] + s._ephemerals("U0ALICE")


async def test_two_sweeps_sent_together_stay_within_max_concurrent(
    standin: SlackStandin,
) -> None:
    rules = (PolicyRule(users=("*",), clusters=("*",), max_nodes=4, max_concurrent=2),)
    async with secure_bot(standin, rules=rules) as s:
        counted = s.bot.store.budgets.active_counts  # what a sweep reads before it writes

        async def slowly_counted(user_id: str) -> tuple[int, int]:  # widen the race's window
            count = await counted(user_id)
            await asyncio.sleep(0.3)
            return count

        s.bot.store.budgets.active_counts = slowly_counted  # type: ignore[method-assign]
        answers = await send_together(s, [f"{SWEEP} name=a", f"{SWEEP} name=b"])
        launches = [
            launch
            for launch in await s.bot.store.launches.get_many(
                await s.bot.store.history.active_ids("U0ALICE")
            )
            if launch is not None
        ]
    queued = [a for a in answers if "Queued; the table in its thread" in a]
    refused = [a for a in answers if "your limit is 2" in a]
    assert (len(queued), len(refused)) == (1, 1), answers
    assert "1 wait their turn (your max_concurrent)." in queued[0], queued
    free = [launch.id for launch in launches if not launch.waits_for]
    assert (len(launches), len(free)) == (3, 2), [(x.id, x.waits_for) for x in launches]


async def test_each_member_counts_against_the_launch_rate(standin: SlackStandin) -> None:
    limits = Limits(launches_per_minute=4)
    async with secure_bot(standin, limits=limits) as s:
        too_many = await s.command("/train", SWEEP + ",7e-5,9e-5")  # five members
        assert "This starts 5 launches, and you may start at most 4 a minute" in too_many
        assert await s.bot.store.history.active_ids("U0ALICE") == []
        first = await s.command("/train", SWEEP)  # three of four
        assert "Queued; the table in its thread" in first, first
        second = await s.command("/train", SWEEP)  # three more do not fit
        assert "Slow down: you started 4 launches in the last minute" in second, second
        assert len(await s.bot.store.history.active_ids("U0ALICE")) == 3


async def test_a_sweep_without_an_estimate_is_refused_under_a_budget(
    standin: SlackStandin,
) -> None:
    """a4 without a time limit: no member has an estimate, so a budget cannot be checked,
    and the sweep is refused as a /train is, nothing stored."""
    budgets = (BudgetRule(users=("*",), gpu_hours_per_week=1000),)
    async with secure_bot(standin, a4={"time_limit": None}, budgets=budgets) as s:
        single = await s.command("/train", "sft llama3p1_8b cluster=a4")
        swept = await s.command("/train", SWEEP)
        assert await s.bot.store.history.active_ids("U0ALICE") == []
    assert "this launch has no estimate" in single, single
    assert "this launch has no estimate" in swept and "Give time=HH:MM:SS" in swept, swept
