"""Dockerfile, docker-compose.yml and .dockerignore: they cannot be built here, so check
what can be checked: structure, names that match the outside interface, no secrets baked in."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.settings.env import Settings

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
    "REDIS_SENTINELS",
    "REDIS_PASSWORD",
    "REDIS_SENTINEL_PASSWORD",
    # added beside them (docs/sentinel.md): an ACL user and TLS through Sentinel
    "REDIS_SENTINEL_USERNAME",
    "REDIS_SENTINEL_TLS",
    "REDIS_TLS",
    "REDIS_TLS_CA_CERT",
    "REDIS_USERNAME",
    "TRAINBOT_ASK_KEY",
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


ROLES = ("web", "worker", "poller")
SECRET_FILES = {
    "SLACK_BOT_TOKEN_FILE": "slack_bot_token",
    "SLACK_SIGNING_SECRET_FILE": "slack_signing_secret",
    "SLACK_APP_TOKEN_FILE": "slack_app_token",
    "REDIS_URL_FILE": "redis_url",
    "REDIS_SENTINEL_PASSWORD_FILE": "redis_sentinel_password",
    "TRAINBOT_ASK_KEY_FILE": "ask_key",
}
SENTINEL_PROFILE = ("redis-replica", "sentinel-1", "sentinel-2", "sentinel-3")


def test_compose_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"redis", *ROLES, *SENTINEL_PROFILE}
    redis = services["redis"]
    assert str(redis["image"]).startswith("redis:7")
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert "requirepass" in command and "/run/secrets/redis_password" in command
    assert "redis_password" in redis["secrets"]
    # each role's ACL user: only trainbot's keys, no admin or dangerous command, no pub/sub
    assert "user %s on >%s ~trainbot:* resetchannels +@all -@admin -@dangerous" in command
    for role in ROLES:
        assert f"redis_password_{role}" in redis["secrets"]
    assert "ports" not in redis  # only the compose network reaches Redis
    volume = redis["volumes"][0].split(":")
    assert volume[1] == "/data" and volume[0] in compose["volumes"]  # named, not a bind mount
    assert redis["restart"] == "unless-stopped"

    for role in ROLES:
        bot = services[role]
        assert bot["build"] == "."
        assert bot["command"] == ["serve", "--role", role]
        assert bot["restart"] == "unless-stopped"
        assert "redis" in bot["depends_on"]
    # Only the web role publishes a port (HTTP mode's /slack/events); workers scale.
    assert [role for role in ROLES if "ports" in services[role]] == ["web"]
    assert services["web"]["ports"] == [
        "${TRAINBOT_PUBLISH_ADDRESS:-127.0.0.1}:${TRAINBOT_PUBLISH_PORT:-3000}:3000"
    ]
    assert services["worker"]["deploy"]["replicas"] >= 2
    assert services["poller"]["deploy"]["replicas"] >= 2


def test_compose_environment_and_secret_files(compose: dict[str, Any]) -> None:
    declared = compose["secrets"]
    for role in ROLES:
        service = compose["services"][role]
        env = service["environment"]
        names = {name.removesuffix("_FILE") for name in env}
        assert names <= INTERFACE_ENV, names - INTERFACE_ENV
        assert env["TRAINBOT_CONFIG"] == "/config/trainbot.yaml"
        assert env["TRAINBOT_HTTP_HOST"] == "0.0.0.0"  # /healthz for the healthcheck
        assert not SECRET_ENV & set(env), "secrets come from files, not the compose file"
        assert "REDIS_URL" not in env  # it carries the Redis password: a secret file
        assert "REDIS_PASSWORD" not in env
        assert env["REDIS_USERNAME"] == role  # its own ACL user and password
        assert env["REDIS_PASSWORD_FILE"] == f"/run/secrets/redis_password_{role}"
        for variable, value in env.items():
            if variable.endswith("_FILE"):
                secret = SECRET_FILES.get(variable, f"redis_password_{role}")
                assert value == f"/run/secrets/{secret}"
                assert secret in secret_names(service)
                assert declared[secret]["file"] == f"./secrets/{secret}"
    # Each role holds only the Slack secrets it needs; the user CA only those that log
    # in as people (workers and pollers).
    assert "SLACK_SIGNING_SECRET_FILE" in compose["services"]["web"]["environment"]
    assert secret_names(compose["services"]["worker"]) == {
        "redis_url",
        "redis_password_worker",
        "ask_key",
        "redis_sentinel_password",
        "user_ca",
    }
    assert secret_names(compose["services"]["poller"]) == {
        "redis_url",
        "redis_password_poller",
        "redis_sentinel_password",
        "slack_bot_token",
        "user_ca",
    }  # the poller neither asks nor answers: no ask key
    assert "user_ca" not in secret_names(compose["services"]["web"])
    # Every role goes through the sentinels when .env sets REDIS_SENTINELS, else REDIS_URL.
    for role in ROLES:
        assert compose["services"][role]["environment"]["REDIS_SENTINELS"] == (
            "${REDIS_SENTINELS:-}"
        )


def secret_names(service: dict[str, Any]) -> set[str]:
    """The secrets a service mounts (short form: the name; long form: its source)."""
    return {item if isinstance(item, str) else item["source"] for item in service["secrets"]}


def mounted_files(service: dict[str, Any]) -> set[str]:
    """Where a service's bind mounts and secrets appear inside the container."""
    found = {mount.split(":")[1] for mount in service.get("volumes", [])}
    for item in service.get("secrets", []):
        name = item if isinstance(item, str) else item.get("target", item["source"])
        found.add(name if name.startswith("/") else f"/run/secrets/{name}")
    return found


