"""The command line: --help is true, and bad set-ups get a message saying what to fix."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from bot.cli import build_parser, main

EXAMPLE = Path(__file__).resolve().parents[2] / "trainbot.example.yaml"


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
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == code
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_version_is_printed_by_the_console_script_and_the_module() -> None:
    expected = f"trainbot {version('trainbot')}"
    script = Path(sys.executable).parent / "trainbot"
    for argv in ([str(script), "--version"], [sys.executable, "-m", "bot", "--version"]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected
