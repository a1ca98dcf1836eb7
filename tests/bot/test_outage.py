"""Slack down, with the whole bot running against the stand-in, real Redis and the dev
cluster: a launch whose parent message became a dead letter ends once (NO_THREAD),
without a pre-flight over SSH on every look; and admins see what is owed on their
App Home."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

from bot import keys
from bot.clusters import Clusters
from bot.config import load_config
from bot.core import Core
from bot.front import Incoming
from bot.launches import Launch
from bot.notifier import Retry
from bot.service import running
from bot.settings import Settings
from bot.slack_front import SlackFront
from bot.store import DeadLetter, Event
from cluster.launch import LaunchSpec
from cluster.preflight import PreflightResult
from cluster.ssh import SSHPool
from commands.requests import TrainRequest
from tests.bot.botkit import (
    bot_settings,
    dev_config,
    flush_test_redis,
    open_test_store,
    wait_for_launch,
)
from tests.slack_standin import SlackStandin

EXAMPLE = Path(__file__).resolve().parents[2] / "trainbot.example.yaml"


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
        assert "could not post this launch's thread" in ended.detail
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
        await store.create(launch, [], enqueue=False)
        event = Event("parent", launch.id, id="1700000000000-0")
        letter = DeadLetter(event, f"thread:{launch.id}", "not_in_channel", 8, "C0OUT", 1.7e9)
        await store.dead_letter(letter)

        async def home_text(user: str) -> str:
            core._home_shown.clear()
            reply = await core(Incoming(user_id=user, channel_id="", event="app_home_opened"))
            return str(reply.blocks)

        shown = await home_text("U0ADMIN")
        assert "Undelivered messages" in shown and "1 dead letter retried" in shown
        assert f"oldest: {launch.id} parent in C0OUT since 2023-11-14 22:13 UTC" in shown
        assert "Undelivered messages" not in await home_text("U0ALICE")
