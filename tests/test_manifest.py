"""slack-manifest.yml against the code: every slash command, event, interactivity
setting and scope the code needs is in the manifest, and nothing more."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot import slack_app

ROOT = Path(__file__).resolve().parents[1]
# The Web API methods trainbot calls (slack_sdk's snake_case names) and the bot scopes
# each needs (api.slack.com/methods). An empty set: no scope beyond a valid token.
METHOD_SCOPES: dict[str, set[str]] = {
    "chat_postMessage": {"chat:write"},
    "chat_update": {"chat:write"},
    "chat_postEphemeral": {"chat:write"},
    "chat_getPermalink": set(),
    "files_upload_v2": {"files:write"},  # files.getUploadURLExternal + completeUploadExternal
    "conversations_open": {"im:write"},
    "conversations_info": {"channels:read", "groups:read"},
    "usergroups_users_list": {"usergroups:read"},
    "users_info": {"users:read", "users:read.email"},  # the profile's email: identity.from_email
    "views_publish": set(),
    "auth_test": set(),
    "apps_connections_open": set(),  # the app-level token's connections:write
}
NOT_WEB_API = {"aclose", "is_connected"}  # the clients' own methods, not Slack's
EVENT_SCOPES = {
    "app_mention": {"app_mentions:read"},
    "app_home_opened": set(),
    "subteam_members_changed": {"usergroups:read"},
    "subteam_updated": {"usergroups:read"},
}


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "slack-manifest.yml").read_text())
    return data


def methods_called() -> set[str]:
    """Every ``client.<method>(`` in the bot's code."""
    found: set[str] = set()
    for path in (ROOT / "bot").glob("*.py"):
        found |= set(re.findall(r"\bclient\.([a-z]+_[A-Za-z0-9_]+)\(", path.read_text()))
    return found


def test_slash_commands_are_exactly_the_registered_ones(manifest: dict[str, Any]) -> None:
    listed = [c["command"] for c in manifest["features"]["slash_commands"]]
    assert sorted(listed) == sorted(slack_app.COMMANDS)
    for command in manifest["features"]["slash_commands"]:
        assert command["description"] and not command["should_escape"]


def test_events_are_exactly_the_handled_ones(manifest: dict[str, Any]) -> None:
    events = manifest["settings"]["event_subscriptions"]["bot_events"]
    assert sorted(events) == sorted(slack_app.EVENTS)
    assert manifest["features"]["app_home"]["home_tab_enabled"] == (
        "app_home_opened" in slack_app.EVENTS
    )


def test_every_method_called_is_known_and_its_scopes_granted(manifest: dict[str, Any]) -> None:
    called = methods_called()
    unknown = called - set(METHOD_SCOPES) - NOT_WEB_API
    assert not unknown, f"add these Web API methods and their scopes to METHOD_SCOPES: {unknown}"
    needed = {"commands"}  # slash commands
    for method in called & set(METHOD_SCOPES):
        needed |= METHOD_SCOPES[method]
    for event in slack_app.EVENTS:
        needed |= EVENT_SCOPES[event]
    assert sorted(manifest["oauth_config"]["scopes"]["bot"]) == sorted(needed)


def test_interactivity_and_socket_mode(manifest: dict[str, Any]) -> None:
    settings = manifest["settings"]
    assert settings["interactivity"]["is_enabled"]  # buttons: Cancel, Retry, Approve, ...
    assert settings["socket_mode_enabled"]  # the default; the file says how to use HTTP
    assert "request_url" not in settings["event_subscriptions"]
    assert manifest["features"]["bot_user"]["display_name"] == "trainbot"
