"""Settings from an explicit environment mapping."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from bot.settings import Settings
from cluster.errors import ConfigError


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
