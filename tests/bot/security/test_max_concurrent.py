"""max_concurrent holds under simultaneous /train; button values that are no launch. Through
the signed HTTP front end (tests.bot.security.kit)."""

from __future__ import annotations

import asyncio
import logging
import urllib.parse

import pytest

from bot.slack.app import WORKING_TEXT
from bot.text.actions import ACTION_CANCEL, ACTION_LOGS, ACTION_RETRY, ACTION_USE_PARTITION
from commands.policy import PolicyRule
from support.slack_requests import post_signed, slash_command_fields
from support.slack_standin import SlackStandin
from tests.bot.security.kit import new_trigger, secure_bot

pytestmark = pytest.mark.devcluster


# -- max_concurrent ------------------------------------------------------------


async def test_simultaneous_trains_cannot_pass_max_concurrent(standin: SlackStandin) -> None:
    rules = (PolicyRule(users=("*",), clusters=("*",), max_nodes=4, max_concurrent=1),)
    async with secure_bot(standin, rules=rules) as s:
        counted = s.bot.store.budgets.active_counts_taking_rate  # what /train reads first

        async def slowly_counted(
            user_id: str, name: str, *, limit: int | None, window_s: float
        ) -> tuple[int, int, float]:  # widen the race's window
            count = await counted(user_id, name, limit=limit, window_s=window_s)
            await asyncio.sleep(0.3)
            return count

        s.bot.store.budgets.active_counts_taking_rate = slowly_counted  # type: ignore[method-assign]

        async def train(i: int) -> str:
            form = slash_command_fields(
                "/train", f"sft llama3p1_8b cluster=a4 name=race{i}", trigger_id=new_trigger()
            )
            answer = await post_signed(s.url, urllib.parse.urlencode(form))
            return str(answer.json()["text"])

        answers = list(await asyncio.gather(*(train(i) for i in range(6))))
        late = answers.count(WORKING_TEXT)
        for _ in range(200):  # answers after the ack arrive as ephemerals
            if len(s._ephemerals("U0ALICE")) >= late:
                break
            await asyncio.sleep(0.05)
        answers = [a for a in answers if a != WORKING_TEXT] + s._ephemerals("U0ALICE")
        active = sum(await s.bot.store.budgets.active_counts("U0ALICE"))
    queued = [a for a in answers if a.startswith("Queued")]
    refused = [a for a in answers if "your limit is 1" in a]
    assert (len(queued), len(refused), active) == (1, 5, 1), answers


@pytest.mark.parametrize("action", [ACTION_CANCEL, ACTION_RETRY, ACTION_LOGS, ACTION_USE_PARTITION])
async def test_a_button_value_that_is_no_launch_gets_a_clear_answer(
    standin: SlackStandin, caplog: pytest.LogCaptureFixture, action: str
) -> None:
    """Button values come back from outside like typed text: checked the same way."""
    caplog.set_level(logging.INFO)
    async with secure_bot(standin) as s:
        said = await s.click(action, "$(id);x:a4")
    assert "is not a job: give a launch id such as L-7f3a9c" in said, said
    assert "Traceback" not in caplog.text
