"""after= and at= on the dev cluster: a child's Slurm job starts only after its parent's
ended (sacct), a parent that fails for good ends the child with its reason, a 3-step
chain runs in order, and a launch for a time starts after it, once, across a bot
restart and a Redis restart in between."""

from __future__ import annotations

import asyncio
import io
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bench.soak_infra import OwnRedis
from bot.console.chat import ConsoleFront, handle_line, plain
from bot.lifecycle.launch import Phase
from bot.runtime.assembly import Bot, running
from bot.settings.env import Settings
from bot.slack.webapi import SlackFront
from bot.text.front import Incoming
from support.slack_standin import SlackStandin
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    ended_with,
    knobs,
    launch_id_in,
    login_run,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
    wait_until,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

QUICK: Knobs = {"steps": 3, "step_time_s": 0.5, "save_time_s": 0.1, "tokenizer_race": "off"}


async def train(bot: Bot, front: ConsoleFront, text: str, user: str = "alice") -> str:
    reply = await handle_line(f"/train {text}", bot.core, front, user=user)
    assert reply is not None and not reply.error, reply
    return launch_id_in(reply.text)


def start_end(job_id: str) -> tuple[float, float]:
    """Slurm's own Start and End of a job (sacct), as epoch seconds."""

    def read() -> tuple[float, float] | None:
        out = login_run(f"sacct -X -P -n -o Start,End -j {job_id}").strip().splitlines()
        if not out or "Unknown" in out[-1] or "None" in out[-1]:
            return None
        start, end = out[-1].split("|")
        # sacct prints the controller's local time without a zone (the dev cluster: UTC)
        return tuple(  # type: ignore[return-value]
            datetime.fromisoformat(t).replace(tzinfo=UTC).timestamp() for t in (start, end)
        )

    deadline = time.monotonic() + 60
    while (found := read()) is None:
        assert time.monotonic() < deadline, f"sacct has no start and end for {job_id}"
        time.sleep(1)
    return found


