"""What a worker re-derives instead of believing Redis (bot.gateway.trust), as tables: whom
a record may say a launch runs as, which log a tail may read, which jobs a cancel ends,
and which estimate shapes the policy allows."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.gateway.trust import (
    estimate_user,
    log_path_problem,
    log_roots,
    recorded_jobs,
    shape_problem,
    user_problem,
)
from bot.lifecycle.launch import Attempt, Launch
from bot.settings.config import parse_config
from cluster.slurm.sbatch import JobShape
from cluster.watching.tracking import Tracking
from commands.requests import TrainRequest

CONFIG = """
clusters:
  a4:
    type: hcc-a4
    login: {host: h, user: trainer, key_file: /k, user_ca_key_file: /ca}
    partition: a4
    max_nodes: 8
    log_dir: /scratch/logs
    identity:
      users: {U0ALICE: alice}
      from_email: true
      email_domains: [example.com]
  a3m:
    type: hcc-a3m
    login: {host: h, user: trainer, key_file: /k}
    partition: a3m
    max_nodes: 4
policy:
  rules:
    - {groups: [S0BIG], clusters: ["*"], max_nodes: 8}
    - {users: ["*"], clusters: [a4], max_nodes: 2}
  accounts:
    - {groups: [S0BIG], account: vision}
"""
CONFIG_ = parse_config(CONFIG, base_dir=Path("."))
A4, A3M = CONFIG_.clusters["a4"], CONFIG_.clusters["a3m"]
LOG = "/home/alice/vertex-oss-training/nemo/experiments/x/x_1/x/log-x_4187_0.out"


@pytest.mark.parametrize(
    ("profile", "user_id", "name", "problem"),
    [
        (A4, "U0ALICE", "alice", ""),
        (A4, "U0ALICE", "bob", "maps U0ALICE to alice, not to bob"),
        (A4, "U0ALICE", "", "maps U0ALICE to alice, not to trainer"),
        (A4, "U0ADA", "ada", ""),  # from_email: the web role checked the email
        (A4, "U0ADA", "root", "root is not a person's user"),
        (A4, "U0ADA", "trainer", "trainer is not a person's user"),
        (A4, "U0ADA", "alice", "alice is someone else's user here"),
        (A4, "U0ADA", "", "U0ADA has no user here and unmapped people are refused"),
        (A3M, "U0ALICE", "", ""),
        (A3M, "U0ALICE", "alice", "a3m has no identity section"),
    ],
)
def test_whom_a_record_may_say_a_launch_runs_as(
    profile: object, user_id: str, name: str, problem: str
) -> None:
    found = user_problem(profile, user_id, name)  # type: ignore[arg-type]
    assert (problem in found) if problem else found == "", found


def launch(log: str = LOG, job: str = "4187", *attempts: Attempt) -> Launch:
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    launch = Launch(request=request, user_id="U0ALICE", channel="C1", cluster_user="alice")
    tracking = Tracking(framework="nemo", job_id=job, log_path=log)
    launch.attempts = [*attempts, Attempt(number=len(attempts) + 1, job_id=job, tracking=tracking)]
    return launch


@pytest.mark.parametrize(
    ("recorded", "asked", "problem"),
    [
        (LOG, LOG, ""),
        ("~/vertex-oss-training/nemo_rl/4187/nemo_rl_output.log", None, ""),
        ("~/vertex-oss-training/nemo_rl/4187-logs/ray-driver.log", None, ""),
        (LOG, "/home/alice/.ssh/id_ed25519", "not the log the launch's record names"),
        ("/home/alice/.ssh/id_ed25519", None, "not a log file"),
        ("/home/alice/4187/../.ssh/x.log", None, "'..'"),
        ("/home/alice/logs/other_4188_0.out", None, "does not name the launch's Slurm job"),
        ("/home/alice/logs/other_41870_0.out", None, "does not name the launch's Slurm job"),
        ("logs/x_4187.log", None, "not absolute"),
    ],
)
def test_which_log_a_tail_may_read(recorded: str, asked: str | None, problem: str) -> None:
    found = log_path_problem(launch(recorded), recorded if asked is None else asked)
    assert (problem in found) if problem else found == "", found


def test_the_logs_roots_are_the_clusters_directories() -> None:
    assert log_roots(A4) == (
        "~/vertex-oss-training",
        "~/vertex-oss-training/nemo",
        "/scratch/logs",
    )


def test_a_cancel_takes_the_records_newest_job_and_a_held_retrys_old_one() -> None:
    old = Attempt(number=1, job_id="100")
    assert recorded_jobs(launch(LOG, "4187", old)) == ["4187"]
    held = launch(LOG, "", old)
    held.attempts[-1].held = True
    assert recorded_jobs(held) == ["100"]
    elsewhere = launch(LOG, "4187")
    elsewhere.attempts[-1].cluster = "a3m"  # a job left on another cluster: not this one's
    assert recorded_jobs(elsewhere) == []


@pytest.mark.parametrize(
    ("user_id", "groups", "shape", "problem"),
    [
        ("U0ALICE", (), JobShape(nodes=2, partition="a4"), ""),
        ("U0ALICE", (), JobShape(nodes=3, partition="a4"), "3 nodes is more than U0ALICE"),
        ("U0BIG", ("S0BIG",), JobShape(nodes=8, partition="a4", account="vision"), ""),
        ("U0BIG", ("S0BIG",), JobShape(nodes=9, partition="a4"), "(max 8)"),
        ("U0ALICE", (), JobShape(nodes=1, partition="a4", account="vision"), "not U0ALICE's"),
    ],
)
def test_which_estimate_shapes_the_policy_allows(
    user_id: str, groups: tuple[str, ...], shape: JobShape, problem: str
) -> None:
    found = shape_problem(CONFIG_.policy, A4, shape, user_id=user_id, groups=groups)
    assert (problem in found) if problem else found == "", found
    refused = shape_problem(CONFIG_.policy, A3M, shape, user_id="U0ALICE", groups=())
    assert "no policy rule lets U0ALICE launch on a3m" in refused


def test_an_estimate_runs_as_the_configs_user_or_the_shared_account() -> None:
    assert estimate_user(A4, "U0ALICE") == "alice"
    assert estimate_user(A4, "U0ADA") == ""  # from_email names are the web role's to check
    assert estimate_user(A3M, "U0ALICE") == ""
