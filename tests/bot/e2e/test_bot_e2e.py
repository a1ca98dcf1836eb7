"""The bot end to end on the dev cluster: real Redis, real Slurm over SSH, real
nemo-run, and the console or Slack (slack-bolt against the Web API stand-in)."""

from __future__ import annotations

import asyncio
import io
import re
from dataclasses import replace

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.launch import Phase
from bot.runtime.assembly import running
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    in_order,
    knobs,
    launch_id_in,
    login_run,
    sacct_rows,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

FAST: Knobs = {
    "steps": 4,
    "step_time_s": 0.4,
    "ckpt_every": 2,
    "save_time_s": 0.1,
    "tokenizer_race": "off",
}


async def test_train_sft_in_the_console_from_queue_to_completed(unique: str) -> None:
    out = io.StringIO()
    front = ConsoleFront(out, color=False)
    async with knobs(unique, **FAST), running(bot_settings(), dev_config(), front) as bot:
        reply = await handle_line(
            f"/train sft llama3p1_8b nodes=2 cluster=a4 name={unique}",
            bot.core,
            front,
            user="alice",
        )
        assert reply is not None and not reply.error, reply
        assert reply.text.startswith("Queued L-")
        launch_id = launch_id_in(reply.text)
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    assert launch.outcome == "COMPLETED", front.lines
    job_id = launch.job_id
    in_order(
        front.lines,
        r"^\S+ [A-Z-]+  sft · llama3p1_8b · 2 nodes × 8 GPU · a4 \(hcc-a4\)",  # the parent
        r"Queued by @alice: `/train sft llama3p1_8b framework=nemo cluster=a4 nodes=2",
        r"Pre-flight ok: partition a4 up .*image nemo-20250721.sqsh found, "
        r"recipe sft/llama3p1_8b_sft.py found",
        rf"Submitted: Slurm job {job_id} on a4, partition a4, 2 nodes\.",
        r"Running on dev\[",
        r"💾 Checkpoint step 1 saved\.",  # NeMo's own step numbers (global_step)
        r"✅ COMPLETED in .* · 1 attempt · ",
        rf"✅ COMPLETED  sft · llama3p1_8b · 2 nodes × 8 GPU · a4 \(hcc-a4\) · job {job_id}",
    )
    assert sum("Running on" in line for line in front.lines) == 1
    rows = sacct_rows(job_id)
    assert rows[-1]["State"] == "COMPLETED" and rows[-1]["Partition"] == "a4"
    assert rows[-1]["NNodes"] == "2"
    assert rows[-1]["JobName"].endswith(f"{unique}-{launch_id}")
    assert launch.progress.step == launch.progress.total == 4
    assert launch.progress.loss is not None


