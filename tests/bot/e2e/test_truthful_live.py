"""Truthful on real runs, on the dev cluster: a NeMo-RL driver that block-buffers its
output as the real one does is followed step by step (PYTHONUNBUFFERED reaches it) and
never called hung; a run stopped by its time budget (checkpoint_must_save_by) is said as
stopped early, resumed from its checkpoint, and completes, its ``after=`` child waiting for
the real end; a held job is said within two polls and paged once; a GRPO run is watched on
its reward and accuracy, with no false spike from its signed loss."""

from __future__ import annotations

import asyncio
import io
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.launch import Phase
from bot.runtime.assembly import Bot, running
from bot.text.front import Incoming
from commands.requests import TrainRequest
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    knobs,
    launch_id_in,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
    wait_until,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]


@asynccontextmanager
async def console_bot(
    edit: Callable[[str], str] | None = None, **watch: float
) -> AsyncIterator[tuple[Bot, ConsoleFront]]:
    front = ConsoleFront(io.StringIO(), color=False)
    async with running(bot_settings(), dev_config(edit=edit, watch=watch), front) as bot:
        yield bot, front


async def train(bot: Bot, front: ConsoleFront, text: str) -> str:
    reply = await handle_line(f"/train {text}", bot.core, front, user="alice")
    assert reply is not None and not reply.error, reply
    return launch_id_in(reply.text)


async def cancel_named(fragment: str, cancel_jobs: list[str]) -> None:
    jobs = await asyncio.to_thread(slurm_jobs_named, fragment)
    cancel_jobs.extend(j for j in jobs if j not in cancel_jobs)


async def test_a_buffered_sft_with_20s_steps_is_followed_step_by_step_and_not_called_hung(
    unique: str, cancel_jobs: list[str]
) -> None:
    """The stand-in prints without flushing (rl_buffered=1): without PYTHONUNBUFFERED its
    1.5 KiB of output would reach the log only at exit, a minute of silence past the 30 s
    hang limit. With it, each 20 s step is seen while the job runs."""
    async with (
        knobs(unique, rl_buffered=1, steps=3, step_time_s=20, save_time_s=0.1),
        console_bot(hang_min_s=30) as (bot, front),
    ):
        launch_id = await train(
            bot, front, f"sft llama3p1_8b framework=nemo-rl cluster=a3m name={unique}"
        )
        seen: list[int] = []  # the steps the launch showed while its job was RUNNING
        try:
            while (launch := await bot.store.launches.get(launch_id)) is not None and launch.active:
                if launch.phase == Phase.RUNNING and launch.progress.step not in seen:
                    seen.append(launch.progress.step)
                await asyncio.sleep(0.5)
            final = await wait_for_launch(bot.store, launch_id, timeout_s=30)
            await wait_delivered(bot.store)
        finally:
            await cancel_named(launch_id, cancel_jobs)
    text = "\n".join(front.lines)
    assert final.outcome == "COMPLETED", text
    assert "No progress for" not in text and "S0ONCALL" not in text, text
    assert {1, 2} <= set(seen), (seen, text)  # steps as they happened, not all at the end
    assert not any(a.hang_reported for a in final.attempts)


