"""The command registry against what is derived from it: each command has a parser, a
help topic whose usage starts with its name, and the Slack app listens to exactly those
(slack-manifest.yml against the registry: tests/test_manifest.py)."""

from __future__ import annotations

from bot.runtime.client import API_COMMANDS
from bot.slack.app import COMMANDS as SLACK_COMMANDS
from bot.slack.app import MENTION_HINT
from commands.dispatch import _PARSERS, COMMANDS
from commands.help import USAGE
from commands.registry import COMMAND_NAMES, SLASH_COMMANDS


def test_names_are_unique_slash_words() -> None:
    assert len(set(COMMAND_NAMES)) == len(COMMAND_NAMES)
    for command in SLASH_COMMANDS:
        assert command.name.startswith("/") and command.name[1:].isalpha(), command
        assert command.description and command.usage_hint, command


def test_each_command_has_a_parser_and_each_parser_a_command() -> None:
    assert set(_PARSERS) == set(COMMAND_NAMES)
    assert list(COMMANDS) == list(COMMAND_NAMES)


def test_each_command_has_help_that_starts_with_its_name() -> None:
    for name in COMMAND_NAMES:
        topic = name.removeprefix("/")
        assert topic in USAGE, f"commands/help.py has no usage for {name}"
        assert USAGE[topic].startswith(f"{name} "), USAGE[topic]


def test_the_slack_app_listens_to_the_registrys_commands() -> None:
    assert SLACK_COMMANDS == COMMAND_NAMES
    assert all(f"`{name}`" in MENTION_HINT for name in COMMAND_NAMES)


def test_the_api_clis_commands_are_slash_commands_of_the_registry() -> None:
    assert {f"/{name}" for name in API_COMMANDS} <= set(COMMAND_NAMES)
