"""The bot over HTTP: real bolt, real signature checks, answers at the stand-in."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from types import SimpleNamespace

import aiohttp
import pytest
from pydantic import SecretStr

from bot.slack.app import WORKING_TEXT
from bot.slack.http import SlackParams
from bot.text.actions import ACTION_HELP
from bot.text.front import Incoming, Reply
from bot.text.mrkdwn import HELP_TOPICS, escape
from cluster.errors import ConfigError
from support.slack_requests import (
    block_action_body,
    event_envelope,
    post_signed,
    slash_command_body,
)
from support.slack_standin import SlackStandin
from support.workspace import BOT_USER_ID
from tests.bot.conftest import FakeHandler, Serve, events_url


async def test_signed_slash_command_reaches_handler_and_is_answered(
    serve: Serve, handler: FakeHandler
) -> None:
    handler.reply = Reply(text="Queued L-7f3a: sft llama3p1_8b")
    async with serve() as service:
        body = slash_command_body(
            "/train", "sft llama3p1_8b nodes=2 cluster=a4", trigger_id="1.2.abc"
        )
        answer = await post_signed(events_url(service), body)
    assert answer.status == 200
    assert answer.json() == {"text": "Queued L-7f3a: sft llama3p1_8b", "response_type": "ephemeral"}
    assert handler.seen == [
        Incoming(
            user_id="U0ALICE",
            channel_id="C0TRAIN",
            command="/train",
            text="sft llama3p1_8b nodes=2 cluster=a4",
            user_name="alice",
            team_id="T0STANDIN",
            trigger_id="1.2.abc",
        )
    ]


async def test_bad_or_stale_signature_is_refused(serve: Serve, handler: FakeHandler) -> None:
    body = slash_command_body("/jobs", "")
    async with serve() as service:
        bad = await post_signed(events_url(service), body, secret="not-the-secret")
        stale = await post_signed(events_url(service), body, timestamp=int(time.time()) - 301)
        unsigned_status = await _post_unsigned(events_url(service), body)
    assert (bad.status, stale.status, unsigned_status) == (401, 401, 401)
    assert handler.seen == []


async def _post_unsigned(url: str, body: str) -> int:
    async with aiohttp.ClientSession() as session, session.post(url, data=body) as response:
        return response.status


async def test_slow_handler_is_acked_in_time_and_answers_later(
    serve: Serve, handler: FakeHandler, standin: SlackStandin
) -> None:
    handler.release = asyncio.Event()
    handler.reply = Reply(text="Cluster a4: 4 nodes idle")
    async with serve() as service:  # the default 2 s budget
        answer = await post_signed(events_url(service), slash_command_body("/clusters", ""))
        assert answer.status == 200 and answer.elapsed_s < 3.0
        assert answer.json() == {"text": WORKING_TEXT, "response_type": "ephemeral"}
        handler.release.set()
        call = await standin.wait_for("chat.postEphemeral")
    assert call.params["channel"] == "C0TRAIN" and call.params["user"] == "U0ALICE"
    assert call.params["text"] == "Cluster a4: 4 nodes idle"


async def test_payload_in_command_text_is_not_lost(serve: Serve, handler: FakeHandler) -> None:
    async with serve() as service:
        body = slash_command_body("/train", "sft llama3p1_8b name=payload-test")
        assert "payload" in body
        answer = await post_signed(events_url(service), body)
    assert answer.status == 200
    assert [(i.command, i.text) for i in handler.seen] == [
        ("/train", "sft llama3p1_8b name=payload-test")
    ]


async def test_typed_entities_are_unescaped_and_echo_is_escaped(
    serve: Serve, handler: FakeHandler, standin: SlackStandin
) -> None:
    handler.answer = lambda incoming: Reply(text=f"Unknown key in `{escape(incoming.text)}`")
    async with serve() as service:
        body = slash_command_body("/train", "sft x name=&lt;!channel&gt;")
        answer = await post_signed(events_url(service), body)
    assert handler.seen[0].text == "sft x name=<!channel>"
    assert "<!channel>" not in answer.body and "&lt;!channel&gt;" in answer.json()["text"]


async def test_button_click_reaches_handler_and_reply_is_ephemeral(
    serve: Serve, handler: FakeHandler, standin: SlackStandin
) -> None:
    handler.reply = Reply(text="Cancelling job 4187…")
    async with serve() as service:
        body = block_action_body("trainbot_cancel", "L-7f3a", message_ts="1700000000.000009")
        answer = await post_signed(events_url(service), body)
        call = await standin.wait_for("chat.postEphemeral")
    assert answer.status == 200 and answer.body == ""
    (incoming,) = handler.seen
    assert (incoming.action_id, incoming.action_value) == ("trainbot_cancel", "L-7f3a")
    assert (incoming.user_id, incoming.channel_id) == ("U0ALICE", "C0TRAIN")
    assert incoming.thread_ts == "1700000000.000009"
    assert call.params["user"] == "U0ALICE" and call.params["text"] == "Cancelling job 4187…"


async def test_reply_goes_to_response_url_when_bot_is_not_in_channel(
    serve: Serve, handler: FakeHandler, standin: SlackStandin
) -> None:
    handler.reply = Reply(text="Logs for 4187")
    standin.fail_next("chat.postEphemeral", status=200, error="channel_not_found")
    async with serve() as service:
        body = block_action_body("trainbot_logs", "4187", response_url=standin.response_url())
        await post_signed(events_url(service), body)
        call = await standin.wait_for("response_url")
    assert call.params["text"] == "Logs for 4187"
    assert call.params["response_type"] == "ephemeral" and call.params["replace_original"] is False


async def test_error_reply_and_failing_handler_are_ephemeral(
    serve: Serve, handler: FakeHandler
) -> None:
    def answer(incoming: Incoming) -> Reply:
        if incoming.command == "/cancel":
            raise RuntimeError("boom")
        return Reply(text="Unknown cluster 'a5'. Known clusters: a3m, a4.", error=True)

    handler.answer = answer
    async with serve() as service:
        bad = await post_signed(events_url(service), slash_command_body("/train", "x cluster=a5"))
        boom = await post_signed(events_url(service), slash_command_body("/cancel", "42"))
        unknown = await post_signed(events_url(service), slash_command_body("/deploy", ""))
    assert bad.json()["text"].startswith(":warning: Unknown cluster 'a5'")
    assert boom.json()["text"].startswith(":warning: Something went wrong")
    assert "boom" not in boom.body
    assert all(a.json()["response_type"] == "ephemeral" for a in (bad, boom, unknown))
    assert "I don't know /deploy" in unknown.json()["text"]


async def test_file_reply_goes_to_a_dm(
    serve: Serve, handler: FakeHandler, standin: SlackStandin
) -> None:
    log = b"".join(b"step %d\n" % i for i in range(50_000))
    handler.reply = Reply(
        text="Log of job 4187 (50,000 lines)", file_name="4187.out", file_content=log
    )
    async with serve() as service:
        answer = await post_signed(events_url(service), slash_command_body("/logs", "4187"))
        complete = await standin.wait_for("files.completeUploadExternal")
    assert "I sent 4187.out to you in a direct message" in answer.json()["text"]
    assert complete.params["channel_id"] == "DU0ALICE"
    assert list(standin.uploads.values()) == [log]


async def test_events_are_acked_and_retries_dropped(
    serve: Serve, handler: FakeHandler, standin: SlackStandin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.slack.app")
    event = event_envelope(
        {
            "type": "app_mention",
            "user": "U0ALICE",
            "channel": "C0TRAIN",
            "text": "<@U0TRAINBOT> hi",
            "ts": "1700000000.000100",
        },
        event_id="Ev0001",
        event_time=int(time.time()),
    )
    body = json.dumps(event)
    async with serve() as service:
        first = await post_signed(events_url(service), body, content_type="application/json")
        retry = await post_signed(  # Slack signs a retry anew, with its own timestamp
            events_url(service),
            body,
            timestamp=int(time.time()) + 1,
            content_type="application/json",
            extra_headers={"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"},
        )
        await standin.wait_for("chat.postEphemeral")
        challenge = await post_signed(
            events_url(service),
            json.dumps({"type": "url_verification", "challenge": "c-123", "token": "t"}),
            content_type="application/json",
        )
    assert (first.status, retry.status) == (200, 200)
    assert "dropping a retried delivery of event Ev0001" in caplog.text
    assert len(standin.calls_to("chat.postEphemeral")) == 1
    assert "/train" in standin.calls_to("chat.postEphemeral")[0].params["text"]
    assert handler.seen == []
    assert challenge.json() == {"challenge": "c-123"}


async def test_healthz_and_metrics(serve: Serve) -> None:
    async def sick() -> tuple[bool, str]:
        return False, "redis: connection refused"

    async with serve() as service, aiohttp.ClientSession() as session:
        base = f"http://127.0.0.1:{service.http_port}"
        async with session.get(f"{base}/healthz") as response:
            assert (response.status, await response.text()) == (200, "ok")
        async with session.get(f"{base}/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert "trainbot_queue_length 3" in await response.text()

    def plain_metrics() -> str:
        return "trainbot_up 1\n"

    async with (
        serve(health=sick, metrics=plain_metrics) as service,
        aiohttp.ClientSession() as session,
    ):
        async with session.get(f"http://127.0.0.1:{service.http_port}/metrics") as response:
            assert await response.text() == "trainbot_up 1\n"
        async with session.get(f"http://127.0.0.1:{service.http_port}/healthz") as response:
            assert response.status == 503
            assert await response.text() == "redis: connection refused"


async def test_shutdown_finishes_answers_in_flight(
    serve: Serve, handler: FakeHandler, standin: SlackStandin
) -> None:
    handler.release = asyncio.Event()
    handler.reply = Reply(text="done at last")
    async with serve(ack_budget_s=0.1) as service:
        answer = await post_signed(events_url(service), slash_command_body("/jobs", ""))
        assert answer.json()["text"] == WORKING_TEXT
        asyncio.get_running_loop().call_later(0.2, handler.release.set)
    assert [c.params["text"] for c in standin.calls_to("chat.postEphemeral")] == ["done at last"]


async def test_shutdown_cancels_answers_that_take_too_long(
    serve: Serve, handler: FakeHandler, standin: SlackStandin
) -> None:
    handler.release = asyncio.Event()  # never set
    started = time.monotonic()
    async with serve(ack_budget_s=0.1, drain_timeout_s=0.3) as service:
        await post_signed(events_url(service), slash_command_body("/jobs", ""))
    assert time.monotonic() - started < 2.0
    assert standin.calls_to("chat.postEphemeral") == []


def test_params_from_settings_unwrap_secrets_and_hide_them() -> None:
    settings = SimpleNamespace(
        slack_bot_token=SecretStr("xoxb-1"),
        slack_signing_secret=SecretStr("s3cret"),
        slack_app_token=None,
        slack_api_url="http://127.0.0.1:9/api/",
        http_host="0.0.0.0",
        http_port=3001,
    )
    params = SlackParams.from_settings(settings, ack_budget_s=1.5)
    assert (params.bot_token, params.signing_secret, params.app_token) == ("xoxb-1", "s3cret", "")
    assert (params.api_url, params.http_port, params.ack_budget_s) == (
        settings.slack_api_url,
        3001,
        1.5,
    )
    assert "xoxb-1" not in repr(params) and "s3cret" not in repr(params)
    assert "mode=http" in repr(params)


async def test_http_mode_without_signing_secret_is_a_config_error(serve: Serve) -> None:
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        async with serve(signing_secret=""):
            pass


async def test_refused_bot_token_fails_at_start(serve: Serve) -> None:
    with pytest.raises(ConfigError, match="refused SLACK_BOT_TOKEN \\(invalid_auth\\)"):
        async with serve(bot_token="xoxb-revoked"):
            pass


async def test_file_that_cannot_be_sent_is_explained(
    serve: Serve, handler: FakeHandler, standin: SlackStandin
) -> None:
    handler.reply = Reply(text="Log of job 4187", file_name="4187.out", file_content=b"x\n")
    standin.fail_next("conversations.open", status=200, error="cannot_dm_bot")
    async with serve() as service:
        await post_signed(events_url(service), slash_command_body("/logs", "4187"))
        call = await standin.wait_for("chat.postEphemeral")
    assert call.params["text"] == ":warning: _I could not send you the file (cannot_dm_bot)._"
    assert standin.uploads == {}


async def test_the_app_joining_a_channel_posts_the_help_card_there(
    serve: Serve, handler: FakeHandler, standin: SlackStandin
) -> None:
    def joined(user: str, channel: str) -> str:
        event = {"type": "member_joined_channel", "user": user, "channel": channel}
        return json.dumps(event_envelope(event, event_time=int(time.time())))

    async with serve() as service:
        for body in (joined("U0ALICE", "C0OTHER"), joined(BOT_USER_ID, "C0TRAIN")):
            answer = await post_signed(events_url(service), body, content_type="application/json")
            assert answer.status == 200
        posted = await standin.wait_for("chat.postMessage")
    assert [c.params["channel"] for c in standin.calls_to("chat.postMessage")] == ["C0TRAIN"]
    blocks = posted.params["blocks"]
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks  # form or JSON body
    buttons = [e for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert [(b["action_id"], b["value"]) for b in buttons] == [
        (ACTION_HELP, value) for value in HELP_TOPICS
    ]
    assert "/train sft llama3p1_8b" in posted.params["text"]
    assert handler.seen == []  # the card needs nothing of the core: answered at the edge
