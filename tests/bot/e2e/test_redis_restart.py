"""Redis restarts, as docker-compose.yml runs it (append-only, fsync every second):
nothing queued, running, due or undelivered is lost, and the store answers again
once Redis is back, without a restart of the bot."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.soak_infra import OwnRedis
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.store.base import StoreError
from bot.store.store import Store
from commands.requests import TrainRequest

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server (devcluster/up installs it)"
)


def launch(**fields: object) -> Launch:
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    return Launch(request=request, user_id="U0ALICE", channel="C1", **fields)


async def test_nothing_queued_running_due_or_undelivered_is_lost(tmp_path: Path) -> None:
    redis = OwnRedis(tmp_path / "redis", appendfsync="everysec")
    await redis.start()
    try:
        async with Store.connect(redis.url) as store:
            await store.ensure_groups()
            queued = launch()
            await store.launches.create(
                queued, [Event("parent", queued.id), Event("thread", queued.id, "Queued.")]
            )
            running = launch(phase=Phase.RUNNING, attempts=[Attempt(number=1, job_id="42")])
            await store.launches.create(running, [], enqueue=False)
            due = launch(phase=Phase.RETRYING)
            await store.launches.create(due, [], enqueue=False)
            await store.queue.requeue(due.id, after_s=600)
            taken = await store.queue.read("w1", block_ms=100)
            assert [f["launch"] for _, f in taken] == [queued.id]  # read, not yet acknowledged
            before = await store.backlog()

            await redis.stop()  # SIGTERM: Redis writes its append-only file and exits
            with pytest.raises(StoreError):
                await store.launches.get(queued.id)
            await redis.start()  # the same directory, the same port

            # The same store object (the bot did not restart) answers again.
            for kept in (queued, running, due):
                stored = await store.launches.get(kept.id)
                assert stored is not None and stored.phase == kept.phase
            after = await store.backlog()
            assert (after.queue, after.deferred, after.outbox) == (
                before.queue,
                before.deferred,
                before.outbox,
            )
            assert after.outbox >= 2 and after.deferred == 1
            # The worker's unacknowledged entry is still its own, pending.
            mine = await store.queue.read("w1", block_ms=0, pending=True)
            assert [f["launch"] for _, f in mine] == [queued.id]
            assert await store.history.active_ids("U0ALICE")
    finally:
        await redis.stop()
