"""Dev cluster: a team's monthly GPU-hour budget, held atomically with each launch: a
launch past it is refused with used / held / left, the 80% DM goes once to the owner and
the team's lead, and ``/usage`` shows the team's used / held / left."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.runtime.assembly import running
from commands.policy import Team, TeamBudgetRule, UsagePolicy
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    knobs,
    launch_id_in,
    wait_for_launch,
)
from tests.bot.e2e.test_cost_live import wait_charged

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

TEAM = "S0ML"
SLOW: Knobs = {"steps": 6, "step_time_s": 3.0, "ckpt_every": 3, "save_time_s": 0.1,
        "tokenizer_race": "off"}  # fmt: skip


class TeamConsole(ConsoleFront):
    """The console, with one Slack user group (alice and bob) as Slack would list it."""

    async def usergroup_members(self, usergroup_id: str) -> list[str]:
        return ["alice", "bob"] if usergroup_id == TEAM else []


async def test_a_team_over_its_monthly_budget_is_refused_and_told_once_at_80_percent(
    unique: str, tmp_path: Path
) -> None:
    out = io.StringIO()
    front = TeamConsole(out, color=False, files_dir=tmp_path)
    config = dev_config()
    policy = config.policy.model_copy(
        update={
            "team_budgets": (TeamBudgetRule(group=TEAM, gpu_hours=20.0, window="month"),),
            "usage": UsagePolicy(teams=(Team(group=TEAM, leads=("bob",)),)),
        }
    )
    config = config.model_copy(update={"policy": policy})
    # 1 node of a4 (8 GPUs) x the 1 h limit: each launch holds 8 GPU-hours of the 20.
    train = f"/train sft llama3p1_8b cluster=a4 name={unique} nodes=1"
    month = datetime.now(UTC).strftime("%Y-%m")
    async with knobs(unique, **SLOW), running(bot_settings(), config, front) as bot:
        first = await handle_line(train, bot.core, front, user="alice")
        assert first is not None and not first.error, first
        assert "(to @" not in out.getvalue()  # 40%: nobody is told
        second = await handle_line(train, bot.core, front, user="bob")
        assert second is not None and not second.error, second
        told = out.getvalue()
        assert told.count("(to @bob) The monthly GPU-hour budget of team") == 1, told
        assert told.count("(to @alice)") == 0, told  # bob launched it, and bob leads
        assert "is at 80%: 0.0 GPU-hours used, 16.0 GPU-hours held" in told, told

        for who in ("alice", "alice"):  # refused each time, told no more
            third = await handle_line(train, bot.core, front, user=who)
            assert third is not None and third.error, third
            assert third.text.startswith(
                "The monthly budget of team <!subteam^S0ML> on a4 has no room for this launch "
                "(about 8.0 GPU-hours): 0.0 GPU-hours used, 16.0 GPU-hours held by active "
                "launches, 4.0 GPU-hours left of 20.0 GPU-hours."
            ), third.text
        assert out.getvalue().count("is at 80%") == 1
        assert out.getvalue().count("(to @") == 1

        # Half an hour of 8 GPUs (4 GPU-hours) fits exactly: 100%, told to owner and lead.
        exact = await handle_line(f"{train} time=30", bot.core, front, user="alice")
        assert exact is not None and not exact.error, exact
        told = out.getvalue()
        assert told.count("is at 100%: 0.0 GPU-hours used, 20.0 GPU-hours held") == 2, told
        assert "(to @alice) The monthly GPU-hour budget of team @S0ML is at 100%" in told
        assert told.count("is at 80%") == 1

        # A dry run is not held, so it is not refused; it shows what it would use.
        dry = await handle_line(f"{train} dry_run=true", bot.core, front, user="alice")
        assert dry is not None and not dry.error, dry

        ids = [launch_id_in(r.text) for r in (first, second, exact)]
        for launch_id in ids:
            assert (await wait_for_launch(bot.store, launch_id)).outcome == "COMPLETED"
        used = sum([(await wait_charged(bot.store, i)).gpu_hours for i in ids])
        assert 0 < used < 1
        team_used, team_held = await bot.store.budgets.team_use(f"group:{TEAM}", month)
        assert team_used == pytest.approx(used) and team_held == 0.0

        lead = await handle_line(f"/usage team={TEAM} month", bot.core, front, user="bob")
        assert lead is not None and not lead.error, lead
        left = 20.0 - used
        assert (
            f"Budget of team {TEAM} ({month}): {used:.3g} used, 0.00 held by active launches, "
            f"{left:,.2f} left of 20.00 GPU-hours"
        ) in lead.text, lead.text
        member = await handle_line(f"/usage team={TEAM}", bot.core, front, user="alice")
        assert member is not None and member.error and "may not see" in member.text
