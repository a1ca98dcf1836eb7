"""Requests from other Slack workspaces are refused. Through the signed HTTP front end
(tests.bot.security.kit)."""

from __future__ import annotations

import asyncio
import json
import urllib.parse

import pytest

from bot.lifecycle.launch import Phase
from bot.text.actions import ACTION_CANCEL
from support.slack_requests import block_action_payload, post_signed
from support.slack_standin import SlackStandin
from tests.bot.security.kit import secure_bot, seed

pytestmark = pytest.mark.devcluster


# -- workspaces ----------------------------------------------------------------


async def test_requests_from_other_workspaces_are_refused(standin: SlackStandin) -> None:
    async with secure_bot(standin) as s:
        launch = await seed(s.bot, phase=Phase.QUEUED)
        other = await s.command("/jobs", "", team_id="T0ELSEWHERE")
        own = await s.command("/jobs", "")
        payload = block_action_payload(ACTION_CANCEL, launch.id)
        payload["team"]["id"] = payload["user"]["team_id"] = "T0ELSEWHERE"
        body = urllib.parse.urlencode({"payload": json.dumps(payload)})
        click = await post_signed(s.url, body)
        await asyncio.sleep(0.5)
        stored = await s.bot.store.launches.get(launch.id)
    assert "serves another Slack workspace" in other
    assert launch.id in own
    assert click.status == 200 and stored is not None and stored.phase == Phase.QUEUED
