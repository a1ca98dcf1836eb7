"""The store against a real Redis: transactions, leases, and what an outage looks like."""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.console.chat import ConsoleFront
from bot.core.core import Core
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.events import EVENT_KINDS, Event
from bot.lifecycle.launch import Launch, Phase
from bot.notify.notifier import Notifier
from bot.settings.config import load_config
from bot.settings.env import Settings
from bot.store import keys
from bot.store.base import StoreError
from bot.store.store import Store
from bot.text.front import Incoming
from cluster.ssh.pool import SSHPool
from tests.bot.botkit import TEST_REDIS, flush_test_redis, open_test_store, request, stream_entries

EXAMPLE = Path(__file__).resolve().parents[3] / "trainbot.example.yaml"
CLOSED = "redis://127.0.0.1:1/0"  # nothing listens there


async def test_a_change_and_its_messages_are_written_together() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        launch = Launch(request=request(), user_id="U1", channel="C1")
        await store.launches.create(launch, [Event("parent", launch.id)])
        assert await store.history.active_ids("U1") == [launch.id]

        def running(stored: Launch) -> list[Event]:
            stored.phase = Phase.SUBMITTED
            return [Event("thread", stored.id, "Submitted."), Event("enqueue", stored.id)]

        changed, _ = await store.launches.mutate(launch.id, running)
        assert changed.phase == Phase.SUBMITTED
        assert await store.history.tracked_ids("a4") == [launch.id]
        assert await store.outbox.length() == 2  # parent + thread; enqueue went to the queue
        assert await store.queue.length() == 2  # created + enqueue


async def test_a_lease_has_one_holder_at_a_time() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        assert await store.leases.acquire("poller:a4", "one", 5000)
        assert not await store.leases.acquire("poller:a4", "two", 5000)
        assert await store.leases.acquire("poller:a4", "one", 5000)  # renewal
        await store.leases.release("poller:a4", "two")  # not the holder: nothing happens
        assert not await store.leases.acquire("poller:a4", "two", 5000)
        await store.leases.release("poller:a4", "one")
        assert await store.leases.acquire("poller:a4", "two", 5000)


async def test_redis_down_is_a_store_error_not_a_redis_exception() -> None:
    store = Store(aioredis.from_url(CLOSED, decode_responses=True))
    try:
        with pytest.raises(StoreError, match="Redis is unreachable"):
            await store.launches.get("L-abcdef")
        with pytest.raises(StoreError):
            sum(await store.budgets.active_counts("U1"))
    finally:
        await store.redis.aclose()


async def test_commands_answer_clearly_while_redis_is_down() -> None:
    config = load_config(EXAMPLE)
    store = Store(aioredis.from_url(CLOSED, decode_responses=True))
    try:
        async with SSHPool() as pool:
            core = Core(
                store, Clusters(config, Settings.from_environ({}), pool), config.command_context()
            )
            reply = await core(Incoming(user_id="U0ALICE", channel_id="C1", command="/jobs"))
    finally:
        await store.redis.aclose()
    assert reply.error and reply.text.startswith("That did not work: Redis is unreachable")
    assert TEST_REDIS not in reply.text


def test_events_round_trip_and_unknown_kinds_are_refused() -> None:
    for kind in EVENT_KINDS:
        event = Event(kind, "L-1", "text", data={"k": 1})
        assert Event.decode("1-0", event.encode()) == replace(event, id="1-0")
    with pytest.raises(ValueError, match="unknown event kind 'ephemeral'"):
        Event.decode("1-0", {"kind": "ephemeral", "launch": "L-1"})


async def test_the_notifier_skips_an_entry_of_an_unknown_kind() -> None:
    await flush_test_redis()
    front = ConsoleFront(io.StringIO(), color=False)
    async with open_test_store() as store:
        launch = Launch(request=request(), user_id="U1", channel="C1")
        await store.launches.create(launch, [], enqueue=False)
        await store.redis.xadd(keys.OUTBOX, {"kind": "ephemeral", "launch": launch.id})
        retry = [Event("thread", launch.id, "Retrying."), Event("enqueue", launch.id)]
        await store.launches.mutate(launch.id, lambda _: retry)
        notifier = Notifier(store, front, {}, owner="test")
        while not await notifier.drained():
            await notifier.drain()
        assert await store.queue.length() == 1  # the enqueue went to the workers
    assert front.lines[1:] == ["  └ Retrying."]  # after the parent; the unknown entry dropped


