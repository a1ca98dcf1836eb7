"""cluster=auto, reroute and from= on the dev cluster.

The dev cluster's four partitions span the same four nodes, so Slurm gives every one
the same start for the same job. To make partition a4 full while another cluster
can start a job now, the test config gives a3u nodes of 4 GPUs (``gpus_per_node``,
as a site with smaller machines would) and other jobs take 4 GPUs of every node
through partition a4: an 8-GPU-per-node job (a4, a3m, a3h) waits for them, a
4-GPU-per-node one (a3u) starts now."""

from __future__ import annotations

import asyncio
import io
import re
import time
from datetime import UTC, datetime

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.planning import start_from
from bot.runtime.assembly import Bot, running
from bot.text.front import Incoming
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    knobs,
    launch_id_in,
    login_run,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
    wait_until,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

NODES = 4
FILL_S = 90
ESTIMATE_TIMEOUT_S = 15.0  # this machine is shared and slow
QUICK: Knobs = {"steps": 4, "step_time_s": 0.5, "save_time_s": 0.1, "tokenizer_race": "off"}


def small_a3u(text: str) -> str:
    found = "  a3u:\n    type: hcc-a3u\n"
    assert found in text
    return text.replace(found, found + "    gpus_per_node: 4\n")


async def fill_a4(tag: str) -> list[str]:
    """Jobs of other people in partition a4 taking 4 GPUs of every node; their ids."""
    ids = []
    for i in range(NODES):
        out = await asyncio.to_thread(
            login_run,
            f"sbatch --parsable -J {tag}-fill{i} -o /dev/null -N 1 -w dev{i} -p a4 -t 3 "
            f"--gres=gpu:4 --wrap='sleep {FILL_S}'",
        )
        ids.append(out.strip().split(";")[0])

    async def all_running() -> bool:
        out = await asyncio.to_thread(login_run, f"squeue -h -o %T -j {','.join(ids)}")
        return out.split() == ["RUNNING"] * NODES

    await wait_until(all_running, "the filling jobs to run", timeout_s=240, interval_s=1)
    return ids


