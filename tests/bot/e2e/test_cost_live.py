"""Before a launch, on the dev cluster: Slurm's start estimate in the /train answer and
in /clusters while every node is busy, and a GPU-hour budget that refuses a launch and
charges a finished one what sacct says it used."""

from __future__ import annotations

import asyncio
import io
import re
import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.launch import Launch, Phase
from bot.runtime.assembly import running
from bot.settings.config import Config
from bot.store.store import Store
from bot.text.front import Incoming, Reply
from commands.budget import iso_week
from commands.policy import BudgetRule
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    knobs,
    launch_id_in,
    login_run,
    match_in,
    slurm_jobs_named,
    wait_for_launch,
    wait_until,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

FAST: Knobs = {
    "steps": 4,
    "step_time_s": 0.4,
    "ckpt_every": 2,
    "save_time_s": 0.1,
    "tokenizer_race": "off",
}
NODES = 4  # dev[0-3], every partition over the same nodes
FILL_S = 60  # how long the filling jobs hold the nodes (others' tests wait meanwhile)
# This machine is shared and can be slow; the default (1.5 s) is for a real login node.
ESTIMATE_TIMEOUT_S = 15.0
AT_RE = re.compile(r"\(at ([0-9-]+ [0-9:]+) UTC\)")


def slurm_start(command: str) -> float:
    """The start time Slurm's own ``sbatch --test-only`` gives (run by the test itself)."""
    out = login_run(f"TZ=UTC0 {command} 2>&1")
    found = re.search(r"to start at (\S+)", out)
    assert found, out
    return datetime.fromisoformat(found.group(1)).replace(tzinfo=UTC).timestamp()


def answered_start(reply: Reply) -> float:
    found = AT_RE.search(reply.text)
    assert found, reply.text
    return datetime.fromisoformat(found.group(1)).replace(tzinfo=UTC).timestamp()


async def fill_nodes(tag: str) -> list[str]:
    """A plain job on every node (all 8 GPUs of each), held for FILL_S; their ids."""
    ids = []
    for i in range(NODES):
        out = await asyncio.to_thread(
            login_run,
            f"sbatch --parsable -J {tag}-fill{i} -o /dev/null -N 1 -p a4 -t 3 --gres=gpu:8 "
            f"--wrap='sleep {FILL_S}'",
        )
        ids.append(out.strip().split(";")[0])

    async def all_running() -> bool:
        out = await asyncio.to_thread(login_run, f"squeue -h -o %T -j {','.join(ids)}")
        return out.split() == ["RUNNING"] * NODES

    await wait_until(all_running, "the filling jobs to run", timeout_s=240, interval_s=1)
    return ids


async def test_train_answer_and_clusters_give_slurms_start_estimate_on_a_full_cluster(
    unique: str,
) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    fill: list[str] = []
    try:
        async with running(bot_settings(), dev_config(), front, workers=0) as bot:
            bot.core.launcher.planner.timeout_s = ESTIMATE_TIMEOUT_S
            fill = await fill_nodes(unique)
            own = "sbatch --test-only -N 2 -p a4 -t 01:00:00 --gres=gpu:8 --wrap=true"
            before = await asyncio.to_thread(slurm_start, own)
            reply = await handle_line(
                f"/train sft llama3p1_8b nodes=2 cluster=a4 name={unique} dry_run=true",
                bot.core,
                front,
                user="alice",
            )
            after = await asyncio.to_thread(slurm_start, own)
            clusters = await handle_line("/clusters cluster=a4", bot.core, front, user="alice")
        assert reply is not None and not reply.error, reply
        assert before > time.time() + 10, "the cluster was not full: nothing would wait"
        start = answered_start(reply)
        assert before - 2 <= start <= after + 2, (before, start, after, reply.text)
        assert "Expected start: in about " in reply.text, reply.text
        assert "Expected start: now" not in reply.text
        # Nothing ran for this recipe and size on a4 in this Redis: the time limit bounds it.
        assert "Estimated use: about 16.0 GPU-hours (at most: the whole 1 h time limit" in (
            reply.text
        )
        assert clusters is not None and not clusters.error, clusters
        line = next(x for x in clusters.text.splitlines() if x.startswith("• `a4`"))
        waits = line.split("a job would start: ", 1)[1]
        assert re.fullmatch(
            r"1 node in about \d+ (s|min), 2 nodes in about \d+ (s|min), "
            r"4 nodes in about \d+ (s|min)",
            waits,
        ), line
    finally:
        if fill:
            await asyncio.to_thread(login_run, f"scancel {' '.join(fill)}", check=False)


