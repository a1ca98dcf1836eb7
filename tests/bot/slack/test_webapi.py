"""SlackFront against the Web API stand-in: retries, per-thread order, uploads, lookups; and
the core behind slack-bolt: where the token goes, how user text reaches Slack."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.core.core import Core
from bot.gateway.on_cluster import Clusters
from bot.notify.notifier import Notifier
from bot.settings.config import parse_config
from bot.settings.env import Settings
from bot.slack.http import run_slack
from bot.slack.webapi import SlackError, SlackFront, open_front
from bot.store.store import Store
from bot.text.front import MessageRef
from bot.text.mrkdwn import section
from cluster.ssh.pool import SSHPool
from support.slack_requests import block_action_body, post_signed, slash_command_body
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN
from tests.bot.botkit import flush_test_redis, launch_id_in, open_test_store
from tests.bot.conftest import standin_params

EXAMPLE = Path(__file__).resolve().parents[3] / "trainbot.example.yaml"


async def test_post_returns_ref_and_keeps_thread(front: SlackFront, standin: SlackStandin) -> None:
    parent = await front.post("C0TRAIN", "Queued L-1")
    reply = await front.post("C0TRAIN", "Submitted", thread_ts=parent.ts)
    assert parent.channel == "C0TRAIN" and parent.ts and reply.ts != parent.ts
    calls = standin.calls_to("chat.postMessage")
    assert [c.params.get("thread_ts") for c in calls] == [None, parent.ts]
    assert calls[0].params["unfurl_links"] is False


@asynccontextmanager
async def core_on_slack(
    standin: SlackStandin, **params: Any
) -> AsyncIterator[tuple[str, Store, Notifier]]:
    """trainbot's core behind slack-bolt over HTTP (the events URL), its store on the test
    Redis, and a notifier to drain by hand; Slack is the stand-in. No cluster is reached."""
    await flush_test_redis()
    # The stand-in's people are not in the example's identity map: they run as the shared
    # account here (the example refuses unmapped people).
    text = EXAMPLE.read_text().replace("unmapped: refuse", "unmapped: shared")
    config = parse_config(text, source=str(EXAMPLE), base_dir=EXAMPLE.parent)

    async def healthy() -> tuple[bool, str]:
        return True, "ok"

    slack = standin_params(standin, **params)
    async with (
        open_test_store() as store,
        SSHPool() as pool,
        open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as front,
    ):
        clusters = Clusters(config, Settings.from_environ({}), pool)
        core = Core(store, clusters, config.command_context(), front)
        async with run_slack(slack, core, health=healthy, metrics=lambda: "", front=front) as app:
            url = f"http://127.0.0.1:{app.http_port}/slack/events"
            yield url, store, Notifier(store, front, clusters.profiles, owner="test")


async def everything_stored(store: Store) -> str:
    """Every key and value of the test Redis database, as text."""
    redis, parts = store.redis, []
    async for key in redis.scan_iter():
        kind = await redis.type(key)
        value: object = kind
        if kind == "string":
            value = await redis.get(key)
        elif kind == "stream":
            value = await redis.xrange(key)
        elif kind == "set":
            value = await redis.smembers(key)
        elif kind == "hash":
            value = await redis.hgetall(key)
        elif kind == "list":
            value = await redis.lrange(key, 0, -1)
        parts.append(f"{key} {value!r}")
    return "\n".join(parts)


async def test_the_token_goes_only_in_the_authorization_header(
    standin: SlackStandin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # everything any library logs, as `trainbot -v` would
    for name in ("slack_sdk", "slack_bolt"):  # however an earlier set-up left them
        caplog.set_level(logging.DEBUG, logger=name)
    standin.fail_next("chat.postMessage", 1, status=500)  # the retry path logs too
    async with core_on_slack(standin) as (url, store, notifier):
        answer = await post_signed(url, slash_command_body("/train", "sft llama3p1_8b cluster=a4"))
        launch_id = launch_id_in(answer.json()["text"])
        while not await notifier.drained():
            await notifier.drain()
        stored = await everything_stored(store)
    posted = [c.params["text"] for c in standin.calls_to("chat.postMessage")]
    assert len(posted) == 2 and posted[1].startswith("Queued by <@U0ALICE>")  # parent, thread
    assert {c.method for c in standin.calls} >= {"auth.test", "chat.postMessage"}
    assert {c.auth for c in standin.calls} == {"bot"}  # every call: "Bearer <bot token>"
    for call in standin.calls:  # and nowhere else in the request
        assert BOT_TOKEN not in json.dumps(call.params, default=str) + json.dumps(call.headers)
    assert launch_id in stored and BOT_TOKEN not in stored
    assert any(r.name.startswith("slack_sdk") for r in caplog.records)
    assert BOT_TOKEN not in caplog.text

    wrong = "xoxb-a-revoked-token"
    async with open_front(wrong, api_url=standin.api_url, backoff_base_s=0.01) as front:
        with pytest.raises(SlackError, match="invalid_auth") as raised:
            await front.post("C0TRAIN", "hello")
    assert standin.calls[-1].auth == "other"
    assert wrong not in str(raised.value) and wrong not in caplog.text


async def test_rate_limit_then_ok_keeps_every_message_in_order(
    front: SlackFront, standin: SlackStandin
) -> None:
    parent = await front.post("C0TRAIN", "parent")
    standin.fail_next("chat.postMessage", 1, status=429, retry_after_s=1)
    texts = [f"thread message {i}" for i in range(4)]
    posts = [
        asyncio.create_task(front.post("C0TRAIN", text, thread_ts=parent.ts)) for text in texts
    ]
    # The first one met its 429 and now waits out Retry-After (1 s) before its retry.
    await standin.wait_for("chat.postMessage", lambda c: c.status == 429, ok_only=False)
    other = await front.post("C0OTHER", "another thread is not held up")
    refs = await asyncio.gather(*posts)

    calls = standin.calls_to("chat.postMessage", ok_only=False)[1:]
    sent = [(c.params["text"], c.status) for c in calls if c.params["channel"] == "C0TRAIN"]
    assert sent == [(texts[0], 429), *[(text, 200) for text in texts]]
    limited, retried = calls[0], next(c for c in calls[1:] if c.params["text"] == texts[0])
    assert retried.at - limited.at >= 1.0  # Retry-After honoured
    assert calls.index(next(c for c in calls if c.params["channel"] == "C0OTHER")) < calls.index(
        retried
    )
    assert [r.ts for r in refs] == sorted(r.ts for r in refs)
    assert other.channel == "C0OTHER"


async def test_server_error_is_retried(front: SlackFront, standin: SlackStandin) -> None:
    standin.fail_next("chat.update", 2, status=500)
    await front.update(MessageRef("C0TRAIN", "1700000000.000001"), "RUNNING")
    statuses = [c.status for c in standin.calls_to("chat.update", ok_only=False)]
    assert statuses == [500, 500, 200]


async def test_persistent_failure_raises_slack_error(
    front: SlackFront, standin: SlackStandin
) -> None:
    standin.fail_next("chat.postMessage", 10, status=503)
    with pytest.raises(SlackError) as raised:
        await front.post("C0TRAIN", "lost?")
    assert raised.value.method == "chat.postMessage" and raised.value.status == 503
    assert len(standin.calls_to("chat.postMessage", ok_only=False)) == 5  # 1 + 4 retries


async def test_user_text_reaches_slack_escaped(standin: SlackStandin) -> None:
    """Typed text quoted back: in a slash command's ack, and through chat.postEphemeral."""
    async with core_on_slack(standin) as (url, _store, _notifier):
        typed = "trainer.max_steps=&lt;!channel&gt;&amp;&lt;@U0BOSS&gt;"  # as Slack sends <, &, >
        answer = await post_signed(url, slash_command_body("/train", f"sft llama3p1_8b {typed}"))
        queued = await post_signed(url, slash_command_body("/train", "sft llama3p1_8b"))
        launch_id = launch_id_in(queued.json()["text"])
        # A button value comes back from outside too: [Use <partition>] with a crafted one.
        value = f"{launch_id}:<!channel>&<@U0BOSS>"
        await post_signed(url, block_action_body("trainbot_use_partition", value))
        said = await standin.wait_for("chat.postEphemeral")
    assert answer.json()["text"] == (
        ":warning: trainer.max_steps='&lt;!channel&gt;&amp;&lt;@U0BOSS&gt;' is not allowed for "
        "sft llama3p1_8b: the value must match [0-9]{1,7}."
    )
    assert said.params["text"] == (
        ":warning: '&lt;!channel&gt;&amp;&lt;@U0BOSS&gt;' is not a partition name."
    )
    for call in standin.calls:
        assert "<!channel>" not in repr(call.params) and "<@U0BOSS" not in repr(call.params)


