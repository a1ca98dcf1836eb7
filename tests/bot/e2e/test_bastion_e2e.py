"""The bot on the dev cluster described as a generic Slurm GPU cluster (no type preset)
whose login node only a bastion reaches: launch, attach and cancel all go that way."""

from __future__ import annotations

import io
import shlex
import subprocess
from pathlib import Path

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.launch import Phase
from bot.runtime.assembly import running
from bot.runtime.doctor import run_doctor, run_known_hosts
from bot.text.front import Incoming
from tests.bot.botkit import (
    DEV,
    bot_settings,
    dev_config,
    in_order,
    knobs,
    launch_id_in,
    match_in,
    sacct_rows,
    wait_delivered,
    wait_for_launch,
    wait_until,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]


def person_ssh_config(tmp_path: Path) -> Path:
    """What a person's ~/.ssh/config holds for this cluster: their key, the host keys
    (OpenSSH hands ``-F`` on to the ``-J`` hop)."""
    path = tmp_path / "ssh_config"
    path.write_text(
        "Host *\n"
        f"  IdentityFile {DEV / 'id_ed25519'}\n"
        f"  UserKnownHostsFile {DEV / 'known_hosts_bastion'}\n"
        "  StrictHostKeyChecking yes\n  BatchMode yes\n"
    )
    return path


async def test_launch_attach_and_cancel_through_the_bastion(
    unique: str, cancel_jobs: list[str], tmp_path: Path
) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    config = dev_config(file="trainbot-bastion.yaml")
    assert list(config.clusters) == ["hpc"] and config.clusters["hpc"].type is None
    async with (
        knobs(unique, attach_delay_s=1),
        running(bot_settings(), config, front) as bot,
    ):
        reply = await handle_line(
            f"/train interactive nodes=1 cluster=hpc name={unique}", bot.core, front, user="alice"
        )
        assert reply is not None and not reply.error, reply
        launch_id = launch_id_in(reply.text)
        launch = await wait_for_launch(bot.store, launch_id, done=Phase.RUNNING)
        cancel_jobs.append(launch.job_id)

        async def attach_ready() -> bool:
            launch = await bot.store.launches.get(launch_id)
            return bool(launch and launch.attempts[-1].attach_ready)

        await wait_until(attach_ready, "attach.sh", 30)
        attach = await handle_line(f"/attach {launch_id}", bot.core, front, user="alice")
        assert attach is not None and not attach.error, attach
        command = match_in(r"```(.*)```", attach.text, 1)
        remote = f"bash ~/vertex-oss-training/nemo_rl/{launch.job_id}/attach.sh"
        assert command == f"ssh -t -J jump@127.0.0.1:2200 -p 2201 trainer@127.0.0.1 {remote}"
        argv = shlex.split(command)
        argv[1:1] = ["-F", str(person_ssh_config(tmp_path))]
        out = subprocess.run(
            [*argv, "bash", "-c", "'echo $SLURM_JOB_ID'"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.stdout.strip().splitlines()[-1] == launch.job_id, out

        confirm = await handle_line(f"/cancel {launch_id}", bot.core, front, user="alice")
        assert confirm is not None and confirm.blocks, "the cancel command asks to confirm"
        done = await bot.core(
            Incoming(
                user_id="alice",
                channel_id="console",
                action_id="trainbot_cancel",
                action_value=launch_id,
            )
        )
        assert not done.error, done.text
        final = await wait_for_launch(bot.store, launch_id, timeout_s=60)
        await wait_delivered(bot.store)
    assert final.outcome == "CANCELLED"
    in_order(
        front.lines,
        r"interactive .* hpc \(H100\)",  # the parent names the cluster by its GPU model
        rf"Submitted: Slurm job {launch.job_id} on hpc, partition a4, 1 node",
        r"Cancelled by @alice",
        r"🚫 CANCELLED",
    )
    assert sacct_rows(launch.job_id)[-1]["State"].startswith("CANCELLED")


async def test_doctor_through_the_bastion_says_what_it_found() -> None:
    config = dev_config(file="trainbot-bastion.yaml")
    out = io.StringIO()
    code = await run_doctor(bot_settings(), config, out)
    text = out.getvalue()
    assert code == 0, text
    route = "jump@127.0.0.1:2200 -> trainer@127.0.0.1:2201"
    assert f"ok   hpc: ssh {route} (host keys verified)" in text
    assert (
        "ok   hpc: Slurm GRES (8 x H100, infiniband): partitions a3m*, a3u, a4, a3h; a4: 4 "
        "nodes, gpu:8: 8 GPUs per node, GRES names no GPU model (the config's H100 stands)"
    ) in text
    assert "ok   hpc: Slurm accounting: slurmdbd records jobs and their GPUs (gres/gpu)" in text
    keys = io.StringIO()
    assert await run_known_hosts(config, keys) == 0, keys.getvalue()
    printed = [line for line in keys.getvalue().splitlines() if not line.startswith("#")]
    assert printed == (DEV / "known_hosts_bastion").read_text().splitlines()
