"""The bot's view of its clusters: job secrets from the settings."""

from __future__ import annotations

from pathlib import Path

from bot.clusters import Clusters
from bot.config import parse_config
from bot.settings import Settings
from cluster.ssh import SSHPool

CONFIG = """
clusters:
  a4:
    type: hcc-a4
    login: {host: h, user: u}
    partition: a4
    max_nodes: 1
    job_secrets:
      HF_TOKEN: {env: TRAINBOT_HF_TOKEN}
      WANDB_API_KEY: {file: ~/w}
"""


def clusters(environ: dict[str, str]) -> Clusters:
    config = parse_config(CONFIG, base_dir=Path("."))
    return Clusters(config, Settings.from_environ(environ), SSHPool())


def test_env_secrets_come_from_the_settings_and_file_secrets_stay_remote() -> None:
    found = clusters({"TRAINBOT_HF_TOKEN": "hf_x", "OTHER": "y"})
    values, notes = found.secrets(found.profile("a4"))
    assert list(values) == ["HF_TOKEN"] and notes == []
    assert values["HF_TOKEN"].get_secret_value() == "hf_x"
    assert "hf_x" not in repr(values)


def test_an_unset_secret_is_a_note_not_an_error() -> None:
    found = clusters({})
    values, notes = found.secrets(found.profile("a4"))
    assert values == {}
    assert notes == ["HF_TOKEN is not configured for a4 (TRAINBOT_HF_TOKEN is unset)"]
