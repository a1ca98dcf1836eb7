"""One Slurm job per launch when a real worker process stalls mid-submit (SIGSTOP) on the
dev cluster and another worker takes the launch over, then the first one wakes up."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from commands.requests import TrainRequest
from tests.bot.botkit import (
    DEV,
    PROJECT,
    TEST_REDIS,
    dev_config,
    flush_test_redis,
    free_port,
    knobs,
    open_test_store,
    slurm_jobs_named,
    wait_until,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]


def start_worker(tmp_path: Path, name: str, *, stall: bool) -> tuple[subprocess.Popen[bytes], Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TRAINBOT_"))}
    env |= {
        "TRAINBOT_CONFIG": str(DEV / "trainbot.yaml"),
        "REDIS_URL": TEST_REDIS,
        "TRAINBOT_HF_TOKEN": "hf_test_token_value",
        "TRAINBOT_HTTP_PORT": str(free_port()),
        "STALL_BEFORE_SUBMIT": "1" if stall else "0",
    }
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.bot.stalling_worker"],
            cwd=PROJECT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return proc, log


def stopped(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the process is stopped (state T in /proc/<pid>/stat)."""
    stat = Path(f"/proc/{proc.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


async def test_a_worker_stopped_mid_submit_yields_one_job(
    unique: str, tmp_path: Path, cancel_jobs: list[str]
) -> None:
    dev_config()  # skips when the dev cluster is not up
    await flush_test_redis()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        async with knobs(unique, steps=200, step_time_s=0.5), open_test_store() as store:
            launch = Launch(
                request=TrainRequest(
                    workload="rm",
                    model="llama3p1_8b",
                    framework="nemo-rl",
                    cluster="a4",
                    name=unique,
                ),
                user_id="U0ALICE",
                channel="C1",
                parent_ts="1700000000.000100",  # its thread is posted
            )
            await store.launches.create(launch, [Event("thread", launch.id, "Queued.")])
            a, a_log = start_worker(tmp_path, "a", stall=True)
            procs.append(a)

            async def a_stopped() -> bool:
                assert a.poll() is None, a_log.read_text()
                return stopped(a)

            await wait_until(a_stopped, "worker A to stop right before its submit", 90, 0.1)
            mid = await store.launches.get(launch.id)
            assert mid is not None and mid.phase == Phase.SUBMITTING and mid.submit_started_at
            b, b_log = start_worker(tmp_path, "b", stall=False)
            procs.append(b)

            async def b_submitted() -> Launch | None:
                assert b.poll() is None, b_log.read_text()
                stored = await store.launches.get(launch.id)
                return stored if stored is not None and stored.job_id else None

            taken = await wait_until(b_submitted, "worker B to take the launch over", 120, 0.3)
            cancel_jobs.append(taken.job_id)
            a.send_signal(signal.SIGCONT)  # A wakes up mid-submit, long after B submitted

            async def a_gave_up() -> bool:
                return "not submitting" in a_log.read_text() or "stops" in a_log.read_text()

            await wait_until(a_gave_up, "worker A to give the launch up", 60, 0.3)
            await asyncio.sleep(5.0)  # any second job would be in Slurm by now
            jobs = await asyncio.to_thread(slurm_jobs_named, launch.id)
            cancel_jobs.extend(j for j in jobs if j not in cancel_jobs)
            final = await store.launches.get(launch.id)
            assert final is not None
            assert jobs == [taken.job_id], (jobs, a_log.read_text()[-3000:])
            assert [at.job_id for at in final.attempts] == [taken.job_id]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
