"""Dockerfile, docker-compose.yml and .dockerignore: they cannot be built here, so check
what can be checked: structure, names that match the outside interface, no secrets baked in."""

from __future__ import annotations

import ast
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.settings import Settings

ROOT = Path(__file__).resolve().parents[1]

# The environment variables of INTERFACE.md ("Environment").
INTERFACE_ENV = {
    "TRAINBOT_CONFIG",
    "REDIS_URL",
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "SLACK_API_URL",
    "TRAINBOT_HTTP_HOST",
    "TRAINBOT_HTTP_PORT",
}
SECRET_ENV = {"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", text)
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def test_settings_use_the_interface_names() -> None:
    aliases = {field.alias for field in Settings.model_fields.values()}
    assert INTERFACE_ENV <= aliases


def test_compose_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"redis", "trainbot"}
    redis = services["redis"]
    assert str(redis["image"]).startswith("redis:7")
    assert "--appendonly" in redis["command"] and "yes" in redis["command"]
    volume = redis["volumes"][0].split(":")
    assert volume[1] == "/data" and volume[0] in compose["volumes"]  # named, not a bind mount

    bot = services["trainbot"]
    assert bot["build"] == "." and bot["command"] in (["serve"], "serve")
    assert bot["restart"] == "unless-stopped" and redis["restart"] == "unless-stopped"
    assert "redis" in bot["depends_on"]
    assert "${TRAINBOT_PUBLISH_ADDRESS:-127.0.0.1}:3000:3000" in bot["ports"]  # loopback
    assert bot["env_file"] in (".env", [".env"])


def test_compose_environment(compose: dict[str, Any]) -> None:
    env = compose["services"]["trainbot"]["environment"]
    assert set(env) <= INTERFACE_ENV
    assert env["REDIS_URL"] == "redis://redis:6379/0"
    assert env["TRAINBOT_CONFIG"] == "/config/trainbot.yaml"
    assert env["TRAINBOT_HTTP_HOST"] == "0.0.0.0"  # reachable through the published port
    assert not SECRET_ENV & set(env), "secrets come from .env, not the compose file"


def test_compose_mounts_are_read_only(compose: dict[str, Any]) -> None:
    mounts = compose["services"]["trainbot"]["volumes"]
    targets = {mount.split(":")[1]: mount for mount in mounts}
    assert targets["/config/trainbot.yaml"].startswith("./trainbot.yaml:")
    for target in (
        "/config/trainbot.yaml",
        "/etc/trainbot/id_ed25519",
        "/etc/trainbot/known_hosts",
    ):
        assert targets[target].endswith(":ro")


def test_dockerfile(dockerfile: list[tuple[str, str]]) -> None:
    first = dockerfile[0]
    assert first == ("FROM", "python:3.11-slim")
    users = [args for instruction, args in dockerfile if instruction == "USER"]
    assert users and users[-1] not in ("root", "0")
    final = dict(dockerfile)  # the last of each instruction wins, as in Docker
    assert json.loads(final["ENTRYPOINT"]) == ["trainbot"]
    assert json.loads(final["CMD"]) == ["serve"]
    assert any("pip install ." in args for instruction, args in dockerfile if instruction == "RUN")
    assert "curl" not in " ".join(args for _, args in dockerfile)
    instructions = [instruction for instruction, _ in dockerfile]
    assert instructions.index("USER") > max(
        i for i, instruction in enumerate(instructions) if instruction == "RUN"
    )


def test_dockerfile_healthcheck_is_valid_python(dockerfile: list[tuple[str, str]]) -> None:
    healthcheck = dict(dockerfile)["HEALTHCHECK"]
    command = json.loads(healthcheck[healthcheck.index("CMD") + 3 :].strip())
    assert command[:2] == ["python", "-c"]
    ast.parse(command[2])
    assert "/healthz" in command[2] and "127.0.0.1" in command[2]


def test_console_script_is_trainbot() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["scripts"]["trainbot"] == "bot.cli:main"


def test_dockerignore_keeps_secrets_out() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".env", "secrets/", "trainbot.yaml", ".git", ".devcluster/", ".venv/"} <= ignored
    needed = {"pyproject.toml", "README.md", "bot", "commands", "cluster"}
    assert not needed & ignored


def test_env_example_names_known_variables() -> None:
    names = set()
    for line in (ROOT / ".env.example").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^#?\s*([A-Z][A-Z0-9_]*)=(.*)$", line)
        if match:
            names.add(match.group(1))
            if not line.startswith("#"):
                assert match.group(2) == "", f"{match.group(1)} has a value in .env.example"
    assert SECRET_ENV <= names
    aliases = {field.alias for field in Settings.model_fields.values()}
    example = (ROOT / "trainbot.example.yaml").read_text(encoding="utf-8")
    for name in names:
        assert name in aliases or f"env: {name}" in example, name
