"""The CLI end to end: ``trainbot train`` launches on the dev cluster through the API
(its thread in the person's DM), ``trainbot logs -f`` prints the log as it grows until
COMPLETED, and ``trainbot cancel`` cancels a running launch. The CLI runs as its own
process, with nothing but TRAINBOT_URL and TRAINBOT_TOKEN."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import pytest

from bot.api.routes import Api
from bot.lifecycle.launch import Phase
from bot.runtime.assembly import running
from bot.slack.http import run_slack
from bot.slack.webapi import open_front
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN
from tests.bot.botkit import (
    bot_settings,
    dev_config,
    flush_test_redis,
    in_dm,
    knobs,
    launch_id_in,
    wait_for_launch,
)
from tests.bot.conftest import standin_params

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]


async def cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


async def test_the_cli_launches_follows_to_completed_and_cancels(
    standin: SlackStandin, unique: str, cancel_jobs: list[str]
) -> None:
    await flush_test_redis()
    config = dev_config(retry_backoff_s=0)
    short, long = f"{unique}s", f"{unique}l"
    async with (
        knobs(short, steps=8, step_time_s=0.6, ckpt_every=3, tokenizer_race="off"),
        knobs(long, steps=400, step_time_s=0.5, tokenizer_race="off"),
        open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as front,
        running(bot_settings(), config, front) as bot,
        run_slack(
            standin_params(standin),
            bot.core,
            health=bot.healthy,
            metrics=bot.metrics,
            front=front,
            api=Api(bot.core, dm_channel=front.open_dm, follow_interval_s=0.5).app(),
        ) as slack,
    ):
        _, token = await bot.store.tokens.mint_token("U0ALICE", user_name="alice")
        env = {
            "PATH": os.environ.get("PATH", ""),
            "TRAINBOT_URL": f"http://127.0.0.1:{slack.http_port}",
            "TRAINBOT_TOKEN": token,
        }
        rc, out, err = await cli(env, "train", "sft", "llama3p1_2b", "cluster=a3m", f"name={short}")
        assert rc == 0 and out.startswith("Queued L-"), (out, err)
        first = launch_id_in(out)
        rc, out, err = await cli(env, "train", "sft", "llama3p1_2b", "cluster=a3m", f"name={long}")
        assert rc == 0, (out, err)
        second = launch_id_in(out)

        follower = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "logs", "-f", first, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert follower.stdout is not None
        lines: list[tuple[float, str]] = []
        async with asyncio.timeout(240):
            while raw := await follower.stdout.readline():
                lines.append((time.monotonic(), raw.decode().rstrip("\n")))
            rc = await follower.wait()
        texts = [text for _, text in lines]
        assert texts[-1].startswith(f"[trainbot] {first} ended COMPLETED"), texts
        assert rc == 0, texts
        steps = [at for at, text in lines if "iteration" in text]
        assert len(steps) >= 4, texts
        assert lines[-1][0] - steps[0] > 1.0, "the log came all at the end, not as it grew"
        progress = [text for text in texts if "iteration" in text]
        assert len(progress) == len(set(progress)), "a line was written twice"

        rc, out, err = await cli(env, "checkpoints", first)
        assert rc == 0 and out.startswith(f"Checkpoints of {first} "), (out, err)
        assert "• step 2 " in out and "• step 5 " in out, out
        rc, out, err = await cli(env, "jobs", "--json")
        assert rc == 0 and [j["id"] for j in json.loads(out)["launches"]] == [second], out
        (listed,) = json.loads(out)["launches"]
        assert listed["job_id"], listed  # submitted with the first, which has ended since
        assert f"--experiment-name {long}-{second}" in listed["record"]["command"], listed
        rc, out, err = await cli(env, "clusters", "a3m")
        assert rc == 0 and out.startswith("*a3m*") and "GPUs free" in out, (out, err)

        running_one = await wait_for_launch(bot.store, second, done=Phase.RUNNING, timeout_s=120)
        cancel_jobs.append(running_one.job_id)
        rc, out, err = await cli(env, "cancel", second)
        assert rc == 0, (out, err)
        assert out.strip() == f"Cancelled Slurm job {running_one.job_id}. The thread will show " \
            "the final state."  # fmt: skip
        final = await wait_for_launch(bot.store, second, timeout_s=120)
        rc, out, _ = await cli(env, "cancel", second)
        assert rc == 1 and "has already ended" in out
        launch = await bot.store.launches.get(first)

    assert final.outcome == "CANCELLED"
    assert launch is not None and launch.channel == "DU0ALICE"
    assert any(in_dm(c.params) for c in standin.calls_to("chat.postMessage"))