async def test_auto_picks_a_cluster_that_starts_now_and_says_why(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    fill: list[str] = []
    try:
        config = dev_config(edit=small_a3u)
        async with running(bot_settings(), config, front, workers=0) as bot:
            bot.core.launcher.planner.timeout_s = ESTIMATE_TIMEOUT_S
            fill = await fill_a4(unique)
            reply = await handle_line(
                f"/train sft llama3p1_8b nodes=2 cluster=auto name={unique} dry_run=true",
                bot.core,
                front,
                user="alice",
            )
            launch = None
            if reply is not None and (found := re.search(r"L-[0-9a-f]+", reply.text)):
                launch = await bot.store.launches.get(found.group(0))
        assert reply is not None and not reply.error, reply
        said = re.search(
            r"cluster=auto chose a3u \((.*)\): Slurm starts it there first", reply.text
        )
        assert said, reply.text
        waits = dict(part.split(": ", 1) for part in said.group(1).split("; "))
        assert list(waits) == ["a3m", "a3u", "a4", "a3h"], waits
        assert waits["a3u"] == "now", waits
        for name in ("a3m", "a4", "a3h"):  # the 8-GPU nodes are half taken until the fill ends
            assert re.fullmatch(r"in \d+ min", waits[name]), waits
        assert launch is not None and launch.cluster == "a3u", launch
        assert launch.request.cluster == "a3u"
    finally:
        if fill:
            await asyncio.to_thread(login_run, f"scancel {' '.join(fill)}", check=False)


async def train(bot: Bot, front: ConsoleFront, text: str, user: str = "alice") -> str:
    reply = await handle_line(f"/train {text}", bot.core, front, user=user)
    assert reply is not None and not reply.error, reply
    return launch_id_in(reply.text)


async def test_from_starts_from_the_parents_newest_checkpoint_and_says_which(
    unique: str,
) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    async with knobs(unique, **QUICK), running(bot_settings(), dev_config(), front) as bot:
        parent = await train(bot, front, f"pretrain llama3p1_2b cluster=a3u name={unique}a")
        child = await train(
            bot,
            front,
            f"sft llama3p1_2b cluster=a3u name={unique}b after={parent} from={parent}",
        )
        jobs = await handle_line("/jobs", bot.core, front, user="alice")
        first = await wait_for_launch(bot.store, parent, timeout_s=300)
        second = await wait_for_launch(bot.store, child, timeout_s=300)
        await wait_delivered(bot.store)
    assert jobs is not None and f"chain: {parent} -> {child}" in jobs.text, jobs
    assert f"from {parent}'s checkpoint" in jobs.text
    assert first.outcome == "COMPLETED" and second.outcome == "COMPLETED", front.lines
    found = start_from.newest_checkpoint(first)
    assert found is not None
    tracking, name, step = found
    # The newest complete checkpoint on disk is the one the bot chose.
    listed = login_run(f"ls {tracking.checkpoint_dir}").split()
    steps = sorted(
        int(m.group(1))
        for n in listed
        if not n.endswith("-unfinished") and (m := re.search(r"-step=(\d+)", n))
    )
    assert steps and steps[-1] == step, (listed, name)
    said = "\n".join(front.lines)
    assert f"Starts from {parent}'s newest complete checkpoint, step {step}" in said, said
    # The child's job ran with NeMo's weights-only restore pointing at that checkpoint.
    script = login_run(
        f"grep -rh -o 'resume.restore_config.path=[^ ]*' "
        f"~/vertex-oss-training/nemo/experiments/{unique}b-{child}/ | sort -u"
    ).split()
    home = login_run("echo $HOME").strip()
    path = f"{tracking.checkpoint_dir}/{name}".replace("~", home, 1)
    assert any(path in line.replace("'", "").replace('"', "") for line in script), (script, path)
    assert slurm_jobs_named(child) == [second.job_id]


async def test_a_nemo_rl_child_starts_from_a_copy_and_leaves_the_parents_directory(
    unique: str,
) -> None:
    """NeMo-RL resumes, saves and prunes in its checkpoint directory: the child runs in
    a directory of its own holding a linked copy of the parent's newest step_N."""
    front = ConsoleFront(io.StringIO(), color=False)
    async with knobs(unique, **QUICK), running(bot_settings(), dev_config(), front) as bot:
        parent = await train(bot, front, f"dpo llama3p1_8b cluster=a3u name={unique}a")
        first = await wait_for_launch(bot.store, parent, timeout_s=300)
        assert first.outcome == "COMPLETED", front.lines
        found = start_from.newest_checkpoint(first)
        assert found is not None
        tracking, name, _ = found
        home = login_run("echo $HOME").strip()
        where = tracking.checkpoint_dir.replace("~", home, 1)
        before = login_run(f"ls {where}").split()
        child = await train(bot, front, f"dpo llama3p1_8b cluster=a3u name={unique}b from={parent}")
        second = await wait_for_launch(bot.store, child, timeout_s=300)
        await wait_delivered(bot.store)
    assert second.outcome == "COMPLETED", front.lines
    assert login_run(f"ls {where}").split() == before  # the parent's directory as it was
    own = f"{home}/vertex-oss-training/nemo_rl/from-{child}/checkpoints"
    assert second.start_path == f"from-{child}/checkpoints"
    inodes = login_run(f"stat -c %i {where}/{name} {own}/{name}").split()
    assert len(inodes) == 2, inodes  # both there (the copy's files are links)
    said = "\n".join(front.lines)
    assert f"{parent}'s own checkpoint directory is left as it is" in said, said
    login_run(f"rm -rf {home}/vertex-oss-training/nemo_rl/from-{child}", check=False)


def reroute_config(text: str) -> str:
    """a4 before a3u in the config (ties go to a4), a3u of 4-GPU nodes, everyone allowed
    on those two only, and a launch pending 10 s moved."""
    text = small_a3u(text)
    a3u, a4, a3h = (text.index(f"  {name}:\n    type:") for name in ("a3u", "a4", "a3h"))
    text = text[:a3u] + text[a4:a3h] + text[a3u:a4] + text[a3h:]
    rule = '      clusters: ["*"]\n      max_nodes: 4\n'
    assert rule in text
    text = text.replace(rule, "      clusters: [a4, a3u]\n      max_nodes: 4\n")
    found = "  approval_above_nodes: null\n"
    assert found in text
    return text.replace(found, found + "  placement: {reroute_after_s: 10}\n")


async def fill(tag: str, gpus: int, hold_s: int, *, wait: bool, limit: int, ids: list[str]) -> None:
    """A job of other people on each node taking ``gpus`` GPUs for ``hold_s``; their ids
    go into ``ids`` as they are submitted (so the caller cancels them whatever happens)."""
    mine: list[str] = []
    for i in range(NODES):
        out = await asyncio.to_thread(
            login_run,
            f"sbatch --parsable -J {tag}-fill{gpus}x{i} -o /dev/null -N 1 -w dev{i} -p a4 "
            f"-t {limit} --gres=gpu:{gpus} --wrap='sleep {hold_s}'",
        )
        mine.append(out.strip().split(";")[0])
        ids.append(mine[-1])

    async def all_running() -> bool:
        out = await asyncio.to_thread(login_run, f"squeue -h -o %T -j {','.join(mine)}")
        return out.split() == ["RUNNING"] * NODES

    if wait:
        await wait_until(all_running, "the filling jobs to run", timeout_s=240, interval_s=1)


@pytest.mark.timeout(580)  # other people's jobs must leave room for the filling ones first
async def test_a_pending_launch_moves_once_and_only_one_of_its_jobs_runs(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    taken: list[str] = []
    config = dev_config(edit=reroute_config)
    try:
        async with knobs(unique, **QUICK):
            # Placed while both clusters are free (a tie: a4, first in the config), and
            # queued by a bot without workers; before a worker submits it, other jobs
            # take half of every node: an 8-GPU-per-node job (a4) must wait for them,
            # a 4-GPU-per-node one (a3u) could start now.
            async with running(bot_settings(), config, front, workers=0) as bot:
                bot.core.launcher.planner.timeout_s = ESTIMATE_TIMEOUT_S
                reply = await handle_line(
                    f"/train sft llama3p1_2b cluster=auto name={unique}",
                    bot.core,
                    front,
                    user="alice",
                )
            assert reply is not None and not reply.error, reply
            launch_id = launch_id_in(reply.text)
            assert "cluster=auto chose a4 (a4: " in reply.text, reply.text
            await fill(unique, 4, 90, wait=True, limit=2, ids=taken)
            async with running(bot_settings(), config, front) as bot:
                done = await wait_for_launch(bot.store, launch_id, timeout_s=420)
                await wait_delivered(bot.store)
        said = "\n".join(front.lines)
        assert done.outcome == "COMPLETED", said
        assert done.cluster == "a3u" and done.rerouted, said
        assert said.count("🔀 Still pending on a4 after 10 s while a3u would start it now") == 1
        assert [a.cluster for a in done.attempts] == ["a4", "a3u"]
        first, second = done.attempts
        assert "cancelled job " + first.job_id in said
        jobs = slurm_jobs_named(launch_id)
        assert jobs == sorted([first.job_id, second.job_id]), jobs  # one submit each
        states = {
            j: login_run(f"sacct -X -P -n -o State,Start -j {j}").strip().splitlines()[-1]
            for j in jobs
        }
        assert states[first.job_id].startswith("CANCELLED"), states
        assert states[first.job_id].split("|")[1] in ("None", "Unknown"), states  # never ran
        assert states[second.job_id].startswith("COMPLETED"), states
    finally:
        if taken:
            await asyncio.to_thread(login_run, f"scancel {' '.join(taken)}", check=False)


async def test_from_refusals_say_what_would_be_right(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    at = datetime.fromtimestamp(time.time() + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    async def refused(text: str, user: str = "alice") -> str:
        reply = await handle_line(f"/train {text}", bot.core, front, user=user)
        assert reply is not None and reply.error, reply
        return reply.text

    async with running(bot_settings(), dev_config(), front) as bot:
        bot.core.launcher.planner.timeout_s = ESTIMATE_TIMEOUT_S
        bobs = await train(
            bot, front, f"pretrain llama3p1_2b cluster=a3u name={unique} at={at}", "bob"
        )
        mine = await train(bot, front, f"pretrain llama3p1_2b cluster=a3u name={unique} at={at}")
        assert (await refused(f"sft llama3p1_2b cluster=a3u from={bobs}")).startswith(
            f"from={bobs}: "
        )  # alice may not see bob's launch
        assert await refused(f"sft llama3p1_2b cluster=a4 from={mine}") == (
            f"from={mine}: its checkpoints are on a3u, so a launch starting from them runs "
            "there. Give cluster=a3u."
        )
        text = await refused(f"dpo llama3p1_8b cluster=a3u from={mine}")
        assert text.startswith(
            f"from={mine}: dpo on nemo-rl cannot start from {mine} (pretrain on nemo): "
            "NeMo-RL starts only from a run of the same algorithm"
        ), text
        # cluster=auto with from= asks only the parent's cluster.
        reply = await handle_line(
            f"/train sft llama3p1_2b cluster=auto after={mine} from={mine}",
            bot.core,
            front,
            user="alice",
        )
        assert reply is not None and not reply.error, reply
        assert re.search(r"cluster=auto chose a3u \(a3u: [^;]*\): Slurm", reply.text), reply.text
        assert f"It starts from {mine}'s newest complete checkpoint" in reply.text
        child = launch_id_in(reply.text)
        alice = await bot.core.directory.user(
            Incoming(user_id="alice", user_name="alice", channel_id="console", command="/cancel")
        )
        await bot.core.decisions.cancel(await bot.store.launches.get(mine), alice)  # type: ignore[arg-type]
        text = await refused(f"sft llama3p1_2b cluster=a3u from={mine}")
        assert text == (
            f"from={mine}: {mine} ended CANCELLED without a complete checkpoint (NO_CHECKPOINT), "
            "so there is nothing to start from. Leave from= out to start from the recipe's "
            "own weights, or give a launch that saved one."
        )
        ended = await wait_for_launch(bot.store, child, timeout_s=60)  # its parent ended
        bob = await bot.core.directory.user(
            Incoming(user_id="bob", user_name="bob", channel_id="console", command="/cancel")
        )
        await bot.core.decisions.cancel(await bot.store.launches.get(bobs), bob)  # type: ignore[arg-type]
    assert ended.outcome == "PARENT_FAILED"
    assert slurm_jobs_named(mine) == [] and slurm_jobs_named(child) == []