def test_every_file_the_example_config_names_is_mounted_where_it_is_read(
    compose: dict[str, Any],
) -> None:
    """docker-compose.yml runs the example config: each local file its clusters' login
    names (SSH key, known hosts, the identity's user CA) is in the workers and pollers."""
    example = yaml.safe_load((ROOT / "trainbot.example.yaml").read_text(encoding="utf-8"))
    wanted = {
        str(value)
        for cluster in example["clusters"].values()
        for name, value in cluster["login"].items()
        if name.endswith("_file") and value
    }
    assert "/etc/trainbot/user_ca" in wanted  # the example turns identity on
    for role in ("worker", "poller"):
        missing = wanted - mounted_files(compose["services"][role])
        assert not missing, f"{role} lacks {sorted(missing)}"
    declared = compose["secrets"]["user_ca"]
    assert declared == {"file": "./secrets/user_ca"}


def test_compose_sentinel_profile(compose: dict[str, Any]) -> None:
    """The optional profile: a replica of `redis` and three sentinels watching it, none
    started without the profile, none published, the password only from the secret."""
    services = compose["services"]
    for name in ("redis", *ROLES):
        assert "profiles" not in services[name]
    for name in SENTINEL_PROFILE:
        service = services[name]
        assert service["profiles"] == ["sentinel"]
        assert "ports" not in service
        roles = [f"redis_password_{role}" for role in ROLES] if name == "redis-replica" else []
        own = ["redis_sentinel_password"] if name.startswith("sentinel") else []
        assert service["secrets"] == ["redis_password", *roles, *own]  # a replica keeps the users
        assert service["volumes"][0].split(":")[0] in compose["volumes"]
        assert service["restart"] == "unless-stopped"
    replica = " ".join(services["redis-replica"]["command"])
    assert "--replicaof redis 6379" in replica and "masterauth" in replica
    assert "masterauth" in " ".join(services["redis"]["command"])  # once it is a replica
    volumes = {services[f"sentinel-{i}"]["volumes"][0] for i in (1, 2, 3)}
    assert len(volumes) == 3  # each sentinel rewrites its own configuration
    for i in (1, 2, 3):
        sentinel = " ".join(services[f"sentinel-{i}"]["command"])
        assert "sentinel monitor mymaster redis 6379 2" in sentinel
        assert "auth-pass mymaster" in sentinel and "/run/secrets/redis_password" in sentinel
        # the sentinels' own password, from its secret file into their configuration
        assert "requirepass" in sentinel and "/run/secrets/redis_sentinel_password" in sentinel
        assert sentinel.endswith("--sentinel")


