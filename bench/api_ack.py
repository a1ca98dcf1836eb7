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
import subprocess
import sys
from pathlib import Path

from bench import ack
from bench.common import REDIS_URL, BotProcess, Row, free_port, ms, ratio
from bot.store.store import Store
from support.slack_standin import SlackStandin

GOAL = "p99 ≤ 2x bare at 100/s; 0 errors; no ack over 3 s at the top rate"


async def tokens(count: int, tag: str) -> list[str]:
    """``count`` people's tokens (launch scope), in the bench's Redis."""
    async with Store.connect(REDIS_URL) as store:
        made = []
        for i in range(count):
            _, token = await store.mint_token(f"U{tag.upper()}{i:06d}", ttl_s=3600, by="bench")
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
    bot = BotProcess(standin.api_url, config, workdir / "bot-web-api.log", role="web")
    port = free_port()
    bare = subprocess.Popen(
        [sys.executable, "-m", "bench.ack", "serve-bare", str(port), standin.api_url],
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "bare-api.log").open("ab"),
    )
    bare_url = f"http://127.0.0.1:{port}/slack/events"
    results: dict[int, tuple[ack.Load, ack.Load]] = {}
    asks = ack.start_asks(config, workdir / "asks-api.log")
    try:
        await bot.start()
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
    finally:
        bot.stop()
        asks.terminate()
        asks.wait(timeout=20)
        bare.terminate()
        bare.wait(timeout=20)
    figure = "; ".join(
        f"{r}/s p50 {ms(o.p50)} p99 {ms(o.p99)} max {ms(o.worst)} err {o.errors}"
        for r, (o, _) in results.items()
    )
    anchor_text = "; ".join(
        f"{r}/s p50 {ms(a.p50)} p99 {ms(a.p99)} err {a.errors}" for r, (_, a) in results.items()
    )
    mid = 100 if 100 in results else sorted(results)[len(results) // 2]
    top = max(results)
    p99_ratio = ratio(results[mid][0].p99, results[mid][1].p99)
    errors = sum(o.errors for o, _ in results.values())
    worst_top = results[top][0].worst
    ok = p99_ratio <= 2.0 and errors == 0 and worst_top <= ack.BUDGET_S
    notes = [
        f"p99 ratio at {mid}/s: {p99_ratio:.2f}; errors at all rates: {errors}; "
        f"slowest ack at {top}/s: {ms(worst_top)}"
    ]
    if errors:
        seen = [x for o, _ in results.values() for x in o.samples][:3]
        notes.append(
            f"{errors} requests failed or got an unexpected answer, e.g. " + "; ".join(seen)
        )
    return Row(
        "P7",
        measure_text,
        figure,
        anchor_text,
        f"p99 {p99_ratio:.2f}x at {mid}/s",
        GOAL,
        "pass" if ok else "short",
        notes,
    )
