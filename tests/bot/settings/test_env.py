"""Settings from an explicit environment mapping."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from bot.settings.env import Settings
from bot.settings.redis_urls import without_password
from cluster.errors import ConfigError


def secret_file(path: Path, text: str) -> Path:
    """A secret file as an operator writes it: its owner's alone (mode 600)."""
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_defaults_per_interface() -> None:
    settings = Settings.from_environ({})
    assert settings.config_path == Path("./trainbot.yaml")
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.slack_api_url == "https://slack.com/api/"
    assert (settings.http_host, settings.http_port) == ("127.0.0.1", 3000)
    assert settings.slack_bot_token is None and settings.slack_signing_secret is None
    assert settings.slack_app_token is None


def test_values_from_the_mapping_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://elsewhere:1/0")
    settings = Settings.from_environ(
        {
            "TRAINBOT_CONFIG": "/etc/trainbot.yaml",
            "SLACK_BOT_TOKEN": "xoxb-1",
            "SLACK_SIGNING_SECRET": "sign",
            "SLACK_APP_TOKEN": "xapp-1",
            "SLACK_API_URL": "http://127.0.0.1:8999/api",
            "TRAINBOT_HTTP_HOST": "0.0.0.0",
            "TRAINBOT_HTTP_PORT": "8080",
        }
    )
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.config_path == Path("/etc/trainbot.yaml")
    assert settings.slack_api_url == "http://127.0.0.1:8999/api/"
    assert settings.http_port == 8080 and settings.http_host == "0.0.0.0"
    assert settings.slack_app_token is not None
    assert isinstance(settings.slack_bot_token, SecretStr)
    assert settings.slack_bot_token.get_secret_value() == "xoxb-1"


def test_secrets_never_show() -> None:
    settings = Settings.from_environ({"SLACK_BOT_TOKEN": "xoxb-secret", "HF": "hf_secret"})
    shown = repr(settings) + str(settings) + settings.model_dump_json()
    assert "xoxb-secret" not in shown and "hf_secret" not in shown
    assert "hf_secret" not in repr(settings.env_secret("HF"))


def test_empty_means_unset() -> None:
    settings = Settings.from_environ({"SLACK_APP_TOKEN": "", "TRAINBOT_HTTP_PORT": ""})
    assert settings.slack_app_token is None and settings.http_port == 3000


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"TRAINBOT_HTTP_PORT": "http"},
            "environment: TRAINBOT_HTTP_PORT: Input should be a valid integer, unable to parse "
            "string as an integer (got 'http')",
        ),
        ({"TRAINBOT_HTTP_PORT": "70000"}, "environment: TRAINBOT_HTTP_PORT: Input should be"),
        ({"REDIS_URL": "localhost:6379"}, "environment: REDIS_URL: must start with"),
        ({"SLACK_API_URL": "slack.com/api"}, "environment: SLACK_API_URL: must"),
    ],
)
def test_bad_values_name_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_environ(environ)
    assert str(caught.value).startswith(message)
    assert caught.value.source == "environment"


def test_secrets_from_files(tmp_path: Path) -> None:
    secret_file(tmp_path / "bot_token", "xoxb-from-a-file\n")
    secret_file(tmp_path / "hf", "hf_from_a_file")
    settings = Settings.from_environ(
        {
            "SLACK_BOT_TOKEN_FILE": str(tmp_path / "bot_token"),
            "REDIS_URL_FILE": "",  # empty: unset
            "TRAINBOT_HF_TOKEN_FILE": str(tmp_path / "hf"),
        }
    )
    assert settings.slack_bot_token is not None
    assert settings.slack_bot_token.get_secret_value() == "xoxb-from-a-file"  # newline dropped
    token = settings.env_secret("TRAINBOT_HF_TOKEN")
    assert token is not None and token.get_secret_value() == "hf_from_a_file"
    assert settings.env_secret("TRAINBOT_HF_TOKEN") is token  # read once
    shown = repr(settings) + str(settings) + settings.model_dump_json()
    assert "xoxb-from-a-file" not in shown and "hf_from_a_file" not in shown


