"""The Web API stand-in itself: token checks, the methods tests lean on, call records."""

from __future__ import annotations

from typing import Any

import aiohttp

from support.slack_requests import sign
from support.slack_standin import SlackStandin
from support.workspace import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET


async def _call(
    standin: SlackStandin, method: str, token: str | None = BOT_TOKEN, **data: Any
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(standin.api_url + method, data=data, headers=headers) as response,
    ):
        answer: dict[str, Any] = await response.json()
        return answer


async def test_bearer_token_is_checked_and_never_recorded(standin: SlackStandin) -> None:
    assert (await _call(standin, "auth.test", token=None))["error"] == "not_authed"
    assert (await _call(standin, "auth.test", token="xoxb-wrong"))["error"] == "invalid_auth"
    assert (await _call(standin, "auth.test"))["user_id"] == "U0TRAINBOT"
    assert (await _call(standin, "apps.connections.open", token=BOT_TOKEN))["ok"] is False
    opened = await _call(standin, "apps.connections.open", token=APP_TOKEN)
    assert opened["url"] == f"ws://127.0.0.1:{standin.port}/socket"
    assert (await _call(standin, "no.such.method"))["error"] == "unknown_method"
    assert [c.error for c in standin.calls[:3]] == ["not_authed", "invalid_auth", ""]
    assert [c.auth for c in standin.calls] == ["", "other", "bot", "bot", "app", "bot"]
    assert all(BOT_TOKEN not in repr(c) and APP_TOKEN not in repr(c) for c in standin.calls)


def test_sign_matches_slack_example() -> None:
    # The worked example in Slack's "Verifying requests from Slack" guide.
    secret = "8f742231b10e8888abcd99yyyzzz85a5"
    body = (
        "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&"
        "channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&"
        "command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2F"
        "commands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&"
        "trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
    )
    assert sign(secret, "1531420618", body) == (
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    )
    assert SIGNING_SECRET


async def test_conversations_and_refused_channels(standin: SlackStandin) -> None:
    standin.channels["C0OUT"] = {"is_member": False}
    standin.channels["G0GONE"] = {"error": "channel_not_found"}
    standin.refuse_posts("C0OUT")
    info = await _call(standin, "conversations.info", channel="C0OUT")
    assert info["channel"]["is_member"] is False and info["channel"]["is_private"] is False
    assert (await _call(standin, "conversations.info", channel="C0TRAIN"))["channel"]["is_member"]
    assert (await _call(standin, "conversations.info", channel="G0GONE"))["error"] == (
        "channel_not_found"
    )
    refused = await _call(standin, "chat.postMessage", channel="C0OUT", text="hi")
    assert refused == {"ok": False, "error": "not_in_channel"}
    assert (await _call(standin, "chat.postMessage", channel="C0TRAIN", text="hi"))["ok"]
    standin.accept_posts("C0OUT")
    assert (await _call(standin, "chat.postMessage", channel="C0OUT", text="hi"))["ok"]
    assert [c.error for c in standin.calls_to("chat.postMessage", ok_only=False)] == [
        "not_in_channel",
        "",
        "",
    ]
