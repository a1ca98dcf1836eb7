"""SlackFront against the Web API stand-in: retries, per-thread order, uploads, lookups."""

from __future__ import annotations

import asyncio
import socket

import pytest

from bot.front import MessageRef
from bot.slack_front import SlackError, SlackFront, open_front
from bot.slack_text import code_block, escape, section
from tests.slack_standin import BOT_TOKEN, SlackStandin


async def test_post_returns_ref_and_keeps_thread(front: SlackFront, standin: SlackStandin) -> None:
    parent = await front.post("C0TRAIN", "Queued L-1")
    reply = await front.post("C0TRAIN", "Submitted", thread_ts=parent.ts)
    assert parent.channel == "C0TRAIN" and parent.ts and reply.ts != parent.ts
    calls = standin.calls_to("chat.postMessage")
    assert [c.params.get("thread_ts") for c in calls] == [None, parent.ts]
    assert calls[0].params["unfurl_links"] is False


async def test_token_is_sent_but_never_recorded(front: SlackFront, standin: SlackStandin) -> None:
    await front.post("C0TRAIN", "hello")
    (call,) = standin.calls_to("chat.postMessage")
    assert "authorization" not in {k.lower() for k in call.headers}
    assert BOT_TOKEN not in repr(call)


async def test_rate_limit_then_ok_keeps_every_message_in_order(
    front: SlackFront, standin: SlackStandin
) -> None:
    parent = await front.post("C0TRAIN", "parent")
    standin.fail_next("chat.postMessage", 1, status=429, retry_after_s=1)
    texts = [f"thread message {i}" for i in range(4)]
    posts = [
        asyncio.create_task(front.post("C0TRAIN", text, thread_ts=parent.ts)) for text in texts
    ]
    await asyncio.sleep(0.2)  # the first one is now waiting out Retry-After
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


async def test_user_text_is_never_sent_unescaped(front: SlackFront, standin: SlackStandin) -> None:
    typed = "name=<!channel> & <@U0BOSS> <https://x|y>"
    await front.post("C0TRAIN", f"Unknown key in {escape(typed)}", blocks=[section(escape(typed))])
    await front.post_ephemeral("C0TRAIN", "U0ALICE", code_block(typed))
    for call in standin.calls:
        assert "<!channel>" not in repr(call.params)
        assert "<@U0BOSS>" not in repr(call.params)


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
