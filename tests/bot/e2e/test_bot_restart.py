"""Restarts lose nothing and repeat nothing: a bot killed mid-submit, a bot
stopped mid-run, a worker that finds its launch already in Slurm, two bots."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.launch import Launch, Phase
from bot.runtime.assembly import running
from cluster.launching import launch as cluster_launch
from commands.requests import TrainRequest
from tests.bot.botkit import (
    DEV,
    PROJECT,
    TEST_REDIS,
    Knobs,
    bot_settings,
    dev_config,
    knobs,
    launch_id_in,
    open_test_store,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

FAST: Knobs = {"steps": 4, "step_time_s": 0.5, "tokenizer_race": "off"}


def console(config: Path, stdin: int) -> subprocess.Popen[str]:
    env = {**os.environ, "REDIS_URL": TEST_REDIS, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "bot", "console", "--config", str(config), "--user", "alice"],
        cwd=PROJECT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=stdin,
    )  # fmt: skip


def fast_config_file(tmp_path: Path) -> Path:
    text = (DEV / "trainbot.yaml").read_text().replace("poll_interval_s: 2", "poll_interval_s: 1")
    path = tmp_path / "trainbot.yaml"
    path.write_text(text)
    return path


async def only_launch() -> Launch | None:
    async with open_test_store() as store:
        async for key in store.redis.scan_iter(match="trainbot:launch:*"):
            return await store.launches.get(str(key).rsplit(":", 1)[-1])
    return None


async def test_killed_mid_submit_gives_exactly_one_slurm_job(tmp_path: Path, unique: str) -> None:
    dev_config()  # skips when the dev cluster is not up
    config = fast_config_file(tmp_path)
    async with knobs(unique, **FAST):
        first = console(config, stdin=subprocess.PIPE)
        assert first.stdin is not None
        first.stdin.write(f"/train sft llama3p1_2b nodes=1 cluster=a3h name={unique}\n")
        first.stdin.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        launch = None
        while loop.time() < deadline:
            launch = await only_launch()
            if launch is not None and launch.phase == Phase.SUBMITTING:
                break
            await asyncio.sleep(0.02)
        assert launch is not None and launch.phase == Phase.SUBMITTING, launch
        first.send_signal(signal.SIGKILL)  # somewhere inside "bash -l -s" / run.py / sbatch
        first.wait(timeout=10)
        second = console(config, stdin=subprocess.DEVNULL)
        out, _ = await asyncio.to_thread(second.communicate, timeout=240)
        assert second.returncode == 0, out
        async with open_test_store() as store:
            final = await store.launches.get(launch.id)
    assert final is not None and final.outcome == "COMPLETED", out
    assert slurm_jobs_named(launch.id) == [final.job_id]  # exactly one job for the launch
    assert len(final.attempts) == 1
    assert ("Found the job submitted before a restart" in out) or ("Submitted: Slurm job" in out), (
        out
    )
    assert "COMPLETED" in out


async def test_a_worker_adopts_a_job_submitted_before_it_died(unique: str) -> None:
    """The launch is SUBMITTING and Slurm already has its job: no second sbatch."""
    config = dev_config()
    front = ConsoleFront(io.StringIO(), color=False)
    async with knobs(unique, **FAST), running(bot_settings(), config, front, workers=0) as bot:
        request = TrainRequest(
            workload="sft",
            model="llama3p1_8b",
            framework="nemo-rl",
            cluster="a3u",
            nodes=1,
            name=unique,
        )
        stored = Launch(request=request, user_id="alice", channel="console", phase=Phase.SUBMITTING)
        spec = bot.clusters.spec_for(stored).spec
        submitted = await cluster_launch.submit(bot.clusters.pool, cluster_launch.plan_launch(spec))
        await bot.store.launches.create(stored, [])  # queued for a worker, as the dead one left it
        from bot.engine.worker import Worker

        worker = Worker(bot.store, bot.clusters, name="replacement")
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        try:
            launch = await wait_for_launch(bot.store, stored.id)
        finally:
            stop.set()
            await task
        await wait_delivered(bot.store)
    assert launch.job_id == submitted.job_id
    assert slurm_jobs_named(stored.id) == [submitted.job_id]
    assert any("Found the job submitted before a restart" in line for line in front.lines)


async def test_restart_mid_run_picks_the_launch_up_without_repeating(unique: str) -> None:
    config = dev_config()
    lines: list[str] = []
    async with knobs(unique, steps=12, step_time_s=0.5, tokenizer_race="off"):
        front = ConsoleFront(io.StringIO(), color=False)
        async with running(bot_settings(), config, front) as bot:
            reply = await handle_line(
                f"/train dpo llama3p1_8b cluster=a4 name={unique}",
                bot.core,
                front,
                user="alice",
            )
            assert reply is not None, "no answer"
            launch_id = launch_id_in(reply.text)
            await wait_for_launch(bot.store, launch_id, done=Phase.RUNNING)
            await wait_delivered(bot.store)
        lines += front.lines
        front = ConsoleFront(io.StringIO(), color=False)  # a new process, as after a restart
        async with running(bot_settings(), config, front) as bot:
            launch = await wait_for_launch(bot.store, launch_id)
            await wait_delivered(bot.store)
        lines += front.lines
    assert launch.outcome == "COMPLETED"
    assert sum(line.startswith("  └ Running on") for line in lines) == 1
    assert sum("✅ COMPLETED in" in line and "└" in line for line in lines) == 1
    assert sum(line.startswith("  └ Submitted:") for line in lines) == 1


async def test_two_bots_poll_each_cluster_once(unique: str) -> None:
    config = dev_config()
    front = ConsoleFront(io.StringIO(), color=False)
    async with (
        knobs(unique, **FAST),
        running(bot_settings(), config, front, instance="one") as one,
        running(bot_settings(), config, front, instance="two") as two,
    ):
        reply = await handle_line(
            f"/train grpo llama3p1_8b cluster=a3m name={unique}", one.core, front, user="alice"
        )
        assert reply is not None, "no answer"
        launch_id = launch_id_in(reply.text)
        launch = await wait_for_launch(one.store, launch_id)
        await wait_delivered(one.store)
    assert launch.outcome == "COMPLETED"
    assert min(one.poller.polls, two.poller.polls) == 0 < max(one.poller.polls, two.poller.polls)
    thread = [line for line in front.lines if line.startswith("  └ ")]
    assert len(thread) == len(set(thread))  # no message delivered twice
