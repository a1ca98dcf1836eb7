"""A node fails under a running job: the collector sees the requeue, not a new job."""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest

from cluster.launching.launch import plan_launch, submit
from cluster.launching.spec import LaunchSpec
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from cluster.watching.collector import collect
from tests.conftest import PROJECT, LoginShell

pytestmark = [
    pytest.mark.devcluster,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="devcluster/node needs root"),
]


def node(action: str, name: str) -> None:
    subprocess.run([str(PROJECT / "devcluster" / "node"), action, name], check=True, timeout=60)


async def test_requeue_after_node_failure_is_seen(
    pool: SSHPool,
    dev_profile: ClusterProfile,
    login: LoginShell,
    launch_id: str,
    jobs_to_cancel: list[str],
) -> None:
    spec = LaunchSpec(
        profile=dev_profile, launch_id=launch_id, framework="nemo-rl", nodes=1,
        script="algorithms/sft.sh", env={"DEVCLUSTER_STEPS": "200", "DEVCLUSTER_STEP_TIME_S": "1"},
    )  # fmt: skip
    sub = await submit(pool, plan_launch(spec))
    jobs_to_cancel.append(sub.job_id)
    job = sub.tracking
    for _ in range(60):
        snap = (await collect(pool, dev_profile.login, [job])).jobs[sub.job_id]
        if snap.state == "RUNNING" and snap.queue is not None:
            break
        await asyncio.sleep(0.5)
    assert snap.queue is not None and snap.state == "RUNNING"
    victim = snap.queue.nodelist
    others = await login.run(f"squeue -h -o %i -w {victim}")
    if others.stdout.split() != [sub.job_id]:
        pytest.skip(f"other jobs run on {victim}; not failing a node under them")
    node("fail", victim)
    try:
        for _ in range(80):
            snap = (await collect(pool, dev_profile.login, [job])).jobs[sub.job_id]
            if snap.restarts >= 1:
                break
            await asyncio.sleep(0.5)
    finally:
        node("restore", victim)
    assert snap.restarts == 1 and snap.state in ("PENDING", "CONFIGURING", "RUNNING", "REQUEUED")
    history = await login.run(f"sacct -D -X -P -n -o JobID,State -j {sub.job_id}")
    assert f"{sub.job_id}|NODE_FAIL" in history.stdout
