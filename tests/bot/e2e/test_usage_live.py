"""Dev cluster: ``/usage`` gives the GPU-hours ``sacct`` recorded for the same jobs and
window, as text, as a CSV file that sums back to the same figure, and as a chart."""

from __future__ import annotations

import asyncio
import csv
import io
import os
from pathlib import Path

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.core.usage import hours
from bot.runtime.assembly import running
from commands.policy import Principals, Team, UsagePolicy
from tests.bot.botkit import (
    bot_settings,
    dev_config,
    knobs,
    launch_id_in,
    wait_for_launch,
)
from tests.bot.e2e.test_cost_live import FAST, sacct_gpu_hours, wait_charged

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]


async def test_usage_equals_what_sacct_recorded_for_two_jobs_and_the_csv_sums_back(
    unique: str, tmp_path: Path
) -> None:
    front = ConsoleFront(io.StringIO(), color=False, files_dir=tmp_path)
    config = dev_config()
    usage = UsagePolicy(
        teams=(Team(group="S0ML", leads=("bob",)),), price_per_gpu_hour={"hcc-a4": 2.5}
    )
    policy = config.policy.model_copy(
        update={"usage": usage, "admins": Principals(users=("carol",))}
    )
    config = config.model_copy(update={"policy": policy})
    train = f"/train sft llama3p1_8b cluster=a4 name={unique} nodes=1"
    async with knobs(unique, **FAST), running(bot_settings(), config, front) as bot:
        ids = []
        for _ in range(2):
            reply = await handle_line(train, bot.core, front, user="alice")
            assert reply is not None and not reply.error, reply
            ids.append(launch_id_in(reply.text))
        launches = [await wait_for_launch(bot.store, i) for i in ids]
        assert [x.outcome for x in launches] == ["COMPLETED", "COMPLETED"]
        launches = [await wait_charged(bot.store, i) for i in ids]
        real = [await asyncio.to_thread(sacct_gpu_hours, x.job_id) for x in launches]
        assert all(r > 0 for r in real), real

        text = await handle_line("/usage days=1", bot.core, front, user="alice")
        assert text is not None and not text.error, text
        assert f"{hours(sum(real))} GPU-hours in 2 launches" in text.text, text.text
        assert f"{sum(real) * 2.5:,.2f} USD" in text.text, text.text
        assert text.file_name == "usage.png" and text.file_content.startswith(b"\x89PNG")
        if os.environ.get("TRAINBOT_KEEP_CHART"):
            Path(os.environ["TRAINBOT_KEEP_CHART"]).write_bytes(text.file_content)

        table = await handle_line("/usage me days=1 csv=true", bot.core, front, user="alice")
        assert table is not None and not table.error and table.file_name == "usage.csv"
        rows = list(csv.DictReader(io.StringIO((tmp_path / "usage.csv").read_text())))
        assert sorted(r["launch_id"] for r in rows) == sorted(ids)
        by_launch = {r["launch_id"]: float(r["gpu_hours"]) for r in rows}
        for launch, used in zip(launches, real, strict=True):
            assert by_launch[launch.id] == pytest.approx(used), (launch.id, used)
        assert sum(by_launch.values()) == pytest.approx(sum(real))

        # Policy: another person may not see alice's use; an admin may, and a cluster's.
        other = await handle_line("/usage @alice", bot.core, front, user="dave")
        assert other is not None and other.error and "may not see" in other.text, other
        admin = await handle_line("/usage @alice days=1", bot.core, front, user="carol")
        assert admin is not None and not admin.error
        assert f"{hours(sum(real))} GPU-hours" in admin.text, admin.text
        whole = await handle_line("/usage cluster=a4 days=1", bot.core, front, user="carol")
        assert whole is not None and f"{hours(sum(real))} GPU-hours" in whole.text, whole