def budget_config(gpu_hours: float) -> Config:
    """The dev config with a weekly budget on a4 for everyone, and a4's profile claiming 4
    GPUs per node: the stand-in's jobs still get all 8 (run.py asks by cluster type), so a
    charge that came from the profile rather than from Slurm's accounting would be half."""
    config = dev_config()
    rule = BudgetRule(users=("*",), clusters=("a4",), gpu_hours_per_week=gpu_hours)
    clusters = dict(config.clusters)
    clusters["a4"] = clusters["a4"].model_copy(update={"gpus_per_node": 4})
    return config.model_copy(
        update={
            "policy": config.policy.model_copy(update={"budgets": (rule,)}),
            "clusters": clusters,
        }
    )


def sacct_gpu_hours(job_id: str) -> float:
    """What sacct says the job used: ElapsedRaw x AllocTRES gres/gpu, every incarnation."""

    def rows() -> list[list[str]]:
        out = login_run(f"sacct -X -P -n -D -o ElapsedRaw,AllocTRES,State -j {job_id}")
        return [line.split("|") for line in out.splitlines() if line]

    deadline = time.monotonic() + 30
    found = rows()
    while not (found and all(r[0] != "0" and "gres/gpu=" in r[1] for r in found)):
        assert time.monotonic() < deadline, found
        time.sleep(0.5)
        found = rows()
    gpus = [int(match_in(r"gres/gpu=(\d+)", r[1], 1)) for r in found]
    return sum(int(r[0]) * g for r, g in zip(found, gpus, strict=True)) / 3600


async def test_a_budget_refuses_what_does_not_fit_and_charges_what_sacct_says(
    unique: str,
) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    train = f"/train sft llama3p1_8b cluster=a4 name={unique}"
    async with (
        knobs(unique, **FAST),
        running(bot_settings(), budget_config(5.0), front) as bot,
    ):
        bot.core.launcher.planner.timeout_s = ESTIMATE_TIMEOUT_S
        # 2 nodes x 4 GPUs (as a4's profile says) x the 1 h limit = 8 GPU-hours: over 5.
        big = await handle_line(f"{train} nodes=2", bot.core, front, user="alice")
        assert big is not None and big.error, big
        assert big.text.startswith(
            "This launch needs about 8.0 GPU-hours, but only 5.0 GPU-hours of your "
            "5.0 GPU-hours weekly budget on a4 are left"
        ), big.text
        assert "Expected start: " in big.text and "Estimated use: about 8.0" in big.text
        assert sum(await bot.store.budgets.active_counts("alice")) == 0
        forced = await handle_line(
            f"{train} nodes=2 over_budget=true", bot.core, front, user="alice"
        )
        assert forced is not None and forced.error
        assert forced.text.startswith("over_budget=true is for trainbot admins only")

        # 4 GPU-hours fit; while it runs it holds those 4, so a second one does not fit.
        first = await handle_line(f"{train} nodes=1", bot.core, front, user="alice")
        assert first is not None and not first.error, first
        assert "Budget on a4: 1.0 of 5.0 GPU-hours left this week" in first.text, first.text
        second = await handle_line(f"{train} nodes=1", bot.core, front, user="alice")
        assert second is not None and second.error, second
        assert "4.0 GPU-hours held by active launches" in second.text, second.text

        launch_id = launch_id_in(first.text)
        launch = await wait_for_launch(bot.store, launch_id)
        assert launch.outcome == "COMPLETED", (launch.ending, launch.attempts[-1].tail)
        launch = await wait_charged(bot.store, launch_id)
        week = iso_week(time.time())
        charged = await bot.store.budgets.usage("alice", "a4", week)
        real = await asyncio.to_thread(sacct_gpu_hours, launch.job_id)
        assert real > 0 and charged == pytest.approx(real), (charged, real)
        assert launch.gpu_hours == pytest.approx(real)

        # The finished run is now the history this recipe and size are estimated from.
        again = await handle_line(f"{train} nodes=1 dry_run=true", bot.core, front, user="alice")
        assert again is not None and not again.error, again
        assert "4 steps × " in again.text and "the median of the last run of sft" in again.text
        dry = await bot.store.launches.get(launch_id_in(again.text))
        assert dry is not None and dry.estimate_gpu_hours is not None
        assert dry.estimate_gpu_hours < 1.0  # 4 short steps, not the 4 of the time limit
        left = 5.0 - charged - dry.estimate_gpu_hours
        assert f"Budget on a4: {left:,.1f} of 5.0 GPU-hours left" in again.text, again.text
    assert slurm_jobs_named(unique) == [launch.job_id]


async def wait_charged(store: Store, launch_id: str, timeout_s: float = 90) -> Launch:
    """Until the ended launch is charged (the poller does it once sacct shows its jobs ended)."""

    async def charged() -> Launch | None:
        launch = await store.launches.get(launch_id)
        return launch if launch is not None and launch.charged else None

    return await wait_until(charged, f"{launch_id} charged", timeout_s, interval_s=0.5)


