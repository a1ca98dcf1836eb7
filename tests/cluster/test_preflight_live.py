"""Pre-flight on the dev cluster against what a real site may have: a missing mount
directory, a guide-style ``configs/auth.sh``, a ``run.py`` without some flags. Each
test changes only files in a private directory in trainer's home, removed afterwards."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import SecretStr

from cluster.launching.launch import plan_launch, submit
from cluster.launching.spec import LaunchSpec
from cluster.preflight.checks import preflight
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import Result, SSHPool
from tests.conftest import LoginShell
from tests.devlogin import copy_recipes_command

pytestmark = pytest.mark.devcluster
FAST = {
    "DEVCLUSTER_STEPS": "2",
    "DEVCLUSTER_STEP_TIME_S": "0.3",
    "DEVCLUSTER_TOKENIZER_RACE": "off",
}


class CountingPool(SSHPool):
    """The real pool, noting each command it runs on a login node."""

    def __init__(self) -> None:
        super().__init__()
        self.commands: list[str] = []

    async def run(self, login: Any, command: str, **kwargs: Any) -> Result:
        self.commands.append(command)
        return await super().run(login, command, **kwargs)


@pytest.fixture
async def private_dir(login: LoginShell, unique: str) -> AsyncIterator[str]:
    """``~/tmp-<unique>`` on the login node, removed when the test ends."""
    path = f"~/tmp-{unique}"
    yield path
    await login.run(f"rm -rf ~/tmp-{unique}", check=False)


async def private_tree(login: LoginShell, profile: ClusterProfile, root: str) -> ClusterProfile:
    """A copy of the recipes checkout under ``root``, and ``profile`` pointed at it."""
    await login.run(copy_recipes_command(root), timeout_s=60)
    base = f"{root}/vertex-oss-training"
    body = profile.model_dump()
    body.update(recipes_dir=base, nemorun_home=f"{base}/nemo", log_dir=f"{base}/nemo/logs")
    body["images"] = {}
    return ClusterProfile(**body)


async def test_a_missing_mount_directory_fails_preflight_with_the_command_that_fixes_it(
    pool: SSHPool, dev_profile: ClusterProfile, login: LoginShell, private_dir: str
) -> None:
    missing = f"{private_dir}/data"
    profile = dev_profile.model_copy(update={"data_dir": missing})
    spec = LaunchSpec(
        profile=profile, launch_id="L-mnt1", framework="nemo", nodes=1,
        script="sft/llama3p1_8b_sft.py",
    )  # fmt: skip
    result = await preflight(pool, spec)
    assert not result.ok
    assert [c.name for c in result.failures] == ["mount data_dir"]
    text = result.message()
    assert f"Directory {missing} (run.py's --data-dir) does not exist on a4." in text
    assert f"Create it on the login node as trainer with `mkdir -p {missing}`" in text
    assert "or point data_dir in a4's cluster config at a directory that exists" in text
    assert "--data-dir" in plan_launch(spec).command_line  # the flag that mounts it
    await login.run(f"mkdir -p {missing}")  # what the message says to do
    assert (await preflight(pool, spec)).ok


async def test_an_auth_file_that_replaces_the_persons_token_is_refused_without_its_value(
    pool: SSHPool, dev_profile: ClusterProfile, login: LoginShell, private_dir: str
) -> None:
    profile = await private_tree(login, dev_profile, private_dir)
    auth = f"{profile.recipes_dir}/nemo_rl/configs/auth.sh"
    site_value = "hf_SiteOwnTokenQ7x"
    body = (
        "# guide style\\n"
        f"export HF_TOKEN={site_value}\\n"
        "export WANDB_API_KEY=${WANDB_API_KEY:-wandb_site_Q7x}\\n"
    )
    await login.run(f"printf '{body}' > {auth}")
    person = SecretStr("hf_PersonOwnToken9k")
    spec = LaunchSpec(
        profile=profile, launch_id="L-auth1", framework="nemo-rl", nodes=1,
        script="algorithms/dpo.sh",
        secrets={"HF_TOKEN": person, "WANDB_API_KEY": SecretStr("wandb_person_9k")},
    )  # fmt: skip
    result = await preflight(pool, spec)
    assert not result.ok
    assert [c.name for c in result.failures] == ["auth HF_TOKEN"]
    text = result.message()
    assert f"{auth} on a4 sets HF_TOKEN (line 2, a line like `export HF_TOKEN=...`)" in text
    assert "Change the line to `export HF_TOKEN=${HF_TOKEN:-...}`" in text
    everything = "\n".join(c.message for c in result.checks)
    assert site_value not in everything and person.get_secret_value() not in everything
    assert "wandb_" not in everything
    # Without a token of the bot's, the file's own is what the job should get: no refusal.
    assert (await preflight(pool, dataclasses.replace(spec, secrets={}))).ok
    # The change the message asks for passes.
    await login.run(f"sed -i 's/^export HF_TOKEN=.*/export HF_TOKEN=${{HF_TOKEN:-x}}/' {auth}")
    assert (await preflight(pool, spec)).ok


async def test_a_run_py_without_some_flags_launches_without_them_and_says_so(
    pool: SSHPool,
    dev_profile: ClusterProfile,
    login: LoginShell,
    private_dir: str,
    launch_id: str,
    jobs_to_cancel: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    profile = await private_tree(login, dev_profile, private_dir)
    run_py = f"{profile.recipes_dir}/nemo/run.py"
    # A site's run.py that has no -t and no --exclude (its own defaults instead).
    await login.run(
        'sed -i -e \'s/^    parser.add_argument("-t", "--time".*/'
        '    parser.set_defaults(time="04:00:00")/\' '
        "-e 's/^    parser.add_argument(\"--exclude\".*/    parser.set_defaults(exclude=None)/' "
        + run_py
    )
    helped = await login.run(f"cd {profile.recipes_dir}/nemo && python3 run.py --help")
    assert "--exclude" not in helped.stdout and "--time" not in helped.stdout
    spec = LaunchSpec(
        profile=profile, launch_id=launch_id, framework="nemo", nodes=1,
        script="sft/llama3p1_2b_sft.py", name="flags", exclude="dev3", env=FAST,
    )  # fmt: skip
    assert profile.time_limit == "01:00:00"
    counting = CountingPool()
    async with counting:
        result = await preflight(counting, spec)
    assert counting.commands == ["python3 -"]  # run.py --help came in the one round trip
    assert result.ok, result.message()
    assert result.launcher is not None and "--exclude" not in result.launcher.flags
    assert result.notes == (
        "run.py on a4 has no -t: the time limit 01:00:00 goes to sbatch as SBATCH_TIMELIMIT "
        "instead",
        "run.py on a4 has no --exclude: trainbot asks Slurm to keep the job off dev3 right "
        "after the submit (scontrol update), which holds only if the job is still queued by then",
    )
    plan = plan_launch(dataclasses.replace(spec, launcher=result.launcher))
    assert "--exclude" not in plan.command_line and " -t " not in plan.command_line
    assert "--data-dir" in plan.command_line  # what it has still goes
    assert "export SBATCH_TIMELIMIT=01:00:00" in plan.script()
    caplog.set_level(logging.WARNING, logger="cluster.launching.launch")
    sub = await submit(pool, plan)  # run.py accepts the line (it refused -t before)
    jobs_to_cancel.append(sub.job_id)
    shown = (await login.run(f"scontrol show job {sub.job_id} -o")).stdout
    assert "TimeLimit=01:00:00" in shown, shown  # Slurm took it, not run.py's 04:00:00
    # --exclude went to Slurm with scontrol update right after the submit: it holds while the
    # job waits; a job already started (an idle dev cluster starts it at once) keeps its
    # nodes, and the refusal is logged.
    if "JobState=PENDING" in shown:
        assert "ExcNodeList=dev3" in shown, shown
    else:
        assert f"job={sub.job_id} cluster=a4: could not set ExcNodeList" in caplog.text