def test_a_redis_url_with_a_password_from_a_file(tmp_path: Path) -> None:
    secret_file(tmp_path / "url", "redis://:s3cret-pass@redis:6379/0\n")
    settings = Settings.from_environ({"REDIS_URL_FILE": str(tmp_path / "url")})
    assert settings.redis_url == "redis://:s3cret-pass@redis:6379/0"


def test_secret_file_errors_name_the_variable_never_the_content(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as missing:
        Settings.from_environ({"SLACK_SIGNING_SECRET_FILE": str(tmp_path / "nope")})
    assert "SLACK_SIGNING_SECRET_FILE" in str(missing.value)
    assert "nope" in str(missing.value)
    secret_file(tmp_path / "secret", "sign-from-file")
    with pytest.raises(ConfigError, match="not both") as both:
        Settings.from_environ(
            {"SLACK_SIGNING_SECRET": "sign", "SLACK_SIGNING_SECRET_FILE": str(tmp_path / "secret")}
        )
    assert "sign-from-file" not in str(both.value)
    settings = Settings.from_environ({"HF": "hf_value", "HF_FILE": str(tmp_path / "secret")})
    with pytest.raises(ConfigError, match="not both"):
        settings.env_secret("HF")
    lazy = Settings.from_environ({"HF_FILE": str(tmp_path / "gone")})
    with pytest.raises(ConfigError, match="HF_FILE"):
        lazy.env_secret("HF")


def test_sentinels_make_a_sentinel_target_that_waits_for_a_replica() -> None:
    settings = Settings.from_environ(
        {"REDIS_SENTINELS": "10.0.0.5:26379, sentinel-b:26380", "REDIS_PASSWORD": "pw-1"}
    )
    target = settings.redis_target()
    assert target.sentinels == (("10.0.0.5", 26379), ("sentinel-b", 26380))
    assert (target.service, target.wait_replicas, target.retry_for_s) == ("mymaster", 1, 30.0)
    assert "pw-1" not in repr(settings) and "pw-1" not in target.describe()
    plain = Settings.from_environ({}).redis_target()
    assert (plain.sentinels, plain.wait_replicas, plain.retry_for_s) == ((), 0, 2.0)


def test_a_sentinel_that_is_not_host_port_is_named() -> None:
    with pytest.raises(ConfigError, match="REDIS_SENTINELS: 'sentinel-a' is not host:port"):
        Settings.from_environ({"REDIS_SENTINELS": "sentinel-a,10.0.0.6:26379"})


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o444])
def test_a_secret_file_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = secret_file(tmp_path / "redis_password", "s3cret-redis-pass")
    path.chmod(mode)
    with pytest.raises(ConfigError) as caught:
        Settings.from_environ({"REDIS_PASSWORD_FILE": str(path)})
    said = str(caught.value)
    assert said.startswith(f"environment: REDIS_PASSWORD_FILE: {path} can be read by others")
    assert f"(mode {mode:04o})" in said and f"chmod 600 {path}" in said
    assert "s3cret-redis-pass" not in said
    lazy = Settings.from_environ({"TRAINBOT_HF_TOKEN_FILE": str(path)})  # a config's {env: ...}
    with pytest.raises(ConfigError, match="TRAINBOT_HF_TOKEN_FILE: .* can be read by others"):
        lazy.env_secret("TRAINBOT_HF_TOKEN")
    path.chmod(0o400)
    settings = Settings.from_environ({"REDIS_PASSWORD_FILE": str(path)})
    assert settings.redis_password == SecretStr("s3cret-redis-pass")


def test_a_secret_file_readable_by_a_group_is_refused_unless_it_is_the_processs_own(
    tmp_path: Path,
) -> None:
    """Kubernetes mounts secrets as root:<fsGroup> 0440 (deploy/kubernetes): the pod's own
    group, which is allowed; a group that is not the process's own is refused."""
    path = secret_file(tmp_path / "redis_password", "s3cret-redis-pass")
    path.chmod(0o440)
    assert os.stat(path).st_gid == os.getgid()
    assert Settings.from_environ({"REDIS_PASSWORD_FILE": str(path)}).redis_password
    other = next(g for g in (65534, 65533, 12345) if g != os.getgid())
    try:
        os.chown(path, -1, other)
    except PermissionError:
        pytest.skip("changing a file's group needs root")
    with pytest.raises(ConfigError) as caught:
        Settings.from_environ({"REDIS_PASSWORD_FILE": str(path)})
    assert f"can be read by its group (gid {other}, not this process's" in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis//:hunter2-pass@redis:6379/0",  # the colon forgotten
        "http://:hunter2-pass@redis:6379/0",  # the wrong scheme
        "redis:/user:hunter2-pass@redis:6379/0",
        "redis//redis:6379/0?password=hunter2-pass",
    ],
)
def test_a_mistyped_redis_url_is_never_echoed_with_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_environ({"REDIS_URL": url})
    said = str(caught.value)
    assert "must start with redis://, rediss:// or unix://" in said
    assert "hunter2-pass" not in said and "redis:6379/0" in said


