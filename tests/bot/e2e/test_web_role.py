"""The web role, Slack's listener, holds no SSH key and no user CA: signed /train (with
its start estimate), /jobs, /logs and /cancel (and the Cancel button) answered there
over HTTP, the cluster work done by a worker that holds the keys (bot.gateway.asks). The web
process itself never logs in anywhere."""

from __future__ import annotations

import asyncio
import time

import pytest

from bot.gateway.asks import WorkerAsks
from bot.lifecycle.launch import Phase
from bot.runtime.assembly import running
from bot.settings.config import Config
from bot.slack.http import run_slack
from bot.slack.webapi import open_front
from support.slack_requests import block_action_body, post_signed, slash_command_body
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN
from tests.bot.botkit import (
    bot_settings,
    dev_config,
    flush_test_redis,
    knobs,
    launch_id_in,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
    wait_until,
)
from tests.bot.conftest import standin_params

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]


def without_keys(config: Config) -> Config:
    """The same clusters with no SSH key and no user CA: what the web role is given."""
    clusters = {
        name: profile.model_copy(
            update={
                "login": profile.login.model_copy(
                    update={"key_file": None, "user_ca_key_file": None}
                )
            }
        )
        for name, profile in config.clusters.items()
    }
    return config.model_copy(update={"clusters": clusters})


async def test_the_web_role_answers_train_jobs_logs_and_cancel_with_no_key_or_ca(
    standin: SlackStandin, unique: str, cancel_jobs: list[str]
) -> None:
    await flush_test_redis()
    config = dev_config(people={"U0ALICE": "alice"}, unmapped="refuse", retry_backoff_s=0)
    bare = without_keys(config)
    assert all(p.login.key_file is None and p.identity for p in bare.clusters.values())
    async with (
        knobs(unique, steps=400, step_time_s=0.5, tokenizer_race="off", users=("alice",)),
        open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as front,
        running(bot_settings(), config, front, role="worker", instance="worker"),
        running(bot_settings(), config, front, role="poller", instance="poller") as poller,
        running(bot_settings(), bare, front, role="web", instance="web") as web,
        run_slack(
            standin_params(standin), web.core, health=web.healthy, metrics=web.metrics, front=front
        ) as slack,
    ):
        assert isinstance(web.core.calls, WorkerAsks) and not web.workers
        url = f"http://127.0.0.1:{slack.http_port}/slack/events"

        async def command(name: str, text: str) -> str:
            answer = await post_signed(url, slash_command_body(name, text))
            assert answer.status == 200 and answer.elapsed_s < 3.0, answer
            return str(answer.json()["text"])

        train = f"sft llama3p1_2b cluster=a3m name={unique}"
        asked = time.monotonic()
        ack = await command("/train", train)
        assert time.monotonic() - asked < 3.0  # inside Slack's 3 s, the estimate included
        launch_id = launch_id_in(ack)
        assert ack.startswith(f"Queued {launch_id}"), ack
        assert "Expected start: " in ack and "no worker answered" not in ack, ack
        launch = await wait_for_launch(poller.store, launch_id, done=Phase.RUNNING, timeout_s=180)
        cancel_jobs.append(launch.job_id)
        assert launch.cluster_user == "alice", launch

        assert launch_id in await command("/jobs", "")

        async def logged() -> str:
            text = await command("/logs", launch_id)
            return text if text.startswith("Last ") else ""  # no log yet, or later

        text = await wait_until(logged, "a log tail through the web role", 60, 1.0)
        assert f"of job {launch.job_id}" in text, text

        assert "Cancel" in await command("/cancel", launch_id)
        clicked = await post_signed(url, block_action_body("trainbot_cancel", launch_id))
        assert clicked.status == 200 and clicked.elapsed_s < 3.0
        said = await standin.wait_for(
            "chat.postEphemeral",
            lambda c: str(c.params.get("text", "")).startswith("Cancelled Slurm job"),
            timeout_s=60,
        )
        assert said.params["text"] == (
            f"Cancelled Slurm job {launch.job_id}. The thread will show the final state."
        )
        final = await wait_for_launch(poller.store, launch_id, timeout_s=120)
        await wait_delivered(poller.store)
        found = await asyncio.to_thread(slurm_jobs_named, launch_id)
        assert web.clusters.pool.stats.round_trips == 0  # the web process logged in nowhere
    assert final.outcome == "CANCELLED" and found == [launch.job_id], final
