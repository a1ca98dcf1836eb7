"""GPU samples of a cluster's running launches against a real Redis: one round trip per
Unix user whose jobs run there, each figure kept on its launch, idle GPUs said once, and
a user whose sample fails leaves the others' figures standing."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from bot.engine import gpuwatch
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.settings.sections import HealthRules
from bot.store.store import Store
from cluster.errors import ClusterError
from cluster.preflight.gpu import GpuSample
from cluster.site.profiles import ClusterProfile
from commands.requests import TrainRequest
from tests.bot.botkit import flush_test_redis, open_test_store

PROFILE = ClusterProfile(
    name="a4",
    type="hcc-a4",
    login={"host": "login.example", "user": "trainer"},
    partition="a4",
    max_nodes=4,
)
BUSY = GpuSample(gpus=8, util_pct=93.0, mem_used_mib=40960, mem_total_mib=81920)
IDLE = GpuSample(gpus=8, util_pct=2.0, mem_used_mib=1024, mem_total_mib=81920)


def clusters(rules: HealthRules) -> Any:
    """What sampling reads of ``Clusters``: the profile, the health rules, the pool."""
    config = SimpleNamespace(watch=SimpleNamespace(health=rules))
    return SimpleNamespace(profile=lambda name: PROFILE, config=config, pool=None)


async def running(store: Store, user_id: str, cluster_user: str, job_id: str) -> Launch:
    request = TrainRequest(
        workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4", nodes=1
    )
    launch = Launch(request=request, user_id=user_id, channel="C1", cluster_user=cluster_user)
    await store.launches.create(launch, [Event("parent", launch.id)], enqueue=False)

    def start(stored: Launch) -> list[Event]:
        stored.phase, stored.attempts = Phase.RUNNING, [Attempt(number=1, job_id=job_id)]
        return []

    await store.launches.mutate(launch.id, start)
    return launch


class Sampler:
    """``cluster.preflight.gpu.sample`` without SSH: canned figures by job, or an error by user."""

    def __init__(self, figures: dict[str, GpuSample], failing: str = "") -> None:
        self.figures, self.failing = figures, failing
        self.calls: list[tuple[str, list[str]]] = []

    async def __call__(
        self, pool: Any, login: Any, job_ids: Sequence[str], *, cluster: str = ""
    ) -> dict[str, GpuSample]:
        self.calls.append((login.user, list(job_ids)))
        if login.user == self.failing:
            raise ClusterError("ssh: connection reset")
        return {job: self.figures[job] for job in job_ids if job in self.figures}


async def test_one_round_trip_per_unix_user_and_each_figure_on_its_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        alice = await running(store, "U0ALICE", "alice", "101")
        shared = [await running(store, "U0BOB", "", job) for job in ("102", "103")]
        queued = Launch(
            request=alice.request, user_id="U0CAROL", channel="C1", cluster_user="carol"
        )
        await store.launches.create(queued, [Event("parent", queued.id)], enqueue=False)
        sampler = Sampler({"101": BUSY, "102": IDLE})  # 103 printed nothing
        monkeypatch.setattr(gpuwatch, "sample", sampler)

        assert await gpuwatch.sample_running(store, clusters(HealthRules()), "a4") == 2
        calls = sorted((user, sorted(jobs)) for user, jobs in sampler.calls)
        assert calls == [("alice", ["101"]), ("trainer", ["102", "103"])]
        by_id = {
            launch.id: launch
            for launch in await store.launches.get_many([alice.id, *[s.id for s in shared]])
            if launch
        }
        assert by_id[alice.id].health.gpu_util_pct == 93.0
        assert by_id[alice.id].health.gpu_mem_used_mib == 40960
        assert by_id[shared[0].id].health.gpu_util_pct == 2.0
        assert by_id[shared[1].id].health.gpu_util_pct is None


async def test_idle_gpus_are_said_once_per_idle_stretch(monkeypatch: pytest.MonkeyPatch) -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        launch = await running(store, "U0ALICE", "", "101")
        rules = HealthRules(idle_window_s=0)
        monkeypatch.setattr(gpuwatch, "sample", Sampler({"101": IDLE}))
        await gpuwatch.sample_running(store, clusters(rules), "a4")
        first = await store.launches.get(launch.id)
        assert first is not None and first.health.gpu_idle_said
        idle_since = first.health.gpu_idle_since
        await gpuwatch.sample_running(store, clusters(rules), "a4")
        again = await store.launches.get(launch.id)
        assert again is not None and again.health.gpu_idle_since == idle_since

        monkeypatch.setattr(gpuwatch, "sample", Sampler({"101": BUSY}))
        await gpuwatch.sample_running(store, clusters(rules), "a4")
        busy = await store.launches.get(launch.id)
        assert busy is not None and not busy.health.gpu_idle_said
        assert busy.health.gpu_idle_since is None


async def test_a_user_whose_sample_fails_leaves_the_others_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        alice = await running(store, "U0ALICE", "alice", "101")
        bob = await running(store, "U0BOB", "bob", "102")
        monkeypatch.setattr(gpuwatch, "sample", Sampler({"101": BUSY, "102": BUSY}, "alice"))
        assert await gpuwatch.sample_running(store, clusters(HealthRules()), "a4") == 1
        kept, read = await store.launches.get(alice.id), await store.launches.get(bob.id)
        assert kept is not None and kept.health.gpu_util_pct is None
        assert read is not None and read.health.gpu_util_pct == 93.0
