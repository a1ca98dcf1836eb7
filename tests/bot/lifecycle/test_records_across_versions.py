"""What docs/upgrade.md says of stored records during a rolling upgrade, with the real
models and a real Redis: a launch record written by a newer version (a field this one
does not know) and one written by an older version (fields it lacked) both load; an
older process that rewrites a newer record loses only the field it does not know; a
request key it does not know (a newer `/train` key) makes the record unreadable to it,
which is why such a release is rolled out with every role stopped first; and a record
leaves out the fields at their defaults, the request's kind excepted, and reads back
whole."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, HistoryEntry, Launch, Phase, Terms
from bot.store import keys
from commands.requests import InteractiveRequest, TrainRequest
from tests.bot.botkit import flush_test_redis, open_test_store, stored_record


def launch() -> Launch:
    req = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    return Launch(request=req, user_id="U0ALICE", user_name="alice", channel="C1")


async def test_a_newer_record_loads_and_an_older_process_drops_only_what_it_does_not_know() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        ours = launch()
        await store.launches.create(ours, [Event("parent", ours.id)], enqueue=False)
        raw = await stored_record(store, ours.id)
        raw["added_in_a_later_version"] = {"x": 1}  # as a newer process would write it
        await store.redis.set(keys.launch(ours.id), json.dumps(raw))

        stored = await store.launches.get(ours.id)  # this (older) version reads it
        assert stored is not None and stored.id == ours.id and stored.phase == Phase.QUEUED

        def run(current: Launch) -> list[Event]:
            current.phase = Phase.RUNNING
            return []

        await store.launches.mutate(ours.id, run)  # and rewrites it
        after = await stored_record(store, ours.id)
        assert after["phase"] == str(Phase.RUNNING.value)
        assert "added_in_a_later_version" not in after  # the documented loss
        assert after["user_name"] == "alice" and after["id"] == ours.id


async def test_an_older_record_without_the_newer_fields_loads_with_their_defaults() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        ours = launch()
        full = json.loads(ours.model_dump_json())
        defaults = {name for name, field in Launch.model_fields.items() if not field.is_required()}
        older = {k: v for k, v in full.items() if k not in defaults or k in ("id",)}
        await store.redis.set(keys.launch(ours.id), json.dumps(older))
        stored = await store.launches.get(ours.id)
        assert stored is not None and stored.id == ours.id
        assert stored.attempts == [] and stored.phase == Launch.model_fields["phase"].default
        entry = HistoryEntry.of(stored)
        minimal = {k: v for k, v in json.loads(entry.model_dump_json()).items()
                   if HistoryEntry.model_fields[k].is_required()}  # fmt: skip
        assert HistoryEntry.model_validate_json(json.dumps(minimal)).id == ours.id


async def test_a_request_key_this_version_does_not_know_makes_the_record_unreadable() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        stored = launch()
        await store.launches.create(stored, [Event("parent", stored.id)], enqueue=False)
        raw = await stored_record(store, stored.id)
        raw["request"]["a_later_request_key"] = "y"  # a /train key added by a newer version
        await store.redis.set(keys.launch(stored.id), json.dumps(raw))
        with pytest.raises(ValidationError, match="a_later_request_key"):
            await store.launches.get(stored.id)


@pytest.mark.parametrize(
    "request_",
    [
        TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4"),
        InteractiveRequest(cluster="a4", nodes=2),
    ],
)
async def test_a_record_leaves_out_its_defaults_and_reads_back_whole(
    request_: TrainRequest | InteractiveRequest,
) -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        ours = Launch(request=request_, user_id="U0ALICE", user_name="alice", channel="C1")
        ours.attempts.append(Attempt(number=1, job_id="5", terms=Terms()))
        ours.preflight_said = 0  # a default of -1: 0 is said
        await store.launches.create(ours, [Event("parent", ours.id)], enqueue=False)
        raw = await stored_record(store, ours.id)
        assert raw["request"]["kind"] == request_.kind  # which request, though a default
        assert "after_any" not in raw["request"] and "phase" not in raw and "health" not in raw
        assert raw["preflight_said"] == 0 and raw["attempts"] == [
            {"number": 1, "job_id": "5", "terms": {}}  # terms of all defaults are not None
        ]
        assert await store.launches.get(ours.id) == ours
