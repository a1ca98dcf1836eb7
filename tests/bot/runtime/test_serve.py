"""``trainbot serve`` as operators run it: a separate process, configured only by
its environment, talking to the Slack stand-in, with signed requests over HTTP."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from support.slack_requests import post_signed, slash_command_body
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN, SIGNING_SECRET
from tests.bot.botkit import (
    DEV,
    PROJECT,
    TEST_REDIS,
    dev_config,
    flush_test_redis,
    free_port,
    in_dm,
    knobs,
    launch_id_in,
    login_run,
    open_test_store,
    wait_delivered,
    wait_for_launch,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]


async def wait_healthy(url: str, proc: subprocess.Popen[str], timeout_s: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with aiohttp.ClientSession() as session:
        while loop.time() < deadline:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.3)
    raise AssertionError(f"{url} never became healthy")


def start_serve(
    standin: SlackStandin, tmp_path: Path, **env: str | None
) -> tuple[subprocess.Popen[str], int]:
    """``python -m bot serve`` in HTTP mode on a free port, against the stand-in and the test
    Redis, on the dev cluster's config polled every second. ``env`` adds variables (None:
    leave one out). Returns the process and its port."""
    config = tmp_path / "trainbot.yaml"
    config.write_text(
        (DEV / "trainbot.yaml").read_text().replace("poll_interval_s: 2", "poll_interval_s: 1")
    )
    port = free_port()
    environ: dict[str, str | None] = {
        **os.environ,
        "TRAINBOT_CONFIG": str(config),
        "REDIS_URL": TEST_REDIS,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": standin.api_url,
        "TRAINBOT_HTTP_PORT": str(port),
        "SLACK_APP_TOKEN": None,  # HTTP mode
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "serve"],
        cwd=PROJECT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={name: value for name, value in environ.items() if value is not None},
    )  # fmt: skip
    return proc, port


async def test_serve_answers_signed_slash_commands_and_runs_the_launch(
    standin: SlackStandin, unique: str, tmp_path: Path
) -> None:
    dev_config()  # skips when the dev cluster is not up
    await flush_test_redis()
    proc, port = start_serve(standin, tmp_path, TRAINBOT_HF_TOKEN="hf_test_token_value")
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_healthy(f"{base}/healthz", proc)
        async with knobs(unique, steps=3, step_time_s=0.3), open_test_store() as store:
            body = slash_command_body("/train", f"rm llama3p1_8b cluster=a3h name={unique}")
            answer = await post_signed(f"{base}/slack/events", body)
            assert answer.status == 200 and answer.elapsed_s < 3.0
            text = answer.json()["text"]
            launch_id = launch_id_in(text)
            bad = await post_signed(f"{base}/slack/events", body, secret="not-the-secret")
            assert bad.status == 401
            launch = await wait_for_launch(store, launch_id)
            await wait_delivered(store)
        async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as metrics:
            exposition = await metrics.text()
        assert launch.outcome == "COMPLETED"
        assert "trainbot_launches_processed_total 1" in exposition
        assert 'trainbot_ssh_round_trips_total{cluster="a3h"}' in exposition
        posts = standin.calls_to("chat.postMessage")
        parents = [c for c in posts if not c.params.get("thread_ts") and not in_dm(c.params)]
        assert len(parents) == 1
        thread = [
            c.params["text"]
            for c in standin.calls_to("chat.postMessage")
            if c.params.get("thread_ts")
        ]
        assert re.match(r"<@U\w+> ✅ COMPLETED", thread[-1])
        # The job got the token (the stand-in prints its fingerprint), no command line did.
        digest = hashlib.sha256(b"hf_test_token_value").hexdigest()[:12]
        log = login_run(f"cat ~/vertex-oss-training/nemo_rl/{launch.job_id}/nemo_rl_output.log")
        assert f"HF_TOKEN is set (sha256 {digest})" in log
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "hf_test_token_value" not in out  # no secret in the bot's output
    assert BOT_TOKEN not in out
