"""Image jobs on the dev cluster: ``sbatch`` over SSH, the stand-ins of ``enroot import``
and ``gcloud storage cp`` on the nodes, and the end read from Slurm and the job's log."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from cluster.images.jobs import (
    ImageJob,
    Outcome,
    image_job_state,
    job_script,
    outcome,
    plan_fetch,
    plan_import,
    submit_image_job,
)
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import is_terminal
from cluster.ssh.pool import SSHPool
from tests.conftest import LoginShell

pytestmark = pytest.mark.devcluster


async def run_to_end(
    pool: SSHPool, profile: ClusterProfile, job: ImageJob, jobs: list[str], timeout_s: float = 90
) -> tuple[str, Outcome]:
    job_id = await submit_image_job(pool, profile, job)
    jobs.append(job_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        state = await image_job_state(pool, profile, job, job_id)
        if state.state and is_terminal(state.state):
            return job_id, outcome(job, state.state, state.exit_code, state.log_tail)
        await asyncio.sleep(1.0)
    raise AssertionError(f"image job {job_id} did not end in {timeout_s} s")


def _profile(dev_profile: ClusterProfile, unique: str, region: str | None = None) -> ClusterProfile:
    return dev_profile.model_copy(
        update={"image_dir": f"~/devcluster-images-{unique}", "region": region}
    )


async def test_import_builds_the_sqsh_in_the_image_directory(
    pool: SSHPool,
    dev_profile: ClusterProfile,
    login: LoginShell,
    unique: str,
    jobs_to_cancel: list[str],
) -> None:
    profile = _profile(dev_profile, unique)
    job = plan_import(profile, "nvcr.io/nvidia/nemo:26.02", f"nemo-{unique}")
    assert job.target == f"~/devcluster-images-{unique}/nemo-{unique}.sqsh"
    try:
        job_id, end = await run_to_end(pool, profile, job, jobs_to_cancel)
        assert end.ok, end.text
        assert f"image=nemo-{unique}" in end.text
        head = await login.run(f"head -c 60 {job.target}; ls -a ~/devcluster-images-{unique}")
        assert head.stdout.startswith("hsqs stand-in image for the dev cluster: docker://nvcr.io#")
        assert ".partial-" not in head.stdout  # renamed when whole
        log = await login.run(f"cat ~/devcluster-images-{unique}/.nemo-{unique}.{job_id}.log")
        assert "[INFO] Creating squashfs filesystem..." in log.stdout
        assert "no enroot credentials file" in log.stdout
        # the private credentials directory is gone once the job ended
        left = await login.run("ls -d /tmp/trainbot-enroot.* 2>/dev/null | wc -l", check=False)
        assert left.stdout.strip() == "0"
    finally:
        await login.run(f"rm -rf ~/devcluster-images-{unique}", check=False)


async def test_import_from_a_private_registry_uses_the_site_credentials_and_401s_without(
    pool: SSHPool,
    dev_profile: ClusterProfile,
    login: LoginShell,
    unique: str,
    jobs_to_cancel: list[str],
) -> None:
    """The credentials are enroot's own file of the Unix user the job runs as; the job
    copies it into a private directory, and trainbot never sees it."""
    profile = _profile(dev_profile, unique)
    job = plan_import(profile, "registry.devcluster.test/team/model:1", f"private-{unique}")
    creds = "~/.config/enroot/.credentials"
    keep = f"~/.config/enroot/.credentials.kept-{unique}"
    await login.run(f"mkdir -p ~/.config/enroot && (mv {creds} {keep} 2>/dev/null || true)")
    try:
        await login.run(
            "printf 'machine registry.devcluster.test login team password expired-key\\n' "
            f"> {creds} && chmod 600 {creds}"
        )
        script = job_script(job)
        assert "expired-key" not in script and ".credentials" in script
        _, end = await run_to_end(pool, profile, job, jobs_to_cancel)
        assert not end.ok and end.cause == "auth" and end.site, end.text
        assert "401 Unauthorized" in end.text
        assert "https://registry.devcluster.test/v2/team/model/manifests/1" in end.text
        assert "~/.config/enroot/.credentials" in end.text  # where to fix it
        assert "expired-key" not in end.text
        await login.run(
            "printf 'machine registry.devcluster.test login team password "
            f"devcluster-registry-key\\n' > {creds}"
        )
        _, end = await run_to_end(pool, profile, job, jobs_to_cancel)
        assert end.ok, end.text
        assert (await login.run(f"test -s {job.target}", check=False)).returncode == 0
    finally:
        await login.run(
            f"rm -f {creds}; (mv {keep} {creds} 2>/dev/null || true); "
            f"rm -rf ~/devcluster-images-{unique}",
            check=False,
        )


async def _wait(
    pool: SSHPool, profile: ClusterProfile, job: ImageJob, job_id: str, timeout_s: float = 90
) -> Outcome:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        state = await image_job_state(pool, profile, job, job_id)
        if state.state and is_terminal(state.state):
            return outcome(job, state.state, state.exit_code, state.log_tail)
        await asyncio.sleep(1.0)
    raise AssertionError(f"image job {job_id} did not end in {timeout_s} s")


async def test_a_full_disk_is_said_and_leaves_no_partial_image(
    pool: SSHPool,
    dev_profile: ClusterProfile,
    login: LoginShell,
    unique: str,
    jobs_to_cancel: list[str],
) -> None:
    profile = _profile(dev_profile, unique)
    job = plan_import(profile, "nvcr.io/nvidia/nemo:26.02", f"full-{unique}")
    knob = f"~/devcluster-control/full-{unique}.env"
    await login.run(f"printf 'enroot_fault=disk_full\\nimage_s=1\\n' > {knob}")
    try:
        _, end = await run_to_end(pool, profile, job, jobs_to_cancel)
        assert not end.ok and end.cause == "disk_full" and end.site, end.text
        assert "No space left on device" in end.text
        assert f"~/devcluster-images-{unique}" in end.text
        listing = await login.run(f"ls -a ~/devcluster-images-{unique}")
        assert ".sqsh" not in listing.stdout.replace(".log", "")  # no partial, no image
    finally:
        await login.run(f"rm -rf {knob} ~/devcluster-images-{unique}", check=False)


async def test_fetch_copies_the_prebuilt_image_and_a_401_is_said(
    pool: SSHPool,
    dev_profile: ClusterProfile,
    login: LoginShell,
    unique: str,
    jobs_to_cancel: list[str],
) -> None:
    profile = _profile(dev_profile, unique, region="europe")
    job = plan_fetch(profile, "nemo-rl")
    assert job.source == "gs://vmds-containers-europe/vmds_nemo_squashfs/nemo_rl-h20260302.sqsh"
    knob = f"~/devcluster-control/{unique}.env"
    try:
        # a knob of its own: the job's name carries the image's name, made unique here
        await login.run(f"printf 'gcloud_fault=401\\nimage_s=1\\n' > {knob}")
        job = replace(
            job,
            name=f"nemo_rl-{unique}",
            target=f"~/devcluster-images-{unique}/nemo_rl-{unique}.sqsh",
        )
        _, end = await run_to_end(pool, profile, job, jobs_to_cancel)
        assert not end.ok and end.cause == "auth" and end.site, end.text
        assert "HTTPError 401" in end.text and "gcloud auth login" in end.text
        await login.run(f"printf 'image_s=1\\n' > {knob}")
        _, end = await run_to_end(pool, profile, job, jobs_to_cancel)
        assert end.ok, end.text
        head = await login.run(f"head -c 80 {job.target}")
        assert head.stdout.startswith("hsqs stand-in image for the dev cluster: gs://")
    finally:
        await login.run(f"rm -rf {knob} ~/devcluster-images-{unique}", check=False)
