"""Hostile values in every user-controlled field run nothing on the login node.

Two layers: :class:`LaunchSpec` refuses them (see test_launch), and, bypassing
that check, the builders quote them so the login node's shell, sbatch and launch.sh
see them as plain words. Seen on the dev cluster with nemo-run 0.11.1: it puts the
experiment name and the task arguments unquoted into shell commands, so those two
fields are safe only because the spec allows nothing but [A-Za-z0-9_.-/:+,@] there.
"""

from __future__ import annotations

import asyncio

import pytest
from pydantic import SecretStr

from cluster.frameworks import nemo, nemo_rl
from cluster.launching.launch import plan_launch, render_script, submit
from cluster.launching.spec import LaunchSpec
from cluster.site.profiles import ClusterProfile
from cluster.slurm.sbatch import JobShape, parse_sbatch_parsable
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import RPath, export_lines
from tests.conftest import LoginShell

pytestmark = pytest.mark.devcluster
NEMO_DIR = "~/vertex-oss-training/nemo"


def hostile_values(marker: str) -> list[str]:
    touch = f"touch {marker}"
    return [
        f"$({touch})",
        f";{touch}",
        f"`{touch}`",
        f"x\n{touch}\n",
        f"'; {touch}; '",
        f'"; {touch}; "',
        f"&& {touch}",
        f"| {touch}",
        f"$'\\x3b'{touch}",
    ]


async def test_hostile_values_through_nemo_rl_builders(
    pool: SSHPool,
    dev_profile: ClusterProfile,
    login: LoginShell,
    unique: str,
    jobs_to_cancel: list[str],
) -> None:
    marker = f"/tmp/trainbot-pwned-{unique}"
    env = {"DEVCLUSTER_STEPS": "1", "DEVCLUSTER_STEP_TIME_S": "0.1"}
    for value in hostile_values(marker):
        exports = export_lines(
            {**env, "X_ENV": value}, {"HF_TOKEN": SecretStr(value)}, {}, redact=False
        )
        # A hostile partition: sbatch must refuse it as a name, nothing else.
        argv = nemo_rl.sbatch_argv(
            JobShape(nodes=1, partition=value, time_limit="5"), job_name=value,
            cluster_type="hcc-a4", job_script="algorithms/sft.sh", args=(value,),
            overrides=(("sft.max_num_steps", value),),
        )  # fmt: skip
        script = render_script(nemo_rl.NEMO_RL.work_dir(dev_profile), exports, argv)
        refused = await pool.run(dev_profile.login, "bash -l -s", input=script, timeout_s=30,
                                 check=False)  # fmt: skip
        assert refused.returncode != 0 and "invalid partition" in refused.stderr.lower()
        # A valid partition: the job runs with the hostile name, arguments and environment.
        argv[argv.index("-p") + 1] = "a4"
        script = render_script(nemo_rl.NEMO_RL.work_dir(dev_profile), exports, argv)
        result = await pool.run(dev_profile.login, "bash -l -s", input=script, timeout_s=30)
        jobs_to_cancel.append(parse_sbatch_parsable(result.stdout).job_id)
    await _wait_for_jobs_to_end(login, jobs_to_cancel)
    assert not await login.exists(marker)


async def test_hostile_values_through_nemo_builders(
    pool: SSHPool, dev_profile: ClusterProfile, login: LoginShell, unique: str
) -> None:
    marker = f"/tmp/trainbot-pwned-{unique}"
    for value in hostile_values(marker):
        argv = nemo.nemo_run_argv(
            JobShape(nodes=1, partition=value, time_limit=value, account=value),
            cluster_type="hcc-a4", work_dir=f"~/{value}", image=f"~/{value}", script=value,
            experiment_name="safe-name", log_dir=f"/tmp/{value}", cache_dir=f"~/{value}",
            data_dir=value,
        )  # fmt: skip
        exports = export_lines({"X_ENV": value}, {"HF_TOKEN": SecretStr(value)}, {}, redact=False)
        script = render_script(
            NEMO_DIR,
            exports,
            argv,
            env={"NEMORUN_HOME": RPath(f"~/{value}"), "CONTAINER": RPath(value)},
        )
        result = await pool.run(dev_profile.login, "bash -l -s", input=script, timeout_s=30,
                                check=False)  # fmt: skip
        assert result.returncode != 0  # run.py refuses the missing script or image
        # Real script and image: the hostile partition, time and account reach nemo-run.
        argv = nemo.nemo_run_argv(
            JobShape(nodes=1, partition=value, time_limit=value, account=value),
            cluster_type="hcc-a4", work_dir=NEMO_DIR, image=f"{NEMO_DIR}/nemo-20250721.sqsh",
            script="sft/llama3p1_8b_sft.py", experiment_name=f"inj-{unique}",
        )  # fmt: skip
        script = render_script(NEMO_DIR, exports, argv, env={"NEMORUN_HOME": RPath(NEMO_DIR)})
        result = await pool.run(dev_profile.login, "bash -l -s", input=script, timeout_s=60,
                                check=False)  # fmt: skip
        assert "Job id:" not in result.stdout
    await login.run(f"rm -rf {NEMO_DIR}/experiments/inj-{unique}", check=False)
    assert not await login.exists(marker)


async def test_hostile_values_refused_by_the_spec_never_reach_the_cluster(
    pool: SSHPool, dev_profile: ClusterProfile, login: LoginShell, unique: str
) -> None:
    marker = f"/tmp/trainbot-pwned-{unique}"
    for value in hostile_values(marker):
        for field in ("name", "partition", "time_limit", "image", "script", "launch_id"):
            values: dict[str, object] = {
                "profile": dev_profile, "launch_id": "L-1", "framework": "nemo", "nodes": 1,
                "script": "sft/llama3p1_8b_sft.py", field: value,
            }  # fmt: skip
            with pytest.raises(ValueError):
                spec = LaunchSpec(**values)  # type: ignore[arg-type]
                await submit(pool, plan_launch(spec))
    assert not await login.exists(marker)


async def _wait_for_jobs_to_end(login: LoginShell, job_ids: list[str]) -> None:
    for _ in range(60):
        out = await login.run(f"squeue -h -o %i -j {','.join(job_ids)}", check=False)
        if not out.stdout.strip():
            return
        await asyncio.sleep(0.5)