async def test_a_run_stopped_by_its_time_budget_resumes_completes_and_its_child_waits(
    unique: str, cancel_jobs: list[str]
) -> None:
    """checkpoint_must_save_by=5 s and 1.5 s steps: attempt 1 saves step 3 of 6 and exits 0
    (COMPLETED); trainbot says it stopped early and resumes it from that checkpoint; attempt
    2 runs steps 4 to 6 and completes. The after= child is submitted only after that."""
    child_tag = f"{unique}c"
    async with (
        knobs(unique, steps=6, step_time_s=1.5, save_time_s=0.1, ckpt_every=100),
        knobs(child_tag, steps=2, step_time_s=0.3),
        console_bot() as (bot, front),
    ):
        parent_id = await train(
            bot,
            front,
            f"sft llama3p1_8b framework=nemo-rl cluster=a3m name={unique} "
            "checkpointing.checkpoint_must_save_by=00:00:00:05",
        )
        child_id = await train(
            bot,
            front,
            f"sft llama3p1_8b framework=nemo-rl cluster=a3m name={child_tag} after={parent_id}",
        )
        try:
            parent = await wait_for_launch(bot.store, parent_id, timeout_s=240)
            child = await wait_for_launch(bot.store, child_id, timeout_s=120)
            await wait_delivered(bot.store)
        finally:
            await cancel_named(parent_id, cancel_jobs)
            await cancel_named(child_id, cancel_jobs)
    text = "\n".join(front.lines)
    assert (
        "⏸️ STOPPED EARLY at step 3 / 6 (its time budget; Slurm: COMPLETED) · checkpoint "
        "step 3 · resuming from it (attempt 2)." in text
    ), text
    assert parent.outcome == "COMPLETED" and len(parent.attempts) == 2, text
    assert parent.progress.step == 6 and parent.attempts[1].resume, parent.progress
    assert [c for c in parent.checkpoints if c.endswith(("_3", "_6"))] == ["step_3", "step_6"]
    assert child.outcome == "COMPLETED", text
    assert child.attempts[0].submitted_at >= parent.attempts[-1].ended_at, (child, parent)


def never_resume(text: str) -> str:
    return text.replace("\nwatch:\n", "\nwatch:\n  resume_stopped_early: never\n", 1)


async def test_a_run_left_stopped_early_goes_on_from_its_checkpoint_by_its_button(
    unique: str, cancel_jobs: list[str]
) -> None:
    """Under resume_stopped_early: never, a run stopped by its 3 s budget at step 2 of 4
    ends STOPPED_EARLY (not ✅); its Resume button launches the same run from its
    checkpoint (from=), which does steps 3 and 4 and completes."""
    async with (
        knobs(unique, steps=4, step_time_s=1.0, save_time_s=0.1, ckpt_every=100),
        console_bot(edit=never_resume) as (bot, front),
    ):
        first_id = await train(
            bot,
            front,
            f"sft llama3p1_8b framework=nemo-rl cluster=a3m name={unique} "
            "checkpointing.checkpoint_must_save_by=00:00:00:03",
        )
        try:
            first = await wait_for_launch(bot.store, first_id, timeout_s=120)
            click = Incoming(
                user_id="alice",
                channel_id="console",
                action_id="trainbot_resume",
                action_value=first_id,
            )
            reply = await bot.core(click)
            assert not reply.error, reply
            second_id = launch_id_in(reply.text)
            second = await wait_for_launch(bot.store, second_id, timeout_s=120)
            await wait_delivered(bot.store)
        finally:
            await cancel_named(unique, cancel_jobs)
    text = "\n".join(front.lines)
    assert first.outcome == "STOPPED_EARLY" and first.progress.step == 2, text
    assert "⏸️ STOPPED EARLY at step 2 / 4 (its time budget; Slurm: COMPLETED)" in text, text
    assert "Not resumed: the policy resumes no run" in text, text
    assert isinstance(second.request, TrainRequest), second.request
    assert second.request.start_from == first_id, second.request
    assert second.outcome == "COMPLETED" and second.progress.step == 4, text


def hold(job: str) -> None:
    """As the cluster's admin (the tests run where devcluster/up did): requeue the running
    job, then hold it once Slurm has it pending again."""
    subprocess.run(["scontrol", "requeue", job], check=True, timeout=30, capture_output=True)
    deadline = time.monotonic() + 30
    while True:
        held = subprocess.run(["scontrol", "hold", job], timeout=30, capture_output=True)
        if held.returncode == 0 or time.monotonic() > deadline:
            assert held.returncode == 0, held.stderr
            return
        time.sleep(0.3)


