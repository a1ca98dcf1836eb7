"""Requests as Slack sends them to an app: slash commands, button clicks and event
envelopes, signed with the app's signing secret (Slack's v0 scheme), and a client that
posts them to an app's HTTP endpoint."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any

import aiohttp

from support.workspace import APP_ID, SIGNING_SECRET, TEAM_ID


def slash_command_fields(command: str, text: str, **fields: str) -> dict[str, str]:
    base = {
        "token": "legacy-verification-token",
        "team_id": TEAM_ID,
        "team_domain": "standin",
        "channel_id": "C0TRAIN",
        "channel_name": "training",
        "user_id": "U0ALICE",
        "user_name": "alice",
        "command": command,
        "text": text,
        "api_app_id": APP_ID,
        "is_enterprise_install": "false",
        "response_url": "https://hooks.slack.com/commands/T0STANDIN/1/abc",
        "trigger_id": next_trigger_id(),
    }
    return {**base, **fields}


_TRIGGERS = itertools.count(1)


def next_trigger_id() -> str:
    """A fresh trigger id, as Slack gives every slash command and button press."""
    return f"{int(time.time())}.{next(_TRIGGERS)}.standin"


def block_action_payload(
    action_id: str,
    value: str,
    *,
    user_id: str = "U0ALICE",
    channel_id: str = "C0TRAIN",
    message_ts: str = "1700000000.000001",
    response_url: str = "https://hooks.slack.com/actions/1",
) -> dict[str, Any]:
    return {
        "type": "block_actions",
        "api_app_id": APP_ID,
        "trigger_id": next_trigger_id(),
        "team": {"id": TEAM_ID, "domain": "standin"},
        "user": {"id": user_id, "username": "alice", "name": "alice", "team_id": TEAM_ID},
        "channel": {"id": channel_id, "name": "training"},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel_id},
        "message": {"ts": message_ts, "text": "parent"},
        "response_url": response_url,
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": "b1",
                "value": value,
                "action_ts": "1700000001.000001",
            }
        ],
    }


def event_envelope(
    event: dict[str, Any], *, event_id: str = "", event_time: int = 1
) -> dict[str, Any]:
    """An Events API callback around ``event``, as Slack posts it (a fresh event id)."""
    return {
        "type": "event_callback",
        "team_id": TEAM_ID,
        "api_app_id": APP_ID,
        "event_id": event_id or "Ev" + uuid.uuid4().hex[:10],
        "event_time": event_time,
        "event": event,
    }


def slash_command_body(command: str, text: str, **fields: str) -> str:
    return urllib.parse.urlencode(slash_command_fields(command, text, **fields))


def block_action_body(action_id: str, value: str, **fields: str) -> str:
    payload = block_action_payload(action_id, value, **fields)
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


def shortcut_body(callback_id: str, *, user_id: str = "U0ALICE") -> str:
    """A global shortcut used, as Slack posts it."""
    payload = {
        "type": "shortcut",
        "callback_id": callback_id,
        "trigger_id": next_trigger_id(),
        "action_ts": "1700000001.000001",
        "team": {"id": TEAM_ID, "domain": "standin"},
        "user": {"id": user_id, "username": "alice", "team_id": TEAM_ID},
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


def view_submission_body(
    callback_id: str, block_id: str, value: str, *, user_id: str = "U0ALICE"
) -> str:
    """A modal submitted, as Slack posts it: one text input (action id ``text``)."""
    payload = {
        "type": "view_submission",
        "api_app_id": APP_ID,
        "trigger_id": next_trigger_id(),
        "team": {"id": TEAM_ID, "domain": "standin"},
        "user": {"id": user_id, "username": "alice", "name": "alice", "team_id": TEAM_ID},
        "view": {
            "id": "V0EDIT",
            "type": "modal",
            "callback_id": callback_id,
            "state": {"values": {block_id: {"text": {"type": "plain_text_input", "value": value}}}},
        },
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


def sign(secret: str, timestamp: str, body: str) -> str:
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256)
    return "v0=" + digest.hexdigest()


def signed_headers(
    body: str,
    *,
    secret: str = SIGNING_SECRET,
    timestamp: int | None = None,
    content_type: str = "application/x-www-form-urlencoded",
) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    return {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": sign(secret, ts, body),
    }


@dataclass
class SlackAnswer:
    status: int
    body: str
    elapsed_s: float

    def json(self) -> Any:
        return json.loads(self.body)


async def post_signed(
    url: str,
    body: str,
    *,
    secret: str = SIGNING_SECRET,
    timestamp: int | None = None,
    content_type: str = "application/x-www-form-urlencoded",
    extra_headers: dict[str, str] | None = None,
) -> SlackAnswer:
    """POST ``body`` to a running app as Slack would, signed with ``secret``."""
    headers = {
        **signed_headers(body, secret=secret, timestamp=timestamp, content_type=content_type),
        **(extra_headers or {}),
    }
    started = time.monotonic()
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body.encode(), headers=headers) as r,
    ):
        text = await r.text()
    return SlackAnswer(r.status, text, time.monotonic() - started)
