"""State that lasts a year, against a real Redis: finished launches expire after the
retention while their history stays queryable, and a Slurm job id is found through
an index, never a keyspace scan."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from bot.console.chat import ConsoleFront
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.runtime.assembly import running
from bot.settings.config import Retention, RetentionDays, parse_config
from bot.store import keys
from bot.store.store import Store
from cluster.errors import ConfigError
from commands.errors import CommandError
from commands.request_fields import JobRef
from commands.requests import TrainRequest
from tests.bot.botkit import TEST_REDIS, bot_settings, dev_config, flush_test_redis


def launch(user: str, cluster: str) -> Launch:
    req = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster=cluster)
    return Launch(request=req, user_id=user, user_name=user.lower(), channel="C1")


async def finish(store: Store, launch: Launch, job_id: str, outcome: str = "COMPLETED") -> None:
    await store.launches.create(launch, [Event("parent", launch.id)])

    def submitted(stored: Launch) -> list[Event]:
        stored.phase = Phase.RUNNING
        stored.attempts.append(Attempt(number=1, job_id=job_id, started_at=time.time() - 60))
        return []

    def done(stored: Launch) -> list[Event]:
        stored.phase, stored.outcome = Phase.DONE, outcome
        stored.attempts[-1].ended_at = time.time()
        return []

    await store.launches.mutate(launch.id, submitted)
    await store.launches.mutate(launch.id, done)


def no_scan(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a keyspace scan")


async def test_a_job_id_is_found_through_the_index_without_scanning() -> None:
    await flush_test_redis()
    async with Store.connect(TEST_REDIS) as store:
        a, b, c = launch("U1", "a4"), launch("U2", "a3m"), launch("U1", "a4")
        await finish(store, a, "4187")
        await finish(store, b, "4187")  # the same Slurm id on another cluster
        await store.launches.create(c, [])

        def submitted(stored: Launch) -> list[Event]:
            stored.phase = Phase.SUBMITTED
            stored.attempts.append(Attempt(number=1, job_id="99"))
            return []

        await store.launches.mutate(c.id, submitted)
        store.redis.scan_iter = no_scan  # type: ignore[method-assign]
        store.redis.scan = no_scan  # type: ignore[method-assign]
        assert await store.history.find_job("4187") == [("a3m", b.id), ("a4", a.id)]
        assert await store.history.find_job("99") == [("a4", c.id)]
        assert await store.history.find_job("5") == []
        assert await store.redis.ttl(keys.job_index("99")) == -1  # active: kept


async def test_job_keys_of_earlier_versions_are_moved_once() -> None:
    await flush_test_redis()
    async with Store.connect(TEST_REDIS) as store:
        await store.redis.delete(keys.JOB_INDEX_MIGRATED)
        await store.redis.set(keys.job("a4", "77"), "L-000077")
        assert await store.history.migrate_job_index() == 1
        assert await store.history.find_job("77") == [("a4", "L-000077")]
        assert not await store.redis.exists(keys.job("a4", "77"))
        assert await store.history.migrate_job_index() == 0  # marked done: no second scan


async def test_finished_launches_expire_and_their_history_stays() -> None:
    await flush_test_redis()
    retention = Retention(launch_s=2, history_s=3600)
    async with Store.connect(TEST_REDIS, retention=retention) as store:
        old, mine, theirs = launch("U1", "a4"), launch("U1", "a3m"), launch("U2", "a4")
        await finish(store, old, "10", "FAILED")
        await finish(store, mine, "11")
        await finish(store, theirs, "12", "CANCELLED")
        running = launch("U1", "a4")
        await store.launches.create(running, [])
        assert 0 < await store.redis.ttl(keys.launch(mine.id)) <= 2
        assert await store.redis.ttl(keys.launch(running.id)) == -1  # active: never expires
        await asyncio.sleep(2.5)
        assert await store.launches.get(mine.id) is None  # the record is gone ...
        assert await store.launches.get(running.id) is not None
        history = await store.history.entries(user_id="U1")  # ... its history is not
        assert [e.id for e in history] == [mine.id, old.id]  # newest first
        entry = history[0]
        assert (entry.cluster, entry.job_id, entry.outcome, entry.title) == (
            "a3m",
            "11",
            "COMPLETED",
            "sft · llama3p1_8b",
        )
        assert entry.user_name == "u1" and entry.attempts == 1 and 55 < entry.run_s < 120
        assert [e.id for e in await store.history.entries(cluster="a4")] == [theirs.id, old.id]
        assert [e.id for e in await store.history.entries(user_id="U1", cluster="a4")] == [old.id]
        assert [e.id for e in await store.history.entries()] == [theirs.id, mine.id, old.id]
        assert await store.history.entries(since=time.time() + 10) == []
        assert len(await store.history.entries(limit=2)) == 2


async def test_history_older_than_its_retention_is_trimmed() -> None:
    await flush_test_redis()
    async with Store.connect(TEST_REDIS, retention=Retention(launch_s=60, history_s=60)) as s:
        ancient = launch("U1", "a4")
        await finish(s, ancient, "1")
        await s.redis.zadd(keys.history(user_id="U1"), {ancient.id: time.time() - 3600})
        await finish(s, launch("U1", "a4"), "2")  # the next write trims the index
        assert ancient.id not in [e.id for e in await s.history.entries(user_id="U1")]
        assert 0 < await s.redis.ttl(keys.summary(ancient.id)) <= 60


def test_retention_is_configured_in_days() -> None:
    base = (
        "clusters:\n  a4: {type: hcc-a4, login: {host: h, user: u}, partition: a4, max_nodes: 2}\n"
    )
    default = parse_config(base).retention.store()
    assert default == Retention(launch_s=90 * 86400, history_s=400 * 86400)
    config = parse_config(base + "retention: {launches_days: 30, history_days: 365}\n")
    assert config.retention.store() == Retention(launch_s=30 * 86400, history_s=365 * 86400)
    with pytest.raises(ConfigError, match="history_days must be >= launches_days"):
        parse_config(base + "retention: {launches_days: 30, history_days: 7}\n")


async def test_a_launch_past_its_retention_is_named_with_when_it_ended() -> None:
    await flush_test_redis()
    config = dev_config()
    short = config.model_copy(
        update={"retention": RetentionDays(launches_days=2 / 86400, history_days=1)}
    )
    async with running(bot_settings(), short, ConsoleFront(), workers=0) as bot:
        bot.poller.shutdown()
        stored = launch("U1", "a4")
        await finish(bot.store, stored, "4242", "TIMEOUT")
        assert (await bot.core.lookup.find(JobRef(id="4242"))).id == stored.id
        await asyncio.sleep(2.5)
        with pytest.raises(CommandError) as raised:
            await bot.core.lookup.find(JobRef(id=stored.id))
        day = time.strftime("%Y-%m-%d", time.gmtime())
        assert str(raised.value).startswith(f"{stored.id} ended on {day} (TIMEOUT); its details")
        with pytest.raises(CommandError, match="No launch of trainbot has Slurm job 4242"):
            await bot.core.lookup.find(JobRef(id="4242"))  # its index entry expired with the record
        with pytest.raises(CommandError, match="No launch L-000000"):
            await bot.core.lookup.find(JobRef(id="L-000000"))
