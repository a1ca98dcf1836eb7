"""The web role, Slack's listener, holds no SSH key and no user CA: /train (with its
start estimate), /jobs, /logs and /cancel answered there, the cluster work done by a
worker that holds the keys (bot.asks). The web process itself never logs in anywhere."""

from __future__ import annotations

import asyncio
import io
import time

import pytest

from bot.asks import WorkerAsks
from bot.config import Config
from bot.console import ConsoleFront, handle_line
from bot.front import Incoming
from bot.launches import Phase
from bot.service import running
from tests.bot.botkit import (
    LAUNCH_RE,
    bot_settings,
    dev_config,
    flush_test_redis,
    knobs,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
    wait_until,
)

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
    unique: str, cancel_jobs: list[str]
) -> None:
    await flush_test_redis()
    front = ConsoleFront(io.StringIO(), color=False)
    config = dev_config(people={"U0ALICE": "alice"}, unmapped="refuse", retry_backoff_s=0)
    bare = without_keys(config)
    assert all(p.login.key_file is None and p.identity for p in bare.clusters.values())
    async with (
        knobs(unique, steps=400, step_time_s=0.5, tokenizer_race="off", users=("alice",)),
        running(bot_settings(), config, front, role="worker", instance="worker"),
        running(bot_settings(), config, front, role="poller", instance="poller") as poller,
        running(bot_settings(), bare, front, role="web", instance="web") as web,
    ):
        assert isinstance(web.core.calls, WorkerAsks) and not web.workers
        asked = time.monotonic()
        reply = await handle_line(
            f"/train sft llama3p1_2b cluster=a3m name={unique}", web.core, front, user="U0ALICE"
        )
        answered_s = time.monotonic() - asked
        assert reply is not None and not reply.error, reply
        assert answered_s < 3.0, answered_s  # inside Slack's 3 s, estimate included
        assert "Expected start: " in reply.text and "no worker answered" not in reply.text, reply
        launch_id = LAUNCH_RE.search(reply.text).group(0)  # type: ignore[union-attr]
        launch = await wait_for_launch(poller.store, launch_id, done=Phase.RUNNING, timeout_s=180)
        cancel_jobs.append(launch.job_id)
        assert launch.cluster_user == "alice", launch

        jobs = await handle_line("/jobs", web.core, front, user="U0ALICE")
        assert jobs is not None and not jobs.error and launch_id in jobs.text, jobs

        async def logged() -> str:
            answer = await handle_line(f"/logs {launch_id}", web.core, front, user="U0ALICE")
            assert answer is not None
            return "" if answer.error else answer.text

        text = await wait_until(logged, "a log tail through the web role", 60, 1.0)
        assert f"of job {launch.job_id}" in text and "as the poller last read it" not in text

        confirm = await handle_line(f"/cancel {launch_id}", web.core, front, user="U0ALICE")
        assert confirm is not None and not confirm.error, confirm
        done = await web.core(  # the confirm's Cancel button, as the web role takes it
            Incoming(
                user_id="U0ALICE",
                channel_id="console",
                action_id="trainbot_cancel",
                action_value=launch_id,
            )
        )
        assert (
            done.text
            == f"Cancelled Slurm job {launch.job_id}. The thread will show the final state."
        ), done
        final = await wait_for_launch(poller.store, launch_id, timeout_s=120)
        await wait_delivered(poller.store)
        found = await asyncio.to_thread(slurm_jobs_named, launch_id)
        assert web.clusters.pool.stats.round_trips == 0  # the web process logged in nowhere
    assert final.outcome == "CANCELLED" and found == [launch.job_id], final