async def test_create_holds_to_max_active_across_connections() -> None:
    """Two stores (two bot processes) creating at once: the limit holds."""
    import asyncio

    await flush_test_redis()
    async with open_test_store() as one, open_test_store() as two:
        items = [Launch(request=request(), user_id="U1", channel="C1") for _ in range(8)]
        made = await asyncio.gather(
            *(
                (one if i % 2 else two).launches.create(launch, [], enqueue=False, max_active=3)
                for i, launch in enumerate(items)
            )
        )
        assert made.count(True) == 3 and sum(await one.budgets.active_counts("U1")) == 3
        kept = [launch.id for launch, ok in zip(items, made, strict=True) if ok]
        assert sorted(kept) == await one.history.active_ids("U1")
        assert [await one.launches.get(launch.id) is not None for launch in items] == made


async def test_first_seen_is_shared_and_expires() -> None:
    await flush_test_redis()
    async with open_test_store() as one, open_test_store() as two:
        assert await one.marks.first_seen("req-1", 1)
        assert not await two.marks.first_seen("req-1", 1)
        assert await two.marks.first_seen("req-2", 1)


async def test_records_and_messages_are_stored_redacted() -> None:
    await flush_test_redis()
    secret = "hf_storedSecret123"
    async with Store.connect(TEST_REDIS, redact=lambda t: t.replace(secret, "[redacted]")) as st:
        launch = Launch(request=request(), user_id="U1", channel="C1", detail=f"x {secret}")
        await st.launches.create(launch, [Event("thread", launch.id, f"stderr {secret}")])
        client = aioredis.from_url(TEST_REDIS, decode_responses=True)
        try:
            raw = str(await client.get(f"trainbot:launch:{launch.id}"))
            entries = await stream_entries(client, "trainbot:outbox")
        finally:
            await client.aclose()
    assert secret not in raw and "[redacted]" in raw
    assert all(secret not in v for _, fields in entries for v in fields.values())


async def test_many_launches_are_read_in_order_in_chunks() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        items = [Launch(request=request(), user_id="U1", channel="C1") for _ in range(5)]
        for launch in items:
            await store.launches.create(launch, [], enqueue=False)
        ids = [items[3].id, "L-000000", items[0].id, items[4].id]
        found = await store.launches.get_many(ids, chunk=2)
        assert [f.id if f else None for f in found] == [items[3].id, None, items[0].id, items[4].id]


async def test_a_burst_beyond_the_pool_waits_for_a_connection_instead_of_failing() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        names = [f"burst-{i}" for i in range(400)]
        seen = await asyncio.gather(*(store.marks.first_seen(name, 60) for name in names))
        assert all(seen)


async def test_watchers_preferences_and_dms_written_once() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        launch = Launch(request=request(), user_id="U1", channel="C1")
        await store.launches.create(launch, [])
        assert await store.people.watch(launch.id, "U2") and not await store.people.watch(
            launch.id, "U2"
        )
        assert await store.people.watchers(launch.id) == ["U2"] and await store.people.watching(
            "U2"
        ) == [launch.id]
        assert await store.people.unwatch(launch.id, "U2") and not await store.people.unwatch(
            launch.id, "U2"
        )
        assert (
            await store.people.watchers(launch.id) == [] and await store.people.watching("U2") == []
        )

        assert (await store.people.prefs("U2")).dm == ["finish", "failure", "hang"]  # the defaults
        await store.people.set_prefs(
            "U2", (await store.people.prefs("U2")).model_copy(update={"dm": []})
        )
        assert (await store.people.prefs("U2")).dm == []

        before = await store.outbox.length()
        dm = Event("dm", launch.id, "done", data={"user": "U2", "notice": "completed"})
        assert await store.lanes.write_dms("1-0", [dm, dm])
        assert not await store.lanes.write_dms("1-0", [dm])  # a redelivered line writes none again
        assert await store.outbox.length() == before + 2


async def test_the_facts_of_an_event_are_stored_redacted_even_where_json_escapes_them() -> None:
    """A thread event's facts (a launcher's stderr, an error) are redacted value by value
    before they are JSON: a secret with a quote or a backslash in it, which JSON writes
    escaped, does not slip past the redactor."""
    await flush_test_redis()
    secret = 'hf_"quoted\\Secret'
    async with Store.connect(TEST_REDIS, redact=lambda t: t.replace(secret, "[redacted]")) as st:
        launch = Launch(request=request(), user_id="U1", channel="C1")
        facts = {"move": "launcher_error", "output": f"token {secret}", "more": [secret]}
        await st.launches.create(launch, [Event("thread", launch.id, data=facts)], enqueue=False)
        client = aioredis.from_url(TEST_REDIS, decode_responses=True)
        try:
            entries = await stream_entries(client, "trainbot:outbox")
        finally:
            await client.aclose()
    stored = [json.loads(fields["data"]) for _, fields in entries if fields["kind"] == "thread"]
    assert stored == [
        {"move": "launcher_error", "output": "token [redacted]", "more": ["[redacted]"]}
    ]
    assert all('hf_\\"quoted' not in v for _, fields in entries for v in fields.values())
