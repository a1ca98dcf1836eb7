"""Slack down, with the whole bot running against the stand-in, real Redis and the dev
cluster: a launch whose parent message became a dead letter ends once (NO_THREAD),
without a pre-flight over SSH on every look; and admins see what is owed on their
App Home."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.core.core import Core
from bot.engine import worker
from bot.engine.worker import Worker
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.notify.lane_rules import Retry
from bot.runtime.assembly import running
from bot.settings.config import load_config
from bot.settings.env import Settings
from bot.settings.sections import Delivery
from bot.slack.webapi import SlackFront
from bot.store import keys
from bot.store.lanes import DeadLetter
from bot.store.store import Store
from bot.text.front import Incoming
from cluster.launching.spec import LaunchSpec
from cluster.preflight.checks import PreflightResult
from cluster.ssh.pool import SSHPool
from commands.requests import TrainRequest
from support.slack_standin import SlackStandin
from tests.bot.botkit import (
    bot_settings,
    dev_config,
    ended_with,
    flush_test_redis,
    open_test_store,
    wait_for_launch,
)
from tests.bot.engine.test_worker import ScriptedClusters, queued

EXAMPLE = Path(__file__).resolve().parents[3] / "trainbot.example.yaml"


async def test_a_launch_whose_parent_is_a_dead_letter_ends_once_without_preflight_each_look(
    standin: SlackStandin, front: SlackFront
) -> None:
    await flush_test_redis()
    standin.fail_next("chat.postMessage", 10**6, status=503)  # Slack takes no message
    async with running(bot_settings(), dev_config(), front, workers=1) as bot:
        bot.notifier.retry = Retry(first_s=0.05, cap_s=0.1, max_tries=3, dead_cap_s=0.5)
        preflights: list[float] = []
        real = bot.clusters.preflight

        async def counted(spec: LaunchSpec) -> PreflightResult:
            preflights.append(time.monotonic())
            return await real(spec)

        bot.clusters.preflight = counted  # type: ignore[method-assign]
        reply = await bot.core(
            Incoming(
                user_id="U0ALICE",
                channel_id="C0TRAIN",
                command="/train",
                text="sft llama3p1_8b cluster=a4 nodes=1",
            )
        )
        assert not reply.error, reply.text
        found = re.search(r"L-[0-9a-f]+", reply.text)
        assert found is not None
        ended = await wait_for_launch(bot.store, found.group(0), timeout_s=40)
        assert ended.outcome == "NO_THREAD" and not ended.job_id
        assert "could not post this launch's thread" in ended_with(ended)
        passes = sum(w.processed for w in bot.workers)
        await asyncio.sleep(4.0)  # nothing more: no look, no pre-flight
        assert sum(w.processed for w in bot.workers) == passes
        assert len(preflights) <= 1
        assert passes <= 4
        assert await bot.store.redis.zscore(keys.DEFERRED, ended.id) is None


async def test_admins_see_dead_letters_on_their_app_home_and_others_do_not() -> None:
    await flush_test_redis()
    config = load_config(EXAMPLE)  # admins: U0ADMIN
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    async with open_test_store() as store, SSHPool(connect_timeout_s=1.0) as pool:
        core = Core(
            store, Clusters(config, Settings.from_environ({}), pool), config.command_context()
        )
        launch = Launch(request=request, user_id="U0ALICE", channel="C0OUT")
        await store.launches.create(launch, [], enqueue=False)
        event = Event("parent", launch.id, id="1700000000000-0")
        letter = DeadLetter(event, f"thread:{launch.id}", "not_in_channel", 8, "C0OUT", 1.7e9)
        await store.lanes.dead_letter(letter)

        async def home_text(user: str) -> str:
            core.app_home.forget(user)
            reply = await core(Incoming(user_id=user, channel_id="", event="app_home_opened"))
            return str(reply.blocks)

        shown = await home_text("U0ADMIN")
        assert "Undelivered messages" in shown and "1 dead letter retried" in shown
        assert f"oldest: {launch.id} parent in C0OUT since 2023-11-14 22:13 UTC" in shown
        assert "Undelivered messages" not in await home_text("U0ALICE")


async def dead_letter_three_times(store: Store, w: Worker) -> None:
    """Let the worker fail the launch's queue entry MAX_DELIVERIES times."""
    for delivery in range(worker.MAX_DELIVERIES):
        if delivery:  # redelivered: claimed back after it sat unacknowledged
            entries = await store.queue.claim_stale("a", min_idle_ms=0)
        else:
            entries = await store.queue.read("a", block_ms=100)
        assert len(entries) == 1
        await w.handle(*entries[0])


@pytest.fixture
async def clusters() -> AsyncIterator[ScriptedClusters]:
    async with SSHPool() as pool:
        yield ScriptedClusters(pool)


async def test_a_queue_dead_letter_is_replayed_with_backoff_and_given_up_after_its_time(
    store: Store, clusters: ScriptedClusters
) -> None:
    launch = await queued(store)
    clusters.preflight_error = KeyError("a bug")
    w = Worker(store, clusters, name="a")
    started = time.time()
    await dead_letter_three_times(store, w)
    due = await store.redis.zrange(keys.DEAD_LETTERS_DUE, 0, -1, withscores=True)
    assert len(due) == 1 and 59 <= float(due[0][1]) - started <= 62  # the first replay in a minute
    assert await store.queue.replay_due(now=started + 30) == 0  # not yet
    # An hour later the cause (a bug, a Redis hiccup) is gone: the replay submits it.
    assert await store.queue.replay_due(now=started + 3600) == 1
    assert await store.queue.dead_letter_count() == 0 and await store.queue.retrying_count() == 0
    entries = await store.queue.read("a", block_ms=100)
    assert [(f["launch"], f["replays"]) for _, f in entries] == [(launch.id, "1")]
    clusters.preflight_error = None
    await w.handle(*entries[0])
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.job_id == "100" and clusters.submits == ["100"]

    # Another launch that keeps failing past delivery.retry_for_h (24 h) is given up.
    other = await queued(store)
    clusters.preflight_error = KeyError("a bug")
    for entry_id, _ in await store.queue.read("a", block_ms=100):
        await store.queue.ack(entry_id)  # as if replayed 9 times:
    day_ago = repr(time.time() - 24 * 3600)
    await store.redis.xadd(keys.QUEUE, {"launch": other.id, "replays": "9", "first_dead": day_ago})
    await dead_letter_three_times(store, w)
    assert await store.queue.retrying_count() == 0 and await store.queue.dead_letter_count() == 1
    ended = await store.launches.get(other.id)
    assert ended is not None and ended.outcome == "INTERNAL_ERROR" and not ended.active
    said = ended_with(ended)
    assert "given up" in said and "10 tries over 24." in said


async def test_the_notifier_retries_as_long_as_the_config_says(
    standin: SlackStandin, front: SlackFront
) -> None:
    config = dev_config()
    config = config.model_copy(
        update={"delivery": Delivery(retry_for_h=36, dead_letter_retry_max_s=600)}
    )
    async with running(bot_settings(), config, front, workers=0) as bot:
        assert bot.notifier.retry.give_up_after_s == 36 * 3600
        assert bot.notifier.retry.dead_cap_s == 600
    with pytest.raises(ValidationError, match="retry_for_h"):
        Delivery(retry_for_h=0.5)
