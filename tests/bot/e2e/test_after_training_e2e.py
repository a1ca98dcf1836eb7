"""then=export and then=eval on the dev cluster, through the bot: a Megatron-Bridge run
that completes is followed by one Slurm job, as its person, that exports its newest
checkpoint with the site's copy of Megatron-Bridge's convert_checkpoints.py (the stand-in
prints what upstream prints) and evaluates it with the site's recipe (the lm_eval stand-in,
which prints lm-evaluation-harness's table); the exported path and the results table, with
the change against the parent for a child started from= it, are said in the thread."""

from __future__ import annotations

import asyncio
import io
import json
import re

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.launch import Launch
from bot.runtime.assembly import Bot, running
from bot.slack.http import run_slack
from bot.slack.webapi import open_front
from bot.store.store import Store
from bot.text.actions import ACTION_EVALUATE, ACTION_EXPORT, VIEW_EVALUATE
from support.slack_requests import (
    block_action_body,
    post_signed,
    slash_command_body,
    view_submission_body,
)
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN
from tests.bot.botkit import (
    LAUNCH_RE,
    Knobs,
    bot_settings,
    dev_config,
    flush_test_redis,
    knobs,
    login_run,
    wait_delivered,
    wait_for_launch,
)
from tests.bot.conftest import standin_params

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


async def after_ended(
    store: Store, launch_id: str, timeout_s: float = 120, asked: str = ""
) -> Launch:
    for _ in range(int(timeout_s * 2)):
        launch = await store.launches.get(launch_id)
        if launch is not None and launch.after_state and launch.after_then == asked:
            return launch
        await asyncio.sleep(0.5)
    raise AssertionError(f"{launch_id}: the after-training step did not end")


async def test_then_eval_exports_evaluates_and_compares_with_the_parent(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    quick: Knobs = {"step_time_s": 0.2, "save_time_s": 0.1, "log_interval": 2}
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
    quick: Knobs = {"step_time_s": 0.2, "save_time_s": 0.1, "log_interval": 2}
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
        listed = await handle_line(f"/checkpoints {first}", bot.core, front, user="alice")
    # /checkpoints: each one's size as the poller measured it on the login node, the totals
    assert listed is not None and not listed.error, listed
    sizes = {n: b for n, b in done.checkpoint_bytes.items()}
    assert set(sizes) == {"iter_0000003", "iter_0000006"} and all(sizes.values()), sizes
    total = sum(sizes.values())
    assert f"• step 3 · {sizes['iter_0000003']} B · `iter_0000003`" in listed.text, listed.text
    assert f"Total: {total} B for {first}; " in listed.text, listed.text
    assert " for its owner over " in listed.text  # alice's launches on the console
    assert [e["action_id"] for e in listed.blocks[-1]["elements"]][:2] == [
        ACTION_EXPORT, ACTION_EVALUATE,
    ]  # fmt: skip
    said = "\n".join(front.lines)
    assert done.after_state == "COMPLETED", said
    assert done.exported_to.endswith("/hf/iter_0000006"), said
    assert f"Exported to Hugging Face format: `{done.exported_to}`" in said
    assert done.eval_results == {} and "Evaluation" not in said
    # the run's record: a registry image's digest is not known before the job starts
    record = done.attempts[-1].record
    assert record is not None and record.image == "nvcr.io#nvidia/nemo:26.02", record
    assert "(registry image; digest: resolved at start)" in record.summary()
    assert "image nvcr.io#nvidia/nemo:26.02 (registry image; digest: resolved at start)" in said
    assert "evaluate" not in login_run(
        f"cat {done.exported_to.rsplit('/', 1)[0]}/after-{done.after_job}.out"
    )


async def test_export_and_evaluate_buttons_through_slack(
    standin: SlackStandin, unique: str
) -> None:
    """The final line of a completed run has Export and Evaluate (signed requests against
    the Slack stand-in): Export exports; Evaluate opens a modal asking the tasks, refuses a
    bad one with the modal still open, and evaluates what it is given."""
    await flush_test_redis()
    quick: Knobs = {"step_time_s": 0.2, "save_time_s": 0.1, "log_interval": 2}
    async with (
        knobs(unique, **quick),
        open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as front,
        running(bot_settings(), dev_config(edit=with_eval), front) as bot,
        run_slack(
            standin_params(standin), bot.core, health=bot.healthy, metrics=bot.metrics, front=front
        ) as slack,
    ):
        bot.poller.after.look_s = 1.0
        url = f"http://127.0.0.1:{slack.http_port}/slack/events"
        text = f"pretrain llama3p1_8b {MB} name={unique} train.train_iters=6"
        text += " checkpoint.save_interval=3"
        ack = await post_signed(url, slash_command_body("/train", text))
        launch_id = LAUNCH_RE.search(ack.json()["text"]).group(0)  # type: ignore[union-attr]
        done = await wait_for_launch(bot.store, launch_id, timeout_s=180)
        await wait_delivered(bot.store)
        final = [
            c
            for c in standin.calls_to("chat.postMessage")
            if ACTION_EXPORT in json.dumps(c.params.get("blocks") or [])
        ]
        assert final and ACTION_EVALUATE in json.dumps(final[0].params["blocks"]), "no buttons"

        clicked = await post_signed(url, block_action_body(ACTION_EXPORT, launch_id))
        assert clicked.status == 200
        await standin.wait_for(
            "chat.postEphemeral", lambda c: "export of" in str(c.params.get("text")), 30
        )
        exported = await after_ended(bot.store, launch_id, asked="export")

        await post_signed(url, block_action_body(ACTION_EVALUATE, launch_id))
        opened = await standin.wait_for("views.open", timeout_s=30)
        view = opened.params["view"]
        view = view if isinstance(view, dict) else json.loads(view)
        (field,) = [b for b in view["blocks"] if b["type"] == "input"]
        assert view["callback_id"] == VIEW_EVALUATE and field["block_id"] == launch_id
        refused = await post_signed(url, view_submission_body(VIEW_EVALUATE, launch_id, "arc$"))
        assert refused.json()["response_action"] == "errors", refused
        assert "is not a task name" in refused.json()["errors"][launch_id]
        submitted = await post_signed(
            url, view_submission_body(VIEW_EVALUATE, launch_id, "arc_easy,piqa")
        )
        assert submitted.status == 200 and not submitted.body, submitted  # closed
        evaluated = await after_ended(bot.store, launch_id, asked="eval:arc_easy,piqa")
        await wait_delivered(bot.store)
    said = "\n".join(str(c.params.get("text", "")) for c in standin.calls_to("chat.postMessage"))
    assert done.outcome == "COMPLETED"
    assert exported.after_state == "COMPLETED" and exported.exported_to.endswith("iter_0000006")
    assert f"Exported to Hugging Face format: `{exported.exported_to}`" in said, said
    assert evaluated.after_state == "COMPLETED" and evaluated.after_job != exported.after_job
    assert set(evaluated.eval_results) == {
        "arc_easy/acc", "arc_easy/acc_norm", "piqa/acc", "piqa/acc_norm",
    }  # fmt: skip
    assert "Evaluation (arc_easy, piqa):" in said, said
