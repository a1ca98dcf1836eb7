"""The command line: --help is true, and bad set-ups get a message saying what to fix."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from bot.runtime.assembly import role_parts
from bot.runtime.cli import build_parser, main
from bot.runtime.serve import check_slack_settings
from bot.slack.http import SlackParams
from cluster.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[3] / "trainbot.example.yaml"


def test_help_lists_the_interface_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("serve", "console", "demo", "doctor"):
        assert command in out
    assert {a.dest for a in build_parser()._actions} >= {"command", "verbose"}


@pytest.mark.parametrize(
    ("argv", "env", "code", "message"),
    [
        (["console", "--config", "/nonexistent.yaml"], {}, 2, "/nonexistent.yaml: file not found"),
        (
            ["serve", "--config", str(EXAMPLE)],
            {"SLACK_BOT_TOKEN": ""},
            2,
            "SLACK_BOT_TOKEN is not set",
        ),
        (
            ["serve", "--config", str(EXAMPLE)],
            {"SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": "", "SLACK_APP_TOKEN": ""},
            2,
            "HTTP mode needs SLACK_SIGNING_SECRET",
        ),
        (
            ["serve", "--role", "poller", "--config", str(EXAMPLE)],
            {"SLACK_BOT_TOKEN": ""},
            2,
            "SLACK_BOT_TOKEN is not set",
        ),
        (
            ["serve", "--role", "web", "--config", str(EXAMPLE)],
            {"SLACK_BOT_TOKEN": "xoxb-test"},
            2,
            "HTTP mode needs SLACK_SIGNING_SECRET",
        ),
        (
            ["serve", "--config", str(EXAMPLE)],
            {"SLACK_BOT_TOKEN_FILE": "/nowhere/token"},
            2,
            "SLACK_BOT_TOKEN_FILE: cannot read /nowhere/token",
        ),
        (["doctor"], {"TRAINBOT_CONFIG": "/nowhere/trainbot.yaml"}, 2, "file not found"),
        (["console"], {"REDIS_URL": "http://localhost"}, 2, "REDIS_URL: must start with redis://"),
    ],
)
def test_bad_setups_say_what_to_fix(
    argv: list[str],
    env: dict[str, str],
    code: int,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "TRAINBOT_CONFIG"):
        monkeypatch.delenv(name + "_FILE", raising=False)
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == code
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_an_unknown_role_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--role", "scheduler"])
    assert exit_.value.code == 2
    assert "invalid choice: 'scheduler'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("role", "parts"),
    [
        ("all", {"web", "worker", "poller"}),
        ("web", {"web"}),
        ("worker", {"worker"}),
        ("poller", {"poller"}),
    ],
)
def test_roles_and_their_parts(role: str, parts: set[str]) -> None:
    assert role_parts(role) == parts


def test_what_each_role_needs_of_slack() -> None:
    nothing = SlackParams(bot_token="")
    check_slack_settings(nothing, role_parts("worker"))  # workers never speak to Slack
    bot_only = SlackParams(bot_token="xoxb-1")
    check_slack_settings(bot_only, role_parts("poller"))
    for role in ("web", "all"):
        with pytest.raises(ConfigError, match="HTTP mode needs SLACK_SIGNING_SECRET"):
            check_slack_settings(bot_only, role_parts(role))
    check_slack_settings(SlackParams(bot_token="xoxb-1", app_token="xapp-1"), role_parts("web"))
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN is not set"):
        check_slack_settings(nothing, role_parts("poller"))


def test_version_is_printed_by_the_console_script_and_the_module() -> None:
    expected = f"trainbot {version('trainbot')}"
    script = Path(sys.executable).parent / "trainbot"
    for argv in ([str(script), "--version"], [sys.executable, "-m", "bot", "--version"]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected
