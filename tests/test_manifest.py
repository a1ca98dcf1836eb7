"""slack-manifest.yml against the code: every slash command, event, interactivity
setting and scope the code needs is in the manifest, and nothing more.

Commands, events and buttons are checked against the bolt app the service builds
(``bot.slack.http.run_slack``): each is sent to it as Slack sends it, signed, and must
reach the core (or, for a mention, be answered), and what the core knows that the
manifest lacks must not be handled. The slash commands are the registry's
(commands.registry), and docs/operations.md lists them and the scopes.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.slack.http import SlackService, run_slack
from bot.text import actions
from bot.text.front import Incoming, Reply
from commands.dispatch import COMMANDS as PARSED_COMMANDS
from commands.registry import SLASH_COMMANDS, SlashCommand
from support.slack_requests import (
    block_action_payload,
    event_envelope,
    post_signed,
    slash_command_fields,
)
from support.slack_standin import SlackStandin
from support.workspace import BOT_USER_ID
from tests.bot.conftest import standin_params

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
    "views_open": set(),
    "views_update": set(),
    "auth_test": set(),
    "apps_connections_open": set(),  # the app-level token's connections:write
}
NOT_WEB_API = {"aclose", "is_connected"}  # the clients' own methods, not Slack's
EVENT_SCOPES = {
    "app_mention": {"app_mentions:read"},
    "app_home_opened": set(),
    "member_joined_channel": {"channels:read", "groups:read"},
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
    for path in (ROOT / "bot").rglob("*.py"):
        found |= set(re.findall(r"\bclient\.([a-z]+_[A-Za-z0-9_]+)\(", path.read_text()))
    return found


@dataclass
class Served:
    """The service's Slack app on HTTP, a core that records what reaches it, and the stand-in."""

    service: SlackService
    standin: SlackStandin
    reached: list[Incoming] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.service.http_port}/slack/events"

    async def send(self, body: str, content_type: str) -> bool:
        """Send a signed request; whether it reached the core or made the app answer in Slack."""
        before = self._answers()
        answer = await post_signed(self.url, body, content_type=content_type)
        if answer.status == 404:  # bolt: no listener matched
            return False
        assert answer.status == 200, answer.body
        if "I don't know" in answer.body:  # the catch-all for commands the app does not handle
            return False
        for _ in range(20):  # events and clicks are acknowledged first, handled after
            now = self._answers()
            if now != before:
                return True
            await asyncio.sleep(0.025)
        return False

    def _answers(self) -> tuple[int, int, int]:
        """What reached the core, and what the app said in Slack on its own."""
        calls = self.standin.calls_to
        return len(self.reached), len(calls("chat.postEphemeral")), len(calls("chat.postMessage"))

    async def command(self, command: str) -> bool:
        form = slash_command_fields(command, "")
        return await self.send(urllib.parse.urlencode(form), "application/x-www-form-urlencoded")

    async def event(self, kind: str) -> bool:
        envelope = event_envelope(
            {
                "type": kind,
                # a join is answered only when it is the app's own
                "user": BOT_USER_ID if kind == "member_joined_channel" else "U0ALICE",
                "channel": "C0TRAIN",
                "tab": "home",
                "subteam_id": "S0GROUP",
                "text": "<@U0TRAINBOT> hi",
            }
        )
        return await self.send(json.dumps(envelope), "application/json")

    async def click(self, action_id: str) -> bool:
        body = urllib.parse.urlencode({"payload": json.dumps(block_action_payload(action_id, "x"))})
        return await self.send(body, "application/x-www-form-urlencoded")


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    standin = SlackStandin()
    await standin.start()
    reached: list[Incoming] = []

    async def core(incoming: Incoming) -> Reply:
        reached.append(incoming)
        return Reply(text="ok")

    async def healthy() -> tuple[bool, str]:
        return True, "ok"

    try:
        async with run_slack(standin_params(standin), core, health=healthy, metrics=str) as svc:
            yield Served(svc, standin, reached)
    finally:
        await standin.close()


def manifest_events(manifest: dict[str, Any]) -> list[str]:
    return list(manifest["settings"]["event_subscriptions"]["bot_events"])


def registry_disagreements(
    manifest: dict[str, Any], registry: tuple[SlashCommand, ...] = SLASH_COMMANDS
) -> list[str]:
    """How the manifest's slash commands differ from the registry's (commands.registry):
    a command in one only, or a description or usage hint that is not the same."""
    listed = {c["command"]: c for c in manifest["features"]["slash_commands"]}
    known = {c.name: c for c in registry}
    where = "slack-manifest.yml"
    found = [f"{name}: in {where}, not in the registry" for name in listed.keys() - known]
    found += [f"{name}: in the registry, not in {where}" for name in known.keys() - listed]
    for name in sorted(listed.keys() & known.keys()):
        wanted = {"description": known[name].description, "usage_hint": known[name].usage_hint}
        for key, want in wanted.items():
            if (got := listed[name].get(key)) != want:
                found.append(f"{name}: {key} is {got!r} in {where}, {want!r} in the registry")
    order = [name for name in listed if name in known]
    if order != [c.name for c in registry if c.name in listed]:
        found.append(f"the order differs: {where} {order}, the registry {list(known)}")
    return sorted(found)


