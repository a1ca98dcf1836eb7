"""Moving a pending launch (policy.placement.reroute_after_s) against a real Redis: the
move is made once, the old job is cancelled only while pending, the attempts keep
their clusters, and a job that started meanwhile keeps the launch where it is. The
cluster side is trainbot's own seam (Clusters.cancel_and_confirm); the dev-cluster
test is in test_placement_e2e.py."""

from __future__ import annotations

import time

from bot.engine import reroute
from bot.lifecycle import phases
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase, Terms
from commands.policy import BudgetRule, Policy, PolicyRule
from commands.requests import TrainRequest
from tests.bot.botkit import flush_test_redis, open_test_store
from tests.bot.planning.test_pipelines import authority_for


class Cancels:
    """Clusters.cancel_and_confirm as Slurm would answer it: "" (gone) or why not."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str, bool]] = []

    async def cancel_and_confirm(self, launch: Launch, job_id: str, *, pending_only: bool) -> str:
        self.calls.append((launch.cluster, job_id, pending_only))
        return self.answer


def pending(job_id: str) -> Launch:
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    launch = Launch(request=request, user_id="U1", channel="C1", placed="a4 (a4: now; a3u: now)")
    launch.phase = Phase.SUBMITTED
    launch.attempts.append(Attempt(number=1, job_id=job_id, submitted_at=time.time() - 60))
    return launch


async def test_a_pending_launch_moves_once_and_its_old_job_stays_on_its_cluster() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        launch = pending("4187")
        await store.launches.create(launch, [])
        await store.launches.mutate(
            launch.id, lambda s: [Event("update", s.id)]
        )  # index as submitted
        assert await store.history.tracked_ids("a4") == [launch.id]
        assert reroute._due(launch, 30, time.time())
        assert not reroute._due(launch, 120, time.time())  # not pending that long yet
        cancels = Cancels("")
        moved = await reroute._move(store, cancels, launch, "a3u", "a3u: now", 30, Terms())  # type: ignore[arg-type]
        assert moved
        assert cancels.calls == [("a4", "4187", True)]  # only while still pending
        stored = await store.launches.get(launch.id)
        assert stored is not None
        assert stored.cluster == "a3u" and stored.request.cluster == "a3u"
        assert stored.rerouted and stored.phase == Phase.RETRYING
        assert [(a.cluster, a.job_id, a.held) for a in stored.attempts] == [
            ("a4", "4187", False),
            ("a3u", "", False),
        ]
        assert stored.attempts[0].ended_at > 0  # billed until the move
        assert await store.history.tracked_ids("a4") == []  # the old cluster's poller lets it go
        assert await store.history.find_job("4187") == [("a4", launch.id)]
        assert not reroute._due(stored, 30, time.time())
        again = await reroute._move(store, cancels, stored, "a3m", "a3m: now", 30, Terms())  # type: ignore[arg-type]
        assert not again and len(cancels.calls) == 1  # moved once at most


async def test_a_job_that_started_meanwhile_keeps_the_launch_where_it_is() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        launch = pending("4188")
        await store.launches.create(launch, [])
        cancels = Cancels("Slurm still shows it running after 15 s")
        moved = await reroute._move(store, cancels, launch, "a3u", "a3u: now", 30, Terms())  # type: ignore[arg-type]
        assert not moved
        stored = await store.launches.get(launch.id)
        assert stored is not None
        assert stored.cluster == "a4" and stored.phase == Phase.SUBMITTED
        assert [a.job_id for a in stored.attempts] == ["4188"]
        assert stored.rerouted  # not tried again


def test_settle_move_gives_earlier_attempts_their_cluster() -> None:
    launch = pending("4189")
    launch.attempts.append(Attempt(number=2, cluster="a3u"))
    assert phases.settle_move(launch) == "a4"
    assert launch.cluster == "a3u"
    assert [a.cluster for a in launch.attempts] == ["a4", "a3u"]
    assert phases.settle_move(launch) == ""  # already there


async def test_a_move_needs_room_in_the_budget_there() -> None:
    await flush_test_redis()
    policy = Policy(
        rules=(PolicyRule(users=("U1",)),),
        budgets=(BudgetRule(users=("U1",), clusters=("a3u",), gpu_hours_per_week=10),),
    )
    async with open_test_store() as store, authority_for(store, policy) as authority:
        launch = pending("4190")
        launch.estimate_gpu_hours = 16.0
        assert (await authority.readmit(launch, "a3u")).outcome == "OVER_BUDGET"
        assert (await authority.readmit(launch, "a3m")).allowed  # no budget there
        launch.estimate_gpu_hours = 4.0
        assert (await authority.readmit(launch, "a3u")).allowed
