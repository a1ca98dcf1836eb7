"""Runs on the dev cluster that print what the real tools print (see the stand-ins'
sources for the upstream files and commits they follow), launched the way the bot
launches them and followed the way the poller follows them: the collector's one round
trip per poll, each snapshot applied to the launch."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

import pytest

from bot.engine.tracking import apply_snapshot
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.settings.sections import Watch
from bot.wording import thread
from cluster.launching.launch import plan_launch, submit
from cluster.launching.spec import LaunchSpec
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from cluster.watching.collector import collect
from commands.requests import InteractiveRequest, TrainRequest
from tests.conftest import LoginShell

pytestmark = pytest.mark.devcluster
QUICK = {"DEVCLUSTER_STEP_TIME_S": "0.3", "DEVCLUSTER_SAVE_TIME_S": "0.1"}
QUICK["DEVCLUSTER_TOKENIZER_RACE"] = "off"


async def launched(
    pool: SSHPool, profile: ClusterProfile, jobs: list[str], framework: str, workload: str,
    script: str, env: dict[str, str], watch: Watch | None = None,
) -> Launch:  # fmt: skip
    """A launch of ``script`` submitted through the bot's own plan and submit."""
    launch_id = "L-" + uuid.uuid4().hex[:6]
    spec = LaunchSpec(
        profile=profile, launch_id=launch_id, framework=framework, nodes=1, script=script,
        name=f"fmt-{workload}", env={**QUICK, **env},
    )  # fmt: skip
    sub = await submit(pool, plan_launch(spec))
    jobs.append(sub.job_id)
    request = TrainRequest(
        workload=workload, model="llama3p1_8b", framework=framework, cluster=profile.name, nodes=1
    )
    launch = Launch(id=launch_id, request=request, user_id="U0ALICE", channel="C1")
    launch.phase = Phase.SUBMITTED
    attempt = Attempt(number=1, job_id=sub.job_id, submitted_at=time.time())
    attempt.tracking = sub.tracking
    launch.attempts.append(attempt)
    return launch


async def follow(
    pool: SSHPool, profile: ClusterProfile, launches: list[Launch], watch: Watch | None = None,
    timeout_s: float = 150, events_out: list[Event] | None = None,
    meanwhile: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, list[str]]:  # fmt: skip
    """Poll until every launch is done, as the poller does; the thread lines each one got
    (every event in ``events_out``). ``meanwhile`` runs after each poll."""
    said: dict[str, list[str]] = {launch.id: [] for launch in launches}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        live = [launch for launch in launches if launch.phase != Phase.DONE]
        if not live:
            return said
        jobs = [launch.attempts[-1].tracking for launch in live]
        result = await collect(
            pool,
            profile.login,
            [job for job in jobs if job is not None],
            known_checkpoints={launch.job_id: launch.checkpoints for launch in live},
            known_restarts={launch.job_id: launch.attempts[-1].restarts for launch in live},
            cluster=profile.name,
        )
        for launch in live:
            snap = result.jobs[launch.job_id]
            events = apply_snapshot(launch, snap, profile, watch or Watch(), now=time.time())
            said[launch.id] += [thread.line(e) for e in events if e.kind == "thread"]
            if events_out is not None:
                events_out += events
        if meanwhile is not None:
            await meanwhile()
        await asyncio.sleep(0.5)
    raise AssertionError(f"not done in {timeout_s} s: {[(x.id, x.phase) for x in launches]}")


async def test_dpo_and_rm_runs_show_their_loss(
    pool: SSHPool, dev_profile: ClusterProfile, jobs_to_cancel: list[str]
) -> None:
    env = {"DEVCLUSTER_STEPS": "4", "DEVCLUSTER_CKPT_EVERY": "4"}
    runs = [
        await launched(pool, dev_profile, jobs_to_cancel, "nemo-rl", w, f"algorithms/{w}.sh", env)
        for w in ("dpo", "rm")
    ]
    await follow(pool, dev_profile, runs)
    for launch in runs:
        assert launch.outcome == "COMPLETED", launch.ending
        assert [step for step, _ in launch.progress_history] == [1, 2, 3, 4]
        assert all(loss is not None and 0 < loss < 1 for _, loss in launch.progress_history)
        assert launch.progress.loss is not None


