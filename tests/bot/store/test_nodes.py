"""The node ledger on a real Redis: failures across launches, once per job, bounded."""

from __future__ import annotations

import time

import pytest

from bot.store import keys
from bot.store.nodes import NodeEntry
from bot.store.store import Store


def failure(launch_id: str, job_id: str, at: float, cause_key: str = "xid_hardware") -> NodeEntry:
    return NodeEntry(at=at, launch_id=launch_id, job_id=job_id, cause_key=cause_key, cause="Xid")


async def test_a_node_that_failed_two_launches_leads_the_ledger(store: Store) -> None:
    now = time.time()
    assert await store.nodes.record_node("a4", "dev3", failure("L-000001", "41", now - 60))
    assert await store.nodes.record_node(
        "a4", "dev3", failure("L-000002", "57", now, "node_failure")
    )
    assert await store.nodes.record_node("a4", "dev1", failure("L-000003", "60", now))
    assert not await store.nodes.record_node("a4", "dev3", failure("L-000002", "57", now))  # again
    ledger = await store.nodes.node_ledger("a4")
    assert [r.node for r in ledger] == ["dev3", "dev1"]
    assert ledger[0].launches == ["L-000002", "L-000001"]
    assert [e.cause_key for e in ledger[0].failures] == ["node_failure", "xid_hardware"]
    assert await store.nodes.node_ledger("a3m") == []  # per cluster
    assert [r.node for r in await store.nodes.node_ledger("a4", since=now - 1)] == ["dev3", "dev1"]
    assert await store.nodes.node_ledger("a4", since=now + 1) == []


async def test_drain_and_resume_are_remembered_and_history_is_bounded(store: Store) -> None:
    now = time.time()
    await store.nodes.record_node("a4", "dev3", failure("L-000001", "41", now))
    await store.nodes.record_node(
        "a4", "dev3", NodeEntry(kind="drain", at=now, by="U0BOB", reason="x")
    )
    drained = (await store.nodes.node_record("a4", "dev3")).drained
    assert drained is not None and drained.by == "U0BOB"
    await store.nodes.record_node("a4", "dev3", NodeEntry(kind="resume", at=now, by="U0BOB"))
    assert (await store.nodes.node_record("a4", "dev3")).drained is None
    for n in range(keys.NODE_HISTORY + 5):
        await store.nodes.record_node("a4", "dev3", failure(f"L-{n:06d}", str(1000 + n), now))
    record = await store.nodes.node_record("a4", "dev3")
    assert len(record.entries) == keys.NODE_HISTORY
    assert 0 < await store.redis.ttl(keys.node("a4", "dev3")) <= keys.NODE_KEEP_S


async def test_an_entry_someone_else_wrote_is_skipped_not_shown(store: Store) -> None:
    """Any process with Redis access could write the list: what does not parse is dropped."""
    await store.nodes.record_node("a4", "dev3", failure("L-000001", "41", time.time()))
    await store.redis.lpush(keys.node("a4", "dev3"), '{"kind": "<!channel>", "at": "x"}')
    await store.redis.lpush(keys.node("a4", "dev3"), "not json")
    record = await store.nodes.node_record("a4", "dev3")
    assert [e.job_id for e in record.entries] == ["41"]


async def test_a_bad_node_name_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="invalid node name"):
        await store.nodes.record_node("a4", "dev3 *", failure("L-000001", "41", time.time()))