def test_compose_mounts_are_read_only_and_only_workers_and_pollers_get_the_ssh_key(
    compose: dict[str, Any],
) -> None:
    key_files = ("/etc/trainbot/id_ed25519", "/etc/trainbot/known_hosts")
    for role in ROLES:
        mounts = compose["services"][role]["volumes"]
        targets = {mount.split(":")[1]: mount for mount in mounts}
        assert targets["/config/trainbot.yaml"].startswith("./trainbot.yaml:")
        assert all(mount.endswith(":ro") for mount in mounts), mounts
        if role == "web":  # it asks the workers for cluster work (bot.gateway.asks)
            assert not set(key_files) & set(targets), mounts
        else:
            assert set(key_files) <= set(targets), mounts


def stages(dockerfile: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction, args in dockerfile:
        if instruction == "FROM":
            found.append([])
        if found:
            found[-1].append((instruction, args))
    return found


def test_dockerfile(dockerfile: list[tuple[str, str]]) -> None:
    args = dict(
        a.split("=", 1) for instruction, a in dockerfile if instruction == "ARG" and "=" in a
    )
    # A digest-pinned base, the same in every stage.
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", args["PYTHON_IMAGE"])
    build, run = stages(dockerfile)
    assert build[0] == ("FROM", "${PYTHON_IMAGE} AS build")
    assert run[0] == ("FROM", "${PYTHON_IMAGE}")
    runs = " ".join(a for instruction, a in build if instruction == "RUN")
    assert "--require-hashes" in runs and "-r requirements.lock" in runs
    assert "--no-build-isolation" in runs  # no unpinned build tools either
    assert "pip install --no-deps /build/dist/trainbot-" in runs  # nor unpinned dependencies
    assert not [a for instruction, a in run if instruction == "RUN" and "pip" in a]
    assert ("COPY", "--from=build /opt/trainbot /opt/trainbot") in run
    users = [a for instruction, a in run if instruction == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    instructions = [instruction for instruction, _ in run]
    assert instructions.index("USER") > max(
        i for i, instruction in enumerate(instructions) if instruction in ("RUN", "COPY")
    )
    final = dict(run)  # the last of each instruction wins, as in Docker
    assert json.loads(final["ENTRYPOINT"]) == ["trainbot"]
    assert json.loads(final["CMD"]) == ["serve"]
    assert "HEALTHCHECK" in final
    assert "curl" not in " ".join(a for _, a in dockerfile)


def test_dockerfile_healthcheck_is_valid_python(dockerfile: list[tuple[str, str]]) -> None:
    healthcheck = dict(dockerfile)["HEALTHCHECK"]
    command = json.loads(healthcheck[healthcheck.index("CMD") + 3 :].strip())
    assert command[:2] == ["python", "-c"]
    ast.parse(command[2])
    assert "/healthz" in command[2] and "127.0.0.1" in command[2]


def test_console_script_is_trainbot() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["scripts"]["trainbot"] == "bot.runtime.cli:main"


def test_dockerignore_keeps_secrets_out() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".env", "secrets/", "trainbot.yaml", ".git", ".devcluster/", ".venv/"} <= ignored
    needed = {"pyproject.toml", "README.md", "requirements.lock", "bot", "commands", "cluster"}
    assert not needed & ignored


def test_support_code_stays_out_of_the_product() -> None:
    """support/ (the Slack stand-in) serves tests/ and bench/: it is not shipped, and
    bench/ reaches it directly, never through tests/."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not [p for p in include if p.split("*")[0] in {"support", "tests", "bench"}]
    offenders = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "tests"]
    assert offenders == []


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
    compose = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    for name in names:
        assert name in aliases or f"env: {name}" in example or "${" + name in compose, name


# -- the validators CI runs (scripts/check-deploy), on the real files and on broken ones


def check_deploy(*files: Path) -> subprocess.CompletedProcess[str]:
    # The validators come from requirements-dev.lock, beside this interpreter.
    bindir = Path(sys.executable).parent
    for tool in ("hadolint", "check-jsonschema", "kubernetes-validate"):
        assert (bindir / tool).exists(), f"{tool} is not installed: run scripts/bootstrap"
    env = {"PATH": f"{bindir}:/usr/bin:/bin"}
    return subprocess.run(
        [str(ROOT / "scripts" / "check-deploy"), *map(str, files)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_deployment_files_pass_their_validators() -> None:
    result = check_deploy()
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_dockerfile_fails_hadolint(tmp_path: Path) -> None:
    broken = tmp_path / "Dockerfile"
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    # An unpinned base and apt-get without --no-install-recommends: both findings.
    text = text.replace("FROM ${PYTHON_IMAGE} AS build", "FROM python:latest AS build")
    broken.write_text(text + "RUN apt-get update && apt-get install -y curl\n")
    result = check_deploy(broken, ROOT / "docker-compose.yml")
    assert result.returncode != 0
    assert "DL3007" in result.stdout + result.stderr  # "Using latest is prone to errors"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("    deploy:\n      replicas: 2", "    deploy:\n      replica: 2"),
        ("  redis:\n    image:", "  redis:\n    imagee:"),
        ("    restart: unless-stopped", "    restart: [unless-stopped]"),
    ],
)
def test_a_broken_compose_file_fails_the_schema(tmp_path: Path, old: str, new: str) -> None:
    text = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert old in text
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace(old, new, 1))
    result = check_deploy(ROOT / "Dockerfile", broken)
    assert result.returncode != 0, result.stdout
    assert "Schema validation errors" in result.stdout + result.stderr


# -- the lock files


def lockcheck(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lockcheck.py"), str(root)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_lock_files_match_pyproject() -> None:
    result = lockcheck(ROOT)
    assert result.returncode == 0, result.stderr


def locked_copy(tmp_path: Path) -> Path:
    for name in ("pyproject.toml", "requirements.lock", "requirements-dev.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def test_a_dependency_added_to_pyproject_but_not_locked_is_caught(tmp_path: Path) -> None:
    root = locked_copy(tmp_path)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('"aiohttp>=3.9,<4",', '"aiohttp>=3.9,<4",\n    "rich>=13",')
    )
    result = lockcheck(root)
    assert result.returncode == 1
    assert "requirements.lock: rich is not pinned" in result.stderr
    assert "run scripts/lock" in result.stderr


def test_a_pin_outside_pyproject_or_without_hashes_is_caught(tmp_path: Path) -> None:
    root = locked_copy(tmp_path)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"redis>=5.0"', '"redis>=99"'))
    lock = root / "requirements.lock"
    lock.write_text(
        re.sub(
            r"(?m)^(pyyaml==\S+) \\\n(    --hash=\S+ \\\n)*    --hash=\S+", r"\1", lock.read_text()
        )
    )
    result = lockcheck(root)
    assert result.returncode == 1
    assert "does not satisfy redis>=99" in result.stderr
    assert "requirements.lock: no hash for pyyaml" in result.stderr


def test_every_locked_package_has_hashes() -> None:
    for name in ("requirements.lock", "requirements-dev.lock"):
        text = (ROOT / name).read_text()
        assert "--hash=sha256:" in text
        assert "-e " not in text and "file:" not in text  # nothing from a local path
