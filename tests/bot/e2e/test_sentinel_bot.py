"""The whole bot through a Redis failover: ``trainbot serve`` (every role) pointed at
devcluster/sentinel's sentinels, the dev cluster's Slurm and the Slack stand-in. The
primary is SIGKILLed while a launch is being submitted, and again while another one is
polled and cancelled: each launch has exactly one Slurm job, its thread runs from queued
through submitted to its final line, and the cancel pressed during the failover ends the
launch CANCELLED with no new job."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from bench.soak_infra import SENTINELS, SENTINELS_ENV, sentinel
from bot.lifecycle.launch import Launch, Phase
from bot.settings.env import Target
from bot.store.store import Store
from support.slack_requests import block_action_body, post_signed, slash_command_body
from support.slack_standin import SlackStandin
from tests.bot.botkit import (
    dev_config,
    in_order,
    knobs,
    launch_id_in,
    sacct_rows,
    slurm_jobs_named,
    wait_for_launch,
    wait_until,
)
from tests.bot.runtime.test_serve import start_serve, wait_healthy

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]


def thread_of(standin: SlackStandin, launch: Launch) -> list[str]:
    """The lines posted in the launch's thread, in order; its parent posted once."""
    posts = standin.calls_to("chat.postMessage")
    parents = [
        c
        for c in posts
        if c.params.get("channel") == launch.channel
        and not c.params.get("thread_ts")
        and launch.id in str(c.params)
    ]  # the owner's DMs (their own channel) are not the thread's
    assert len(parents) == 1, f"{launch.id}: {len(parents)} parent messages"
    assert launch.parent_ts
    return [str(c.params["text"]) for c in posts if c.params.get("thread_ts") == launch.parent_ts]


async def until_phase(store: Store, launch_id: str, phase: Phase, timeout_s: float) -> Launch:
    async def reached() -> Launch | None:
        launch = await store.launches.get(launch_id)
        return launch if launch is not None and launch.phase == phase else None

    return await wait_until(reached, f"{launch_id} to reach {phase}", timeout_s, 0.05)


async def healthy_again(base: str, since: float, timeout_s: float = 60) -> float:
    """Seconds from ``since`` until ``/healthz`` answers 200."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session:

        async def ok() -> bool:
            try:
                async with session.get(f"{base}/healthz") as response:
                    return response.status == 200
            except (aiohttp.ClientError, TimeoutError):
                return False

        await wait_until(ok, "/healthz to answer 200", timeout_s, 0.2)
    return time.monotonic() - since


@pytest.mark.timeout(420)
async def test_a_failover_during_a_submit_and_during_a_poll_and_cancel(
    sentinel_set: None, standin: SlackStandin, unique: str, tmp_path: Path, cancel_jobs: list[str]
) -> None:
    dev_config()  # skips when the dev cluster is not up
    target = Target(sentinels=SENTINELS, wait_replicas=1, wait_timeout_ms=500, retry_for_s=30)
    proc, port = start_serve(
        standin,
        tmp_path,
        REDIS_URL=None,
        REDIS_SENTINELS=SENTINELS_ENV,
        TRAINBOT_HF_TOKEN="hf_test_token_value",
    )
    base = f"http://127.0.0.1:{port}"
    first, second = f"{unique}a", f"{unique}b"
    try:
        await wait_healthy(f"{base}/healthz", proc, timeout_s=60)
        async with (
            knobs(first, steps=4, step_time_s=0.5),
            knobs(second, steps=400, step_time_s=0.5),
            Store.connect(target) as store,
        ):
            # 1. The primary dies as the first launch is taken up: its pre-flight, its
            #    SUBMITTING mark and its sbatch (a few hundred ms here, too brief to aim
            #    at by polling) run while the sentinels promote the replica.
            body = slash_command_body("/train", f"rm llama3p1_8b cluster=a3h name={first}")
            answer = await post_signed(f"{base}/slack/events", body)
            a_id = launch_id_in(answer.json()["text"])
            before = sentinel("primary")
            killed_at = time.monotonic()
            sentinel("kill")
            back_s = await healthy_again(base, killed_at)
            a = await wait_for_launch(store, a_id, timeout_s=180)
            assert sentinel("primary") != before
            sentinel("revive")
            a_jobs = await asyncio.to_thread(slurm_jobs_named, first)
            cancel_jobs.extend(a_jobs)
            assert a.outcome == "COMPLETED", a
            assert a_jobs == [a.job_id]
            assert [at.job_id for at in a.attempts] == [a.job_id]

            # 2. The primary dies while the second launch runs (polled), and its Cancel
            #    is pressed before the sentinels have promoted the replica.
            body = slash_command_body("/train", f"rm llama3p1_8b cluster=a3h name={second}")
            answer = await post_signed(f"{base}/slack/events", body)
            b_id = launch_id_in(answer.json()["text"])
            running = await until_phase(store, b_id, Phase.RUNNING, 120)
            cancel_jobs.append(running.job_id)
            b_parent_ts = running.parent_ts or "1700000000.000001"
            await asyncio.sleep(3)  # a few polls of the running job
            before = sentinel("primary")
            killed_at = time.monotonic()
            sentinel("kill")
            press = block_action_body("trainbot_cancel", b_id, message_ts=b_parent_ts)
            pressed = await post_signed(f"{base}/slack/events", press)
            assert pressed.status == 200
            b = await wait_for_launch(store, b_id, timeout_s=120)
            back_b_s = await healthy_again(base, killed_at)
            assert sentinel("primary") != before
            await asyncio.sleep(5)  # a second job, if any, would be in Slurm by now
            b_jobs = await asyncio.to_thread(slurm_jobs_named, second)
            cancel_jobs.extend(j for j in b_jobs if j not in cancel_jobs)
            assert b.outcome == "CANCELLED", b
            assert b_jobs == [running.job_id]
            assert sacct_rows(running.job_id)[-1]["State"].startswith("CANCELLED")

            await asyncio.sleep(3)  # the last lines reach the stand-in
        in_order(
            thread_of(standin, a),
            r"Queued by",
            rf"Submitted: Slurm job {a.job_id} on a3h",
            r"✅ COMPLETED",
        )
        b_thread = thread_of(standin, b)
        in_order(b_thread, r"Queued by", rf"Submitted: Slurm job {running.job_id}", "CANCELLED")
        assert sum("Cancelled by" in line for line in b_thread) == 1, b_thread
        assert all(line.count("Submitted:") <= 1 for line in b_thread)
        print(f"healthy again {back_s:.1f} s and {back_b_s:.1f} s after the primary was killed")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out[-3000:]
    assert "hf_test_token_value" not in out
