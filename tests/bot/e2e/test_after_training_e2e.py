"""then=export and then=eval on the dev cluster, through the bot: a Megatron-Bridge run
that completes is followed by one Slurm job, as its person, that exports its newest
checkpoint with the site's copy of Megatron-Bridge's convert_checkpoints.py (the stand-in
prints what upstream prints) and evaluates it with the site's recipe (the lm_eval stand-in,
which prints lm-evaluation-harness's table); the exported path and the results table, with
the change against the parent for a child started from= it, are said in the thread."""

from __future__ import annotations

import asyncio
import io
import re

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.launch import Launch
from bot.runtime.assembly import Bot, running
from bot.store.store import Store
from tests.bot.botkit import (
    LAUNCH_RE,
    bot_settings,
    dev_config,
    knobs,
    login_run,
    wait_delivered,
    wait_for_launch,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

MB = "framework=megatron-bridge cluster=a4"
EVAL = (
    "python3 ~/vertex-oss-training/_devcluster/lm_eval_standin.py --model hf "
    "--model_args pretrained={model} --tasks {tasks} --batch_size auto --output_path {output}"
)


def with_eval(text: str) -> str:
    """The a4 cluster with the evaluation recipe (a config written by an older
    devcluster/up has none)."""
    if "eval_command:" in text:
        return text
    field = f"    eval_command: '{EVAL}'\n"
    return text.replace("    partition: a4\n", "    partition: a4\n" + field, 1)


async def train(bot: Bot, front: ConsoleFront, text: str) -> str:
    reply = await handle_line(f"/train {text}", bot.core, front, user="alice")
    assert reply is not None and not reply.error, reply
    return LAUNCH_RE.search(reply.text).group(0)  # type: ignore[union-attr]


async def after_ended(store: Store, launch_id: str, timeout_s: float = 120) -> Launch:
    for _ in range(int(timeout_s * 2)):
        launch = await store.get(launch_id)
        if launch is not None and launch.after_state:
            return launch
        await asyncio.sleep(0.5)
    raise AssertionError(f"{launch_id}: the after-training step did not end")


async def test_then_eval_exports_evaluates_and_compares_with_the_parent(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    quick = {"step_time_s": 0.2, "save_time_s": 0.1, "log_interval": 2}
    async with (
        knobs(unique, **quick),
        running(bot_settings(), dev_config(edit=with_eval), front) as bot,
    ):
        bot.poller.after.look_s = 1.0
        first = await train(
            bot,
            front,
            f"pretrain llama3p1_8b {MB} name={unique} train.train_iters=10 "
            "checkpoint.save_interval=5 then=eval:arc_easy,hellaswag",
        )
        done = await wait_for_launch(bot.store, first)
        parent = await after_ended(bot.store, first)
        second = await train(
            bot,
            front,
            f"pretrain llama3p1_8b {MB} name={unique}b from={first} train.train_iters=14 "
            "checkpoint.save_interval=7 then=eval:arc_easy",
        )
        await wait_for_launch(bot.store, second)
        child = await after_ended(bot.store, second)
        await wait_delivered(bot.store)
    said = "\n".join(front.lines)
    assert done.outcome == "COMPLETED", said
    assert parent.after_state == "COMPLETED", said
    hf = parent.exported_to
    assert re.fullmatch(rf".*/megatron_bridge/experiments/.*-{first}/hf/iter_0000010", hf), hf
    assert "Exporting step 10 to Hugging Face format with Megatron-Bridge's" in said, said
    assert f"Slurm job {parent.after_job} on a4" in said
    assert f"Exported to Hugging Face format: `{hf}`" in said, said
    files = login_run(f"ls {hf}").split()
    assert "config.json" in files and "model.safetensors.index.json" in files, files
    log = login_run(f"cat {hf.rsplit('/', 1)[0]}/after-{parent.after_job}.out")
    assert "Successfully exported model to: " in log and "|Tasks" in log, log
    assert set(parent.eval_results) == {
        "arc_easy/acc", "arc_easy/acc_norm", "hellaswag/acc", "hellaswag/acc_norm",
    }  # fmt: skip
    table = re.search(r"task\s+metric\s+value\s+stderr\n(.*?)```", said, re.S)
    assert table is not None, said
    assert f"{parent.eval_results['hellaswag/acc']:.4f}" in table.group(1)
    # the child's results, with the change against its parent's
    assert child.after_state == "COMPLETED", said
    assert child.exported_to.endswith(f"-{second}/hf/iter_0000014"), child.exported_to
    delta = child.eval_results["arc_easy/acc"] - parent.eval_results["arc_easy/acc"]
    assert f"Δ vs {first}" in said, said
    assert f"{delta:+.4f}" in said, said


async def test_then_export_alone_exports_and_runs_no_evaluation(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    quick = {"step_time_s": 0.2, "save_time_s": 0.1, "log_interval": 2}
    async with knobs(unique, **quick), running(bot_settings(), dev_config(), front) as bot:
        bot.poller.after.look_s = 1.0
        first = await train(
            bot,
            front,
            f"pretrain llama3p1_8b {MB} name={unique} train.train_iters=6 "
            "checkpoint.save_interval=3 then=export",
        )
        ended = await wait_for_launch(bot.store, first)
        assert ended.outcome == "COMPLETED", "\n".join(front.lines)
        done = await after_ended(bot.store, first)
        await wait_delivered(bot.store)
    said = "\n".join(front.lines)
    assert done.after_state == "COMPLETED", said
    assert done.exported_to.endswith("/hf/iter_0000006"), said
    assert f"Exported to Hugging Face format: `{done.exported_to}`" in said
    assert done.eval_results == {} and "Evaluation" not in said
    assert "evaluate" not in login_run(
        f"cat {done.exported_to.rsplit('/', 1)[0]}/after-{done.after_job}.out"
    )