async def test_a_two_epoch_sft_shows_monotonic_steps(
    pool: SSHPool, dev_profile: ClusterProfile, jobs_to_cancel: list[str]
) -> None:
    env = {"DEVCLUSTER_STEPS": "6", "DEVCLUSTER_EPOCHS": "2", "DEVCLUSTER_EPOCH_STEPS": "3"}
    env["DEVCLUSTER_CKPT_EVERY"] = "3"
    run = await launched(
        pool, dev_profile, jobs_to_cancel, "nemo-rl", "sft", "algorithms/sft.sh", env
    )
    said = await follow(pool, dev_profile, [run])
    assert run.outcome == "COMPLETED", run.ending
    assert [step for step, _ in run.progress_history] == [1, 2, 3, 4, 5, 6]
    assert (run.progress.step, run.progress.total) == (6, 6)
    saved = [line for line in said[run.id] if line.startswith("💾")]
    assert saved == ["💾 Checkpoint step 3 saved.", "💾 Checkpoint step 6 saved."]


async def test_nemo_runs_show_one_validation_per_validation_and_each_checkpoint_once(
    pool: SSHPool, dev_profile: ClusterProfile, jobs_to_cancel: list[str]
) -> None:
    # 7 steps, validation after steps 3 and 6 (0-based 2 and 5), saves at 2, 5 and the end (6).
    env = {"DEVCLUSTER_STEPS": "7", "DEVCLUSTER_VAL_EVERY": "3", "DEVCLUSTER_CKPT_EVERY": "3"}
    runs = [
        await launched(pool, dev_profile, jobs_to_cancel, "nemo", w, f"{w}/llama3p1_2b_{s}.py", env)
        for w, s in (("pretrain", "pt"), ("sft", "sft"))
    ]
    said = await follow(pool, dev_profile, runs)
    for launch in runs:
        assert launch.outcome == "COMPLETED", launch.ending
        assert [step for step, _ in launch.validation_history] == [3, 6]
        saved = [line for line in said[launch.id] if line.startswith("💾")]
        assert saved == [f"💾 Checkpoint step {n} saved." for n in (2, 5, 6)]
        tracking = launch.attempts[-1].tracking
        assert tracking is not None and tracking.checkpoint_dir.endswith("/default/checkpoints")


async def test_a_ray_sub_layout_run_is_followed_to_completed_across_a_requeue(
    pool: SSHPool, dev_profile: ClusterProfile, login: LoginShell, jobs_to_cancel: list[str]
) -> None:
    # The launcher writes what NeMo-RL's ray.sub writes: <id>-logs/ray-driver.log, and
    # <id>-1-logs/ after the requeue (Slurm holds a requeued job about two minutes).
    env = {"DEVCLUSTER_RL_LAYOUT": "ray.sub", "DEVCLUSTER_STEPS": "8"}
    env |= {"DEVCLUSTER_STEP_TIME_S": "1", "DEVCLUSTER_CKPT_EVERY": "2"}
    run = await launched(
        pool, dev_profile, jobs_to_cancel, "nemo-rl", "sft", "algorithms/sft.sh", env
    )
    paths: list[str] = []

    async def requeue_at_step_3() -> None:
        tracking = run.attempts[-1].tracking
        if tracking is not None and tracking.log_path and tracking.log_path not in paths:
            paths.append(tracking.log_path)
        if run.progress.step >= 3 and run.attempts[-1].restarts == 0 and not requeued:
            requeued.append(run.job_id)
            await login.run(f"scontrol requeue {run.job_id}")

    requeued: list[str] = []
    events: list[Event] = []
    said = await follow(
        pool, dev_profile, [run], timeout_s=360, events_out=events, meanwhile=requeue_at_step_3
    )
    assert requeued and run.outcome == "COMPLETED", run.ending
    assert [p.rsplit("/", 2)[-2:] for p in paths] == [
        [f"{run.job_id}-logs", "ray-driver.log"],
        [f"{run.job_id}-1-logs", "ray-driver.log"],
    ]
    assert run.progress.step == 8 and run.progress_history[-1][0] == 8
    notes = [line for line in said[run.id] if "Slurm requeued" in line]
    assert len(notes) == 1 and notes[0].startswith(f"🔁 Slurm requeued job {run.job_id}")
    assert not [e for e in events if e.kind == "oncall"]  # not paged as a node failure


