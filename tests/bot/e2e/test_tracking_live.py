"""Polls of the dev cluster applied to launches: the collector's one round trip over SSH
reads what a run left on the login node, and the launch's thread says it.

The files are written here, over plain ssh, the way each framework (and the dev
cluster's stand-ins) writes them, so the tests do not depend on the recipes copy
that ``devcluster/up`` installed on the login node."""

from __future__ import annotations

import random
import re
import shlex
from collections.abc import Iterator

import pytest

from bot.engine.tracking import apply_snapshot
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.settings.sections import Watch
from bot.wording import thread
from cluster.frameworks.nemo import NEMO
from cluster.frameworks.nemo_rl import NEMO_RL
from cluster.launching.spec import LaunchSpec
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from cluster.watching.collector import collect
from commands.requests import TrainRequest
from tests.bot.botkit import login_run

pytestmark = pytest.mark.devcluster


@pytest.fixture
def root(dev_profile: ClusterProfile, unique: str) -> Iterator[str]:
    """A recipes checkout of this test's own in the shared account's home."""
    path = login_run("echo $HOME").strip() + f"/tbtest-{unique}"
    yield path
    login_run(f"rm -rf {shlex.quote(path)}", check=False)


def write(path: str, text: str = "") -> None:
    """A file on the login node, its directory made first."""
    quoted = shlex.quote(path)
    login_run(f"mkdir -p $(dirname {quoted}) && printf '%s' {shlex.quote(text)} > {quoted}")


def tracked_launch(spec: LaunchSpec, tracking_output: str, framework: str) -> Launch:
    request = TrainRequest(
        workload="dpo" if framework == "nemo-rl" else "sft",
        model="llama3p1_8b",
        framework=framework,
        cluster="a4",
        nodes=1,
    )
    launch = Launch(request=request, user_id="U0ALICE", channel="C1", phase=Phase.RUNNING)
    fw = NEMO_RL if framework == "nemo-rl" else NEMO
    tracking = fw.tracking(spec, tracking_output)
    launch.attempts.append(Attempt(number=1, job_id=tracking.job_id, tracking=tracking))
    return launch


async def test_tensorboard_directories_left_on_the_login_node_reach_the_thread_once(
    pool: SSHPool, dev_profile: ClusterProfile, root: str, unique: str
) -> None:
    profile = ClusterProfile(
        name="a4",
        type=dev_profile.type,
        login=dev_profile.login,
        partition="a4",
        max_nodes=4,
        recipes_dir=root,
    )
    linked = profile.model_copy(
        update={"tensorboard_url_template": "https://tb.example/?dir={log_dir}"}
    )
    # Job ids no Slurm job has (Slurm's largest is 67,108,863): the files are the test.
    rl_id, nemo_id = (str(67_000_000 + random.randrange(100_000) * 2 + i) for i in (0, 1))

    # NeMo-RL: the job runs in the submit directory; its log names a relative directory.
    rl_spec = LaunchSpec(
        profile=profile, launch_id="L-1", framework="nemo-rl", nodes=1, script="algorithms/dpo.sh"
    )
    rl = tracked_launch(rl_spec, f"{rl_id}\n", "nemo-rl")
    write(
        f"{root}/nemo_rl/{rl_id}/nemo_rl_output.log",
        "Initialized TensorboardLogger at logs/exp_001/tensorboard\n"
        f"{'=' * 25} Step 1/10 {'=' * 25}\n",
    )
    write(f"{root}/nemo_rl/logs/exp_001/tensorboard/events.out.tfevents.1.dev0.1.0")

    # NeMo: its log names the logger's save_dir; the events go under <it>/<experiment name>.
    task = f"tb-{unique}"
    local_dir = f"{root}/nemo/experiments/{task}/{task}_1/{task}"
    nemo_spec = LaunchSpec(
        profile=profile, launch_id="L-2", framework="nemo", nodes=1, script="sft/x.py"
    )
    nemo = tracked_launch(
        nemo_spec, f"- Job id: {nemo_id}\n- Local Directory: {local_dir}\n", "nemo"
    )
    write(
        f"{local_dir}/log-trainer-trainer.{task}_{nemo_id}_0.out",
        '[NeMo W 2025-05-06 23:48:47 nemo_logger:173] "update_logger_directory" is True. '
        f'Overwriting tensorboard logger "save_dir" to {root}/nemo/logs/tb_logs\n',
    )
    write(f"{root}/nemo/logs/tb_logs/{task}/events.out.tfevents.1.dev0.2.0")

    said: dict[str, list[str]] = {}
    for _ in range(2):  # the second poll reads nothing new
        jobs = [launch.attempts[0].tracking for launch in (rl, nemo)]
        result = await collect(pool, dev_profile.login, [j for j in jobs if j], cluster="a4")
        assert result.round_trips == 1
        for launch, where in ((rl, profile), (nemo, linked)):
            events = apply_snapshot(launch, result.jobs[launch.job_id], where, Watch())
            said.setdefault(launch.job_id, []).extend(
                line
                for line in (thread.line(e) for e in events if e.kind == "thread")
                if "TensorBoard" in line
            )

    (rl_line,) = said[rl_id]
    rl_dir = f"{root}/nemo_rl/logs/exp_001/tensorboard"
    assert rl_line == (
        f"📊 TensorBoard logs in `{rl_dir}`. To view them, run "
        f"`tensorboard --logdir {rl_dir}` on the login node ({profile.login.host})."
    )
    (nemo_line,) = said[nemo_id]
    nemo_dir = f"{root}/nemo/logs/tb_logs/{task}"
    assert nemo_line == (
        f"📊 TensorBoard: <https://tb.example/?dir={nemo_dir}|job {nemo_id}> (logs in `{nemo_dir}`)"
    )
    for line in (rl_line, nemo_line):  # each names the directory that holds the run's events
        directory = re.findall(r"`([^`]*)`", line)[0]
        assert login_run(f"ls {shlex.quote(directory)}").startswith("events.out.tfevents.")
