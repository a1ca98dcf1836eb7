"""How fast a slash command is acknowledged: signed HTTP requests through slack-bolt
to the bot's core, which parses, checks policy and queues the launch in Redis.

Slack gives an app 3 s to acknowledge. This sends /train commands one at a time
and then CONCURRENCY at a time to a running bot (real Redis, real slack-bolt,
the Web API stand-in; no workers, so nothing reaches Slurm) and prints the ack
latency percentiles and their ratio to the 3 s budget.

    .venv/bin/python bench/ack.py [--requests N] [--concurrency C]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis.asyncio as aioredis  # noqa: E402

from bot.config import load_config  # noqa: E402
from bot.http import SlackParams, run_slack  # noqa: E402
from bot.service import running  # noqa: E402
from bot.settings import Settings  # noqa: E402
from bot.slack_front import open_front  # noqa: E402
from tests.slack_standin import (  # noqa: E402
    BOT_TOKEN,
    SIGNING_SECRET,
    SlackStandin,
    post_signed,
    slash_command_body,
)

BENCH_REDIS = "redis://127.0.0.1:6379/14"
BUDGET_S = 3.0
CONFIG = Path(__file__).resolve().parents[1] / ".devcluster" / "trainbot.yaml"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(url: str, count: int, concurrency: int, *, round_: int) -> list[float]:
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(i: int) -> None:
        user = f"U0B{round_}X{i:05d}"  # one launch per user: the policy caps launches per user
        text = f"sft llama3p1_8b cluster=a4 name=b{i}"
        body = slash_command_body("/train", text, user_id=user)
        async with gate:
            answer = await post_signed(url, body)
        if answer.status != 200 or "Queued" not in answer.json().get("text", ""):
            raise RuntimeError(f"unexpected answer {answer.status}: {answer.body[:200]!r}")
        latencies.append(answer.elapsed_s)

    await asyncio.gather(*(one(i) for i in range(count)))
    return latencies


async def main(count: int, concurrency: int) -> None:
    client = aioredis.from_url(BENCH_REDIS)
    await client.flushdb()
    settings = Settings.from_environ({"REDIS_URL": BENCH_REDIS})
    config = load_config(CONFIG)
    standin = SlackStandin()
    await standin.start()
    params = SlackParams(
        bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET, api_url=standin.api_url, http_port=0
    )
    try:
        async with (
            open_front(BOT_TOKEN, api_url=standin.api_url) as front,
            running(settings, config, front, workers=0) as bot,
            run_slack(
                params, bot.core, health=bot.healthy, metrics=bot.metrics, front=front
            ) as slack,
        ):
            url = f"http://127.0.0.1:{slack.http_port}/slack/events"
            await measure(url, 5, 1, round_=0)  # warm up (bolt's auth.test, connections)
            rounds = (("sequential", 1), (f"{concurrency} at a time", concurrency))
            for number, (label, c) in enumerate(rounds, start=1):
                started = time.perf_counter()
                lat = await measure(url, count, c, round_=number)
                wall = time.perf_counter() - started
                p50, p95, worst = percentile(lat, 0.5), percentile(lat, 0.95), max(lat)
                print(
                    f"{label:>14}: {count} /train acks in {wall:.2f} s ({count / wall:.0f}/s); "
                    f"p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, max {worst * 1000:.1f} ms; "
                    f"max / 3 s budget = {worst / BUDGET_S:.3f}; "
                    f"mean {statistics.mean(lat) * 1000:.1f} ms"
                )
    finally:
        await standin.close()
        await client.flushdb()
        await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.concurrency))
