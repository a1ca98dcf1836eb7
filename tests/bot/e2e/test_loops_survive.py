"""Redis down for 10 s (far past the store's 2 s retry window) under a running bot on
the dev cluster: a worker (every part) and a web role that asks the workers for its
cluster work, both on a Redis of the test's own. The loops that failed are started
again, every launch completes, ``/healthz`` is 200 again within 30 s of Redis
returning (saying which loop was restarted), and ``/logs`` through the web role works."""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from pathlib import Path

import aiohttp
import pytest

from bench.soak_infra import OwnRedis
from bot.lifecycle.launch import Phase
from bot.runtime.assembly import running
from bot.slack.http import run_slack, serve_health
from bot.slack.webapi import open_front
from bot.store.store import Store
from support.slack_requests import post_signed, slash_command_body
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN
from tests.bot.botkit import (
    LAUNCH_RE,
    bot_settings,
    dev_config,
    knobs,
    slurm_jobs_named,
    wait_for_launch,
    wait_until,
)
from tests.bot.conftest import standin_params

pytestmark = [
    pytest.mark.devcluster,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

DOWN_S = 10.0


async def health(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    try:
        async with session.get(url) as response:
            return response.status, await response.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return 0, str(exc)


@pytest.mark.timeout(300)
async def test_redis_down_10_s_the_loops_come_back_launches_complete_and_logs_work(
    standin: SlackStandin, unique: str, tmp_path: Path, cancel_jobs: list[str]
) -> None:
    config = dev_config(retry_backoff_s=0)
    redis = OwnRedis(tmp_path / "redis", appendfsync="everysec")
    await redis.start()
    settings = bot_settings(REDIS_URL=redis.url)
    names = [f"{unique}a", f"{unique}b"]
    try:
        async with (
            knobs(names[0], steps=60, step_time_s=0.5, tokenizer_race="off"),
            knobs(names[1], steps=60, step_time_s=0.5, tokenizer_race="off"),
            open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as front,
            running(settings, config, front, workers=1, instance="all") as worker,
            serve_health("127.0.0.1", 0, health=worker.healthy, metrics=worker.metrics) as port,
            running(settings, config, front, role="web", instance="web") as web,
            run_slack(
                standin_params(standin),
                web.core,
                health=web.healthy,
                metrics=web.metrics,
                front=front,
            ) as slack,  # fmt: skip
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session,
        ):
            events = f"http://127.0.0.1:{slack.http_port}/slack/events"
            healthz = f"http://127.0.0.1:{port}/healthz"
            store: Store = worker.store
            assert await health(session, healthz) == (200, "ok")

            async def command(name: str, text: str) -> str:
                answer = await post_signed(events, slash_command_body(name, text))
                assert answer.status == 200, answer
                return str(answer.json()["text"])

            ids = []
            for name in names:
                ack = await command("/train", f"sft llama3p1_2b cluster=a3m nodes=1 name={name}")
                found = LAUNCH_RE.search(ack)
                assert found is not None, ack
                ids.append(found.group(0))
            for launch_id in ids:
                running_ = await wait_for_launch(
                    store, launch_id, done=Phase.RUNNING, timeout_s=120
                )
                cancel_jobs.append(running_.job_id)

            await redis.stop()
            await asyncio.sleep(DOWN_S)
            status, text = await health(session, healthz)
            assert status != 200, text  # Redis is down and the bot says so
            await redis.start()
            back = time.monotonic()

            async def healthy() -> str:
                status, text = await health(session, healthz)
                return text if status == 200 else ""

            said = await wait_until(healthy, "/healthz to answer 200 again", 30, 0.2)
            back_s = time.monotonic() - back
            # The asks loop's blocking read outlasted the retry window: it failed and was
            # started again, and the 200 says so (beside any other loop that did too, such
            # as the image runs').
            assert said.startswith("ok; restarted: ") and " asks (restarted " in f" {said}", said
            metrics = await worker.metrics()
            restarts = re.search(r'trainbot_loop_restarts_total\{loop="asks"\} (\S+)', metrics)
            assert restarts is not None and float(restarts.group(1)) >= 1, metrics

            async def logged() -> str:
                text = await command("/logs", ids[0])
                return text if text.startswith("Last ") else ""

            tail = await wait_until(logged, "a log tail through the web role's asks", 60, 1.0)
            ended = [await wait_for_launch(store, launch_id, timeout_s=150) for launch_id in ids]
            assert [e.outcome for e in ended] == ["COMPLETED", "COMPLETED"], ended
            assert f"of job {ended[0].job_id}" in tail, tail
            for name, launch in zip(names, ended, strict=True):
                jobs = await asyncio.to_thread(slurm_jobs_named, name)
                assert jobs == [launch.job_id]  # one job each: nothing submitted twice
            print(f"/healthz 200 again {back_s:.1f} s after Redis returned: {said}")
    finally:
        await redis.stop()
