"""Asks are signed, bounded and used once: an unsigned, badly signed, stale, oversized or
replayed ask is logged and dropped, its asker (where the ask names one) gets the reason
at once rather than a wait, and the loop goes on answering good asks. A web process
without the key refuses to start. Real Redis and a worker's real ask loop; the capacity
the good asks read is the dev cluster's own."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from bot.gateway import ask_wire as wire
from bot.gateway.asks import WorkerAsks
from bot.runtime.assembly import check_ask_key
from cluster.errors import ClusterError, ConfigError
from tests.bot.botkit import bot_settings
from tests.bot.security.asks_kit import KEY, ask_worker, old_style, signed

pytestmark = pytest.mark.devcluster


async def test_bad_asks_are_dropped_with_a_reason_and_good_ones_still_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with ask_worker() as w:
        capacity = wire.Capacity(cluster="a4")
        # Unsigned.
        ask_id, raw = old_style("capacity", cluster="a4")
        await w.push_raw(raw)
        answer = await w.answer(ask_id, 10)
        assert answer is not None and "the ask is not signed" in answer["error"]
        # Signed with another key (a web process with the wrong TRAINBOT_ASK_KEY): the
        # asker is told at once, not after its minute.
        started = time.monotonic()
        with pytest.raises(ClusterError, match="must share the same TRAINBOT_ASK_KEY"):
            await WorkerAsks(w.store, b"another-key-" * 4).capacity("a4")
        assert time.monotonic() - started < 10
        # Stale: its time ran out before a worker took it.
        old = wire.Ask(id="ab" * 12, issued_at=time.time() - 90, until=time.time() - 30,
                       what=capacity)  # fmt: skip
        await w.push_raw(wire.seal(old, KEY))
        answer = await w.answer(old.id, 10)
        assert answer is not None and "the ask expired" in answer["error"]
        # Living longer than any ask may.
        long = wire.Ask(id="cd" * 12, issued_at=time.time(), until=time.time() + 3600,
                        what=capacity)  # fmt: skip
        await w.push_raw(wire.seal(long, KEY))
        answer = await w.answer(long.id, 10)
        assert answer is not None and "would live over 120 s" in answer["error"]
        # Oversized, and not JSON at all: dropped (there is no one to answer).
        body = json.loads(wire.Ask.new(capacity, 30).model_dump_json())
        body["pad"] = "x" * 5000
        await w.push_raw(signed(json.dumps(body)))
        await w.push_raw("{not json")
        # Replayed: the same signed ask twice is answered once.
        ask = wire.Ask.new(capacity, 30)
        sealed = wire.seal(ask, KEY)
        await w.push_raw(sealed)
        first = await w.answer(ask.id, 30)
        assert first is not None and "value" in first, first
        await w.push_raw(sealed)
        assert await w.answer(ask.id, 3) is None
        # The loop still answers a good ask after all that.
        found = await w.asks.capacity("a4")
        assert found.cluster == "a4" and found.partitions
    said = caplog.text
    for reason in (
        "the ask is not signed",
        "the ask's signature does not match",
        "the ask expired",
        "would live over 120 s",
        "at most 4096 are taken",
        "the ask is not JSON",
        f"ask {ask.id} (capacity) refused and dropped: its id was used already",
    ):
        assert reason in said, reason


async def test_an_answer_a_worker_did_not_sign_for_this_ask_is_passed_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Someone with Redis access answers an ask before the worker does: unsigned, signed
    with another key, and a worker's real answer to another ask copied over. The asker
    passes over each (logged) and takes the worker's own answer, the dev cluster's real
    capacity; with only forgeries it waits its time out instead of believing one."""
    async with ask_worker(serving=False) as w:
        asking = asyncio.create_task(w.asks.capacity("a4"))
        raw = await w.store.asks.take_ask(10)
        assert raw is not None
        ask = wire.unseal(raw, KEY)
        fake = {"value": {"cluster": "a4", "partitions": []}}
        other = wire.seal_answer("ef" * 12, fake, KEY)  # a real signature, another ask's
        for forged in (fake, wire.seal_answer(ask.id, fake, b"not-the-key-" * 4), other):
            await w.store.asks.put_answer(ask.id, forged)
        await w.push_raw(raw)  # the ask as the worker would have taken it
        w.serve()
        found = await asking
        assert found.cluster == "a4" and found.partitions  # the forgeries had none
        # Only forgeries: no worker answer is believed, the asker times out.
        lone = wire.Ask.new(wire.Capacity(cluster="a4"), 30)
        await w.store.asks.put_answer(lone.id, fake)
        assert await w.asks._signed_answer(lone, 2) is None
    said = caplog.text
    assert said.count(f"an answer to ask {ask.id} (capacity) passed over") == 3
    assert "the answer is not signed" in said
    assert "the answer's signature does not match this ask" in said


def test_a_web_process_without_the_ask_key_refuses_to_start() -> None:
    settings = bot_settings(TRAINBOT_ASK_KEY="")
    with pytest.raises(ConfigError, match="TRAINBOT_ASK_KEY: is not set: the web role asks"):
        check_ask_key(settings, frozenset({"web"}))
    assert check_ask_key(settings, frozenset({"web", "worker", "poller"})) is None  # all
    with pytest.raises(ConfigError, match="is 5 characters; it must be at least 32"):
        bot_settings(TRAINBOT_ASK_KEY="short")
