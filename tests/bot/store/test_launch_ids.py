"""Launch ids against a real Redis: long enough not to collide, and a create that
checks: a new launch whose id is taken (forced here) gets another one and never
writes into the other launch's record or thread."""

from __future__ import annotations

import re

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase, new_launch_id
from bot.store import keys
from bot.store.store import Store
from commands.job_commands import parse_job_ref
from tests.bot.botkit import flush_test_redis, launch_in, open_test_store, request, stream_entries


async def outbox_of(store: Store, launch_id: str) -> list[tuple[str, str]]:
    entries = await stream_entries(store.redis)
    return [(f["kind"], f["text"]) for _, f in entries if f["launch"] == launch_id]


def test_new_ids_are_40_bits_typable_and_old_ones_still_parse() -> None:
    from bot.settings.config import load_config
    from tests.bot.core.test_core import EXAMPLE

    ids = {new_launch_id() for _ in range(20_000)}
    assert len(ids) == 20_000
    assert all(re.fullmatch(r"L-[0-9a-f]{10}", i) for i in ids)
    context = load_config(EXAMPLE).command_context()
    for stored in ("L-7f3a9c", next(iter(ids)), next(iter(ids)).upper().replace("L-", "l-")):
        assert parse_job_ref(stored, None, context).id == "L-" + stored[2:].lower()


async def test_a_taken_id_is_drawn_again_and_the_other_thread_is_untouched() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        alice = Launch(request=request(), user_id="U0ALICE", channel="C1")
        await store.launches.create(alice, [Event("parent", alice.id)], enqueue=False)
        taken = alice.id
        bob = Launch(id=taken, request=request(), user_id="U0BOB", channel="C2")
        queued = "Queued by <@U0BOB>"
        made = await store.launches.create(
            bob, [Event("parent", bob.id), Event("thread", bob.id, queued)]
        )
        assert made
        assert bob.id != taken and re.fullmatch(r"L-[0-9a-f]{10}", bob.id)
        stored = await store.launches.get(taken)
        assert stored is not None and stored.user_id == "U0ALICE" and stored.channel == "C1"
        assert await outbox_of(store, taken) == [("parent", "")]
        assert await outbox_of(store, bob.id) == [("parent", ""), ("thread", queued)]
        assert (await launch_in(store, bob.id)).user_id == "U0BOB"
        assert await store.history.active_ids("U0ALICE") == [taken]
        assert await store.history.active_ids("U0BOB") == [bob.id]


async def test_an_id_of_a_finished_launch_kept_only_in_history_is_not_reused() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        old = Launch(request=request(), user_id="U0ALICE", channel="C1")
        await store.launches.create(old, [], enqueue=False)

        def end(stored: Launch) -> list[Event]:
            stored.phase, stored.outcome = Phase.DONE, "COMPLETED"
            return []

        await store.launches.mutate(old.id, end)
        await store.redis.delete(keys.launch(old.id))  # its record expired; history stays
        fresh = iter(["L-00000000c1"])
        again = Launch(id=old.id, request=request(), user_id="U0BOB", channel="C2")
        events = [Event("parent", again.id)]
        assert await store.launches.create(again, events, new_id=lambda: next(fresh))
        assert again.id == "L-00000000c1" and events[0].launch_id == again.id
        entry = await store.history.finished(old.id)
        assert entry is not None and entry.user_id == "U0ALICE"
        assert await store.launches.get(old.id) is None
