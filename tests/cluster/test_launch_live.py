"""Launches on the dev cluster, followed to the end with the collector."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from pydantic import SecretStr

from cluster.errors import SlurmCommandFailed
from cluster.launching.jobs import cancel, find_jobs_for_launch, tail_log
from cluster.launching.launch import plan_launch, submit
from cluster.launching.spec import LaunchSpec
from cluster.preflight.checks import dry_run, preflight
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import is_terminal
from cluster.ssh.pool import SSHPool
from cluster.watching.collector import JobSnapshot, collect
from cluster.watching.evidence import gather
from cluster.watching.tracking import Tracking
from tests.conftest import LoginShell

pytestmark = pytest.mark.devcluster
FAST = {
    "DEVCLUSTER_STEPS": "6",
    "DEVCLUSTER_STEP_TIME_S": "0.3",
    "DEVCLUSTER_CKPT_EVERY": "2",
    "DEVCLUSTER_SAVE_TIME_S": "0.2",
    "DEVCLUSTER_TOKENIZER_RACE": "off",
}


async def follow(
    pool: SSHPool, profile: ClusterProfile, job: Tracking, timeout_s: float = 90
) -> tuple[str, str, list[str], JobSnapshot]:
    """Poll until the job ends; returns (state, all log text, checkpoint names, last snapshot)."""
    text, ckpts = "", list[str]()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        known = {job.job_id: ckpts}
        result = await collect(
            pool, profile.login, [job], known_checkpoints=known, cluster=profile.name
        )
        assert result.round_trips == 1 and len(result.slurm_calls) <= 2
        snap = result.jobs[job.job_id]
        text += snap.log.text
        ckpts += [c.name for c in snap.new_checkpoints]
        job = snap.advance(job)
        if snap.state is not None and is_terminal(snap.state) and not snap.log.more:
            return snap.state, text, ckpts, snap
        await asyncio.sleep(0.5)
    raise AssertionError(f"job {job.job_id} did not finish in {timeout_s} s")


async def test_nemo_launch_to_completed(
    pool: SSHPool,
    dev_profile: ClusterProfile,
    login: LoginShell,
    launch_id: str,
    jobs_to_cancel: list[str],
) -> None:
    comment = f"trainbot {launch_id} by U0ALICE"
    spec = LaunchSpec(
        profile=dev_profile, launch_id=launch_id, framework="nemo", nodes=1,
        script="sft/llama3p1_8b_sft.py", name="nemo-live", env=FAST, comment=comment,
    )  # fmt: skip
    assert (await preflight(pool, spec)).ok
    sub = await submit(pool, plan_launch(spec))
    jobs_to_cancel.append(sub.job_id)
    # Whose job it is reaches Slurm through the sbatch nemo-run runs (SBATCH_COMMENT).
    shown = await login.run(f"scontrol show job {sub.job_id} -o")
    assert f"Comment={comment}" in shown.stdout, shown.stdout
    tracking = sub.tracking
    assert tracking.log_dir and tracking.checkpoint_dir.endswith(
        f"nemo-live-{launch_id}/default/checkpoints"
    )
    state, text, ckpts, snap = await follow(pool, dev_profile, sub.tracking)
    assert state == "COMPLETED"
    assert "global_step: 5 | reduced_train_loss" in text
    assert "`Trainer.fit` stopped: `max_steps=6` reached." in text
    # Fine-tuning keeps a -last link to the newest save: a second name, the same steps.
    assert sorted({c.split("-step=")[1].split("-")[0] for c in ckpts}) == ["1", "3", "5"]
    assert snap.log.path.endswith(f"_{sub.job_id}_0.out")
    evidence = await gather(pool, dev_profile.login, tracking, cluster="a4")
    names = [path.rsplit("/", 1)[1] for path in evidence.read]
    assert names[0] == snap.log.path.rsplit("/", 1)[1]  # the main log first
    assert any(n.startswith("sbatch_") and n.endswith(f"_{sub.job_id}.out") for n in names)
    assert evidence.record is not None and evidence.state == "COMPLETED"
    found = await find_jobs_for_launch(pool, dev_profile, launch_id)
    assert [(f.job_id, f.state) for f in found] == [(sub.job_id, "COMPLETED")]
    assert f"trainer-trainer.nemo-live-{launch_id}" == found[0].name
    assert "max_steps=6" in await tail_log(pool, dev_profile, snap.log.path, lines=3)


async def test_nemo_rl_launch_to_completed_with_secret_kept_out_of_ps(
    pool: SSHPool,
    dev_profile: ClusterProfile,
    login: LoginShell,
    launch_id: str,
    jobs_to_cancel: list[str],
) -> None:
    secret = "hf_" + launch_id.replace("-", "") + "Zq9secret"
    spec = LaunchSpec(
        profile=dev_profile, launch_id=launch_id, framework="nemo-rl", nodes=1,
        script="algorithms/dpo.sh", overrides=(("dpo.max_num_steps", "4"),),
        env={**FAST, "DEVCLUSTER_STEP_TIME_S": "1"}, secrets={"HF_TOKEN": SecretStr(secret)},
    )  # fmt: skip
    watch = "for i in $(seq 60); do ps -eo args; sleep 0.05; done"
    ps_during_submit, sub = await asyncio.gather(
        login.run(watch, timeout_s=30), submit(pool, plan_launch(spec))
    )
    jobs_to_cancel.append(sub.job_id)
    job = sub.tracking
    ps_outputs = [ps_during_submit.stdout]
    for _ in range(6):
        ps_outputs.append((await login.run("ps -eo args")).stdout)
        await asyncio.sleep(0.3)
    state, text, ckpts, snap = await follow(pool, dev_profile, job)
    assert all(secret not in out for out in ps_outputs)
    assert any("run_nemo_rl.py dpo" in out for out in ps_outputs)  # ps does see the job
    digest = hashlib.sha256(secret.encode()).hexdigest()[:12]
    assert f"HF_TOKEN is set (sha256 {digest})" in text
    assert secret not in text
    assert state == "COMPLETED"
    assert "Step 4/4" in text and "  • loss: " in text  # DPO's metrics are lower case
    assert sorted(ckpts) == ["step_2", "step_4"]
    assert snap.log.path.endswith(f"/nemo_rl/{sub.job_id}/nemo_rl_output.log")


async def test_interactive_attach_appears_then_cancel(
    pool: SSHPool, dev_profile: ClusterProfile, launch_id: str, jobs_to_cancel: list[str]
) -> None:
    spec = LaunchSpec(
        profile=dev_profile, launch_id=launch_id, framework="nemo-rl", nodes=1,
        interactive=True, env={"DEVCLUSTER_ATTACH_DELAY_S": "1"},
    )  # fmt: skip
    sub = await submit(pool, plan_launch(spec))
    jobs_to_cancel.append(sub.job_id)
    job = sub.tracking
    for _ in range(60):
        snap = (await collect(pool, dev_profile.login, [job])).jobs[sub.job_id]
        if snap.attach_ready:
            break
        await asyncio.sleep(0.5)
    assert snap.attach_ready and snap.state == "RUNNING"
    await cancel(pool, dev_profile, [sub.job_id])
    state, _, _, _ = await follow(pool, dev_profile, job, timeout_s=30)
    assert state == "CANCELLED"


async def test_invalid_partition_caught_before_sbatch(
    pool: SSHPool, dev_profile: ClusterProfile, launch_id: str
) -> None:
    spec = LaunchSpec(
        profile=dev_profile, launch_id=launch_id, framework="nemo", nodes=1,
        script="sft/llama3p1_8b_sft.py", partition="general",
    )  # fmt: skip
    before = pool.stats.round_trips
    result = await dry_run(pool, spec)
    assert pool.stats.round_trips - before == 1
    assert not result.preflight.ok
    assert result.preflight.message() == (
        "Partition 'general' does not exist on a4. Partitions there: a3m*, a3u, a4, a3h."
    )
    assert "--partition general" in result.command_line
    assert await find_jobs_for_launch(pool, dev_profile, launch_id) == []


async def test_preflight_lists_every_problem(
    pool: SSHPool, dev_profile: ClusterProfile, launch_id: str
) -> None:
    spec = LaunchSpec(
        profile=dev_profile, launch_id=launch_id, framework="nemo", nodes=9,
        script="sft/nope.py", image="~/missing/x.sqsh",
    )  # fmt: skip
    result = await preflight(pool, spec)
    failed = {c.name: c.message for c in result.failures}
    assert set(failed) == {"nodes", "recipe", "image"}
    assert "has 4 nodes; 9 asked for" in failed["nodes"]
    assert "sft/llama3p1_8b_sft.py" in failed["recipe"]
    assert "nemo/nemo-20250721.sqsh" in failed["image"]


async def test_sbatch_refusal_is_translated(
    pool: SSHPool, dev_profile: ClusterProfile, launch_id: str
) -> None:
    spec = LaunchSpec(
        profile=dev_profile, launch_id=launch_id, framework="nemo-rl", nodes=1,
        interactive=True, partition="general",
    )  # fmt: skip
    with pytest.raises(SlurmCommandFailed, match="Invalid partition name specified") as info:
        await submit(pool, plan_launch(spec))
    assert info.value.returncode == 1 and info.value.cluster == "a4"
