"""GPU-hour estimates (pure) and what the store charges when a launch ends (real Redis)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bot.core.core import Core
from bot.engine.babysit import used_gpu_hours
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase, StepRun
from bot.planning.cost import estimate_cost, start_text
from bot.settings.config import load_config
from bot.settings.env import Settings
from bot.store.budgets import BudgetGuard, OverBudget
from bot.store.store import Store
from bot.text.front import Incoming
from cluster.site.profiles import ClusterProfile
from cluster.slurm.sbatch import StartEstimate
from cluster.ssh.pool import SSHPool
from commands.budget import iso_week
from commands.policy import BudgetRule
from commands.requests import InteractiveRequest, TrainRequest
from tests.bot.botkit import flush_test_redis, open_test_store

EXAMPLE = Path(__file__).resolve().parents[3] / "trainbot.example.yaml"
PROFILE = ClusterProfile(
    name="a4",
    type="hcc-a4",
    login={"host": "login.example", "user": "trainer"},
    partition="a4",
    max_nodes=8,
    time_limit="04:00:00",
)
NO_LIMIT = PROFILE.model_copy(update={"time_limit": None})


def sft(nodes: int = 2, **extra: object) -> TrainRequest:
    return TrainRequest(
        workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4", nodes=nodes, **extra
    )


def test_estimate_from_the_median_step_time_of_earlier_runs() -> None:
    runs = [StepRun(step_time_s=s, steps=1000) for s in (3.0, 9.0, 4.0)]
    cost = estimate_cost(sft(), PROFILE, runs)
    assert cost.gpu_hours == pytest.approx(1000 * 4.0 / 3600 * 2 * 8)
    assert cost.basis.startswith("1,000 steps × 4 s/step, the median of the last 3 runs of sft")


def test_an_override_sets_the_steps_and_the_time_limit_caps_the_estimate() -> None:
    runs = [StepRun(step_time_s=2.0, steps=1000)]
    asked = estimate_cost(sft(overrides=(("trainer.max_steps", "90"),)), PROFILE, runs)
    assert asked.gpu_hours == pytest.approx(90 * 2.0 / 3600 * 16)
    capped = estimate_cost(sft(time="00:30:00"), PROFILE, runs)  # 1000 x 2 s > 30 min
    assert capped.gpu_hours == pytest.approx(0.5 * 16)
    assert "capped by the 30 min time limit" in capped.basis


def test_without_history_the_time_limit_is_the_estimate() -> None:
    cost = estimate_cost(sft(nodes=1), PROFILE, [])
    assert cost.gpu_hours == pytest.approx(4 * 8)
    assert cost.basis == (
        "at most: the whole 4 h time limit; "
        "no earlier run of sft llama3p1_8b on 1 node × a4 to go by"
    )
    interactive = estimate_cost(InteractiveRequest(cluster="a4", time="01:00:00"), PROFILE, [])
    assert interactive.gpu_hours == pytest.approx(8) and "interactive" in interactive.basis
    unknown = estimate_cost(sft(), NO_LIMIT, [])
    assert unknown.gpu_hours is None and "no time limit" in unknown.basis


def test_start_sentences_say_now_only_when_slurm_does() -> None:
    now = 1_796_300_000.0
    assert start_text(StartEstimate(start=now, nodes="dev0", asked_at=now)).startswith(
        "Expected start: now on dev0"
    )
    later = start_text(StartEstimate(start=now + 1500, asked_at=now))
    assert later.startswith("Expected start: in about 25 min (at ")
    refused = start_text(StartEstimate(start=None, error="Invalid partition name specified"))
    assert refused == (
        "Expected start: Slurm cannot place it now (Invalid partition name specified)."
    )
    assert "unavailable (Slurm did not answer" in start_text(None, "Slurm did not answer")


def test_sacct_gpu_hours_beat_the_wall_clock_where_read() -> None:
    launch = Launch(request=sft(), user_id="U1", channel="C1")
    launch.attempts = [
        Attempt(number=1, started_at=0.0 + 1, ended_at=3601.0, gpu_hours=12.5),  # sacct
        Attempt(number=2, started_at=10_000.0, ended_at=11_800.0),  # 0.5 h x 16 GPUs
    ]
    assert used_gpu_hours(launch, PROFILE, now=20_000.0) == pytest.approx(12.5 + 8.0)


@pytest.mark.parametrize("outcome", ["COMPLETED", "CANCELLED", "SUBMIT_FAILED", "INTERNAL_ERROR"])
async def test_an_ended_launch_is_charged_once_and_its_step_time_kept(outcome: str) -> None:
    """However it ended (its final summary, a cancel, a retry refused, a dead letter), a
    launch waits to be charged, its estimate held meanwhile; then it is charged the figure
    given (sacct's), once, however often that is asked."""
    await flush_test_redis()
    async with open_test_store() as store:
        launch = Launch(request=sft(), user_id="U0ALICE", channel="C1", estimate_gpu_hours=30)
        await store.launches.create(launch, [Event("parent", launch.id)], enqueue=False)

        def finish(stored: Launch) -> list[Event]:
            done = outcome == "COMPLETED"
            stored.phase, stored.outcome = Phase.DONE if done else Phase.REJECTED, outcome
            stored.progress.total, stored.progress.recent_step_times_s = 200, [2.0, 2.2, 9.0]
            return []

        week = iso_week(time.time())
        assert await store.budgets.usage("U0ALICE", "a4", week) == 0
        await store.launches.mutate(launch.id, finish)
        assert list(await store.budgets.uncharged("a4")) == [launch.id]
        assert await store.budgets.budget_use("U0ALICE", "a4", week) == (0.0, 30.0)  # still held
        await store.launches.mutate(
            launch.id, lambda stored: []
        )  # a later write of the ended launch
        assert await store.budgets.charge(launch.id, "a4", 3.25)
        assert not await store.budgets.charge(launch.id, "a4", 3.25)  # processed twice: once
        assert await store.budgets.usage("U0ALICE", "a4", week) == pytest.approx(3.25)
        charged, held = await store.budgets.budget_use("U0ALICE", "a4", week)
        assert charged == pytest.approx(3.25) and held == 0.0
        assert await store.budgets.uncharged("a4") == {}
        await store.launches.mutate(launch.id, lambda stored: [])  # written again after its charge
        assert await store.budgets.usage("U0ALICE", "a4", week) == pytest.approx(3.25)
        stored, entry = await store.launches.get(launch.id), await store.history.finished(launch.id)
        assert stored is not None and stored.charged and stored.gpu_hours == 3.25
        assert entry is not None and entry.gpu_hours == 3.25
        assert await store.budgets.usage("U0BOB", "a4", week) == 0
        assert await store.budgets.usage("U0ALICE", "a3m", week) == 0
        (run,) = await store.history.step_runs("a4", "sft:llama3p1_8b:nemo", 2)
        assert (run.step_time_s, run.steps) == (2.2, 200)
        assert await store.history.step_runs("a4", "sft:llama3p1_8b:nemo", 4) == []


async def test_train_answers_with_estimates_and_only_admins_may_go_over_budget() -> None:
    """The example config's clusters are not reachable from here: the start estimate is
    unavailable, said so, and the answer still comes, with the GPU-hours and the budget."""
    await flush_test_redis()
    config = load_config(EXAMPLE)  # admins: U0ADMIN; a4's time limit 4 h
    rule = BudgetRule(users=("*",), clusters=("a4",), gpu_hours_per_week=40)
    shared = {  # everyone on the shared login account (who runs as whom is not the point)
        name: profile.model_copy(update={"identity": None})
        for name, profile in config.clusters.items()
    }
    config = config.model_copy(
        update={
            "policy": config.policy.model_copy(update={"budgets": (rule,)}),
            "clusters": shared,
        }
    )
    async with open_test_store() as store, SSHPool(connect_timeout_s=1.0) as pool:
        core = Core(
            store, Clusters(config, Settings.from_environ({}), pool), config.command_context()
        )

        async def train(user: str, text: str) -> tuple[bool, str]:
            reply = await core(Incoming(user_id=user, channel_id="C1", command="/train", text=text))
            return reply.error, reply.text

        started = time.monotonic()
        error, text = await train("U0ALICE", "sft llama3p1_8b cluster=a4 nodes=1")
        assert time.monotonic() - started < 5.0
        assert not error, text
        lines = text.splitlines()
        assert lines[0].startswith("Queued L-")
        assert lines[1].startswith("Expected start: start estimate unavailable ("), lines[1]
        assert lines[2].startswith("Estimated use: about 32.0 GPU-hours (at most: the whole 4 h")
        assert lines[3].startswith("Budget on a4: 8.0 of 40.0 GPU-hours left this week (")

        error, text = await train("U0ALICE", "sft llama3p1_8b cluster=a4 nodes=1")
        assert error and text.startswith(
            "This launch needs about 32.0 GPU-hours, but only 8.0 GPU-hours of your 40.0 "
            "GPU-hours weekly budget on a4 are left (0.0 GPU-hours used and 32.0 GPU-hours "
            "held by active launches this week"
        ), text
        dry = "sft llama3p1_8b cluster=a4 nodes=1 dry_run=true"
        error, text = await train("U0ALICE", dry)
        assert not error and "A real launch would be refused: This launch needs" in text, text
        error, text = await train("U0ALICE", "sft llama3p1_8b cluster=a4 over_budget=true")
        assert error and text.startswith("over_budget=true is for trainbot admins only"), text

        error, text = await train("U0ADMIN", "sft llama3p1_8b cluster=a4 nodes=2 over_budget=true")
        assert not error and text.startswith("Queued L-"), text
        assert "Over your budget on a4 (40.0 GPU-hours left, this needs 64.0 GPU-hours); " in text
        assert "allowed by over_budget=true" in text
        error, text = await train("U0ADMIN", "sft llama3p1_8b cluster=a3m nodes=1")
        assert not error and "Budget on" not in text, text  # no budget rule covers a3m


async def test_create_holds_to_the_budget_across_connections() -> None:
    """Two stores (two bot processes) creating at once: estimates past the budget are
    refused, with what was charged and held when it was checked; other clusters and the
    charge of a launch that ended count as they should."""
    import asyncio

    await flush_test_redis()
    week = iso_week(time.time())
    guard = BudgetGuard(cluster="a4", week=week, limit=50.0)
    async with open_test_store() as one, open_test_store() as two:
        done = Launch(request=sft(), user_id="U1", channel="C1", estimate_gpu_hours=4)
        await one.launches.create(done, [], enqueue=False)

        def finish(stored: Launch) -> list[Event]:
            stored.phase, stored.outcome, stored.gpu_hours = Phase.DONE, "COMPLETED", 6.0
            return []

        await one.launches.mutate(done.id, finish)
        assert await one.budgets.charge(done.id, "a4", 6.0)  # charged 6: 44 left
        elsewhere = InteractiveRequest(cluster="a3m", time="10:00:00")
        other = Launch(request=elsewhere, user_id="U1", channel="C1", estimate_gpu_hours=80)
        await one.launches.create(other, [], enqueue=False)  # on a3m: not held against a4
        items = [
            Launch(request=sft(), user_id="U1", channel="C1", estimate_gpu_hours=10)
            for _ in range(8)
        ]

        async def make(store: Store, launch: Launch) -> str:
            try:
                made = await store.launches.create(launch, [], enqueue=False, budget=guard)
            except OverBudget as exc:
                assert exc.charged == pytest.approx(6.0) and exc.held == pytest.approx(40.0)
                return "over"
            return "made" if made else "full"

        made = await asyncio.gather(
            *(make(one if i % 2 else two, launch) for i, launch in enumerate(items))
        )
        assert made.count("made") == 4 and made.count("over") == 4  # 6 + 4 x 10 <= 50
        charged, held = await one.budgets.budget_use("U1", "a4", week)
        assert charged == pytest.approx(6.0) and held == pytest.approx(40.0)
        assert [await one.launches.get(launch.id) is not None for launch in items] == [
            m == "made" for m in made
        ]