async def test_a_held_job_is_said_within_two_polls_and_paged_once(
    unique: str, cancel_jobs: list[str]
) -> None:
    """The dev cluster has no failing prolog to leave a job "launch failed requeued held"
    (a Prolog would need the shared slurm.conf changed): an administrator's hold stands in
    for it (scontrol requeue, then hold: squeue's reason JobHeldAdmin), another hold only
    on-call can lift. Read in plain words within two polls, paged once."""
    async with (
        knobs(unique, steps=400, step_time_s=0.5),
        console_bot() as (bot, front),
    ):
        launch_id = await train(
            bot, front, f"sft llama3p1_8b framework=nemo-rl cluster=a3m name={unique}"
        )
        try:
            launch = await wait_for_launch(bot.store, launch_id, done=Phase.RUNNING)
            job = launch.job_id
            await asyncio.to_thread(hold, job)
            polls_then = bot.poller.polls

            async def held() -> bool:
                return any("⛔ HELD" in line for line in front.lines)

            await wait_until(held, "the thread to say the job is held", 30, 0.1)
            polls_taken = bot.poller.polls - polls_then
            await asyncio.sleep(3.0)  # three more polls: said once, paged once
            await wait_delivered(bot.store)
            stored = await bot.store.launches.get(launch_id)
        finally:
            await cancel_named(launch_id, cancel_jobs)
    text = "\n".join(front.lines)
    assert polls_taken <= 2, (polls_taken, text)
    assert len([ln for ln in front.lines if "⛔ HELD · job" in ln]) == 1, text
    assert "held by an administrator (Slurm: `JobHeldAdmin`)" in text, text
    pages = [ln for ln in front.lines if "S0ONCALL" in ln]
    assert len(pages) == 1 and "held by an administrator" in pages[0], text
    assert stored is not None and stored.phase == Phase.SUBMITTED


async def test_a_grpo_run_shows_its_reward_and_accuracy_and_no_false_spike(
    unique: str, cancel_jobs: list[str]
) -> None:
    """The GRPO stand-in prints a clipped policy-gradient loss near zero of either sign,
    several times its usual size every fifth step, a rising reward and a validation every
    two steps."""
    async with (
        knobs(unique, steps=12, step_time_s=0.3, save_time_s=0.1, val_every=2),
        console_bot() as (bot, front),
    ):
        launch_id = await train(bot, front, f"grpo llama3p1_8b cluster=a3m name={unique}")
        try:
            final = await wait_for_launch(bot.store, launch_id, timeout_s=180)
            await wait_delivered(bot.store)
        finally:
            await cancel_named(launch_id, cancel_jobs)
    text = "\n".join(front.lines)
    assert final.outcome == "COMPLETED", text
    assert "spike" not in text.lower(), text
    assert len(final.reward_history) == 12 and final.reward_history[-1][1] > 0.5, final
    assert [s for s, _ in final.accuracy_history] == [2, 4, 6, 8, 10, 12], final
    assert final.progress.reward is not None and final.progress.accuracy is not None
    assert "· reward 0.6" in text and "accuracy 0.5" in text and "(val)" in text, text


async def test_a_registry_401_tells_the_person_and_a_heartbeat_abort_is_retried(
    unique: str, cancel_jobs: list[str]
) -> None:
    """Two of today's texts, injected by the stand-in in their upstream formats: enroot's
    registry 401 is the person's to fix (said, not retried, never paged); PyTorch's NCCL
    heartbeat-monitor abort is transient (retried from the checkpoint, and completes)."""
    auth, beat = f"{unique}a", f"{unique}b"
    quick: Knobs = {"steps": 4, "step_time_s": 0.3, "save_time_s": 0.1}
    async with (
        knobs(auth, fault="registry_401", **quick),
        knobs(beat, fault="heartbeat", fault_at_step=2, fault_once=1, **quick),
        console_bot(retry_backoff_s=0) as (bot, front),
    ):
        ids = [
            await train(bot, front, f"sft llama3p1_8b framework=nemo-rl cluster=a3m name={tag}")
            for tag in (auth, beat)
        ]
        try:
            told, retried = [await wait_for_launch(bot.store, i, timeout_s=180) for i in ids]
            await wait_delivered(bot.store)
        finally:
            for launch_id in ids:
                await cancel_named(launch_id, cancel_jobs)
    text = "\n".join(front.lines)
    assert told.outcome == "FAILED" and len(told.attempts) == 1, text
    assert told.attempts[0].cause_key == "image_registry_auth", text
    assert "the container registry refused the image" in text, text
    assert retried.outcome == "COMPLETED" and len(retried.attempts) == 2, text
    assert retried.attempts[0].cause_key == "nccl_heartbeat", text
    assert not [ln for ln in front.lines if "S0ONCALL" in ln], text  # neither pages
