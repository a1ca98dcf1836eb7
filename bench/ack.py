"""P1: slash-command ack latency through the signed HTTP front end, against a bare
slack-bolt app on the same server stack, at fixed request rates.

trainbot is ``python -m bot serve --role web`` (signature check, replay guard in
Redis, bolt, the core: parse, policy, channel check, the start estimate asked of the
workers through Redis, the launch written and queued in Redis); the anchor is a
slack-bolt ``AsyncApp`` whose ``/train`` listener acks a constant, served the same way
(aiohttp ``AppRunner`` and ``TCPSite``, bolt's own signature check) in its own
process. The load is open-loop: requests leave at the given rate whatever the answers
do, each with its own user (the policy counts launches per user), signed as Slack
signs them.

The web role's asks are answered by a process running the workers' own ask loop
(``bot.gateway.answering.serve_asks``, with the dev cluster's key: Slurm's estimate over
SSH) and nothing else: a ``--role worker`` would also take every queued launch, and
with no notifier in this row to post their threads it looks at each again and again
(about twenty Redis commands a look), on the same two cores as the web role it is
measuring. What the web role does per /train is the same either way.

    python -m bench.ack serve-bare PORT API_URL   # the anchor app (bench/run starts it)
    python -m bench.ack serve-asks                # the asks (TRAINBOT_CONFIG, REDIS_URL)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.common import BOT_REDIS_ENV, BotProcess, Row, free_port, ms, percentile, ratio
from support.slack_requests import signed_headers, slash_command_body
from support.slack_standin import SlackStandin
from support.workspace import SIGNING_SECRET

BUDGET_S = 3.0
GOAL = "p99 ≤ 2x bare at 100/s; 0 errors; no ack over 3 s at 300/s"
BARE_TEXT = "Queued L-000000: bench"


@dataclass
class Load:
    rate: int
    sent: int
    latencies: list[float]
    errors: int
    samples: list[str]  # the first few unexpected answers

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 0.5)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 0.99)

    @property
    def worst(self) -> float:
        return max(self.latencies) if self.latencies else float("nan")


Request = Callable[[int], tuple[bytes, dict[str, str]]]  # request i -> (body, headers)


def slash_train(tag: str) -> Request:
    """Request i: a signed /train of its own user, as Slack sends it."""

    def build(i: int) -> tuple[bytes, dict[str, str]]:
        body = slash_command_body(
            "/train", f"sft llama3p1_8b cluster=a4 name={tag}", user_id=f"U{tag.upper()}{i:06d}"
        )
        return body.encode(), signed_headers(body, secret=SIGNING_SECRET)

    return build


async def load(
    url: str, rate: int, duration_s: float, *, tag: str, expect: str, request: Request | None = None
) -> Load:
    """``rate`` requests per second for ``duration_s``, open-loop: signed /train requests,
    or what ``request`` builds."""
    build = request or slash_train(tag)
    count = max(1, int(rate * duration_s))
    latencies: list[float] = []
    errors = 0
    samples: list[str] = []
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(i: int, at: float) -> None:
            nonlocal errors
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            body, headers = build(i)
            started = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=headers) as r:
                    text = await r.text()
                    ok = r.status == 200 and expect in text
                    answer = f"{r.status} {text[:120]!r}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                ok, answer = False, f"{type(exc).__name__}: {exc}"
            latencies.append(time.perf_counter() - started)
            if not ok:
                errors += 1
                if len(samples) < 3:
                    samples.append(answer)

        t0 = time.perf_counter() + 0.1
        await asyncio.gather(*(one(i, t0 + i / rate) for i in range(count)))
    return Load(rate, count, latencies, errors, samples)


async def serve_bare(port: int, api_url: str) -> None:
    """The anchor: a bare bolt app answering /train with a constant."""
    from aiohttp import web
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    from support.workspace import BOT_TOKEN

    app = AsyncApp(
        client=AsyncWebClient(token=BOT_TOKEN, base_url=api_url),
        signing_secret=SIGNING_SECRET,
    )

    @app.command("/train")
    async def train(ack):  # type: ignore[no-untyped-def]
        await ack(BARE_TEXT)

    runner = web.AppRunner(app.web_app(path="/slack/events"), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


async def serve_asks() -> None:
    """What a worker does for the web role, without taking launches: answer its asks."""
    import os
    import signal

    from bot.gateway.answering import serve_asks as answer_asks
    from bot.gateway.on_cluster import Clusters
    from bot.settings.config import load_config
    from bot.settings.env import Settings
    from bot.store.store import Store
    from cluster.ssh.pool import SSHPool

    settings = Settings.from_environ()
    config = load_config(os.environ["TRAINBOT_CONFIG"])
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with Store.connect(settings.redis_target()) as store, SSHPool() as pool:
        print("ready", flush=True)
        assert settings.ask_key is not None, "TRAINBOT_ASK_KEY: the web role signs its asks"
        key = settings.ask_key.get_secret_value().encode()
        await answer_asks(store, Clusters(config, settings, pool, store), stop, key)


def start_asks(config: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """``serve-asks`` in its own process, on the bench's store; returns once it listens."""
    import os

    env = {**os.environ, **BOT_REDIS_ENV, "TRAINBOT_CONFIG": str(config)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.ack", "serve-asks"],
        stdout=subprocess.PIPE,
        stderr=log_path.open("ab"),
        env=env,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"ready":
        proc.kill()
        raise RuntimeError(f"the asks process did not start; see {log_path}")
    return proc


async def _wait_up(url: str, proc: subprocess.Popen[bytes], expect: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"anchor app exited ({proc.returncode})")
        try:
            warm = await load(url, 20, 0.5, tag="warm", expect=expect)
            if not warm.errors:
                return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.3)
    raise RuntimeError("anchor app never answered")


