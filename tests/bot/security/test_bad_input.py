"""Injection and bad input: refused before queueing, with what would be right. Through the
signed HTTP front end (tests.bot.security.kit)."""

from __future__ import annotations

import pytest

from support.slack_standin import SlackStandin
from tests.bot.botkit import login_run
from tests.bot.security.kit import secure_bot
from tests.cluster.test_injection import hostile_values

pytestmark = pytest.mark.devcluster


# -- injection and bad input: refused, with what would be right ------------------

BAD_TRAINS = [
    ("time=٠٤:٠٠:٠٠", "only the digits 0-9"),  # Arabic-Indic digits
    ("time=۱۰", "only the digits 0-9"),
    ("nodes=٢", "is not a whole number"),
    ("name=$(reboot)", "is not a valid job name"),
    ("name=x;id", "is not a valid job name"),
    ("partition=a4;id", "is not a valid partition name"),
    ("image=~/x.sqsh;id", "image="),
    ("image=../../etc/x.sqsh", "relative path"),
    ("trainer.max_steps=`id`", "trainer.max_steps"),
    ("cluster=a4'", "Unbalanced quote"),
    ("cluster=a5", "Unknown cluster 'a5'"),
]


@pytest.mark.parametrize(("extra", "says"), BAD_TRAINS)
async def test_hostile_or_bad_values_are_refused_before_queueing(
    standin: SlackStandin, extra: str, says: str
) -> None:
    async with secure_bot(standin) as s:
        said = await s.command("/train", f"sft llama3p1_8b {extra}")
        active = sum(await s.bot.store.budgets.active_counts("U0ALICE"))
    assert says in said and not said.startswith("Queued"), said
    assert active == 0


@pytest.mark.parametrize("key", ["name", "partition", "image", "time", "trainer.max_steps"])
async def test_shell_injection_in_any_value_is_refused_and_runs_nothing(
    standin: SlackStandin, unique: str, key: str
) -> None:
    """The hostile values of the cluster layer's injection test, typed into /train."""
    marker = f"/tmp/trainbot-pwned-{unique}"
    async with secure_bot(standin) as s:
        for value in hostile_values(marker):
            said = await s.command("/train", f"sft llama3p1_8b cluster=a4 {key}={value}")
            assert not said.startswith("Queued") and ":warning:" in said, (value, said)
        active = sum(await s.bot.store.budgets.active_counts("U0ALICE"))
    assert active == 0
    assert login_run(f"test -e {marker} && echo found || echo absent").strip() == "absent"
