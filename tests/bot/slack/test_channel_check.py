"""/train refuses, before queueing, a channel the bot cannot post in: signed slash
commands through real slack-bolt, the real core and Redis, the Web API stand-in
answering conversations.info. The console has no channels to check."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.core.core import Core
from bot.gateway.on_cluster import Clusters
from bot.slack.http import SlackService, run_slack
from bot.slack.webapi import SlackError, SlackFront
from bot.store.store import Store
from cluster.ssh.pool import SSHPool
from support.slack_requests import SlackAnswer, post_signed, slash_command_body
from support.slack_standin import SlackStandin
from support.workspace import BOT_SCOPES
from tests.bot.botkit import LAUNCH_RE, bot_settings, dev_config, open_test_store
from tests.bot.conftest import healthy, standin_params

TRAIN = "sft llama3p1_8b nodes=2 cluster=a4"


pytestmark = pytest.mark.usefixtures("clean_redis")


@asynccontextmanager
async def slack_core(
    standin: SlackStandin, front: SlackFront
) -> AsyncIterator[tuple[Store, SlackService]]:
    """The core (no workers: nothing is launched) behind the Slack front end."""
    config = dev_config()
    params = standin_params(standin)
    async with open_test_store() as store, SSHPool() as pool:
        core = Core(store, Clusters(config, bot_settings(), pool), config.command_context(), front)
        async with run_slack(
            params, core, health=healthy, metrics=lambda: "", front=front
        ) as slack:
            yield store, slack


async def train(slack: SlackService, channel: str, text: str = TRAIN) -> SlackAnswer:
    url = f"http://127.0.0.1:{slack.http_port}/slack/events"
    return await post_signed(url, slash_command_body("/train", text, channel_id=channel))


async def nothing_queued(store: Store) -> bool:
    return (
        await store.history.active_ids() == []
        and await store.queue.length() == 0
        and await store.outbox.length() == 0
    )


async def test_a_channel_the_bot_is_not_in_is_refused_before_queueing(
    standin: SlackStandin, front: SlackFront
) -> None:
    standin.channels["C0OUT"] = {"is_member": False}
    async with slack_core(standin, front) as (store, slack):
        answer = await train(slack, "C0OUT")
        assert answer.status == 200 and answer.elapsed_s < 3.0
        text = answer.json()["text"]
        assert await nothing_queued(store)
        assert "<#C0OUT>" in text and "/invite @trainbot" in text and "Nothing was queued" in text
        assert not LAUNCH_RE.search(text)

        standin.channels["C0OUT"] = {"is_member": True}  # invited: the next try goes through
        again = await train(slack, "C0OUT")
        assert again.json()["text"].startswith("Queued L-")
        assert len(await store.history.active_ids()) == 1


@pytest.mark.parametrize(
    ("channel", "described", "scopes", "refused"),
    [
        ("G0SECRET", {"error": "channel_not_found"}, BOT_SCOPES, "I can't see"),
        ("C0OLD", {"is_archived": True}, BOT_SCOPES, "is archived"),
        ("C0PUBLIC", {"is_member": False}, (*BOT_SCOPES, "chat:write.public"), ""),
        (
            "G0PRIV",
            {"is_member": False, "is_private": True},
            (*BOT_SCOPES, "chat:write.public"),
            "I'm not in",
        ),
        ("C0NOSCOPE", {"error": "missing_scope"}, BOT_SCOPES, ""),  # cannot check: goes ahead
    ],
)
async def test_what_counts_as_a_channel_the_bot_can_post_in(
    standin: SlackStandin,
    front: SlackFront,
    channel: str,
    described: dict[str, object],
    scopes: tuple[str, ...],
    refused: str,
) -> None:
    standin.channels[channel] = described
    standin.scopes = scopes
    async with slack_core(standin, front) as (store, slack):
        text = (await train(slack, channel)).json()["text"]
    if refused:
        assert refused in text and "Nothing was queued" in text
        assert await nothing_queued(store)
    else:
        assert text.startswith("Queued L-")


async def test_the_check_is_cached_per_channel(standin: SlackStandin, front: SlackFront) -> None:
    async with slack_core(standin, front) as (store, slack):
        for _ in range(3):
            assert (await train(slack, "C0TRAIN")).json()["text"].startswith("Queued L-")
        await train(slack, "C0OTHER")
    asked = [c.params["channel"] for c in standin.calls_to("conversations.info")]
    assert asked == ["C0TRAIN", "C0OTHER"]


async def test_a_slow_answer_does_not_make_the_ack_late(
    standin: SlackStandin, front: SlackFront
) -> None:
    standin.delays_s["conversations.info"] = 3.0
    async with slack_core(standin, front) as (store, slack):
        answer = await train(slack, "C0TRAIN")
    assert answer.status == 200 and answer.elapsed_s < 3.0
    assert answer.json()["text"].startswith("Queued L-")  # not checked in time: goes ahead


async def test_a_post_refused_later_forgets_the_cached_yes(
    standin: SlackStandin, front: SlackFront
) -> None:
    async with slack_core(standin, front) as (store, slack):
        assert (await train(slack, "C0TRAIN")).json()["text"].startswith("Queued L-")
        standin.refuse_posts("C0TRAIN")  # the bot was removed from the channel
        standin.channels["C0TRAIN"] = {"is_member": False}
        with pytest.raises(SlackError, match="not_in_channel"):
            await front.post("C0TRAIN", "hello")
        text = (await train(slack, "C0TRAIN")).json()["text"]
    assert "/invite @trainbot" in text


async def test_the_console_has_no_channel_to_check() -> None:
    config = dev_config()
    out = io.StringIO()
    front = ConsoleFront(out, color=False)
    async with open_test_store() as store, SSHPool() as pool:
        core = Core(store, Clusters(config, bot_settings(), pool), config.command_context(), front)
        reply = await handle_line(f"/train {TRAIN}", core, front, user="alice")
    assert reply is not None and not reply.error and reply.text.startswith("Queued L-")
    assert await front.can_post("console") == ""
