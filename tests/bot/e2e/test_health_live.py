"""Run health on the dev cluster: the NeMo stand-in prints a NaN loss (as NeMo's progress
printer does), a loss spike and a window of slow steps (knobs nan_at, spike_at, slow_at);
the poller reads them from the log and says each once."""

from __future__ import annotations

import asyncio
import io
import re
from typing import Unpack

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.engine.gpuwatch import sample_running
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.health import TRAINBOT
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.runtime.assembly import running
from bot.settings.config import Config
from bot.settings.sections import HealthRules
from cluster.ssh.pool import SSHPool
from commands.requests import TrainRequest
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    flush_test_redis,
    knobs,
    launch_id_in,
    login_run,
    open_test_store,
    sacct_rows,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
    wait_until,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]


def with_health(config: Config, **rules: object) -> Config:
    health = HealthRules.model_validate(rules)
    return config.model_copy(update={"watch": config.watch.model_copy(update={"health": health})})


async def run_to_end(
    unique: str, cancel_jobs: list[str], config: Config, **values: Unpack[Knobs]
) -> tuple[Launch, str]:
    front = ConsoleFront(io.StringIO(), color=False)
    async with (
        knobs(unique, **Knobs(tokenizer_race="off", **values)),
        running(bot_settings(), config, front) as bot,
    ):
        reply = await handle_line(
            f"/train sft llama3p1_2b cluster=a3m name={unique}", bot.core, front, user="alice"
        )
        assert reply is not None and not reply.error, reply
        launch_id = launch_id_in(reply.text)
        try:
            final = await wait_for_launch(bot.store, launch_id, timeout_s=240)
            await asyncio.sleep(2.0)  # a retry, were one planned, would be queued by now
            await wait_delivered(bot.store)
            final = await bot.store.launches.get(launch_id) or final
        finally:
            jobs = await asyncio.to_thread(slurm_jobs_named, launch_id)
            cancel_jobs.extend(j for j in jobs if j not in cancel_jobs)
    assert jobs == [final.job_id], jobs
    return final, "\n".join(front.lines)


async def test_a_nan_loss_stops_the_run_at_the_poll_that_reads_it_and_is_said_once(
    unique: str, cancel_jobs: list[str]
) -> None:
    await flush_test_redis()
    final, text = await run_to_end(
        unique, cancel_jobs, dev_config(retry_backoff_s=0), steps=200, step_time_s=0.5, nan_at=8
    )
    said = re.findall(r"@alice the training loss is nan at step 9\b", text)
    assert len(said) == 1, text
    assert "trainbot is stopping the run" in text, text
    assert final.outcome == "CANCELLED" and final.phase == Phase.DONE, text
    assert final.cancelled_by == TRAINBOT and final.health.nan_step == 9, final
    assert sacct_rows(final.job_id)[-1]["State"].startswith("CANCELLED"), text
    # One poll a second, 0.5 s a step: stopped within a few steps, not at step 200.
    assert final.progress.step < 30, final.progress
    assert f"ended (CANCELLED) after {TRAINBOT} (its loss went NaN) cancelled it" in text, text
    assert "Retrying" not in text and "attempt 2" not in text, text
    assert all(loss == loss for _, loss in final.progress_history), final.progress_history


async def test_a_run_that_completes_with_a_nan_loss_is_flagged_not_a_plain_success(
    unique: str, cancel_jobs: list[str]
) -> None:
    """Lightning prints ``train_loss: nan`` and exits 0: COMPLETED, with a NaN model."""
    await flush_test_redis()
    config = with_health(dev_config(), nan_action="flag")
    final, text = await run_to_end(
        unique, cancel_jobs, config, steps=12, step_time_s=0.3, nan_at=4, nan_value="inf"
    )
    assert len(re.findall(r"training loss is inf at step 5\b", text)) == 1, text
    assert "The run goes on (health policy: flag)" in text, text
    assert final.outcome == "COMPLETED" and not final.cancelled_by, text
    assert re.search(r"COMPLETED .*but its loss went NaN/inf at step 5", text), text


async def test_a_loss_spike_and_a_slow_step_window_are_each_said_once(
    unique: str, cancel_jobs: list[str]
) -> None:
    await flush_test_redis()
    final, text = await run_to_end(
        unique,
        cancel_jobs,
        dev_config(),
        steps=30,
        step_time_s=0.4,
        ckpt_every=100,
        spike_at=12,
        slow_at=18,
        slow_steps=5,
        slow_factor=4,
    )
    assert final.outcome == "COMPLETED", text
    assert len(re.findall(r"Loss spike at step 13\b", text)) == 1, text
    assert len(re.findall(r"Loss spike", text)) == 1, text
    assert len(re.findall(r"Steps are slow since step 19\b", text)) == 1, text
    assert len(re.findall(r"Steps are slow", text)) == 1, text
    assert len(re.findall(r"Step time is back to normal at step 24\b", text)) == 1, text
    assert "NaN" not in text.replace("NaN/inf", ""), text