async def test_a_retry_then_a_cancel_is_charged_what_sacct_recorded_for_both_jobs(
    unique: str, cancel_jobs: list[str]
) -> None:
    """A Retry cancels the first job; the person then cancels the second: an ending with
    no final summary. The launch is charged, once, ElapsedRaw x AllocTRES gres/gpu of both
    jobs as sacct recorded them (the profile's 4 GPUs per node would give half)."""
    front = ConsoleFront(io.StringIO(), color=False)
    train = f"/train sft llama3p1_8b cluster=a4 nodes=1 name={unique}"

    def press(action: str, launch_id: str) -> Incoming:
        return Incoming(
            user_id="alice", channel_id="console", action_id=action, action_value=launch_id
        )

    async with (
        knobs(unique, steps=400, step_time_s=0.5, tokenizer_race="off"),
        running(bot_settings(), budget_config(500.0), front) as bot,
    ):
        bot.core.launcher.planner.timeout_s = ESTIMATE_TIMEOUT_S
        reply = await handle_line(train, bot.core, front, user="alice")
        assert reply is not None and not reply.error, reply
        launch_id = launch_id_in(reply.text)
        first = await wait_for_launch(bot.store, launch_id, done=Phase.RUNNING)
        cancel_jobs.append(first.job_id)
        await asyncio.sleep(3)  # the first job runs a while
        retried = await bot.core(press("trainbot_retry", launch_id))
        assert not retried.error, retried.text

        async def second_running() -> Launch | None:
            launch = await bot.store.launches.get(launch_id)
            ok = launch and len(launch.attempts) == 2 and launch.phase == Phase.RUNNING
            return launch if ok else None

        second = await wait_until(second_running, "the retry's job running", 120)
        cancel_jobs.append(second.job_id)
        assert second.attempts[0].ended_at > 0  # the Retry closed the first attempt
        await asyncio.sleep(3)
        cancelled = await bot.core(press("trainbot_cancel", launch_id))
        assert not cancelled.error, cancelled.text
        ended = await wait_for_launch(bot.store, launch_id)
        assert ended.outcome == "CANCELLED", ended.outcome
        launch = await wait_charged(bot.store, launch_id)
        charged = await bot.store.budgets.usage("alice", "a4", iso_week(time.time()))
        # charged once: asked again (as after a restart), nothing more is charged
        assert not await bot.store.budgets.charge(launch_id, "a4", launch.gpu_hours)
        again = await bot.store.budgets.usage("alice", "a4", iso_week(time.time()))
    jobs = [first.job_id, second.job_id]
    real = [await asyncio.to_thread(sacct_gpu_hours, job) for job in jobs]
    assert all(r > 0 for r in real), real
    assert charged == pytest.approx(sum(real)) and launch.gpu_hours == pytest.approx(sum(real))
    assert again == charged


async def test_a_burst_of_one_shape_asks_slurm_once_and_each_person_for_themselves() -> None:
    """Many /train of one shape within a few seconds share one ``sbatch --test-only``
    (the ack stays fast under load); another person, or another size, is asked anew."""
    from bot.gateway.on_cluster import Clusters
    from bot.planning.cost import StartEstimates
    from bot.settings.env import Settings
    from cluster.slurm.sbatch import JobShape, StartEstimate
    from cluster.ssh.pool import SSHPool

    config = dev_config()
    async with SSHPool() as pool:
        clusters = Clusters(config, Settings.from_environ({}), pool)
        estimates = StartEstimates(ttl_s=30)
        shape = JobShape(nodes=1, partition="a4", time_limit="00:10:00")

        def ask(nodes: int = 1, user: str = "") -> asyncio.Future[StartEstimate]:
            return estimates.ask(
                clusters, "a4", replace(shape, nodes=nodes), user_id="U0" + user.upper(),
                cluster_user=user, timeout_s=20,
            )  # fmt: skip

        before = pool.stats.round_trips
        tasks = [ask() for _ in range(20)]
        answers = await asyncio.gather(*tasks)
        assert pool.stats.round_trips - before == 1 and len({id(t) for t in tasks}) == 1
        assert answers[0].start is not None and answers[0].partition == "a4", answers[0]
        await asyncio.gather(ask(nodes=2), ask(user="alice"))
        # Two new shapes; alice's first certificate first asks the login node her uid (the
        # CA signs no name outside the people's uid range), one round trip more.
        assert pool.stats.round_trips - before == 4
        await ask(nodes=2, user="alice")  # her uid is kept: only the estimate
        assert pool.stats.round_trips - before == 5
        assert ask() is tasks[0]  # still fresh
