"""The App Home tab: a signed ``app_home_opened`` event through real slack-bolt, the
real core and Redis, the dev cluster's capacity, and ``views.publish`` at the Web API
stand-in. It shows the person's active and finished launches and each cluster."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.clusters import Clusters
from bot.core import Core
from bot.http import SlackService, run_slack
from bot.launches import Launch, Phase
from bot.slack_front import SlackFront
from bot.store import Event, Store
from cluster.ssh import SSHPool
from commands.requests import TrainRequest
from support.slack_standin import SlackStandin, event_envelope, post_signed
from tests.bot.botkit import bot_settings, dev_config, flush_test_redis, open_test_store
from tests.bot.conftest import healthy, standin_params

pytestmark = pytest.mark.devcluster


@asynccontextmanager
async def home_app(
    standin: SlackStandin, front: SlackFront
) -> AsyncIterator[tuple[Store, SlackService]]:
    config = dev_config()
    params = standin_params(standin)
    await flush_test_redis()
    async with open_test_store() as store, SSHPool() as pool:
        core = Core(store, Clusters(config, bot_settings(), pool), config.command_context(), front)
        async with run_slack(
            params, core, health=healthy, metrics=lambda: "", front=front
        ) as slack:
            yield store, slack


async def open_home(slack: SlackService, user: str) -> None:
    event = event_envelope(
        {"type": "app_home_opened", "user": user, "channel": "D0HOME", "tab": "home"}
    )
    url = f"http://127.0.0.1:{slack.http_port}/slack/events"
    answer = await post_signed(url, json.dumps(event), content_type="application/json")
    assert answer.status == 200 and answer.elapsed_s < 3.0


def texts(view: Any) -> str:
    view = view if isinstance(view, dict) else json.loads(view)
    assert view["type"] == "home"
    return "\n".join(
        str((block.get("text") or {}).get("text", ""))
        + "".join(str(e.get("text", "")) for e in block.get("elements", []))
        for block in view["blocks"]
    )


async def test_app_home_shows_the_persons_launches_and_the_clusters(
    standin: SlackStandin, front: SlackFront
) -> None:
    async with home_app(standin, front) as (store, slack):
        request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
        running = Launch(request=request, user_id="U0ALICE", channel="C1", phase=Phase.RUNNING)
        running.permalink = "https://standin.slack.com/archives/C1/p1700000000000001"
        done = Launch(request=request, user_id="U0ALICE", channel="C1")
        other = Launch(request=request, user_id="U0BOB", channel="C1")
        for launch in (running, done, other):
            await store.create(launch, [Event("parent", launch.id)], enqueue=False)

        def finish(stored: Launch) -> list[Event]:
            stored.phase, stored.outcome, stored.gpu_hours = Phase.DONE, "COMPLETED", 2.5
            return []

        await store.mutate(done.id, finish)
        await open_home(slack, "U0ALICE")
        call = await standin.wait_for("views.publish", lambda c: c.params["user_id"] == "U0ALICE")
        shown = texts(call.params["view"])
        assert running.id in shown and "<https://standin.slack.com/archives/C1/p17" in shown
        assert done.id in shown and "COMPLETED" in shown and "2.5 GPU-hours" in shown
        assert other.id not in shown
        for cluster in ("a3m", "a3u", "a4", "a3h"):
            assert f"*{cluster}*:" in shown
        assert "GPUs free" in shown
        # Opened again at once: nothing new to publish (cheap when many open it).
        await open_home(slack, "U0ALICE")
        await open_home(slack, "U0BOB")
        await standin.wait_for("views.publish", lambda c: c.params["user_id"] == "U0BOB")
    assert len(standin.calls_to("views.publish")) == 2