async def test_a_long_start_up_that_prints_is_not_a_hang_and_a_silent_one_is(
    pool: SSHPool, dev_profile: ClusterProfile, login: LoginShell, jobs_to_cancel: list[str]
) -> None:
    # Time-compressed: a 12 s start-up against a 4 s silence bound, as a 15-minute one
    # against the default 10 minutes.
    watch = Watch(hang_min_s=4, hang_step_factor=1)
    env = {"DEVCLUSTER_STEPS": "3", "DEVCLUSTER_STARTUP_S": "12"}
    talking = await launched(
        pool, dev_profile, jobs_to_cancel, "nemo-rl", "grpo", "algorithms/grpo.sh",
        {**env, "DEVCLUSTER_STARTUP_LINE_S": "1"},
    )  # fmt: skip
    silent = await launched(
        pool, dev_profile, jobs_to_cancel, "nemo", "pretrain", "pretrain/llama3p1_2b_pt.py",
        {**env, "DEVCLUSTER_STARTUP_LINE_S": "0"},
    )  # fmt: skip

    async def cancel_once_reported() -> None:
        if silent.attempts[-1].hang_reported and silent.phase != Phase.DONE:
            await login.run(f"scancel {silent.job_id}", check=False)

    said = await follow(
        pool, dev_profile, [talking, silent], watch=watch, meanwhile=cancel_once_reported
    )
    assert talking.outcome == "COMPLETED", talking.ending
    assert not talking.attempts[-1].hang_reported
    assert not [line for line in said[talking.id] if "No progress" in line]
    (report,) = [line for line in said[silent.id] if "No progress" in line]
    assert "(last seen at start-up, last line" in report


async def test_an_interactive_job_in_the_ray_sub_layout_says_its_attach_helper(
    pool: SSHPool, dev_profile: ClusterProfile, login: LoginShell, jobs_to_cancel: list[str]
) -> None:
    launch_id = "L-" + uuid.uuid4().hex[:6]
    env = {"DEVCLUSTER_RL_LAYOUT": "ray.sub", "DEVCLUSTER_ATTACH_DELAY_S": "1"}
    spec = LaunchSpec(
        profile=dev_profile, launch_id=launch_id, framework="nemo-rl", nodes=1,
        interactive=True, env=env,
    )  # fmt: skip
    sub = await submit(pool, plan_launch(spec))
    jobs_to_cancel.append(sub.job_id)
    request = InteractiveRequest(cluster=dev_profile.name, nodes=1)
    run = Launch(id=launch_id, request=request, user_id="U0ALICE", channel="C1")
    run.phase = Phase.SUBMITTED
    run.attempts.append(Attempt(number=1, job_id=sub.job_id, tracking=sub.tracking))

    async def cancel_once_attachable() -> None:
        if run.attempts[-1].attach_ready:
            await login.run(f"scancel {sub.job_id}", check=False)

    said = await follow(pool, dev_profile, [run], meanwhile=cancel_once_attachable)
    (ready,) = [line for line in said[run.id] if line.startswith("🔌")]
    helper = f"{dev_profile.recipes_dir}/nemo_rl/{sub.job_id}-attach.sh"
    assert f"(`bash {helper}`)" in ready, ready
    found = await login.run(f"ls {helper}", check=False)  # (a ~ in it is the shell's)
    assert found.returncode == 0, found.stderr
