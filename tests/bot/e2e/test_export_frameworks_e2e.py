"""then=export of NeMo and NeMo-RL runs on the dev cluster, through the bot: a run that
completes is followed by one Slurm job, as its person, that converts its newest checkpoint
with the framework's own tool (NeMo: ``nemo llm export``, whose stand-in prints what NeMo 2
prints, the path folded by rich; NeMo-RL: ``examples/converters/convert_dcp_to_hf.py``,
reading the run's ``config.yaml``). The job has the launch's HF_TOKEN (its stand-ins print a
fingerprint of it) and the token is nowhere else: not in the job's command line or script,
the thread, or Redis."""

from __future__ import annotations

import asyncio
import hashlib
import io
import re

import pytest

from bot.console.chat import ConsoleFront
from bot.runtime.assembly import running
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    knobs,
    login_run,
    wait_delivered,
    wait_for_launch,
)
from tests.bot.e2e.test_after_training_e2e import after_ended, train
from tests.bot.security.test_secrets import redis_text

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

TOKEN = "hf_export_job_token_5d1c"
QUICK: Knobs = {
    "steps": 4,
    "ckpt_every": 2,
    "step_time_s": 0.2,
    "save_time_s": 0.1,
    "tokenizer_race": "off",
}
CASES = {
    # framework: (the /train line's rest, the tool the thread names, the checkpoint's name)
    "nemo": (
        "sft llama3p1_8b framework=nemo cluster=a4 trainer.max_steps=4",
        "NeMo's nemo llm export",
        r"model_name=0--.*-step=3-.*",
    ),
    "nemo-rl": (
        "sft llama3p1_8b framework=nemo-rl cluster=a4 sft.max_num_steps=4",
        "NeMo-RL's convert_dcp_to_hf.py",
        r"step_4",
    ),
}


@pytest.mark.parametrize("framework", list(CASES))
async def test_then_export_with_the_frameworks_own_tool(framework: str, unique: str) -> None:
    line, tool, checkpoint = CASES[framework]
    front = ConsoleFront(io.StringIO(), color=False)
    async with (
        knobs(unique, **QUICK),
        running(bot_settings(TRAINBOT_HF_TOKEN=TOKEN), dev_config(), front) as bot,
    ):
        bot.poller.after.look_s = 1.0
        launch_id = await train(bot, front, f"{line} name={unique} then=export")
        ended = await wait_for_launch(bot.store, launch_id, timeout_s=180)
        assert ended.outcome == "COMPLETED", "\n".join(front.lines)
        done = await after_ended(bot.store, launch_id)
        await wait_delivered(bot.store)
        stored = await redis_text()
    said = "\n".join(front.lines)
    assert done.after_state == "COMPLETED", said
    hf = done.exported_to
    assert re.fullmatch(rf".*/hf/{checkpoint}", hf), hf
    assert f"Exporting step {render_step(framework)} to Hugging Face format with {tool}" in said
    assert f"Exported to Hugging Face format: `{hf}`" in said, said
    assert "config.json" in login_run(f"ls {shell_path(hf)}").split()
    log = login_run(f"cat {shell_path(hf.rsplit('/', 1)[0])}/after-{done.after_job}.out")
    # the launch's HF_TOKEN reached the export job, through sbatch's environment only
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()[:12]
    assert f"HF_TOKEN is set (sha256 {digest})" in log, log
    batch = await asyncio.to_thread(
        login_run, f"scontrol write batch_script {done.after_job} -", user="trainer"
    )
    assert "trainbot: export " in batch, batch  # the job's script, as Slurm keeps it
    for where, text in {
        "the thread": said, "Redis": stored, "the job's script": batch, "the log": log,
    }.items():  # fmt: skip
        assert TOKEN not in text, f"{where} holds the token"


def render_step(framework: str) -> int:
    return 3 if framework == "nemo" else 4  # NeMo's global_step counts from 0


def shell_path(path: str) -> str:
    return path.replace("~/", "$HOME/", 1)
