"""P7: the HTTP API's ack, ``POST /api/v1/launches``, beside P1's slash command.

The same web role as P1 (``python -m bot serve --role web``, its asks answered by the
workers' ask loop) takes ``POST /api/v1/launches`` with a personal token instead of a
signed ``/train``: the token's hash read from Redis, then the same core (parse, policy,
channel check, start estimate, the launch written and queued). Each request is its own
person with their own token (minted beforehand in the bench's Redis), as P1 gives each
its own user, and names the same channel as P1's slash commands, so the two rows differ
only by the way in. The anchor is P1's: a bare slack-bolt app acking ``/train``.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import ack
from bench.common import REDIS_URL, Row
from bot.store.store import Store
from support.slack_standin import SlackStandin

GOAL = "p99 ≤ 2x bare at 100/s; 0 errors; no ack over 3 s at the top rate"


async def tokens(count: int, tag: str) -> list[str]:
    """``count`` people's tokens (launch scope), in the bench's Redis."""
    async with Store.connect(REDIS_URL) as store:
        made = []
        for i in range(count):
            _, token = await store.tokens.mint_token(
                f"U{tag.upper()}{i:06d}", ttl_s=3600, by="bench"
            )
            made.append(token)
    return made


def api_train(tag: str, made: list[str]) -> ack.Request:
    """Request i: POST /api/v1/launches as person i, their thread in P1's channel."""
    body = json.dumps({"text": f"sft llama3p1_8b cluster=a4 name={tag}", "channel": "C0TRAIN"})

    def build(i: int) -> tuple[bytes, dict[str, str]]:
        headers = {"Authorization": f"Bearer {made[i]}", "Content-Type": "application/json"}
        return body.encode(), headers

    return build


async def measure(
    standin: SlackStandin,
    config: Path,
    workdir: Path,
    *,
    rates: tuple[int, ...],
    duration_s: float,
    tag: str,
) -> Row:
    measure_text = (
        f"API ack latency, POST /api/v1/launches, {'/'.join(map(str, rates))} req/s "
        f"for {duration_s:g} s"
    )
    results: dict[int, tuple[ack.Load, ack.Load]] = {}
    async with ack.apps(standin, config, workdir, "-api") as (bot, bare_url):
        url = f"{bot.base}/api/v1/launches"
        warm_tag = f"{tag}aw"
        warm = await tokens(20, warm_tag)
        await ack.load(
            url, 20, 1.0, tag=warm_tag, expect="Queued", request=api_train(warm_tag, warm)
        )
        for number, rate in enumerate(rates):
            anchor = await ack.load(
                bare_url, rate, duration_s, tag=f"{tag}ab{number}", expect="Queued"
            )
            run_tag = f"{tag}at{number}"
            made = await tokens(max(1, int(rate * duration_s)), run_tag)
            ours = await ack.load(
                url,
                rate,
                duration_s,
                tag=run_tag,
                expect="Queued",
                request=api_train(run_tag, made),
            )
            results[rate] = (ours, anchor)
    return ack.summary("P7", measure_text, GOAL, results)
