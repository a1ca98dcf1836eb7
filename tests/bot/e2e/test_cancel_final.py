"""A cancel is final on the dev cluster: a running job whose log already shows a cause
trainbot retries (an NCCL watchdog timeout) is cancelled by its owner, and the launch ends
CANCELLED with that one job, the thread saying who cancelled it."""

from __future__ import annotations

import asyncio
import io
import re
import shlex

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.launch import Phase
from bot.runtime.assembly import running
from bot.text.front import Incoming
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    flush_test_redis,
    knobs,
    launch_id_in,
    login_run,
    sacct_rows,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
    wait_until,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]

WATCHDOG = "Watchdog caught collective operation timeout"


async def test_a_cancel_of_a_job_whose_log_shows_an_nccl_timeout_is_final(
    unique: str, cancel_jobs: list[str]
) -> None:
    await flush_test_redis()
    front = ConsoleFront(io.StringIO(), color=False)
    # The NCCL fault strikes at step 2; the failing rank then takes minutes to exit, so the
    # job is still RUNNING, its log holding the watchdog line, when its owner cancels it.
    fault: Knobs = {"fault": "nccl", "fault_at_step": 2, "teardown_s": 600}
    async with (
        knobs(unique, steps=20, step_time_s=0.3, tokenizer_race="off", **fault),
        running(bot_settings(), dev_config(retry_backoff_s=0), front) as bot,
    ):
        reply = await handle_line(
            f"/train sft llama3p1_2b cluster=a3m name={unique}", bot.core, front, user="alice"
        )
        assert reply is not None and not reply.error, reply
        launch_id = launch_id_in(reply.text)
        launch = await wait_for_launch(bot.store, launch_id, done=Phase.RUNNING, timeout_s=180)
        cancel_jobs.append(launch.job_id)
        assert launch.attempt is not None and launch.attempt.tracking is not None
        log_dir = launch.attempt.tracking.log_dir

        def watchdog_logged() -> bool:
            found = login_run(f"grep -rl -F {shlex.quote(WATCHDOG)} {shlex.quote(log_dir)} || true")
            return bool(found.strip())

        async def logged() -> bool:
            return await asyncio.to_thread(watchdog_logged)

        await wait_until(logged, "the NCCL watchdog line in the job's log", 120, 1.0)
        current = await bot.store.launches.get(launch_id)
        assert current is not None and current.phase == Phase.RUNNING, current
        done = await bot.core(
            Incoming(
                user_id="alice",
                channel_id="console",
                action_id="trainbot_cancel",
                action_value=launch_id,
            )
        )
        assert not done.error, done.text
        try:
            final = await wait_for_launch(bot.store, launch_id, timeout_s=120)
            await asyncio.sleep(3.0)  # a retry, were one planned, would be queued by now
            await wait_delivered(bot.store)
        finally:  # every job of the launch is cancelled when the test ends, however it ends
            jobs = await asyncio.to_thread(slurm_jobs_named, launch_id)
            cancel_jobs.extend(j for j in jobs if j not in cancel_jobs)
    text = "\n".join(front.lines)
    assert final.outcome == "CANCELLED" and final.phase == Phase.DONE, text
    assert [a.job_id for a in final.attempts] == [launch.job_id], text
    assert jobs == [launch.job_id], text
    assert sacct_rows(launch.job_id)[-1]["State"].startswith("CANCELLED")
    assert re.search(r"Cancelled by @alice", text), text
    assert re.search(rf"Job {launch.job_id} ended \(CANCELLED\) after @alice cancelled it", text)
    assert "Retrying" not in text, text


async def test_a_cancel_taken_by_the_web_role_is_carried_out_by_a_worker(
    unique: str, cancel_jobs: list[str]
) -> None:
    """On a cluster with identity the web role holds no key to act as alice, so it cannot
    ``scancel`` her job itself: it records the cancel and asks a worker (which does act as
    people), which cancels the job as alice there and then."""
    await flush_test_redis()
    front = ConsoleFront(io.StringIO(), color=False)
    config = dev_config(people={"U0ALICE": "alice"}, unmapped="refuse", retry_backoff_s=0)
    async with (
        knobs(unique, steps=400, step_time_s=0.5, tokenizer_race="off"),
        running(bot_settings(), config, front) as bot,
        running(bot_settings(), config, front, role="web", instance="web") as web,
    ):
        assert not web.clusters.pool.act_as_people
        reply = await handle_line(
            f"/train sft llama3p1_2b cluster=a3m name={unique}",
            bot.core,
            front,
            user="U0ALICE",
        )
        assert reply is not None and not reply.error, reply
        launch_id = launch_id_in(reply.text)
        launch = await wait_for_launch(bot.store, launch_id, done=Phase.RUNNING, timeout_s=180)
        cancel_jobs.append(launch.job_id)
        assert launch.cluster_user == "alice", launch
        answer = await web.core(  # the Cancel button's confirm, as the web role takes it
            Incoming(
                user_id="U0ALICE",
                channel_id="console",
                action_id="trainbot_cancel",
                action_value=launch_id,
            )
        )
        assert not answer.error, answer.text
        assert answer.text.startswith(f"Cancelled Slurm job {launch.job_id}."), answer.text
        final = await wait_for_launch(bot.store, launch_id, timeout_s=120)
        await wait_delivered(bot.store)
        jobs = await asyncio.to_thread(slurm_jobs_named, launch_id)
    text = "\n".join(front.lines)
    assert final.outcome == "CANCELLED", text
    assert jobs == [launch.job_id]
    assert sacct_rows(launch.job_id)[-1]["State"].startswith("CANCELLED"), text
