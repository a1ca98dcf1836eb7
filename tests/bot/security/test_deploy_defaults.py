"""Deployment defaults: health and metrics not published on all interfaces. Through the
signed HTTP front end (tests.bot.security.kit)."""

from __future__ import annotations

import pytest
import yaml

from tests.bot.security.kit import PROJECT

pytestmark = pytest.mark.devcluster


# -- deployment defaults -------------------------------------------------------


def test_health_and_metrics_are_not_published_on_all_interfaces() -> None:
    compose = yaml.safe_load((PROJECT / "docker-compose.yml").read_text())
    published = {name: service.get("ports", []) for name, service in compose["services"].items()}
    assert [name for name, ports in published.items() if ports] == ["web"]  # only HTTP mode's
    for port in published["web"]:
        text = str(port)
        assert text.startswith(("127.0.0.1:", "${TRAINBOT_PUBLISH_ADDRESS:-127.0.0.1}:")), text
