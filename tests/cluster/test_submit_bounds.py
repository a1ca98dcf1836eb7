"""A submit is bounded on the login node itself, and a command this side gave up on ends
there too: what lets a worker that takes over a launch conclude "never submitted"."""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster.launching.jobs import find_jobs_for_launch
from cluster.launching.launch import (
    REMOTE_SHELL,
    SUBMIT_TOO_LATE,
    login_bound,
    on_login_clock,
    plan_launch,
    submit,
)
from cluster.launching.spec import LaunchSpec
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from tests.conftest import LoginShell

pytestmark = pytest.mark.devcluster


async def test_a_submit_script_that_arrives_after_its_deadline_submits_nothing(
    pool: SSHPool, dev_profile: ClusterProfile, launch_id: str
) -> None:
    """What a worker that stalled past its submit's deadline would send, sent as it sends
    it: the login node refuses it, and Slurm has no job for the launch."""
    spec = LaunchSpec(
        profile=dev_profile, launch_id=launch_id, framework="nemo", nodes=1,
        script="sft/llama3p1_8b_sft.py", name="late", submit_by=int(time.time()) - 1,
    )  # fmt: skip
    result = await pool.run(
        dev_profile.login,
        REMOTE_SHELL,
        input=plan_launch(spec).script(redact=False),
        timeout_s=60,
        check=False,
        cluster="a4",
    )
    assert result.returncode != 0, result  # 75, or 1 where a login shell's exit hooks trip
    assert SUBMIT_TOO_LATE in result.stderr
    assert await find_jobs_for_launch(pool, dev_profile, launch_id) == []


async def test_a_command_given_up_on_ends_on_the_login_node(
    pool: SSHPool, dev_profile: ClusterProfile, login: LoginShell, launch_id: str
) -> None:
    """A worker that loses its lock cancels its work: the remote command is signalled."""
    seconds = f"300.{int(launch_id[2:], 16)}"  # a sleep no one else runs
    task = asyncio.create_task(
        pool.run(dev_profile.login, f"exec sleep {seconds}", timeout_s=60, cluster="a4")
    )

    async def remote_running() -> bool:
        return bool((await login.run(f"pgrep -f '[s]leep {seconds}' || true")).stdout.strip())

    for _ in range(50):
        if await remote_running():
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the remote sleep never started")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(25):
        if not await remote_running():
            return
        await asyncio.sleep(0.2)
    raise AssertionError("the remote command still runs after the caller gave up")


@pytest.mark.parametrize(
    "read_by",
    [1_000_000.4, 400_000.0, 1_600_000.0],  # clocks agree; this side 10 min behind; ahead
)
def test_the_bound_on_the_login_node_is_its_own_reading_plus_the_time_left(
    read_by: float,
) -> None:
    submit_by = read_by + 299.6  # 299.6 s left on this side's clock, whatever it reads
    assert on_login_clock(submit_by, 1_000_000, read_by) == 1_000_000 + 299


async def test_a_login_node_whose_clock_differs_by_minutes_submits_within_the_same_bound(
    pool: SSHPool, dev_profile: ClusterProfile, launch_id: str, jobs_to_cancel: list[str]
) -> None:
    """This side's clock 10 minutes behind the login node's: the login node used to read
    the deadline as passed and refuse every submit (and, 10 minutes ahead, to let a
    stalled one run 10 minutes past the bound the workers rely on). The bound now is
    the login node's own reading plus the time left, measured on this side's clock."""
    behind_s = 600.0

    def skewed() -> float:
        return time.time() - behind_s

    spec = LaunchSpec(
        profile=dev_profile, launch_id=launch_id, framework="nemo", nodes=1,
        script="sft/llama3p1_8b_sft.py", name="skew", submit_by=int(skewed()) + 120,
    )  # fmt: skip
    before = time.time()
    bound = await login_bound(pool, spec, skewed)
    after = time.time()
    # About 120 s from the call, on the login node: never later than 120 s after the call
    # began, and earlier only by the whole seconds `date +%s` and submit_by drop and by the
    # round trip (a busy CI machine's round trip is seconds, not minutes).
    assert before + 120 - 2 - (after - before) <= bound <= after + 120
    submission = await submit(pool, plan_launch(spec), now=skewed)
    jobs_to_cancel.append(submission.job_id)
    assert [j.job_id for j in await find_jobs_for_launch(pool, dev_profile, launch_id)] == [
        submission.job_id
    ]