def test_redis_passwords_are_handed_to_the_redactor() -> None:
    settings = Settings.from_environ(
        {
            "REDIS_URL": "redis://:url-pass%40x@redis:6379/0",
            "REDIS_PASSWORD": "data-node-pass",
        }
    )
    assert set(settings.redis_secrets()) == {"url-pass@x", "data-node-pass"}
    assert without_password("rediss://u:p@w@h:1/0") == "rediss://h:1/0"
    assert without_password("redis://h:1/0?password=qs-pass-1") == "redis://h:1/0"
    query = Settings.from_environ({"REDIS_URL": "redis://h:1/0?password=qs-pass-1"})
    assert "qs-pass-1" in query.redis_secrets()
    sentinel = Settings.from_environ(
        {"REDIS_SENTINELS": "s1:26379", "REDIS_SENTINEL_PASSWORD": "sentinel-pass"}
    )
    assert "sentinel-pass" in sentinel.redis_secrets()


def test_sentinel_secrets_and_tls_reach_the_target(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    settings = Settings.from_environ(
        {
            "REDIS_SENTINELS": "s1:26379,s2:26379",
            "REDIS_SENTINEL_PASSWORD": "sentinel-pass",
            "REDIS_SENTINEL_TLS": "true",
            "REDIS_TLS": "true",
            "REDIS_TLS_CA_CERT": str(ca),
        }
    )
    target = settings.redis_target()
    assert target.sentinel_password == SecretStr("sentinel-pass")
    assert (target.sentinel_tls, target.tls, target.tls_ca_file) == (True, True, str(ca))
    assert target.describe() == (
        "sentinel mymaster via s1:26379,s2:26379 (TLS to the sentinels and data nodes)"
    )
    assert Settings.from_environ({"REDIS_URL": "rediss://h:6380/0"}).redis_target().tls


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"REDIS_SENTINEL_PASSWORD": "pw-123456"},
            "REDIS_SENTINEL_PASSWORD, REDIS_SENTINEL_USERNAME",
        ),
        ({"REDIS_SENTINEL_TLS": "true"}, "apply to the sentinels: set REDIS_SENTINELS too"),
        ({"REDIS_SENTINEL_USERNAME": "trainbot"}, "apply to the sentinels: set REDIS_SENTINELS"),
        ({"REDIS_TLS": "true"}, "write the URL as rediss://host:port/db"),
        (
            {"REDIS_SENTINELS": "s1:26379", "REDIS_TLS_CA_CERT": "/nowhere/ca.pem"},
            "REDIS_TLS_CA_CERT: /nowhere/ca.pem is not a file",
        ),
    ],
)
def test_sentinel_and_tls_settings_where_they_do_not_apply(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_environ(environ)
    assert message in str(caught.value)
    assert "pw-123456" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://:hunter2-pass@redis:abc/0", "its port is not a number"),
        ("redis://:hunter2-pass@redis:6379/zero", "the database after the host must be a number"),
    ],
)
def test_a_redis_url_that_cannot_be_used_is_refused_at_start(url: str, says: str) -> None:
    """Such a URL passed the check and then stopped the bot with a traceback."""
    with pytest.raises(ConfigError) as caught:
        Settings.from_environ({"REDIS_URL": url})
    said = str(caught.value)
    assert says in said and "hunter2-pass" not in said and "(got 'redis://redis:" in said
    assert Settings.from_environ({"REDIS_URL": "unix:///run/redis.sock?db=2"}).redis_url
