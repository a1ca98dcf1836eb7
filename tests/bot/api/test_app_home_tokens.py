"""API tokens made and revoked in the App Home, through signed clicks as Slack sends them:
the token is shown once, in a modal, and works; Revoke ends it."""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import pytest

from bot.text.actions import ACTION_TOKEN_CREATE, ACTION_TOKEN_REVOKE
from support.slack_requests import block_action_body, post_signed
from support.slack_standin import SlackStandin
from tests.bot.api.test_api import web_with_api
from tests.bot.botkit import match_in

pytestmark = pytest.mark.devcluster
TOKEN_RE = re.compile(r"tbt_[A-Za-z0-9_-]{43}")


async def jobs_status(base: str, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{base}/api/v1/launches", headers=headers) as response,
    ):
        return response.status


async def test_a_token_made_in_the_app_home_is_shown_once_and_revoked_there(
    standin: SlackStandin,
) -> None:
    async with web_with_api(standin, worker=True) as (web, _slack, base):
        events = f"{base}/slack/events"
        clicked = await post_signed(events, block_action_body(ACTION_TOKEN_CREATE, "read,launch"))
        assert clicked.status == 200
        opened = await standin.wait_for("views.open", timeout_s=10)
        view = opened.params["view"]
        view = view if isinstance(view, dict) else json.loads(view)
        assert view["type"] == "modal" and view["title"]["text"] == "Your API token"
        token = match_in(TOKEN_RE, json.dumps(view["blocks"]))
        (record,) = await web.store.tokens.tokens_of("U0ALICE")
        assert record.scopes == ("read", "launch") and record.created_by == "app-home"
        assert await jobs_status(base, token) == 200

        published = await standin.wait_for("views.publish", timeout_s=30)
        home = json.dumps(published.params["view"])
        assert record.id in home and token not in home  # listed, never shown again
        assert not any(token in json.dumps(c.params) for c in standin.calls_to("chat.postMessage"))
        assert not any(
            token in json.dumps(c.params) for c in standin.calls_to("chat.postEphemeral")
        )

        theirs = await post_signed(
            events, block_action_body(ACTION_TOKEN_REVOKE, record.id, user_id="U0BOB")
        )
        assert theirs.status == 200
        await asyncio.sleep(0.3)
        assert await jobs_status(base, token) == 200  # Bob cannot revoke Alice's token

        await post_signed(events, block_action_body(ACTION_TOKEN_REVOKE, record.id))

        async def revoked() -> bool:
            return await web.store.tokens.tokens_of("U0ALICE") == []

        for _ in range(50):
            if await revoked():
                break
            await asyncio.sleep(0.1)
        assert await jobs_status(base, token) == 401