@asynccontextmanager
async def apps(
    standin: SlackStandin, config: Path, workdir: Path, name: str = ""
) -> AsyncIterator[tuple[BotProcess, str]]:
    """trainbot's web role (its asks answered by the workers' ask loop: it holds no SSH
    key) and the bare bolt app, both answering; the bot and the bare app's URL. Logs in
    ``workdir`` as ``bot-web{name}.log``, ``bare{name}.log``, ``asks{name}.log``."""
    bot = BotProcess(standin.api_url, config, workdir / f"bot-web{name}.log", role="web")
    port = free_port()
    bare = subprocess.Popen(
        [sys.executable, "-m", "bench.ack", "serve-bare", str(port), standin.api_url],
        stdout=subprocess.DEVNULL,
        stderr=(workdir / f"bare{name}.log").open("ab"),
    )
    bare_url = f"http://127.0.0.1:{port}/slack/events"
    asks = start_asks(config, workdir / f"asks{name}.log")
    try:
        await bot.start()
        await _wait_up(bare_url, bare, BARE_TEXT)
        yield bot, bare_url
    finally:
        bot.stop()
        asks.terminate()
        asks.wait(timeout=20)
        bare.terminate()
        bare.wait(timeout=20)


def summary(id: str, measure_text: str, goal: str, results: dict[int, tuple[Load, Load]]) -> Row:
    """The row of an ack measurement: trainbot's and the anchor's load at each rate."""
    figure = "; ".join(
        f"{r}/s p50 {ms(o.p50)} p99 {ms(o.p99)} max {ms(o.worst)} err {o.errors}"
        for r, (o, _) in results.items()
    )
    anchor_text = "; ".join(
        f"{r}/s p50 {ms(a.p50)} p99 {ms(a.p99)} err {a.errors}" for r, (_, a) in results.items()
    )
    mid = 100 if 100 in results else sorted(results)[len(results) // 2]
    top = max(results)
    ours_mid, anchor_mid = results[mid]
    p99_ratio = ratio(ours_mid.p99, anchor_mid.p99)
    errors = sum(o.errors for o, _ in results.values())
    worst_top = results[top][0].worst
    ok = p99_ratio <= 2.0 and errors == 0 and worst_top <= BUDGET_S
    notes = [
        f"p99 ratio at {mid}/s: {p99_ratio:.2f}; errors at all rates: {errors}; "
        f"slowest ack at {top}/s: {ms(worst_top)}"
    ]
    if not ok:
        if p99_ratio > 2.0:
            notes.append(f"p99 at {mid}/s is {p99_ratio:.2f}x the bare app's (goal 2x)")
        if errors:
            seen = [x for o, _ in results.values() for x in o.samples][:3]
            notes.append(
                f"{errors} requests failed or got an unexpected answer, e.g. " + "; ".join(seen)
            )
        if worst_top > BUDGET_S:
            notes.append(f"an ack took {ms(worst_top)} at {top}/s (goal ≤ 3 s)")
    return Row(
        id,
        measure_text,
        figure,
        anchor_text,
        f"p99 {p99_ratio:.2f}x at {mid}/s",
        goal,
        "pass" if ok else "short",
        notes,
    )


async def measure(
    standin: SlackStandin,
    config: Path,
    workdir: Path,
    *,
    rates: tuple[int, ...],
    duration_s: float,
    tag: str,
) -> Row:
    """Both apps at every rate (anchor first at each rate, then trainbot)."""
    measure_text = (
        f"ack latency, signed HTTP, {'/'.join(map(str, rates))} req/s for {duration_s:g} s"
    )
    results: dict[int, tuple[Load, Load]] = {}
    async with apps(standin, config, workdir) as (bot, bare_url):
        await load(bot.events_url, 20, 1.0, tag=f"{tag}w", expect="Queued")  # warm up
        for number, rate in enumerate(rates):
            anchor = await load(bare_url, rate, duration_s, tag=f"{tag}b{number}", expect="Queued")
            ours = await load(
                bot.events_url, rate, duration_s, tag=f"{tag}t{number}", expect="Queued"
            )
            results[rate] = (ours, anchor)
    return summary("P1", measure_text, GOAL, results)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve-bare":
        asyncio.run(serve_bare(int(sys.argv[2]), sys.argv[3]))
    elif sys.argv[1:] == ["serve-asks"]:
        asyncio.run(serve_asks())
    else:
        sys.exit(__doc__)
