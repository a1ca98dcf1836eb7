"""Secrets never leave the cluster: redacted in logs, nowhere after a failed submit. Through
the signed HTTP front end (tests.bot.security.kit)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import urllib.parse

import pytest
import redis.asyncio as aioredis

from bot.lifecycle.launch import Phase
from support.slack_standin import SlackStandin
from tests.bot.botkit import TEST_REDIS, login_run, wait_delivered, wait_for_launch
from tests.bot.security.kit import HF_TOKEN, WANDB_KEY, queued, secure_bot, seed

pytestmark = pytest.mark.devcluster


# -- secrets never leave the cluster -------------------------------------------


def _encodings(secret: str) -> list[str]:
    return [
        secret,
        base64.b64encode(secret.encode()).decode(),
        urllib.parse.quote(secret, safe=""),
        secret.encode().hex(),
    ]


async def test_secrets_in_a_job_log_are_redacted_in_logs(
    standin: SlackStandin, log_file: str
) -> None:
    async with secure_bot(standin) as s:
        launch = await seed(s.bot, phase=Phase.QUEUED, log_path=log_file)
        tail = await s.command("/logs", launch.id)
    for secret in (HF_TOKEN, WANDB_KEY):
        for form in _encodings(secret):
            assert form not in tail, form
    assert "[redacted]" in tail
    assert "step 1 loss 2.5" in tail  # the rest of the log is intact


# A site's launcher that fails and dumps its environment to stderr for debugging, plainly
# and base64-encoded. Nothing on the dev cluster does that by itself (sbatch never prints
# the environment, and Slurm there enforces no accounts), so this one stands in for it;
# the rest is the real path: worker, pre-flight, the submit over SSH, sbatch's refusal.
ENV_DUMPING_RUN_PY = """\
import base64, os, sys
print("sbatch: error: Batch job submission failed: Invalid account or account/partition "
      "combination specified", file=sys.stderr)
print("run.py: submission failed; environment:", file=sys.stderr)
for key, value in sorted(os.environ.items()):
    print(f"  {key}={value}", file=sys.stderr)
    print(f"  {key}(base64)={base64.b64encode(value.encode()).decode()}", file=sys.stderr)
sys.exit(1)
"""


async def redis_text() -> str:
    """Every key of the test database and its value, whatever its type."""
    client = aioredis.from_url(TEST_REDIS, decode_responses=True)
    parts: list[str] = []
    try:
        async for key in client.scan_iter():
            kind = await client.type(key)
            if kind == "string":
                value: object = await client.get(key)
            elif kind == "hash":
                value = await client.hgetall(key)
            elif kind == "list":
                value = await client.lrange(key, 0, -1)
            elif kind == "set":
                value = sorted(await client.smembers(key))
            elif kind == "zset":
                value = await client.zrange(key, 0, -1, withscores=True)
            else:
                value = await client.xrange(key)
            parts.append(f"{key}: {value}")
    finally:
        await client.aclose()
    return "\n".join(parts)


async def test_secrets_a_failed_submission_prints_go_nowhere(
    standin: SlackStandin, caplog: pytest.LogCaptureFixture, unique: str
) -> None:
    """A launcher whose refusal echoes the job's secrets: a worker submits, sbatch's error
    reaches the thread, and neither secret (nor its base64) is in anything Slack received,
    anything logged, or any key in Redis."""
    caplog.set_level(logging.DEBUG)
    home = (await asyncio.to_thread(login_run, "echo $HOME")).strip()
    recipes = f"{home}/sectest-{unique}"
    script = base64.b64encode(ENV_DUMPING_RUN_PY.encode()).decode()
    await asyncio.to_thread(
        login_run,
        f"mkdir -p {recipes}/nemo/sft && cp ~/vertex-oss-training/nemo/sft/llama3p1_8b_sft.py "
        f"{recipes}/nemo/sft/ && echo {script} | base64 -d > {recipes}/nemo/run.py",
    )
    try:
        async with secure_bot(standin, workers=1, a4={"recipes_dir": recipes}) as s:
            launch_id = await queued(s, "sft llama3p1_8b cluster=a4")
            launch = await wait_for_launch(s.bot.store, launch_id, timeout_s=120)
            await wait_delivered(s.bot.store)
            stored = await redis_text()
    finally:
        await asyncio.to_thread(login_run, f"rm -rf {recipes}", check=False)
    slack = json.dumps([c.params for c in standin.calls])
    assert launch.outcome == "SUBMIT_FAILED", launch.ending
    assert "Slurm refused the job" in slack and "Invalid account" in slack
    assert "HF_TOKEN=[redacted]" in slack and "WANDB_API_KEY(base64)=[redacted]" in slack
    for where, text in {"Slack": slack, "the logs": caplog.text, "Redis": stored}.items():
        for secret in (HF_TOKEN, WANDB_KEY):
            for form in _encodings(secret):
                assert form not in text, f"{where} holds {form}"