async def test_three_step_chain_runs_in_order(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    async with knobs(unique, **QUICK), running(bot_settings(), dev_config(), front) as bot:
        first = await train(bot, front, f"sft llama3p1_2b cluster=a3u name={unique}a")
        second = await train(
            bot, front, f"sft llama3p1_2b cluster=a3u name={unique}b after={first}"
        )
        third = await train(
            bot, front, f"sft llama3p1_2b cluster=a3m name={unique}c after={second}:any"
        )
        jobs = await handle_line("/jobs", bot.core, front, user="alice")
        assert jobs is not None
        assert f"waits until {first} completes" in jobs.text
        assert f"waits until {second} ends" in jobs.text
        done = [await wait_for_launch(bot.store, i, timeout_s=420) for i in (first, second, third)]
        await wait_delivered(bot.store)
    assert [d.outcome for d in done] == ["COMPLETED"] * 3, front.lines
    times = [start_end(d.job_id) for d in done]
    assert times[0][1] <= times[1][0], times  # Slurm started B after A ended
    assert times[1][1] <= times[2][0], times
    for launch in done:
        assert slurm_jobs_named(launch.id) == [launch.job_id]  # one job each


async def test_child_ends_with_the_parents_reason_when_it_fails_for_good(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    async with (
        knobs(unique, **QUICK, fault="oom", fault_at_step=1),
        running(bot_settings(), dev_config(), front) as bot,
    ):
        parent = await train(bot, front, f"dpo llama3p1_8b cluster=a3u name={unique}")
        child = await train(bot, front, f"sft llama3p1_2b cluster=a3u after={parent}")
        failed = await wait_for_launch(bot.store, parent)
        ended = await wait_for_launch(bot.store, child, timeout_s=60)
        await wait_delivered(bot.store)
    assert failed.outcome == "FAILED" and failed.attempts[0].cause_key == "gpu_oom"
    assert ended.phase == Phase.DONE and ended.outcome == "PARENT_FAILED"
    assert ended_with(ended) == f"{parent} ended FAILED"
    said = "\n".join(front.lines)
    assert (
        f"@alice ⛔ Not started, because {parent}, which this launch waited for, ended FAILED"
        in said
    )
    assert f"after={parent}:any" in said
    assert f"Not started, because {parent}" in said
    assert slurm_jobs_named(child) == []  # nothing was submitted


async def test_refusals_cancel_and_jobs_while_waiting(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    async with running(bot_settings(), dev_config(), front) as bot:
        at = datetime.fromtimestamp(time.time() + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        bobs = await train(bot, front, f"sft llama3p1_2b cluster=a3u name={unique} at={at}", "bob")
        refused = await handle_line(
            f"/train sft llama3p1_2b after={bobs}", bot.core, front, user="alice"
        )
        assert refused is not None and refused.error
        assert refused.text.startswith(f"after={bobs}: ")  # alice may not see bob's launch
        # A cycle in stored records (no command makes one) is refused, not followed for ever.
        mine = await train(bot, front, f"sft llama3p1_2b cluster=a3u at={at}")
        other = await train(bot, front, f"sft llama3p1_2b cluster=a3u after={mine}")

        def loop_back(stored):  # type: ignore[no-untyped-def]
            stored.waits_for = other
            return []

        await bot.store.launches.mutate(mine, loop_back)
        cycle = await handle_line(
            f"/train sft llama3p1_2b after={other}", bot.core, front, user="alice"
        )
        assert cycle is not None and cycle.error and "a cycle" in cycle.text, cycle
        jobs = await handle_line("/jobs", bot.core, front, user="bob")
        assert jobs is not None and "starts at <!date^" in jobs.text, jobs  # reader's zone
        assert f"starts at {at[:10]} {at[11:16]} UTC" in plain(jobs.text), jobs  # console: UTC
        cancelled = await bot.core.decisions.cancel(
            await bot.store.launches.get(bobs),  # type: ignore[arg-type]
            await bot.core.directory.user(_incoming("bob")),
        )
        assert "Cancelled" in cancelled.text
        launch = await bot.store.launches.get(bobs)
        assert launch is not None and launch.outcome == "CANCELLED"
    assert slurm_jobs_named(bobs) == []


def _incoming(user: str) -> Incoming:
    return Incoming(user_id=user, user_name=user, channel_id="console", command="/cancel")


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
async def test_at_starts_after_its_time_once_across_bot_and_redis_restarts(
    tmp_path: Path, unique: str
) -> None:
    redis = OwnRedis(tmp_path / "redis", appendfsync="everysec")
    await redis.start()
    settings = Settings.from_environ({"REDIS_URL": redis.url})
    front = ConsoleFront(io.StringIO(), color=False)
    due = time.time() + 25
    at = datetime.fromtimestamp(due, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        async with knobs(unique, **QUICK):
            async with running(settings, dev_config(), front) as bot:
                launch_id = await train(
                    bot, front, f"sft llama3p1_2b cluster=a3u name={unique} at={at}"
                )
                await wait_delivered(bot.store)
                await asyncio.sleep(2)  # a worker took it and put it back for its time
                waiting = await bot.store.launches.get(launch_id)
                assert waiting is not None and waiting.phase == Phase.QUEUED
            await redis.stop()  # the bot is down; then Redis restarts from its append-only file
            await redis.start()
            assert time.time() < due, "the test was too slow to restart before the time"
            assert slurm_jobs_named(launch_id) == []
            async with running(settings, dev_config(), front) as bot:

                async def submitted() -> bool:
                    found = await bot.store.launches.get(launch_id)
                    return found is not None and bool(found.job_id)

                await wait_until(submitted, "the launch to be submitted", timeout_s=120)
                launch = await wait_for_launch(bot.store, launch_id)
    finally:
        await redis.stop()
    assert launch.outcome == "COMPLETED"
    assert launch.attempts[0].submitted_at >= due - 1  # the stored time has whole seconds
    start, _ = start_end(launch.job_id)
    assert start >= due - 1
    assert slurm_jobs_named(launch_id) == [launch.job_id]  # once
    text = "\n".join(front.lines)
    assert text.count("Pre-flight ok") == 1, text


async def test_at_is_read_and_said_back_in_the_persons_slack_time_zone(
    standin: SlackStandin, front: SlackFront
) -> None:
    standin.timezones["U0ALICE"] = "Asia/Tokyo"
    async with running(bot_settings(), dev_config(), front) as bot:
        incoming = Incoming(
            user_id="U0ALICE",
            channel_id="C0TRAIN",
            command="/train",
            text="sft llama3p1_2b cluster=a3u at=tomorrow 06:30",
        )
        reply = await bot.core(incoming)
        assert not reply.error, reply
        launch_id = launch_id_in(reply.text)
        launch = await bot.store.launches.get(launch_id)
        assert launch is not None and launch.tz == "Asia/Tokyo"
        tokyo = datetime.now(ZoneInfo("Asia/Tokyo")).date() + timedelta(days=1)
        assert f"starts at {tokyo.isoformat()} 06:30 Asia/Tokyo" in reply.text, reply.text
        assert launch.request.at == (
            datetime.combine(tokyo, datetime.min.time().replace(hour=6, minute=30))
            .replace(tzinfo=ZoneInfo("Asia/Tokyo"))
            .astimezone(UTC)
            .strftime("%Y-%m-%dT%H:%M:%SZ")
        )
        await bot.core.decisions.cancel(launch, await bot.core.directory.user(incoming))


async def test_child_follows_its_parent_across_a_retry(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    fault: Knobs = {
        **QUICK,
        "steps": 4,
        "step_time_s": 0.3,
        "fault": "nccl",
        "fault_at_step": 2,
        "fault_once": 1,
        "ckpt_every": 1,
    }
    async with (
        knobs(unique, **fault),
        running(bot_settings(), dev_config(retry_backoff_s=0), front) as bot,
    ):
        parent = await train(bot, front, f"grpo llama3p1_8b cluster=a3h name={unique}")
        child = await train(bot, front, f"sft llama3p1_2b cluster=a3u after={parent}")
        dry = await train(bot, front, f"sft llama3p1_2b cluster=a3u after={parent} dry_run=true")
        assert (await wait_for_launch(bot.store, dry, timeout_s=60)).phase == Phase.DRY_RUN
        retried = await wait_for_launch(bot.store, parent, timeout_s=300)
        done = await wait_for_launch(bot.store, child, timeout_s=300)
        await wait_delivered(bot.store)
    assert retried.outcome == "COMPLETED" and len(retried.attempts) == 2, front.lines
    assert retried.attempts[0].cause_key == "nccl_timeout"
    assert done.outcome == "COMPLETED"
    _, first_end = start_end(retried.attempts[0].job_id)
    _, last_end = start_end(retried.attempts[1].job_id)
    child_start, _ = start_end(done.job_id)
    assert first_end < last_end <= child_start  # it waited for the retry, not the first job
