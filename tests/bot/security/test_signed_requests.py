"""Requests that are not what they claim: replays, Redis down, unsigned or malformed. Through
the signed HTTP front end (tests.bot.security.kit)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
import urllib.parse

import aiohttp
import pytest
import redis.asyncio as aioredis

from bot.lifecycle.launch import Phase
from bot.slack.http import SlackParams, run_slack
from bot.text.actions import ACTION_CANCEL
from support.slack_requests import (
    block_action_payload,
    event_envelope,
    post_signed,
    slash_command_fields,
)
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN, SIGNING_SECRET
from tests.bot.security.kit import new_trigger, secure_bot, seed

pytestmark = pytest.mark.devcluster


# -- requests that are not what they claim -------------------------------------


async def test_a_replayed_signed_train_or_click_acts_once_across_processes(
    standin: SlackStandin,
) -> None:
    form = slash_command_fields("/train", "sft llama3p1_8b cluster=a4", trigger_id=new_trigger())
    train = urllib.parse.urlencode(form)
    ts = int(time.time())
    async with secure_bot(standin) as s:
        first = await post_signed(s.url, train, timestamp=ts)
        again = await post_signed(s.url, train, timestamp=ts)  # the same request, byte for byte
        launch_id = str(first.json()["text"]).split()[1].rstrip(":")
        payload = block_action_payload(ACTION_CANCEL, launch_id)
        payload["trigger_id"] = new_trigger()
        cancel = urllib.parse.urlencode({"payload": json.dumps(payload)})
        clicked = await post_signed(s.url, cancel, timestamp=ts)
        answered = await s._next_ephemeral("U0ALICE", 0)
        clicked_again = await post_signed(s.url, cancel, timestamp=ts)
        # a second bot process (its own HTTP listener) shares the record in Redis
        params = SlackParams(
            bot_token=BOT_TOKEN,
            signing_secret=SIGNING_SECRET,
            api_url=standin.api_url,
            http_port=0,
        )
        async with run_slack(
            params,
            s.bot.core,
            health=s.bot.healthy,
            metrics=s.bot.metrics,
            replay_guard=s.bot.store.marks.first_seen,
        ) as other:
            elsewhere = f"http://127.0.0.1:{other.http_port}/slack/events"
            replayed = [await post_signed(elsewhere, b, timestamp=ts) for b in (train, cancel)]
            await asyncio.sleep(0.5)  # time for an answer a replayed click would get
        stored = await s.bot.store.launches.get(launch_id)
        answers = s._ephemerals("U0ALICE")
    assert first.json()["text"].startswith("Queued")
    assert clicked.status == 200 and "Cancelled" in answered, answered
    dropped = [again, clicked_again, *replayed]
    assert [(a.status, a.body) for a in dropped] == [(200, "")] * 4
    assert answers == [answered]  # the click acted once: one answer
    assert stored is not None and stored.outcome == "CANCELLED"


CLOSED_REDIS = "redis://127.0.0.1:1/0"  # nothing listens there


async def test_signed_requests_while_redis_is_down_get_a_clear_answer_not_a_500(
    standin: SlackStandin, caplog: pytest.LogCaptureFixture
) -> None:
    """The replay guard cannot ask Redis: the request is refused (a replay must not slip
    through), a slash command with the words the commands use, anything else with 503."""
    caplog.set_level(logging.INFO)
    group_event = event_envelope({"type": "subteam_members_changed", "subteam_id": "S0ADMINS"})
    async with secure_bot(standin) as s:
        launch = await seed(s.bot, phase=Phase.QUEUED)
        up = s.bot.store.redis
        s.bot.store.redis = aioredis.from_url(CLOSED_REDIS, decode_responses=True)  # Redis goes
        try:
            form = slash_command_fields(
                "/train", "sft llama3p1_8b cluster=a4", trigger_id=new_trigger()
            )
            command = await post_signed(s.url, urllib.parse.urlencode(form))
            payload = block_action_payload(ACTION_CANCEL, launch.id)
            click = await post_signed(
                s.url, urllib.parse.urlencode({"payload": json.dumps(payload)})
            )
            event = await post_signed(
                s.url, json.dumps(group_event), content_type="application/json"
            )
        finally:
            await s.bot.store.redis.aclose()
            s.bot.store.redis = up
        stored = await s.bot.store.launches.get(launch.id)
        active = sum(await s.bot.store.budgets.active_counts("U0ALICE"))
    assert command.status == 200, command.body
    said = str(command.json()["text"])
    assert said.startswith(":warning: That did not work: Redis is unreachable"), said
    assert (click.status, event.status) == (503, 503)
    assert stored is not None and stored.phase == Phase.QUEUED and active == 1
    served = [
        r
        for r in caplog.records
        if r.name.startswith(("aiohttp", "bot.slack.http", "bot.slack.signed"))
    ]
    assert not [r for r in served if r.exc_info or r.levelno >= logging.ERROR], served


# body, content type, signed, header overrides -> status
MALFORMED = [
    ("payload=notjson", "application/x-www-form-urlencoded", False, {}, 401),
    ("payload=notjson", "application/x-www-form-urlencoded", True, {}, 400),
    ("payload=%5B1%2C2%5D", "application/x-www-form-urlencoded", True, {}, 400),
    ("{not json", "application/json", True, {}, 400),
    ("[1, 2]", "application/json", True, {}, 400),
    ("{not json", "application/json", False, {}, 401),
    ("command=/jobs", "application/x-www-form-urlencoded", False, {"ts": "abc"}, 401),
    ("notaform", "application/x-www-form-urlencoded", True, {}, 400),
]


@pytest.mark.parametrize(("body", "content_type", "signed", "headers", "status"), MALFORMED)
async def test_unsigned_or_malformed_requests_get_4xx_without_a_traceback(
    standin: SlackStandin,
    caplog: pytest.LogCaptureFixture,
    body: str,
    content_type: str,
    signed: bool,
    headers: dict[str, str],
    status: int,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with secure_bot(standin) as s:
        if signed:
            answer = await post_signed(s.url, body, content_type=content_type)
            got = answer.status
        else:
            sent = {"Content-Type": content_type}
            if "ts" in headers:
                sent |= {"X-Slack-Request-Timestamp": headers["ts"], "X-Slack-Signature": "v0=00"}
            async with (
                aiohttp.ClientSession() as session,
                session.post(s.url, data=body.encode(), headers=sent) as response,
            ):
                got = response.status
    assert got == status
    assert "Traceback" not in caplog.text


async def test_non_utf8_body_is_400(standin: SlackStandin) -> None:
    """A body that is not UTF-8, correctly signed (over its bytes, as Slack signs): 400,
    saying why; nothing reaches bolt. Unsigned, the same body is refused too."""
    body = b"command=%2Ftrain&text=\xff\xfe payload"
    ts = str(int(time.time()))
    digest = hmac.new(SIGNING_SECRET.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256)
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": "v0=" + digest.hexdigest(),
    }
    async with secure_bot(standin) as s, aiohttp.ClientSession() as session:
        async with session.post(s.url, data=body, headers=headers) as response:
            signed = (response.status, await response.text())
        async with session.post(s.url, data=b"\xff\xfe payload") as response:
            unsigned = response.status
    assert signed == (400, "malformed request: body is not UTF-8"), signed
    assert unsigned in (400, 401)