async def test_dry_run_submits_nothing_and_shows_the_commands(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    async with running(
        bot_settings(TRAINBOT_HF_TOKEN="hf_secret_value_123"), dev_config(), front
    ) as bot:
        reply = await handle_line(
            f"/train dpo llama3p1_8b nodes=1 cluster=a3u name={unique} dry_run=true",
            bot.core, front, user="alice",
        )  # fmt: skip
        assert reply is not None, "no answer"
        launch_id = launch_id_in(reply.text)
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    assert launch.phase == Phase.DRY_RUN
    text = "\n".join(front.lines)
    assert "Dry run: nothing was submitted" in text
    assert "launch.sh --cluster_type hcc-a3u --job_script algorithms/dpo.sh" in text
    assert "✓ Partition 'a3u' on a3u is up." in text  # each check says what it found
    assert "✓ 8 GPUs per node; the job needs 8." in text
    assert not re.search(r"✓\s*$", text, re.M)
    assert "hf_secret_value_123" not in text  # secrets are redacted
    assert slurm_jobs_named(launch_id) == []


async def test_preflight_refuses_a_partition_that_does_not_exist(unique: str) -> None:
    from bot.text.front import Incoming

    front = ConsoleFront(io.StringIO(), color=False)
    async with knobs(unique, **FAST), running(bot_settings(), dev_config(), front) as bot:
        reply = await handle_line(
            f"/train sft llama3p1_2b cluster=a4 partition=general name={unique}",
            bot.core,
            front,
            user="alice",
        )
        assert reply is not None, "no answer"
        launch_id = launch_id_in(reply.text)
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
        assert launch.phase == Phase.REJECTED
        assert any(
            "Partition 'general' does not exist on a4. Partitions there: a3m*, a3u, a4, a3h. "
            "Re-run with partition=a4?" in line
            for line in front.lines
        ), front.lines
        assert slurm_jobs_named(launch_id) == []
        # The [Use a4] button under that message: the same launch on partition a4.
        click = Incoming(
            user_id="alice",
            channel_id="console",
            action_id="trainbot_use_partition",
            action_value=f"{launch_id}:a4",
        )
        again = await bot.core(click)
        assert again.text.startswith("Queued L-"), again.text
        new_id = launch_id_in(again.text)
        relaunched = await wait_for_launch(bot.store, new_id)
        hostile = await bot.core(replace(click, action_value=f"{launch_id}:a4;touch"))
    assert relaunched.outcome == "COMPLETED"
    assert relaunched.request.partition == "a4"
    assert hostile.error


async def test_cancel_from_the_button_stops_the_job(unique: str, cancel_jobs: list[str]) -> None:
    from bot.text.front import Incoming

    front = ConsoleFront(io.StringIO(), color=False)
    async with (
        knobs(unique, steps=200, step_time_s=0.5, tokenizer_race="off"),
        running(bot_settings(), dev_config(), front) as bot,
    ):
        reply = await handle_line(
            f"/train grpo llama3p1_8b cluster=a3h name={unique}", bot.core, front, user="alice"
        )
        assert reply is not None, "no answer"
        launch_id = launch_id_in(reply.text)
        running_launch = await wait_for_launch(bot.store, launch_id, done=Phase.RUNNING)
        cancel_jobs.append(running_launch.job_id)
        confirm = await handle_line(f"/cancel {launch_id}", bot.core, front, user="alice")
        assert confirm is not None and confirm.blocks, "the cancel command asks to confirm"
        other = await bot.core(
            Incoming(
                user_id="mallory",
                channel_id="console",
                action_id="trainbot_cancel",
                action_value=launch_id,
            )
        )
        assert other.error and "Only alice" in other.text
        done = await bot.core(
            Incoming(
                user_id="alice",
                channel_id="console",
                action_id="trainbot_cancel",
                action_value=launch_id,
            )
        )
        assert not done.error, done.text
        launch = await wait_for_launch(bot.store, launch_id, timeout_s=60)
        await wait_delivered(bot.store)
    assert launch.outcome == "CANCELLED"
    in_order(front.lines, r"Cancelled by @alice", r"🚫 CANCELLED")
    assert sacct_rows(running_launch.job_id)[-1]["State"].startswith("CANCELLED")


async def test_jobs_logs_and_clusters(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    async with knobs(unique, **FAST), running(bot_settings(), dev_config(), front) as bot:
        reply = await handle_line(
            f"/train rm llama3p1_8b cluster=a3m name={unique}", bot.core, front, user="bob"
        )
        assert reply is not None, "no answer"
        launch_id = launch_id_in(reply.text)
        jobs = await handle_line("/jobs", bot.core, front, user="bob")
        assert jobs is not None and launch_id in jobs.text and "rm · llama3p1_8b · a3m" in jobs.text
        mine = await handle_line("/jobs", bot.core, front, user="carol")
        assert mine is not None and launch_id not in mine.text
        everyone = await handle_line("/jobs all", bot.core, front, user="carol")
        assert everyone is not None and launch_id in everyone.text
        launch = await wait_for_launch(bot.store, launch_id)
        logs = await handle_line(f"/logs {launch.job_id} lines=5", bot.core, front, user="bob")
        assert logs is not None and "Last 5 lines of job" in logs.text and "```" in logs.text
        clusters = await handle_line("/clusters", bot.core, front, user="bob")
    assert clusters is not None
    assert re.search(r"\*a4\* \(hcc-a4, .*\)", clusters.text), clusters.text
    assert re.search(
        r"• `a4` \(default for /train\): \d/4 nodes usable · \d+/32 GPUs free · ", clusters.text
    )
    assert re.search(r"• `a3m`: .* \d+ running, \d+ pending", clusters.text), clusters.text


async def test_checkpoints_posted_equal_those_on_disk_without_a_name() -> None:
    """No name=: the experiment is named after the recipe and the launch id."""
    front = ConsoleFront(io.StringIO(), color=False)
    tag = "llama3p1_70b_pt"  # the default job name starts with the recipe's name
    async with knobs(
        tag, steps=6, step_time_s=0.3, ckpt_every=2, save_time_s=0.1, tokenizer_race="off"
    ):
        async with running(bot_settings(), dev_config(), front) as bot:
            reply = await handle_line(
                "/train pretrain llama3p1_70b nodes=1 cluster=a3u",
                bot.core,
                front,
                user="alice",
            )
            assert reply is not None, "no answer"
            launch_id = launch_id_in(reply.text)
            launch = await wait_for_launch(bot.store, launch_id)
            await wait_delivered(bot.store)
    assert launch.outcome == "COMPLETED"
    tracking = launch.attempts[0].tracking
    assert tracking is not None
    ckpt_dir = tracking.checkpoint_dir
    assert ckpt_dir.endswith(f"/llama3p1_70b_pt-{launch_id}/default/checkpoints")
    on_disk = login_run(f"ls {ckpt_dir}").split()
    assert on_disk == [  # pretraining keeps a -last copy of the newest save
        "model_name=0--val_loss=0.00-step=1-consumed_samples=64.0",
        "model_name=0--val_loss=0.00-step=3-consumed_samples=128.0",
        "model_name=0--val_loss=0.00-step=5-consumed_samples=192.0",
        "model_name=0--val_loss=0.00-step=5-consumed_samples=192.0-last",
    ]
    assert launch.checkpoints == on_disk[:3]  # the -last copy is step 5 again, not a new one
    posted = [line for line in front.lines if "💾 Checkpoint" in line]
    assert posted == [f"  └ 💾 Checkpoint step {n} saved." for n in (1, 3, 5)]


async def test_a_big_launch_waits_for_a_second_person(unique: str) -> None:
    from bot.text.front import Incoming

    front = ConsoleFront(io.StringIO(), color=False)
    from commands.rules import ApproverRule

    config = dev_config(approval_above_nodes=1)
    approvers = (ApproverRule(users=("bob",), clusters=("a3u",)),)
    policy = config.policy.model_copy(update={"approvers": approvers})
    config = config.model_copy(update={"policy": policy})
    async with knobs(unique, **FAST), running(bot_settings(), config, front) as bot:
        reply = await handle_line(
            f"/train grpo llama3p1_8b nodes=2 cluster=a3u name={unique}",
            bot.core,
            front,
            user="alice",
        )
        assert reply is not None and "needs a second person's approval" in reply.text
        launch_id = launch_id_in(reply.text)
        await asyncio.sleep(1.0)  # time for a worker to (wrongly) take it
        waiting = await bot.store.launches.get(launch_id)
        assert waiting is not None and waiting.phase == Phase.AWAITING_APPROVAL
        assert slurm_jobs_named(launch_id) == []

        def click(user: str) -> Incoming:
            return Incoming(
                user_id=user,
                channel_id="console",
                action_id="trainbot_approve",
                action_value=launch_id,
            )

        own = await bot.core(click("alice"))
        assert own.error and "cannot approve your own launch" in own.text
        ok = await bot.core(click("bob"))
        assert not ok.error, ok.text
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    assert launch.outcome == "COMPLETED"
    in_order(
        front.lines,
        r"@alice ✋ asks for",
        r"✅ Approved by @bob\. Queued\.",
        r"Submitted: Slurm job",
    )
