"""framework=megatron-bridge on the dev cluster, through the bot: a pretraining run on two
nodes (16 ranks of the stand-in run_recipe.py, its default registry image "imported")
shows steps, loss and ETA, says each checkpoint once and ends COMPLETED; from= of it
starts from its newest checkpoint; a TIMEOUT after a checkpoint is retried from it; a NaN
is named."""

from __future__ import annotations

import io
import re

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.runtime.assembly import Bot, running
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    knobs,
    launch_id_in,
    login_run,
    wait_delivered,
    wait_for_launch,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

MB = "framework=megatron-bridge cluster=a4"


async def train(bot: Bot, front: ConsoleFront, text: str) -> str:
    reply = await handle_line(f"/train {text}", bot.core, front, user="alice")
    assert reply is not None and not reply.error, reply
    return launch_id_in(reply.text)


def run_log(launch_id: str) -> str:
    return login_run(
        "cat ~/vertex-oss-training/megatron_bridge/experiments/"
        f"*-{launch_id}/log-*-{launch_id}_*_0.out"
    )


async def test_pretrain_completes_with_checkpoints_once_and_from_starts_at_the_newest(
    unique: str,
) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    quick: Knobs = {"step_time_s": 0.5, "save_time_s": 0.3, "log_interval": 2}
    async with knobs(unique, **quick), running(bot_settings(), dev_config(), front) as bot:
        first = await train(
            bot,
            front,
            f"pretrain llama3p1_8b {MB} nodes=2 name={unique} train.train_iters=20 "
            "checkpoint.save_interval=5",
        )
        done = await wait_for_launch(bot.store, first)
        second = await train(
            bot,
            front,
            f"pretrain llama3p1_8b {MB} name={unique}b from={first} "
            "train.train_iters=24 checkpoint.save_interval=5",
        )
        resumed = await wait_for_launch(bot.store, second)
        await wait_delivered(bot.store)
    said = "\n".join(front.lines)
    assert done.outcome == "COMPLETED", said
    assert done.checkpoints == [f"iter_{s:07d}" for s in (5, 10, 15, 20)]
    for step in (5, 10, 15, 20):
        assert said.count(f"💾 Checkpoint step {step} saved.") == 1, said
    assert "nvcr.io#nvidia/nemo:26.02 from its registry" in said  # pre-flight: no file check
    assert "pyxis: importing docker image: nvcr.io#nvidia/nemo:26.02" in run_log(first)
    assert "step 20 / 20 · loss" in said
    assert "ETA" in said  # while it ran
    assert done.progress.step == 20 and done.progress.loss is not None
    assert resumed.outcome == "COMPLETED", said
    assert f"Starts from {first}'s newest complete checkpoint, step 20" in said
    log = run_log(second)
    assert f"-{first}/checkpoints [ t 0/1, p 0/1 ] at iteration 20" in log
    assert "Starting training loop at iteration 20" in log
    assert resumed.checkpoints == ["iter_0000024"]  # its own, in its own directory


async def test_timeout_after_a_checkpoint_is_retried_from_it(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    slow: Knobs = {"step_time_s": 0.5, "save_time_s": 0.1, "log_interval": 5}
    async with knobs(unique, **slow), running(bot_settings(), dev_config(), front) as bot:
        launch_id = await train(
            bot,
            front,
            f"pretrain llama3p1_8b {MB} time=1 name={unique} train.train_iters=140 "
            "checkpoint.save_interval=10",
        )
        done = await wait_for_launch(bot.store, launch_id, timeout_s=400)
        await wait_delivered(bot.store)
    said = "\n".join(front.lines)
    assert done.outcome == "COMPLETED", said
    assert len(done.attempts) == 2 and "TIMEOUT" in said, said
    saved = re.findall(
        r"successfully saved checkpoint from iteration\s+(\d+)",
        run_log_of(done.attempts[0].job_id, launch_id),
    )
    assert saved, said
    newest = int(saved[-1])  # the last save the timed-out attempt finished
    retry = run_log_of(done.attempts[1].job_id, launch_id)
    assert f"at iteration {newest}\n" in retry, retry
    assert f"Starting training loop at iteration {newest}\n" in retry, retry


def run_log_of(job_id: str, launch_id: str) -> str:
    return login_run(
        "cat ~/vertex-oss-training/megatron_bridge/experiments/"
        f"*-{launch_id}/log-*-{launch_id}_{job_id}_*.out"
    )


async def test_a_nan_is_named_with_its_step(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    nan: Knobs = {"step_time_s": 0.3, "log_interval": 2, "nan_at": 5, "teardown_s": 1}
    async with knobs(unique, **nan), running(bot_settings(), dev_config(), front) as bot:
        launch_id = await train(
            bot, front, f"pretrain llama3p1_8b {MB} name={unique} train.train_iters=20"
        )
        done = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    said = "\n".join(front.lines)
    assert done.outcome != "COMPLETED", said
    assert done.health.nan_step == 5, said
    assert "NaN" in said and "step 5" in said, said


async def test_a_time_budget_exit_is_said_stopped_early_and_resumed_from_its_checkpoint(
    unique: str,
) -> None:
    """train.exit_duration_in_mins=1 (a minute lasts 5 s here: exit_minute_s) and 2 s steps:
    attempt 1 passes its budget at step 3 of 5, saves it, prints ``[exiting program after
    ... minutes]`` and exits 0 (Slurm: COMPLETED); trainbot says it stopped early, not ✅,
    and resumes it from that checkpoint; attempt 2 does steps 4 and 5 (4 s) and completes.
    The TensorBoard directory the batch script chose is said once, and holds the events."""
    front = ConsoleFront(io.StringIO(), color=False)
    budget: Knobs = {"step_time_s": 2, "save_time_s": 0.1, "log_interval": 1, "exit_minute_s": 5}
    async with knobs(unique, **budget), running(bot_settings(), dev_config(), front) as bot:
        launch_id = await train(
            bot,
            front,
            f"pretrain llama3p1_8b {MB} name={unique} train.train_iters=5 "
            "train.exit_duration_in_mins=1 checkpoint.save_interval=100",
        )
        done = await wait_for_launch(bot.store, launch_id, timeout_s=240)
        await wait_delivered(bot.store)
    said = "\n".join(front.lines)
    assert (
        "⏸️ STOPPED EARLY at step 3 / 5 (its time budget; Slurm: COMPLETED) · checkpoint "
        "step 3 · resuming from it (attempt 2)." in said
    ), said
    assert done.outcome == "COMPLETED" and len(done.attempts) == 2, said
    assert done.progress.step == 5 and done.attempts[1].resume, done.progress
    assert done.checkpoints == ["iter_0000003", "iter_0000005"], done.checkpoints
    first = run_log_of(done.attempts[0].job_id, launch_id)
    assert re.search(r"^\[exiting program after [0-9.]+ minutes\] datetime: ", first, re.M), first
    second = run_log_of(done.attempts[1].job_id, launch_id)
    assert "Starting training loop at iteration 3\n" in second, second
    # The thread names <run dir>/tb_logs once, for both attempts, and it holds event files.
    boards = re.findall(r"📊 TensorBoard logs in `([^`]+)`", said)
    assert len(boards) == 1 and boards[0].endswith(f"-{launch_id}/tb_logs"), said
    assert login_run(f"ls {boards[0]}").startswith("events.out.tfevents."), boards
