"""The App Home tab: a signed ``app_home_opened`` event through real slack-bolt, the
real core and Redis, the dev cluster's capacity, and ``views.publish`` at the Web API
stand-in. It shows the person's active and finished launches and each cluster."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.core.core import Core
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase, Sweep
from bot.slack.http import SlackService, run_slack
from bot.slack.webapi import SlackFront
from bot.store.store import Store
from cluster.ssh.pool import SSHPool
from commands.requests import TrainRequest
from support.slack_requests import event_envelope, post_signed
from support.slack_standin import SlackStandin
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
            await store.launches.create(launch, [Event("parent", launch.id)], enqueue=False)

        def finish(stored: Launch) -> list[Event]:
            stored.phase, stored.outcome, stored.gpu_hours = Phase.DONE, "COMPLETED", 2.5
            return []

        await store.launches.mutate(done.id, finish)
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


async def test_app_home_groups_a_sweeps_members_under_the_sweep(
    standin: SlackStandin, front: SlackFront
) -> None:
    async with home_app(standin, front) as (store, slack):
        request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
        alone = Launch(request=request, user_id="U0ALICE", channel="C1", phase=Phase.RUNNING)
        await store.launches.create(alone, [], enqueue=False)
        sweep = Sweep(
            user_id="U0ALICE", channel="C1", title="sft · llama3p1_8b",
            text="/train sft llama3p1_8b cluster=a4 optim.config.lr=1e-5,3e-5,5e-5",
            where="1 node × a4", keys=["optim.config.lr"], values=[["1e-5"], ["3e-5"], ["5e-5"]],
        )  # fmt: skip
        members = []
        for (lr,) in sweep.values:
            member = Launch(
                request=request.model_copy(update={"overrides": (("optim.config.lr", lr),)}),
                user_id="U0ALICE",
                channel="C1",
                phase=Phase.RUNNING,
                permalink="https://standin.slack.com/archives/C1/p1700000000000042",
            )
            member.sweep = sweep.id
            members.append(member)
        sweep.members = [m.id for m in members]
        await store.launches.create_sweep(sweep, members, [], enqueue=False)

        def finish(stored: Launch) -> list[Event]:
            stored.phase, stored.outcome = Phase.DONE, "COMPLETED"
            return []

        await store.launches.mutate(members[1].id, finish)  # #2 ended: not among the active
        await open_home(slack, "U0ALICE")
        call = await standin.wait_for("views.publish", lambda c: c.params["user_id"] == "U0ALICE")
    view = (
        json.loads(call.params["view"])
        if isinstance(call.params["view"], str)
        else call.params["view"]
    )
    shown = [str((b.get("text") or {}).get("text", "")) for b in view["blocks"]]
    grouped = next(text for text in shown if f"`{sweep.id}` sweep" in text)
    lines = grouped.splitlines()
    assert (
        lines[0].startswith(f"🧪 `{sweep.id}` sweep · sft llama3p1_8b")
        and "2 of 3 members active" in lines[0]
    )
    assert "<https://standin.slack.com/archives/C1/p1700000000000042|thread>" in lines[0]
    assert lines[1].startswith(f"    ↳ #1 (lr=1e-5) 🟢 `{members[0].id}`"), lines[1]
    assert lines[2].startswith(f"    ↳ #3 (lr=5e-5) 🟢 `{members[2].id}`"), lines[2]
    assert len(lines) == 3 and members[1].id not in grouped
    active = (members[0], members[2])  # #2 shows under "Recently finished" only
    assert not any(m.id in text for m in active for text in shown if text != grouped)
    assert any(alone.id in text for text in shown if text != grouped)  # on its own line
