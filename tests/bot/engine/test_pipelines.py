"""bot.engine.pipelines against real Redis: what a waiting launch does when a worker takes it
(put back for its time or its parent's next look, or ended with its parent's reason)."""

from __future__ import annotations

import time

from bot.engine.pipelines import APPROVAL_PATIENCE_S, PARENT_LOOK_S, must_wait
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.store import keys
from bot.store.store import Store
from commands.budget import iso_week
from commands.policy import BudgetRule, Policy
from commands.requests import TrainRequest
from tests.bot.botkit import flush_test_redis, open_test_store


def request(**fields: object) -> TrainRequest:
    return TrainRequest(
        workload="sft",
        model="llama3p1_8b",
        framework="nemo",
        cluster="a4",
        **fields,  # type: ignore[arg-type]
    )


async def stored(store: Store, launch: Launch) -> Launch:
    await store.create(launch, [], enqueue=False)
    return launch


async def thread_texts(store: Store, launch_id: str) -> list[str]:
    entries = await store.redis.xrange(keys.OUTBOX)
    decoded = [Event.decode(str(i), {str(k): str(v) for k, v in f.items()}) for i, f in entries]
    return [e.text for e in decoded if e.kind == "thread" and e.launch_id == launch_id]


async def test_a_child_waits_for_its_parent_then_ends_with_its_reason() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        parent = await stored(store, Launch(request=request(), user_id="U0BOB", channel="C1"))
        child = Launch(request=request(after=parent.id), user_id="U0ALICE", channel="C1")
        child.waits_for = parent.id
        await stored(store, child)

        # The parent still runs: the child goes back for the next look, nothing else.
        before = time.time()
        assert await must_wait(store, child, store.mutate)
        due = await store.redis.zscore(keys.DEFERRED, child.id)
        assert due is not None and before + PARENT_LOOK_S - 1 <= due <= time.time() + PARENT_LOOK_S

        def cancelled(launch: Launch) -> list[Event]:
            launch.phase, launch.outcome = Phase.DONE, "CANCELLED"
            launch.detail = "🚫 Cancelled by <@U0BOB>."
            return []

        await store.mutate(parent.id, cancelled)
        assert await must_wait(store, child, store.mutate)
        ended = await store.get(child.id)
        assert ended is not None and ended.phase == Phase.DONE
        assert ended.outcome == "PARENT_FAILED" and ended.detail == f"{parent.id} ended CANCELLED"
        (text,) = await thread_texts(store, child.id)
        assert text.startswith(f"⛔ Not started, because {parent.id}")  # the mention: notices
        assert "ended CANCELLED (🚫 Cancelled by <@U0BOB>). Nothing" in text  # mrkdwn kept as is
        assert f"after={parent.id}:any" in text
        assert not await store.active_ids("U0ALICE")


async def test_any_end_lets_the_child_go_and_a_time_holds_it_until_then() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        parent = Launch(request=request(), user_id="U0ALICE", channel="C1")
        parent.phase, parent.outcome = Phase.DONE, "FAILED"
        await stored(store, parent)
        child = Launch(
            request=request(after=parent.id, after_any=True), user_id="U0ALICE", channel="C1"
        )
        child.waits_for = parent.id
        assert not await must_wait(store, await stored(store, child), store.mutate)

        later = time.time() + 3600
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(later))
        timed = await stored(
            store, Launch(request=request(at=stamp), user_id="U0ALICE", channel="C1")
        )
        assert await must_wait(store, timed, store.mutate)
        due = await store.redis.zscore(keys.DEFERRED, timed.id)
        assert due is not None and abs(due - int(later)) < 2
        dry = Launch(request=request(at=stamp, dry_run=True), user_id="U0ALICE", channel="C1")
        assert not await must_wait(store, await stored(store, dry), store.mutate)


async def test_the_budget_is_checked_again_when_a_waiting_launch_is_due() -> None:
    await flush_test_redis()
    policy = Policy(budgets=(BudgetRule(users=("U0ALICE",), gpu_hours_per_week=10),))
    async with open_test_store() as store:
        past = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
        fits = Launch(request=request(at=past), user_id="U0ALICE", channel="C1")
        fits.estimate_gpu_hours = 8.0  # its own hold is not counted twice
        assert not await must_wait(store, await stored(store, fits), store.mutate, policy)

        # Charged meanwhile (another run ended this week): no longer fits when due.
        await store.redis.hset(keys.usage("a4", iso_week(time.time())), "U0ALICE", 5.0)
        assert await must_wait(store, fits, store.mutate, policy)
        ended = await store.get(fits.id)
        assert ended is not None and ended.outcome == "OVER_BUDGET"
        (text,) = await thread_texts(store, fits.id)
        assert text.startswith("⛔ Not started now that it is due: This launch needs")

        # A launch that never waited is not checked here (/train did).
        plain = Launch(request=request(), user_id="U0ALICE", channel="C1")
        plain.estimate_gpu_hours = 8.0
        assert not await must_wait(store, await stored(store, plain), store.mutate, policy)


async def test_a_child_of_a_parent_stuck_in_approval_ends_and_frees_its_place() -> None:
    """A parent no one approves (nor rejects) used to keep its child waiting for ever,
    counted among its owner's active launches (max_concurrent). The child waits a day at
    most, then ends saying why and how to go on."""
    await flush_test_redis()
    async with open_test_store() as store:
        parent = Launch(request=request(nodes=4), user_id="U0ALICE", channel="C1")
        parent.phase = Phase.AWAITING_APPROVAL
        await stored(store, parent)
        child = Launch(request=request(after=parent.id), user_id="U0ALICE", channel="C1")
        child.waits_for = parent.id
        await stored(store, child)
        assert (await store.active_counts("U0ALICE"))[0] == 2

        assert await must_wait(store, child, store.mutate)  # a fresh ask: it waits
        assert (await store.get(child.id)).phase == Phase.QUEUED  # type: ignore[union-attr]

        def asked_long_ago(launch: Launch) -> list[Event]:
            launch.created_at = time.time() - APPROVAL_PATIENCE_S - 60
            return []

        await store.mutate(parent.id, asked_long_ago)
        assert await must_wait(store, child, store.mutate)
        ended = await store.get(child.id)
        assert ended is not None and ended.phase == Phase.DONE
        assert ended.outcome == "PARENT_UNAPPROVED"
        assert ended.detail == f"{parent.id} still awaited approval after 24 h"
        said = await thread_texts(store, child.id)
        assert any(
            "has awaited approval for over 24 h" in t and f"after={parent.id}" in t for t in said
        ), said
        assert (await store.active_counts("U0ALICE"))[0] == 1  # its place given back
