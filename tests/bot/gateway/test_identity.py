"""Each person's jobs run as that person: two people's launches on the dev cluster run
as two Unix users (alice and bob) through certificates from trainbot's user CA; each
can attach to their own job with their own key and to no one else's; cancelling
another's job is refused by trainbot and by Slurm itself; sacct shows each job under
its person; someone the configuration does not map is refused; and a job's secret
comes from its person's own file, never through the bot."""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
import shlex
import subprocess
from collections.abc import Iterator

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.launch import Launch, Phase
from bot.runtime.assembly import Bot, running
from bot.runtime.doctor import run_doctor
from bot.text.front import Incoming
from tests import devlogin
from tests.bot.botkit import (
    bot_settings,
    dev_config,
    in_order,
    knobs,
    launch_id_in,
    launch_in,
    login_run,
    match_in,
    wait_delivered,
    wait_for_launch,
    wait_until,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

ALICE, BOB = "U0IDALICE", "U0IDBOB"
PEOPLE = {ALICE: "alice", BOB: "bob"}


@pytest.fixture
def owned_jobs() -> Iterator[dict[str, list[str]]]:
    """Unix user -> Slurm job ids, each cancelled as its owner when the test ends."""
    jobs: dict[str, list[str]] = {}
    yield jobs
    for user, ids in jobs.items():
        if ids:
            login_run("scancel " + " ".join(ids), check=False, user=user)


async def train(bot: Bot, front: ConsoleFront, text: str, user: str) -> str:
    reply = await handle_line(f"/train {text}", bot.core, front, user=user)
    assert reply is not None and not reply.error, reply
    if user in PEOPLE:  # the answer says whose account the launch runs as
        assert f"(8 GPUs) as {PEOPLE[user]}." in reply.text, reply.text
    return launch_id_in(reply.text)


async def attach_ready(bot: Bot, launch_id: str) -> Launch:
    async def ready() -> Launch | None:
        launch = await bot.store.launches.get(launch_id)
        return launch if launch and launch.attempts and launch.attempts[-1].attach_ready else None

    return await wait_until(ready, f"{launch_id}'s attach.sh", 60)


def run_as(user: str, command: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """The ``ssh ...`` command trainbot gave, run with ``user``'s own key (no tty here)."""
    argv = [arg for arg in shlex.split(command) if arg != "-t"]
    argv[1:1] = devlogin.ssh_options(user)
    return subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=60)


def acct_users(job_ids: list[str]) -> dict[str, str]:
    out = login_run(f"sacct -X -P -n -o JobID,User -j {','.join(job_ids)}")
    return dict(line.split("|") for line in out.splitlines() if line)


async def test_two_people_run_attach_and_cancel_as_themselves(
    unique: str, owned_jobs: dict[str, list[str]]
) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    config = dev_config(people=PEOPLE, unmapped="refuse")
    people = ("alice", "bob")
    async with (
        knobs(unique, users=people, attach_delay_s=1),
        running(bot_settings(), config, front) as bot,
    ):
        a_id = await train(bot, front, f"interactive nodes=1 cluster=a3h name={unique}", ALICE)
        b_id = await train(bot, front, f"interactive nodes=1 cluster=a3u name={unique}", BOB)
        a = await wait_for_launch(bot.store, a_id, done=Phase.RUNNING)
        owned_jobs["alice"] = [a.job_id]
        b = await wait_for_launch(bot.store, b_id, done=Phase.RUNNING)
        owned_jobs["bob"] = [b.job_id]
        assert (a.cluster_user, b.cluster_user) == ("alice", "bob")
        await attach_ready(bot, a_id)
        await attach_ready(bot, b_id)

        nobody = await handle_line(
            f"/train interactive nodes=1 cluster=a3h name={unique}",
            bot.core,
            front,
            user="U0X",
        )
        assert nobody is not None and nobody.error
        assert "You have no user on a3h" in nobody.text
        assert "clusters.a3h.identity.users" in nobody.text

        mine = await handle_line(f"/attach {a_id}", bot.core, front, user=ALICE)
        theirs = await handle_line(f"/attach {a_id}", bot.core, front, user=BOB)
        assert mine is not None and not mine.error, mine
        assert theirs is not None and theirs.error and "Only" in theirs.text
        command = match_in(r"```(.*)```", mine.text, 1)
        remote = f"bash ~/vertex-oss-training/nemo_rl/{a.job_id}/attach.sh"
        assert command == f"ssh -t -p 2222 alice@127.0.0.1 {remote}"

        # alice, with her own key, lands inside her allocation.
        inside = await asyncio.to_thread(run_as, "alice", command, "printenv", "SLURM_JOB_ID")
        assert inside.stdout.strip().splitlines()[-1:] == [a.job_id], inside
        # bob's key does not open alice's account ...
        as_bob = await asyncio.to_thread(run_as, "bob", command, "true")
        assert as_bob.returncode == 255 and "Permission denied" in as_bob.stderr, as_bob
        # ... and as himself Slurm keeps him out of her allocation and her job.
        srun = await asyncio.to_thread(
            devlogin.run, f"srun --jobid={a.job_id} --overlap -N1 -n1 true", user="bob"
        )
        assert srun.returncode != 0 and "denied" in srun.stderr.lower(), srun
        bot_as_bob = bot.clusters.profile("a3h").as_user("bob").login
        refused = await bot.clusters.pool.run(
            bot_as_bob, f"scancel {a.job_id}", timeout_s=30, check=False
        )
        assert refused.returncode != 0 and "denied" in refused.stderr.lower(), refused

        # trainbot refuses bob's /cancel of alice's launch; alice's own goes through,
        # and Slurm accepts it because it is sent as alice.
        other = await bot.core(
            Incoming(
                user_id=BOB, channel_id="console", action_id="trainbot_cancel", action_value=a_id
            )
        )
        assert other.error and "Only" in other.text
        assert (await launch_in(bot.store, a_id)).phase == Phase.RUNNING
        done = await bot.core(
            Incoming(
                user_id=ALICE, channel_id="console", action_id="trainbot_cancel", action_value=a_id
            )
        )
        assert not done.error, done.text
        a = await wait_for_launch(bot.store, a_id, timeout_s=60)
        await wait_delivered(bot.store)

    assert a.outcome == "CANCELLED"
    users = acct_users([a.job_id, b.job_id])
    assert users == {a.job_id: "alice", b.job_id: "bob"}
    in_order(
        front.lines, rf"Submitted: Slurm job {a.job_id} on a3h, partition a3h, 1 node as alice\."
    )
    in_order(
        front.lines, rf"Submitted: Slurm job {b.job_id} on a3u, partition a3u, 1 node as bob\."
    )
    queue = login_run(f"squeue -h -u bob -j {b.job_id} -o %i", check=False)
    assert queue.split() == [b.job_id]


async def test_a_persons_job_reads_their_own_token_file_and_reports_as_them(
    unique: str, owned_jobs: dict[str, list[str]]
) -> None:
    token_file = "~/.cache/huggingface/token"
    front = ConsoleFront(io.StringIO(), color=False)
    config = dev_config(people=PEOPLE, unmapped="refuse", hf_token_file=token_file)
    fast = {"steps": 4, "step_time_s": 0.4, "ckpt_every": 2, "save_time_s": 0.1}
    async with (
        knobs(unique, users=("alice",), tokenizer_race="off", **fast),
        running(
            bot_settings(TRAINBOT_HF_TOKEN="hf_the_bots_own_token_unused"), config, front
        ) as bot,
    ):
        launch_id = await train(
            bot, front, f"sft llama3p1_8b nodes=1 cluster=a4 name={unique}", ALICE
        )
        launch = await wait_for_launch(bot.store, launch_id)
        owned_jobs["alice"] = [launch.job_id]
        await wait_delivered(bot.store)
    assert launch.outcome == "COMPLETED", front.lines
    # Progress and checkpoints came from files only alice can read: the poller read them
    # as alice.
    in_order(front.lines, r"as alice\.", r"💾 Checkpoint step 1 saved\.", r"✅ COMPLETED")
    assert login_run("test -r /home/alice/.cache && echo yes || echo no").strip() == "no"
    token = login_run(f"cat {token_file}", user="alice").strip()
    assert token.startswith("hf_dev_alice_")
    digest = hashlib.sha256(token.encode()).hexdigest()[:12]
    tracking = launch.attempts[-1].tracking
    assert tracking is not None and tracking.log_path.startswith("/home/alice/")
    log = login_run(f"cat {tracking.log_path}", user="alice")
    assert f"HF_TOKEN is set (sha256 {digest})" in log
    assert token not in "\n".join(front.lines)
    assert acct_users([launch.job_id]) == {launch.job_id: "alice"}


async def test_doctor_logs_in_as_every_mapped_person_and_names_who_is_refused() -> None:
    config = dev_config(people={ALICE: "alice", "U0GHOST": "nosuchuser"})
    out = io.StringIO()
    code = await run_doctor(bot_settings(), config, out)
    text = out.getvalue()
    assert code == 1, text
    assert "ok   a4: ssh alice@127.0.0.1 with a CA certificate" in text
    refused = re.search(r"FAIL a4: ssh nosuchuser@127\.0\.0\.1 with a CA certificate: (.*)", text)
    assert refused is not None, text  # the CA signs for no one the login node lacks
    assert "CA signs no certificate for nosuchuser: there is no user" in refused.group(1)


async def test_a_person_the_login_node_refuses_is_told_at_once_not_retried(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    config = dev_config(people={"U0GHOST": "nosuchuser"}, unmapped="refuse")
    async with running(bot_settings(), config, front) as bot:
        launch_id = await train(
            bot, front, f"sft llama3p1_8b nodes=1 cluster=a4 name={unique}", "U0GHOST"
        )
        launch = await wait_for_launch(bot.store, launch_id, timeout_s=60)
        await wait_delivered(bot.store)
    assert launch.outcome == "NOT_SUBMITTED" and not launch.job_id
    said = [line for line in front.lines if re.match(r"  └ @\S+ Not submitted", line)]
    assert len(said) == 1, front.lines  # one message in the thread, mentioning its owner
    assert "trainbot's CA signs no certificate for nosuchuser" in said[0]
    assert "there is no user nosuchuser on the login node" in said[0]
    assert "Tried" not in said[0]  # refused once, not retried as if the network were down