async def test_gpus_idle_for_the_window_get_one_warning_and_busy_ones_none(
    unique: str, cancel_jobs: list[str]
) -> None:
    """The nodes' stand-in nvidia-smi reads 2% for one job and 90% for another (knob
    gpu_util per job); sampled every second, idle for 3 s is a warning, said once."""
    await flush_test_redis()
    front = ConsoleFront(io.StringIO(), color=False)
    config = with_health(dev_config(), gpu_sample_s=1, idle_window_s=3, idle_util_pct=10)
    idle, busy = f"{unique}i", f"{unique}b"
    async with (
        knobs(idle, tokenizer_race="off", steps=400, step_time_s=0.5, gpu_util=2),
        knobs(busy, tokenizer_race="off", steps=400, step_time_s=0.5, gpu_util=90),
        running(bot_settings(), config, front) as bot,
    ):
        ids = []
        for name in (idle, busy):
            reply = await handle_line(
                f"/train sft llama3p1_2b cluster=a3m name={name}",
                bot.core,
                front,
                user="alice",
            )
            assert reply is not None and not reply.error, reply
            ids.append(launch_id_in(reply.text))
        try:
            for launch_id in ids:
                launch = await wait_for_launch(bot.store, launch_id, done=Phase.RUNNING)
                cancel_jobs.append(launch.job_id)

            async def both_sampled_past_the_window() -> bool:
                launches = [await bot.store.launches.get(i) for i in ids]
                return all(
                    x is not None and x.health.gpu_util_pct is not None for x in launches
                ) and any("nearly idle" in line for line in front.lines)

            await wait_until(both_sampled_past_the_window, "an idle warning", 120, 0.5)
            await asyncio.sleep(5.0)  # five more samples: no second warning
            await wait_delivered(bot.store)
            idle_launch, busy_launch = [await bot.store.launches.get(i) for i in ids]
        finally:
            for launch_id in ids:
                jobs = await asyncio.to_thread(slurm_jobs_named, launch_id)
                cancel_jobs.extend(j for j in jobs if j not in cancel_jobs)
    text = "\n".join(front.lines)
    assert idle_launch is not None and busy_launch is not None
    warnings = [line for line in front.lines if "nearly idle" in line]
    assert len(warnings) == 1, text
    assert f"GPUs of job {idle_launch.job_id} have been nearly idle" in warnings[0], text
    assert "2% busy, 60.0/80 GiB memory" in warnings[0] and "@alice" in warnings[0], text
    assert busy_launch.health.gpu_util_pct == 90 and not busy_launch.health.gpu_idle_said
    assert idle_launch.health.gpu_util_pct == 2 and idle_launch.health.gpu_idle_said
    assert re.search(r"GPU 90%", text) and re.search(r"GPU 2%", text), text


async def test_sampling_fifty_running_jobs_costs_one_round_trip(
    unique: str, cancel_jobs: list[str]
) -> None:
    """Fifty RUNNING launches of one cluster, sampled: one SSH command at the pool. The dev
    cluster (32 cores, shared) runs two of their jobs for real; the other 48 name jobs
    Slurm does not have, whose srun fails inside the same command."""
    await flush_test_redis()
    submit = f"sbatch --parsable -J {unique}g -p a3m -c1 --gres=gpu:2 --wrap 'sleep 300'"
    real = [login_run(submit).strip().split(";")[0] for _ in range(2)]
    cancel_jobs.extend(real)

    async def both_running() -> bool:
        out = await asyncio.to_thread(login_run, f"squeue -h -o %T -j {','.join(real)}")
        return out.split() == ["RUNNING", "RUNNING"]

    await wait_until(both_running, "two sleep jobs to run", 120, 0.5)
    config = dev_config()
    job_ids = [*real, *(str(9_000_000 + i) for i in range(48))]
    async with open_test_store() as store, SSHPool() as pool:
        clusters = Clusters(config, bot_settings(), pool)
        for number, job_id in enumerate(job_ids):
            request = TrainRequest(
                workload="sft", model="llama3p1_2b", framework="nemo", cluster="a3m"
            )
            launch = Launch(
                request=request, user_id="alice", channel="console", phase=Phase.RUNNING
            )
            launch.attempts.append(Attempt(number=1, job_id=job_id))
            assert await store.launches.create(launch, [], enqueue=False), number
        before = pool.stats.round_trips
        read = await sample_running(store, clusters, "a3m")
        trips = pool.stats.round_trips - before
        stored = [
            x for x in await store.launches.get_many(await store.history.tracked_ids("a3m")) if x
        ]
    assert trips == 1, trips
    assert read == 2, read
    sampled = {x.job_id: x.health for x in stored if x.health.gpu_util_pct is not None}
    assert sorted(sampled) == sorted(real), sampled
    assert all(h.gpu_util_pct == 95 and h.gpu_mem_total_mib == 81559 for h in sampled.values())