def test_the_manifests_commands_are_the_registrys(manifest: dict[str, Any]) -> None:
    assert registry_disagreements(manifest) == []


def test_a_manifest_that_strays_from_the_registry_is_told_how(manifest: dict[str, Any]) -> None:
    strayed = copy.deepcopy(manifest)
    commands = strayed["features"]["slash_commands"]
    commands[0]["description"] = "Train"
    commands.append({"command": "/extra", "description": "x", "usage_hint": ""})
    del commands[1]  # /attach
    assert registry_disagreements(strayed) == [
        "/attach: in the registry, not in slack-manifest.yml",
        "/extra: in slack-manifest.yml, not in the registry",
        "/train: description is 'Train' in slack-manifest.yml, "
        "'Launch a NeMo or NeMo-RL training run' in the registry",
    ]


async def test_every_manifest_command_reaches_the_core_and_no_other(
    manifest: dict[str, Any], served: Served
) -> None:
    listed = [c["command"] for c in manifest["features"]["slash_commands"]]
    for command in manifest["features"]["slash_commands"]:
        assert command["description"] and not command["should_escape"]
    handled = [c for c in sorted({*listed, *PARSED_COMMANDS, "/bogus"}) if await served.command(c)]
    assert handled == sorted(listed)
    assert [i.command for i in served.reached] == handled
    assert sorted(listed) == sorted(PARSED_COMMANDS)  # the core parses each, and no other


async def test_every_manifest_event_is_handled(manifest: dict[str, Any], served: Served) -> None:
    events = manifest_events(manifest)
    unhandled = [kind for kind in events if not await served.event(kind)]
    assert not unhandled, f"the manifest subscribes to events the app ignores: {unhandled}"
    # and the code handles no event the manifest does not subscribe to (it would never come)
    others = [kind for kind in EVENT_SCOPES if kind not in events and await served.event(kind)]
    assert not others, f"subscribe to these in slack-manifest.yml: {others}"
    assert not await served.event("message")  # the check tells handled from ignored
    assert manifest["features"]["app_home"]["home_tab_enabled"] == ("app_home_opened" in events)


async def test_every_button_reaches_the_core(manifest: dict[str, Any], served: Served) -> None:
    assert manifest["settings"]["interactivity"]["is_enabled"]
    buttons = [
        value
        for name, value in vars(actions).items()
        if name.startswith("ACTION_") and name != "ACTION_PREFIX"
    ]
    assert buttons
    unhandled = [action for action in buttons if not await served.click(action)]
    assert not unhandled
    assert not await served.click("elsewhere_button")


def test_every_method_called_is_known_and_its_scopes_granted(manifest: dict[str, Any]) -> None:
    called = methods_called()
    unknown = called - set(METHOD_SCOPES) - NOT_WEB_API
    assert not unknown, f"add these Web API methods and their scopes to METHOD_SCOPES: {unknown}"
    needed = {"commands"}  # slash commands
    for method in called & set(METHOD_SCOPES):
        needed |= METHOD_SCOPES[method]
    for event in manifest_events(manifest):
        needed |= EVENT_SCOPES[event]
    assert sorted(manifest["oauth_config"]["scopes"]["bot"]) == sorted(needed)


def test_the_docs_list_the_manifest_scopes(manifest: dict[str, Any]) -> None:
    page = (ROOT / "docs" / "operations.md").read_text()
    section = page[page.index("\n## Slack app\n") :]
    section = section[: section.index("\n## ", 1)]
    listed = re.search(r"the bot scopes \(`([^`]+)`", section)
    assert listed is not None, "docs/operations.md's Slack app section lists the bot scopes"
    assert sorted(listed[1].split()) == sorted(manifest["oauth_config"]["scopes"]["bot"])


def test_the_docs_list_the_registrys_commands() -> None:
    page = (ROOT / "docs" / "operations.md").read_text()
    section = page[page.index("\n## Slack app\n") :]
    listed = re.search(r"It declares the (\w+) slash\s+commands \(([^)]+)\)", section)
    assert listed is not None, "docs/operations.md's Slack app section lists the slash commands"
    assert re.findall(r"`(/\w+)`", listed[2]) == [c.name for c in SLASH_COMMANDS]
    count = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    count += ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen"]
    assert count.index(listed[1]) == len(SLASH_COMMANDS), listed[1]


def test_interactivity_and_socket_mode(manifest: dict[str, Any]) -> None:
    settings = manifest["settings"]
    assert settings["interactivity"]["is_enabled"]  # buttons: Cancel, Retry, Approve, ...
    assert settings["socket_mode_enabled"]  # the default; the file says how to use HTTP
    assert "request_url" not in settings["event_subscriptions"]
    assert manifest["features"]["bot_user"]["display_name"] == "trainbot"
