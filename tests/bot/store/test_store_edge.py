"""The store's edge during a failover, against real Redis servers: a write refused by a
replica (READONLY) is retried until one is promoted, a reply lost after the write was
applied does not double it, WAIT holds a durable write until a replica has it, and a
failover longer than the bound is a clear StoreError."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from urllib.parse import urlparse

import pytest
import redis.asyncio as aioredis

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.settings.env import Target
from bot.store import keys
from bot.store.base import EPISODE_OVER_S, StoreError
from bot.store.store import Store
from commands.requests import TrainRequest
from tests.bot.botkit import TEST_REDIS, flush_test_redis, free_port

CLOSED = "redis://127.0.0.1:1/0"  # nothing listens there
REDIS_SERVER = shutil.which("redis-server")
needs_server = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")


@contextmanager
def redis_server(*args: str) -> Iterator[int]:
    """A throwaway redis-server on a free loopback port (no persistence)."""
    assert REDIS_SERVER is not None
    port = free_port()
    where = tempfile.mkdtemp(prefix="trainbot-redis-")
    command = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--appendonly", "no", "--dir", where, "--repl-diskless-sync", "yes"]
    proc = subprocess.Popen([*command, *args], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(where, ignore_errors=True)


class ReplyDropper:
    """A TCP relay to Redis that, once armed with a marker, passes on the client's bytes
    holding it and then cuts the connection before Redis's reply comes back: the write
    was applied, the client never hears so (what a failover mid-reply looks like)."""

    def __init__(self, upstream: str) -> None:
        parsed = urlparse(upstream)
        self.host, self.port, self.db = parsed.hostname or "", parsed.port or 6379, parsed.path
        self.marker: bytes | None = None
        self.dropped = 0
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}{self.db}"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        cut = asyncio.Event()

        async def upward() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()
                if self.marker is not None and self.marker in data:
                    self.marker = None
                    self.dropped += 1
                    cut.set()
                    return

        async def downward() -> None:
            while not cut.is_set() and (data := await up_reader.read(65536)):
                if cut.is_set():
                    return
                writer.write(data)
                await writer.drain()

        tasks = [asyncio.create_task(upward()), asyncio.create_task(downward())]
        await asyncio.wait([*tasks, asyncio.create_task(cut.wait())], return_when="FIRST_COMPLETED")
        await asyncio.sleep(0.05)  # Redis applies what it was sent
        for task in tasks:
            task.cancel()
        writer.close()
        up_writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


@asynccontextmanager
async def dropper_store() -> AsyncIterator[tuple[Store, ReplyDropper, list[str]]]:
    await flush_test_redis()
    dropper = ReplyDropper(TEST_REDIS)
    await dropper.start()
    retries: list[str] = []
    try:
        async with Store.connect(Target(url=dropper.url, retry_for_s=5)) as store:
            store.retry_observers.append(lambda reason, _episode: retries.append(reason))
            yield store, dropper, retries
    finally:
        await dropper.close()


def a_launch() -> Launch:
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    return Launch(request=request, user_id="U1", channel="C1")


async def test_a_lost_reply_to_create_does_not_queue_the_launch_twice() -> None:
    async with dropper_store() as (store, dropper, _):
        launch = a_launch()
        dropper.marker = b"EXEC"
        assert await store.launches.create(launch, [Event("parent", launch.id)])
        assert dropper.dropped == 1
        assert await store.queue.length() == 1
        assert await store.outbox.length() == 1
        assert await store.history.active_ids("U1") == [launch.id]  # the same id, not a second draw


async def test_a_lost_reply_to_a_change_does_not_write_its_messages_twice() -> None:
    async with dropper_store() as (store, dropper, _):
        launch = a_launch()
        await store.launches.create(launch, [Event("parent", launch.id)])

        said = [
            Event("update", launch.id),
            Event("thread", launch.id, "Once."),
            Event("thread", launch.id, data={"move": "job_stuck", "job": "5", "held": True}),
        ]
        dropper.marker = b"EXEC"
        stored, events = await store.launches.mutate(launch.id, lambda s: list(said))
        assert dropper.dropped == 1
        assert events == said  # from the mark, empty text and facts included
        assert stored.id == launch.id
        assert await store.outbox.length() == 4  # parent + the three


async def test_a_lost_reply_to_a_posted_mark_still_says_it_was_this_call() -> None:
    async with dropper_store() as (store, dropper, retries):
        dropper.marker = b"trainbot:posted:E-1"
        assert await store.marks.mark_posted("E-1")  # its own mark, set before the reply was lost
        assert retries == ["connection"]
        assert not await store.marks.mark_posted("E-1")  # another call: posted already


async def test_a_lost_reply_to_a_count_counts_once() -> None:
    async with dropper_store() as (store, dropper, _):
        assert await store.marks.count("waits") == 1
        dropper.marker = b"EXEC"
        assert await store.marks.count("waits") == 2
        assert dropper.dropped == 1
        assert await store.marks.count("waits") == 3


async def test_a_lost_reply_to_a_dead_letter_sets_the_entry_aside_once() -> None:
    async with dropper_store() as (store, dropper, _):
        await store.ensure_groups()
        launch = a_launch()
        await store.launches.create(launch, [])
        [(entry_id, fields)] = await store.queue.read("w1", block_ms=100)
        dropper.marker = b"EVAL"
        await store.queue.dead_letter_entry(entry_id, fields, "boom", retry_at=time.time() + 600)
        assert dropper.dropped == 1
        assert await store.queue.dead_letter_count() == 1  # not a second dead letter
        assert await store.queue.retrying_count() == 1
        assert await store.queue.length() == 0


@needs_server
async def test_a_write_refused_by_a_replica_waits_for_its_promotion() -> None:
    with redis_server() as primary, redis_server() as replica:
        client = aioredis.Redis(port=replica)
        await client.replicaof("127.0.0.1", primary)
        seen: list[str] = []
        target = Target(url=f"redis://127.0.0.1:{replica}/0", retry_for_s=10)

        async def promote() -> None:
            await asyncio.sleep(0.5)
            await client.replicaof("NO", "ONE")

        promoting = asyncio.create_task(promote())
        async with Store.connect(target) as store:  # its first write (the groups) is refused
            store.retry_observers.append(lambda reason, _: seen.append(store.failing_over()))
            launch = a_launch()
            assert await store.launches.create(launch, [Event("parent", launch.id)])
            assert store.failing_over() == ""
        await promoting
        await client.aclose()
        # connect rode through READONLY before the observer was added; ride once more
        assert await _readonly_ride(primary) == "readonly"


async def _readonly_ride(primary: int) -> str:
    """A store on a replica of ``primary``: what it reports while a write is refused."""
    with redis_server("--replicaof", "127.0.0.1", str(primary)) as replica:
        store = Store(aioredis.Redis(port=replica), target=Target(retry_for_s=0.3))
        reasons: list[str] = []
        health: list[str] = []

        def observe(reason: str, _: bool) -> None:
            reasons.append(reason)
            health.append(store.failing_over())

        store.retry_observers.append(observe)
        with pytest.raises(StoreError, match="not back within 0.3 s"):
            await store.queue.requeue("L-abc")
        await store.redis.aclose()
        assert health and health[0].startswith("store failing over for")
        return reasons[0]


async def test_a_failover_longer_than_the_bound_is_a_clear_error() -> None:
    store = Store(aioredis.from_url(CLOSED), target=Target(url=CLOSED, retry_for_s=0.5))
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"not back within 0.5 s \(redis://127.0.0.1:1/0"):
        await store.launches.get("L-abcdef")
    assert 0.3 < time.monotonic() - started < 3
    assert store.failover.retries >= 3
    await store.redis.aclose()


@needs_server
async def test_wait_holds_a_queued_launch_until_the_replica_has_it() -> None:
    with redis_server() as primary, redis_server() as replica:
        replica_client = aioredis.Redis(port=replica, decode_responses=True)
        await replica_client.replicaof("127.0.0.1", primary)
        for _ in range(100):
            if (await replica_client.info("replication"))["master_link_status"] == "up":
                break
            await asyncio.sleep(0.05)
        target = Target(
            url=f"redis://127.0.0.1:{primary}/0", wait_replicas=1, wait_timeout_ms=10_000
        )
        async with Store.connect(target) as store:
            assert await store.replicas() == 1
            for _ in range(20):
                launch = a_launch()
                await store.launches.create(launch, [Event("parent", launch.id)])
                assert await replica_client.exists(f"trainbot:launch:{launch.id}") == 1
        await replica_client.aclose()


async def test_wait_without_replicas_costs_its_timeout_and_still_writes() -> None:
    await flush_test_redis()
    target = Target(url=TEST_REDIS, wait_replicas=1, wait_timeout_ms=300)
    async with Store.connect(target) as store:
        launch = a_launch()
        started = time.monotonic()
        assert await store.launches.create(launch, [Event("parent", launch.id)])
        assert time.monotonic() - started >= 0.29
        assert await store.launches.get(launch.id) is not None


async def test_a_record_that_is_not_a_launch_is_skipped_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One bad entry (written by hand into Redis, or by another version) used to make
    every get_many raise: every poll of its cluster, and every /jobs all, failed."""
    await flush_test_redis()
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    async with Store.connect(TEST_REDIS) as store:
        good = Launch(request=request, user_id="U1", channel="C1")
        await store.launches.create(good, [], enqueue=False)
        await store.redis.set(keys.launch("L-0badbad0"), '{"id": "L-0badbad0", "phase": 7}')
        await store.redis.set(keys.launch("L-0badbad1"), "not json at all")
        found = await store.launches.get_many(["L-0badbad0", good.id, "L-0badbad1", "L-gone"])
        assert [f.id if f else None for f in found] == [None, good.id, None, None]
        assert await store.redis.get(keys.launch("L-0badbad1")) == "not json at all"  # kept
    said = [r.getMessage() for r in caplog.records if "is not a launch" in r.getMessage()]
    assert len(said) == 2 and "L-0badbad0" in said[0] and "L-0badbad1" in said[1], said


async def test_a_failover_whose_calls_all_gave_up_is_over_for_health() -> None:
    """A call that gave up left the store 'failing over' until some later call succeeded:
    a process that makes no other call (an idle web role) stayed 503 with Redis back."""
    store = Store(aioredis.from_url(CLOSED), target=Target(url=CLOSED, retry_for_s=0.3))
    with pytest.raises(StoreError):
        await store.launches.get("L-abcdef")
    assert store.failing_over().startswith("store failing over for")  # just gave up
    store.failover.last_retry -= EPISODE_OVER_S + 0.1  # no call retried since: none rides now
    assert store.failing_over() == ""
    assert store.failover.since is None
    await store.redis.aclose()
