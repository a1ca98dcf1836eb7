"""The same bot over Socket Mode: apps.connections.open and the websocket at the stand-in."""

from __future__ import annotations

import asyncio

import pytest

from bot.slack.app import WORKING_TEXT
from bot.text.front import Reply
from cluster.errors import ConfigError
from support.slack_standin import SlackStandin
from support.workspace import APP_TOKEN
from tests.bot.conftest import FakeHandler, Serve


async def test_slash_command_over_socket_mode(
    serve: Serve, handler: FakeHandler, standin: SlackStandin
) -> None:
    handler.reply = Reply(text="Queued L-1: sft llama3p1_8b")
    async with serve(socket_mode=True) as service:
        assert service.mode == "socket"
        ack = await standin.socket_slash_command("/train", "sft llama3p1_8b name=payload-test")
    assert ack["payload"] == {"text": "Queued L-1: sft llama3p1_8b", "response_type": "ephemeral"}
    assert ack["envelope_id"].startswith("env-")
    (incoming,) = handler.seen
    assert (incoming.command, incoming.text) == ("/train", "sft llama3p1_8b name=payload-test")
    (opened,) = standin.calls_to("apps.connections.open")
    assert APP_TOKEN not in repr(opened)


async def test_slow_handler_over_socket_mode(
    serve: Serve, handler: FakeHandler, standin: SlackStandin
) -> None:
    handler.release = asyncio.Event()
    handler.reply = Reply(text="3 active launches")
    async with serve(socket_mode=True, ack_budget_s=0.2) as service:
        assert service.mode == "socket"
        ack = await standin.socket_slash_command("/jobs", "")
        assert ack["payload"]["text"] == WORKING_TEXT
        handler.release.set()
        call = await standin.wait_for("chat.postEphemeral")
    assert call.params["text"] == "3 active launches"


async def test_button_over_socket_mode(
    serve: Serve, handler: FakeHandler, standin: SlackStandin
) -> None:
    handler.reply = Reply(text="Retrying L-1")
    async with serve(socket_mode=True):
        ack = await standin.socket_block_action("trainbot_retry", "L-1")
        call = await standin.wait_for("chat.postEphemeral")
    assert "payload" not in ack or not ack["payload"]
    assert handler.seen[0].action_id == "trainbot_retry"
    assert call.params["text"] == "Retrying L-1"


async def test_refused_app_token_fails_at_start(serve: Serve, standin: SlackStandin) -> None:
    with pytest.raises(ConfigError, match="refused SLACK_APP_TOKEN \\(invalid_auth\\)"):
        async with serve(socket_mode=True, app_token="xapp-revoked"):
            pass
