"""``/metrics`` and ``/healthz`` of real bots: Redis-backed gauges read at scrape time,
counters fed by the store, SSH, the poller and the Slack front end, one registry
per bot, and health that names the broken part."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.console.chat import ConsoleFront
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.runtime.assembly import Bot, running
from bot.runtime.metrics import Counts, Metrics
from bot.slack.http import SlackParams, run_slack
from bot.slack.webapi import SlackError, open_front
from bot.store import keys
from commands.requests import TrainRequest
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN, SIGNING_SECRET
from tests.bot.botkit import bot_settings, dev_config, open_test_store
from tests.bot.conftest import Serve

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def launch(cluster: str = "a4") -> Launch:
    req = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster=cluster)
    return Launch(request=req, user_id="U1", channel="C1")


pytestmark = pytest.mark.usefixtures("clean_redis")


@asynccontextmanager
async def console_bot(workers: int = 0) -> AsyncIterator[Bot]:
    async with running(bot_settings(), dev_config(), ConsoleFront(), workers=workers) as bot:
        yield bot


async def test_redis_backed_gauges_are_read_at_scrape_time() -> None:
    async with open_test_store() as store:
        meters = Metrics(store.backlog, Counts())
        meters.add_dead_letters("queue", store.queue.dead_letter_count)
        empty = parse(await meters.expose())
        assert value(empty, "trainbot_redis_up") == 1
        assert value(empty, "trainbot_queue_depth") == 0
        assert value(empty, "trainbot_queue_oldest_age_seconds") == 0
        old_ms = int((time.time() - 120) * 1000)
        await store.redis.xadd(keys.QUEUE, {"launch": "L-1"}, id=f"{old_ms}-0")
        await store.redis.xadd(keys.QUEUE, {"launch": "L-2"})
        await store.redis.xadd(keys.OUTBOX, {"kind": "thread"}, id=f"{old_ms + 30_000}-0")
        await store.queue.requeue("L-3", after_s=600)
        await store.redis.zadd(keys.DEFERRED, {"L-4": time.time() - 5})
        await store.queue.dead_letter_entry("0-1", {"launch": "L-5"}, "boom")
        now = parse(await meters.expose())  # no restart, no push: read when scraped
    assert value(now, "trainbot_queue_depth") == 2
    assert 119 < value(now, "trainbot_queue_oldest_age_seconds") < 130
    assert value(now, "trainbot_outbox_backlog") == 1
    assert 89 < value(now, "trainbot_outbox_oldest_age_seconds") < 100
    assert value(now, "trainbot_deferred") == 2
    assert value(now, "trainbot_deferred_overdue") == 1
    assert value(now, "trainbot_dead_letters", source="queue") == 1


async def test_a_scrape_without_redis_says_so() -> None:
    async def down() -> None:
        raise ConnectionError("refused")

    meters = Metrics(down, Counts(polls=lambda: 7))  # type: ignore[arg-type]
    samples = parse(await meters.expose())
    assert value(samples, "trainbot_redis_up") == 0
    assert value(samples, "trainbot_polls_total") == 7
    assert ("trainbot_queue_depth", ()) not in samples


async def test_launch_outcomes_retries_and_pages_are_counted_by_cause() -> None:
    async with console_bot() as bot, open_test_store() as other:
        store = bot.store
        ours = launch()
        await store.launches.create(ours, [])

        def submitted(stored: Launch) -> list[Event]:
            stored.attempts.append(Attempt(number=1, job_id="1"))
            stored.phase = Phase.RUNNING
            return []

        def failed_then_retried(stored: Launch) -> list[Event]:
            stored.attempts[-1].cause_key = "nccl_timeout"
            stored.attempts.append(Attempt(number=2))
            stored.phase = Phase.RETRYING
            page = {"dedup_key": "k", "cause_key": "nccl_timeout", "cause": "", "action": ""}
            return [Event("oncall", stored.id, "paged", data=page)]

        def ended(stored: Launch) -> list[Event]:
            stored.attempts[-1].cause_key = "oom"
            stored.phase, stored.outcome = Phase.DONE, "FAILED"
            return []

        await store.launches.mutate(ours.id, submitted)
        await store.launches.mutate(ours.id, failed_then_retried)
        await store.launches.mutate(ours.id, ended)
        await store.launches.mutate(ours.id, lambda s: [])  # already ended: not counted again
        await other.launches.mutate(
            ours.id, lambda s: []
        )  # another process's write: not this bot's
        samples = parse(await bot.metrics())
    assert value(samples, "trainbot_launches_total", outcome="FAILED", cause="oom") == 1
    assert value(samples, "trainbot_retries_total", cause="nccl_timeout") == 1
    assert value(samples, "trainbot_pages_total", cause="nccl_timeout") == 1


async def test_each_bot_has_its_own_registry_and_ssh_and_poll_timings() -> None:
    async with console_bot() as one, console_bot() as two:
        profile = one.clusters.profile("a4")
        await one.clusters.pool.run(profile.login, "true", timeout_s=30, cluster="a4")
        one.poller.observers[0]("a4", 0.2)
        first, second = parse(await one.metrics()), parse(await two.metrics())
    assert value(first, "trainbot_ssh_round_trip_seconds_count", cluster="a4") == 1
    assert value(first, "trainbot_ssh_round_trips_total", cluster="a4") == 1
    assert value(first, "trainbot_poll_duration_seconds_count", cluster="a4") == 1
    assert value(second, "trainbot_ssh_round_trip_seconds_count", cluster="a4") == 0
    for name in (
        "trainbot_launches_processed_total",
        "trainbot_messages_delivered_total",
        "trainbot_queue_dead_letters_total",
        "trainbot_polls_total",
    ):
        assert (name, ()) in first, name  # the names of earlier versions still answer


async def test_slack_api_errors_are_counted_by_method_and_code(standin: SlackStandin) -> None:
    params = SlackParams(
        bot_token=BOT_TOKEN,
        signing_secret=SIGNING_SECRET,
        api_url=standin.api_url,
        http_port=0,
        backoff_base_s=0.01,
    )
    async with (
        open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as front,
        running(bot_settings(), dev_config(), front, workers=0) as bot,
        run_slack(params, bot.core, health=bot.healthy, metrics=bot.metrics, front=front) as slack,
    ):
        standin.fail_next("chat.postMessage", status=200, error="channel_not_found")
        with pytest.raises(SlackError):
            assert bot.core.front is not None
            await bot.core.front.post("C404", "hello")
        url = f"http://127.0.0.1:{slack.http_port}/metrics"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            samples = parse(await response.text())
    labels = {"method": "chat.postMessage", "code": "channel_not_found"}
    assert value(samples, "trainbot_slack_api_errors_total", **labels) == 1
    assert all(name.startswith("trainbot_") for name, _ in samples)


async def test_health_names_the_broken_part() -> None:
    async with console_bot() as bot:
        assert await bot.healthy() == (True, "ok")
        bot.poller.shutdown()  # as in a process without a poller: another must hold the leases
        ok, reason = await bot.healthy()
        assert not ok and reason == "poller lease: no process polls a3m, a3u, a4, a3h"
        for name in ("a3m", "a3u", "a4"):
            await bot.store.leases.acquire(f"poller:{name}", "elsewhere", 30_000)
        assert await bot.healthy() == (False, "poller lease: no process polls a3h")
        await bot.store.leases.acquire("poller:a3h", "elsewhere", 30_000)
        assert await bot.healthy() == (True, "ok")
        await bot.store.redis.delete(keys.QUEUE)
        ok, reason = await bot.healthy()
        assert not ok and reason.startswith("queue groups: missing")
        await bot.store.ensure_groups()
        client = bot.store.redis
        bot.store.redis = type(client).from_url("redis://127.0.0.1:1/0")  # nothing listens
        try:
            ok, reason = await bot.healthy()
        finally:
            await bot.store.redis.aclose()
            bot.store.redis = client
        assert not ok and reason.startswith("redis: ")


async def test_health_says_when_socket_mode_is_down(serve: Serve, standin: SlackStandin) -> None:
    async with serve(socket_mode=True) as service, aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{service.http_port}/healthz"
        async with session.get(url) as response:
            assert (response.status, await response.text()) == (200, "ok")
        standin.fail_next("apps.connections.open", times=1000, status=500)
        for ws in list(standin._sockets):
            await ws.close()
        deadline = time.monotonic() + 15
        while True:
            async with session.get(url) as response:
                answer = (response.status, await response.text())
            if answer[0] == 503 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    assert answer == (503, "socket mode: not connected to Slack")
