"""The runtime's one redactor holds the Redis passwords too: the data nodes', the
sentinels' and one written inside ``REDIS_URL`` are masked in what is logged, posted
and stored, like the Slack tokens."""

from __future__ import annotations

import logging

import pytest

from bot.core.redact import install_log_filter, remove_log_filter
from bot.runtime.assembly import secret_redactor
from bot.settings.env import Settings
from tests.bot.botkit import dev_config


def test_the_redis_passwords_are_redacted_wherever_the_redactor_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings.from_environ(
        {
            "REDIS_SENTINELS": "127.0.0.1:26379",
            "REDIS_URL": "redis://:url-pass-1234@redis:6379/0",
            "REDIS_PASSWORD": "data-pass-5678",
            "REDIS_SENTINEL_PASSWORD": "sentinel-pass-9012",
        }
    )
    redactor = secret_redactor(settings, dev_config())
    said = "auth url-pass-1234 data-pass-5678 sentinel-pass-9012 ZGF0YS1wYXNzLTU2Nzg="
    masked = redactor(said)
    assert masked.startswith("auth [redacted] [redacted] [redacted] [redacted]"), masked
    assert "ZGF0YS1wYXNz" not in masked  # its base64 too
    flt = install_log_filter(redactor)
    try:
        logging.getLogger().addHandler(caplog.handler)
        caplog.handler.addFilter(flt)
        with caplog.at_level(logging.INFO):
            logging.getLogger("bot.test").warning("redis said %s", "data-pass-5678")
    finally:
        caplog.handler.removeFilter(flt)
        remove_log_filter(flt)
    assert "data-pass-5678" not in caplog.text and "[redacted]" in caplog.text
