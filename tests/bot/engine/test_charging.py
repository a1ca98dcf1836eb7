"""Charging ended launches against a real Redis: sacct's figure once it is final, the
same figure never twice, a wait while sacct lags or a submit may still land a job, and
what sacct shows by then once a day has passed."""

from __future__ import annotations

import time

import pytest

from bot.engine import charging
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.store.store import Store
from cluster.errors import ClusterError
from cluster.slurm.sacct import Usage
from commands.budget import iso_week
from commands.requests import TrainRequest
from tests.bot.botkit import flush_test_redis, open_test_store


class Sacct:
    """What ``Clusters.usage`` would answer for each launch, or the error it raises."""

    def __init__(self, answer: Usage | ClusterError) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def usage(self, launch: Launch) -> Usage:
        self.asked.append(launch.id)
        if isinstance(self.answer, ClusterError):
            raise self.answer
        return self.answer


async def ended(store: Store, *, submit_started_at: float = 0.0) -> Launch:
    request = TrainRequest(
        workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4", nodes=1
    )
    launch = Launch(request=request, user_id="U0ALICE", channel="C1", estimate_gpu_hours=8)
    await store.launches.create(launch, [Event("parent", launch.id)], enqueue=False)

    def finish(stored: Launch) -> list[Event]:
        stored.attempts = [Attempt(number=1, job_id="4187")]
        stored.phase, stored.outcome = Phase.DONE, "COMPLETED"
        stored.submit_started_at = submit_started_at
        return []

    await store.launches.mutate(launch.id, finish)
    return launch


async def charge(store: Store, sacct: Sacct) -> int:
    return await charging.charge_ended(store, sacct, "a4")  # type: ignore[arg-type]


async def test_a_final_figure_is_charged_once() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        launch = await ended(store)
        sacct = Sacct(Usage(gpu_hours=2.5, jobs=("4187",)))
        assert await charge(store, sacct) == 1
        assert await charge(store, sacct) == 0  # asked again: nothing left to charge
        assert sacct.asked == [launch.id]
        assert await store.budgets.usage("U0ALICE", "a4", iso_week(time.time())) == pytest.approx(
            2.5
        )
        assert await store.budgets.uncharged("a4") == {}


@pytest.mark.parametrize(
    "answer",
    [
        Usage(gpu_hours=1.0, jobs=("4187",), running=("4187",)),
        Usage(gpu_hours=0.0, missing=("4187",)),
        ClusterError("ssh: connection refused"),
    ],
    ids=["still-running", "not-recorded-yet", "sacct-unreachable"],
)
async def test_a_figure_that_may_still_change_waits(answer: Usage | ClusterError) -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        launch = await ended(store)
        assert await charge(store, Sacct(answer)) == 0
        assert list(await store.budgets.uncharged("a4")) == [launch.id]
        assert await store.budgets.usage("U0ALICE", "a4", iso_week(time.time())) == 0


async def test_a_submit_that_may_still_land_a_job_is_not_asked_about_yet() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        launch = await ended(store, submit_started_at=time.time())
        sacct = Sacct(Usage(gpu_hours=2.5, jobs=("4187",)))
        assert await charge(store, sacct) == 0
        assert sacct.asked == [] and list(await store.budgets.uncharged("a4")) == [launch.id]


async def test_after_a_day_what_sacct_shows_is_charged(monkeypatch: pytest.MonkeyPatch) -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        await ended(store)
        later = time.time() + charging.GIVE_UP_S + 60
        monkeypatch.setattr(time, "time", lambda: later)  # the clock charging reads
        sacct = Sacct(Usage(gpu_hours=1.5, jobs=("4187",), running=("4187",)))
        assert await charge(store, sacct) == 1
        assert await store.budgets.uncharged("a4") == {}
        monkeypatch.undo()
        assert await store.budgets.usage("U0ALICE", "a4", iso_week(time.time())) == pytest.approx(
            1.5
        )


async def test_a_launch_active_again_is_let_go_without_a_charge() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        launch = await ended(store)

        def retry(stored: Launch) -> list[Event]:
            stored.phase = Phase.QUEUED
            return []

        await store.launches.mutate(launch.id, retry)
        sacct = Sacct(Usage(gpu_hours=2.5, jobs=("4187",)))
        assert await charge(store, sacct) == 0
        assert sacct.asked == [] and await store.budgets.uncharged("a4") == {}
        assert await store.budgets.usage("U0ALICE", "a4", iso_week(time.time())) == 0