async def test_long_text_and_many_blocks_are_cut(front: SlackFront, standin: SlackStandin) -> None:
    blocks = [section("s" * 5000) for _ in range(70)]
    await front.post("C0TRAIN", "t\n" * 30_000, blocks=blocks)
    (call,) = standin.calls_to("chat.postMessage")
    assert len(call.params["text"]) <= 40_000
    assert len(call.params["blocks"]) == 50
    assert all(len(b["text"]["text"]) <= 3000 for b in call.params["blocks"] if "text" in b)


async def test_update_and_ephemeral(front: SlackFront, standin: SlackStandin) -> None:
    ref = await front.post("C0TRAIN", "QUEUED")
    await front.update(ref, "RUNNING", blocks=[section("RUNNING")])
    await front.post_ephemeral("C0TRAIN", "U0ALICE", "only you")
    (update,) = standin.calls_to("chat.update")
    assert update.params["ts"] == ref.ts and update.params["text"] == "RUNNING"
    (ephemeral,) = standin.calls_to("chat.postEphemeral")
    assert ephemeral.params["user"] == "U0ALICE"


async def test_upload_long_log_into_thread(front: SlackFront, standin: SlackStandin) -> None:
    content = "".join(f"step {i} loss 1.0\n" for i in range(100_000)).encode()
    await front.upload(
        "C0TRAIN", "1700000000.000001", filename="log-4187.out", content=content, title="job 4187"
    )
    (url_call,) = standin.calls_to("files.getUploadURLExternal")
    assert url_call.params["filename"] == "log-4187.out"
    assert int(url_call.params["length"]) == len(content)
    (complete,) = standin.calls_to("files.completeUploadExternal")
    assert complete.params["channel_id"] == "C0TRAIN"
    assert complete.params["thread_ts"] == "1700000000.000001"
    assert list(standin.uploads.values()) == [content]


async def test_upload_to_user_opens_a_dm(front: SlackFront, standin: SlackStandin) -> None:
    dm = await front.upload_to_user("U0ALICE", filename="a.txt", content=b"hi", title="a")
    assert dm == "DU0ALICE"
    (complete,) = standin.calls_to("files.completeUploadExternal")
    assert complete.params["channel_id"] == "DU0ALICE"


async def test_permalink_and_usergroup_members(front: SlackFront, standin: SlackStandin) -> None:
    link = await front.permalink(MessageRef("C0TRAIN", "1700000000.000042"))
    assert link == "https://standin.slack.com/archives/C0TRAIN/p1700000000000042"
    assert await front.usergroup_members("S0ONCALL") == ["U0BOB", "U0CAROL"]
    assert await front.usergroup_members("S0NOBODY") == []


async def test_unreachable_slack_is_retried_then_reported() -> None:
    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with open_front(
        BOT_TOKEN, api_url=f"http://127.0.0.1:{port}/api/", backoff_base_s=0.01
    ) as dead:
        with pytest.raises(SlackError, match="unreachable"):
            await dead.post("C0TRAIN", "hello?")
