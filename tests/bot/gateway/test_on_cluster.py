"""The bot's view of its clusters: job secrets from the settings, accounts and comments."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from bot.gateway.on_cluster import Clusters
from bot.lifecycle.launch import Launch
from bot.planning.cost import estimate_shape
from bot.settings.config import parse_config
from bot.settings.env import Settings
from cluster.launching.launch import plan_launch
from cluster.slurm.sbatch import build_test_only
from cluster.ssh.pool import SSHPool
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


@pytest.mark.parametrize(
    ("framework", "account"), [("nemo-rl", "vision"), ("nemo-rl", None), ("nemo", "vision")]
)
def test_the_start_estimate_asks_about_the_options_the_submit_gives(
    framework: str, account: str | None
) -> None:
    config = parse_config(
        CONFIG.replace("max_nodes: 1", "max_nodes: 4\n    time_limit: '04:00:00'")
    )
    request = TrainRequest(
        workload="sft", model="llama3p1_8b", framework=framework, cluster="a4", nodes=2,
        time="01:30:00",
    )  # fmt: skip
    launch = Launch(request=request, user_id="U0BOB", channel="C1", slurm_account=account or "")
    clusters = Clusters(config, Settings.from_environ({}), SSHPool())
    profile = clusters.profile("a4")
    estimate = shlex.split(
        build_test_only(estimate_shape(request, profile, account), gpus_per_node=8)
        .removeprefix("TZ=UTC0 ")
        .removesuffix(" 2>&1")
    )
    asked = estimate[estimate.index("--test-only") + 1 : estimate.index("-J")]
    expected = ["-N", "2", "-p", "a4", "-t", "01:30:00"] + (
        ["--account", account] if account else []
    )
    assert asked == expected
    argv = [str(a) for a in plan_launch(clusters.spec_for(launch).spec).argv]
    if framework == "nemo-rl":  # sbatch itself: the very same words, in the same order
        assert argv[argv.index("--parsable") + 1 : argv.index("-J")] == asked
    else:  # run.py: -n and --partition, then sbatch's own limit flags, which it passes on
        assert argv[argv.index("-n") + 1] == "2" and argv[argv.index("--partition") + 1] == "a4"
        limits = argv[argv.index("-t") : argv.index("-t") + len(asked) - 4]
        assert limits == asked[4:]
