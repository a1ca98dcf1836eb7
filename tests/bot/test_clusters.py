"""The bot's view of its clusters: job secrets from the settings, accounts and comments."""

from __future__ import annotations

from pathlib import Path

from bot.clusters import Clusters
from bot.config import parse_config
from bot.launches import Launch
from bot.settings import Settings
from cluster.launch import plan_launch
from cluster.ssh import SSHPool
from commands.access import slurm_account
from commands.requests import TrainRequest

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


def test_a_persons_launch_runs_under_their_account_and_says_whose_it_is() -> None:
    config = parse_config(
        CONFIG.replace("max_nodes: 1", "max_nodes: 4")
        + """
policy:
  rules:
    - {users: ["*"], clusters: ["*"], max_nodes: 4}
  accounts:
    - {groups: [S0VISION], clusters: [a4], account: vision}
    - {users: [U0ALICE], account: alice-research}
"""
    )
    decide = config.command_context().policy
    assert slurm_account(decide, user_id="U0BOB", group_ids=["S0VISION"], cluster="a4") == "vision"
    assert slurm_account(decide, user_id="U0BOB", group_ids=["S0VISION"], cluster="a3m") is None
    assert slurm_account(decide, user_id="U0ALICE", group_ids=[], cluster="a3m") == "alice-research"
    request = TrainRequest(workload="dpo", model="llama3p1_8b", framework="nemo-rl", cluster="a4")
    launch = Launch(request=request, user_id="U0BOB", channel="C1", slurm_account="vision")
    clusters = Clusters(config, Settings.from_environ({}), SSHPool())
    argv = [str(a) for a in plan_launch(clusters.spec_for(launch).spec).argv]
    assert argv[argv.index("--account") + 1] == "vision"
    assert argv[argv.index("--comment") + 1] == f"trainbot {launch.id} by U0BOB"
