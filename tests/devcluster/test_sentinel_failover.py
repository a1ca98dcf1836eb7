"""A real failover: devcluster/sentinel's primary, replica and three sentinels; the
primary is SIGKILLed while launches are written and changed through the store. Every
launch acknowledged is on the new primary once (one queue entry, one parent message),
and a cancel written during the failover is kept."""

from __future__ import annotations

import asyncio
import shutil
import time

import pytest

from bench.soak_infra import SENTINELS, sentinel
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.settings.env import Target
from bot.store.connection import REDIS_MAX_CONNECTIONS
from bot.store.store import Store
from commands.requests import TrainRequest

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None or shutil.which("redis-cli") is None,
    reason="redis-server and redis-cli are needed for a primary, a replica and sentinels",
)


def a_launch() -> Launch:
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    return Launch(request=request, user_id="U1", channel="C1")


@pytest.mark.timeout(120)
async def test_launches_and_a_cancel_survive_a_primary_killed_mid_write(
    sentinel_set: None,
) -> None:
    target = Target(sentinels=SENTINELS, wait_replicas=1, wait_timeout_ms=200, retry_for_s=30)
    async with Store.connect(target) as store:
        await store.redis.flushdb()
        await store.ensure_groups()
        episodes: list[bool] = []
        store.retry_observers.append(lambda _reason, episode: episodes.append(episode))
        first = a_launch()
        assert await store.launches.create(first, [Event("parent", first.id)])
        # A failover keeps what the replica acknowledged: make sure it has the first launch
        # (the create's own WAIT gives up after 200 ms, which a loaded machine can outlast).
        # WAIT counts this connection's writes, and the replica applies writes in order.
        async with store.redis.pipeline(transaction=False) as pipe:
            pipe.set("trainbot:test:replicated", "1")
            pipe.execute_command("WAIT", 1, 10_000)
            _, acked = await pipe.execute()
        assert int(acked) == 1
        before = sentinel("primary")
        written: list[str] = []

        async def keep_writing() -> None:
            for _ in range(40):
                launch = a_launch()
                assert await store.launches.create(launch, [Event("parent", launch.id)])
                written.append(launch.id)
                await asyncio.sleep(0.05)

        def cancelled(stored: Launch) -> list[Event]:
            stored.cancelled_by, stored.cancelled_at = "U1", time.time()
            return [Event("thread", stored.id, "Cancelled by <@U1>.")]

        writing = asyncio.create_task(keep_writing())
        await asyncio.sleep(0.3)
        killed_at = time.monotonic()
        sentinel("kill")
        _, events = await store.launches.mutate(first.id, cancelled)  # during the failover
        back_s = time.monotonic() - killed_at
        await writing
        assert [e.kind for e in events] == ["thread"]
        assert sentinel("primary") != before
        assert True in episodes  # it rode through at least one failover episode
        assert back_s < 30
        stored = await store.launches.get(first.id)
        assert stored is not None and stored.cancelled_by == "U1"
        ids = [first.id, *written]
        assert len(set(ids)) == 41 and all(await store.launches.get_many(ids))
        assert await store.queue.length() == 41  # one entry per launch
        assert await store.outbox.length() == 42  # 41 parents, 1 cancel line


@pytest.mark.timeout(60)
async def test_a_burst_through_sentinel_waits_for_a_connection(sentinel_set: None) -> None:
    """More callers at once than the pool has connections (a burst of slash commands):
    each waits for a connection, as with a plain URL, and none fails."""
    async with Store.connect(Target(sentinels=SENTINELS)) as store:
        await store.redis.flushdb()
        await asyncio.gather(
            *(store.marks.count("burst") for _ in range(3 * REDIS_MAX_CONNECTIONS))
        )
        assert await store.marks.count("burst") == 3 * REDIS_MAX_CONNECTIONS + 1
        pool = store.redis.connection_pool
        opened = len(pool._available_connections) + len(pool._in_use_connections)
        assert opened <= REDIS_MAX_CONNECTIONS
