"""/train with a list, /jobs and /cancel of a sweep through the core, against real Redis
and the dev cluster's login node (the start estimate): the answer before anything runs,
the members written at once, grouped in /jobs, and one confirm cancelling each; one
approval for the whole sweep; members past max_concurrent waiting in order; a sweep
over budget refused before any member exists."""

from __future__ import annotations

import time
from collections.abc import Callable

from bot.core.core import Core
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.planning import pipelines
from bot.settings.config import Config
from bot.settings.env import Settings
from bot.store import keys
from bot.store.store import Store
from bot.text.actions import ACTION_APPROVE, ACTION_CANCEL, ACTION_REJECT
from bot.text.front import Incoming
from bot.wording import thread
from cluster.ssh.pool import SSHPool
from commands.budget import iso_week
from commands.policy import BudgetRule
from commands.requests import TrainRequest
from commands.rules import ApproverRule
from tests.bot.botkit import dev_config, flush_test_redis, open_test_store, stream_entries

LINE = "sft llama3p1_8b cluster=a4 optim.config.lr=1e-5,3e-5 trainer.max_steps=10,20"


async def test_a_sweep_is_answered_listed_and_cancelled_whole() -> None:
    await flush_test_redis()
    config = dev_config()
    async with open_test_store() as store, SSHPool() as pool:
        core = Core(
            store, Clusters(config, Settings.from_environ({}), pool), config.command_context()
        )

        async def say(command: str, text: str, user: str = "U0ALICE") -> str:
            reply = await core(Incoming(user_id=user, channel_id="C1", command=command, text=text))
            assert not reply.error, reply.text
            return reply.text

        dry = await say("/train", LINE + " dry_run=true")
        assert ": 4 launches of sft · llama3p1_8b on 1 node × a4" in dry
        assert "4. lr=3e-5, max_steps=20" in dry and "Nothing was launched." in dry
        assert await store.redis.xlen(keys.QUEUE) == 0

        said = await say("/train", LINE)
        sweep_id = said.split()[1].rstrip(":")
        assert sweep_id.startswith("S-") and "4 launches" in said
        sweep = await store.launches.get_sweep(sweep_id)
        assert sweep is not None and len(sweep.members) == 4
        assert await store.redis.xlen(keys.QUEUE) == 4

        jobs = await say("/jobs", "")
        assert f"🧪 `{sweep_id}` sweep" in jobs and "4 of 4 members active" in jobs
        assert "↳ #2 (lr=1e-5, max_steps=20)" in jobs

        confirm = await core(
            Incoming(user_id="U0ALICE", channel_id="C1", command="/cancel", text=sweep_id.lower())
        )
        assert confirm.blocks and confirm.text.startswith(f"Cancel sweep {sweep_id} (4 active")
        bob = await core(
            Incoming(
                user_id="U0BOB", channel_id="C1", action_id=ACTION_CANCEL, action_value=sweep_id
            )
        )
        assert bob.error and "or a trainbot admin may cancel it" in bob.text, bob.text
        done = await core(
            Incoming(
                user_id="U0ALICE", channel_id="C1", action_id=ACTION_CANCEL, action_value=sweep_id
            )
        )
        assert done.text.startswith(f"Cancelled sweep {sweep_id}: 4 active member(s)"), done.text
        members = await store.launches.get_many(sweep.members)
        assert all(m is not None and m.outcome == "CANCELLED" for m in members)
        assert "no active launches" in await say("/jobs", "")


def core_on(config: Config, store: Store, pool: SSHPool) -> Core:
    return Core(store, Clusters(config, Settings.from_environ({}), pool), config.command_context())


def click(action_id: str, value: str, user: str) -> Incoming:
    return Incoming(user_id=user, channel_id="C1", action_id=action_id, action_value=value)


async def test_one_approval_for_the_sweep_starts_all_and_one_rejection_ends_all() -> None:
    """nodes=1,2 above approval_above_nodes=1: only the 2-node members need a second
    person, and the whole sweep waits for one answer."""
    await flush_test_redis()
    config = dev_config(approval_above_nodes=1)
    approvers = (
        ApproverRule(users=("U0BOB",), clusters=("a4",)),
        ApproverRule(users=("U0CAROL",), clusters=("a4",), max_nodes=1),
    )
    config = config.model_copy(
        update={"policy": config.policy.model_copy(update={"approvers": approvers})}
    )
    line = "sft llama3p1_8b cluster=a4 nodes=1,2 optim.config.lr=1e-5,3e-5"
    async with open_test_store() as store, SSHPool() as pool:
        core = core_on(config, store, pool)
        asked = await core(
            Incoming(user_id="U0ALICE", channel_id="C1", command="/train", text=line)
        )
        assert not asked.error and "needs a second person's approval" in asked.text, asked.text
        sweep_id = asked.text.split()[1].rstrip(":")
        sweep = await store.launches.get_sweep(sweep_id)
        assert sweep is not None
        members = await store.launches.get_many(sweep.members)
        assert [m.phase for m in members if m] == [Phase.AWAITING_APPROVAL] * 4
        assert await store.redis.xlen(keys.QUEUE) == 0  # nothing goes before the answer
        outbox = [
            Event.decode(entry_id, fields) for entry_id, fields in await stream_entries(store.redis)
        ]
        asks = [e for e in outbox if e.kind == "thread" and "asks for sweep" in thread.line(e)]
        assert len(asks) == 1 and asks[0].data["sweep"] == sweep_id  # asked once

        own = await core(click(ACTION_APPROVE, sweep_id, "U0ALICE"))
        assert own.error and "cannot approve your own launch" in own.text, own.text
        stranger = await core(click(ACTION_APPROVE, sweep_id, "U0DAN"))
        assert stranger.error, stranger.text
        small = await core(click(ACTION_APPROVE, sweep_id, "U0CAROL"))  # up to 1 node
        assert small.error and "You may approve launches of up to 1 nodes" in small.text, small
        still = await store.launches.get_many(sweep.members)
        assert [m.phase for m in still if m] == [Phase.AWAITING_APPROVAL] * 4

        ok = await core(click(ACTION_APPROVE, sweep_id, "U0BOB"))
        assert ok.text == f"Approved sweep {sweep_id} (4 launches).", ok.text
        approved = await store.launches.get_many(sweep.members)
        assert [m.phase for m in approved if m] == [Phase.QUEUED] * 4
        assert await store.redis.xlen(keys.QUEUE) == 4
        again = await core(click(ACTION_APPROVE, sweep_id, "U0BOB"))
        assert again.error and "not waiting for approval any more" in again.text
        await core(click(ACTION_CANCEL, sweep_id, "U0ALICE"))  # out of the queue's way

        asked = await core(
            Incoming(user_id="U0ALICE", channel_id="C1", command="/train", text=line)
        )
        other = asked.text.split()[1].rstrip(":")
        no = await core(click(ACTION_REJECT, other, "U0BOB"))
        assert no.text == f"Rejected sweep {other} (4 launches).", no.text
        sweep = await store.launches.get_sweep(other)
        assert sweep is not None
        rejected = await store.launches.get_many(sweep.members)
        assert [(m.phase, m.outcome) for m in rejected if m] == [
            (Phase.REJECTED, "NOT_APPROVED")
        ] * 4
        assert await store.redis.xlen(keys.QUEUE) == 4  # only the first sweep's, cancelled


async def test_members_past_max_concurrent_wait_their_turn_in_order() -> None:
    """max_concurrent 4 with one launch already active: room for 3; members 4, 5, 6
    wait for 1, 2, 3, and a turn comes however the member before it ended."""
    await flush_test_redis()
    config = dev_config()
    line = "sft llama3p1_8b cluster=a4 optim.config.lr=1e-5,3e-5 trainer.max_steps=10,20,30"
    async with open_test_store() as store, SSHPool() as pool:
        core = core_on(config, store, pool)
        running = Launch(
            request=TrainRequest(
                workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4"
            ),
            user_id="U0ALICE",
            channel="C1",
        )
        await store.launches.create(running, [], enqueue=False)
        said = await core(Incoming(user_id="U0ALICE", channel_id="C1", command="/train", text=line))
        assert not said.error, said.text
        assert "3 wait their turn (your max_concurrent)." in said.text, said.text
        sweep = await store.launches.get_sweep(said.text.split()[1].rstrip(":"))
        assert sweep is not None and len(sweep.members) == 6
        members = [m for m in await store.launches.get_many(sweep.members) if m]
        assert [m.waits_for for m in members] == ["", "", "", *sweep.members[:3]]
        jobs = await core(Incoming(user_id="U0ALICE", channel_id="C1", command="/jobs", text=""))
        assert f"waits until {sweep.members[0]} ends" in jobs.text, jobs.text

        # Member 1 fails, member 2 is cancelled: 4 and 5 go all the same; 6 still waits.
        def end(outcome: str) -> Callable[[Launch], list[Event]]:
            def mutate(stored: Launch) -> list[Event]:
                stored.phase, stored.outcome = Phase.DONE, outcome
                return []

            return mutate

        await store.launches.mutate(sweep.members[0], end("FAILED"))
        await store.launches.mutate(sweep.members[1], end("CANCELLED"))
        held = [await pipelines.must_wait(store, m, store.launches.mutate) for m in members[3:]]
        assert held == [False, False, True]
        later = [m for m in await store.launches.get_many(sweep.members[3:]) if m]
        assert [m.phase for m in later] == [Phase.QUEUED] * 3  # none ended as PARENT_FAILED


async def test_a_sweep_over_budget_is_refused_through_the_core_before_any_job() -> None:
    """a4's time limit is 1 h: each member is estimated at 8 GPU-hours, the sweep at 32,
    against a weekly budget of 30 (each member alone would fit)."""
    await flush_test_redis()
    config = dev_config()
    rule = BudgetRule(users=("*",), clusters=("a4",), gpu_hours_per_week=30)
    config = config.model_copy(
        update={"policy": config.policy.model_copy(update={"budgets": (rule,)})}
    )
    async with open_test_store() as store, SSHPool() as pool:
        core = core_on(config, store, pool)
        refused = await core(
            Incoming(user_id="U0ALICE", channel_id="C1", command="/train", text=LINE)
        )
        assert refused.error, refused.text
        assert "about 32.0 GPU-hours in all" in refused.text, refused.text
        assert (
            "needs about 32.0 GPU-hours, but only 30.0 GPU-hours of your 30.0 GPU-hours "
            "weekly budget on a4 are left" in refused.text
        ), refused.text
        assert await store.redis.xlen(keys.QUEUE) == 0
        assert not [k async for k in store.redis.scan_iter("*sweep*")]
        assert await store.budgets.budget_use("U0ALICE", "a4", iso_week(time.time())) == (0.0, 0.0)
        three = "sft llama3p1_8b cluster=a4 optim.config.lr=1e-5,3e-5,5e-5"
        fits = await core(
            Incoming(user_id="U0ALICE", channel_id="C1", command="/train", text=three)
        )
        assert not fits.error, fits.text
        assert await store.budgets.budget_use("U0ALICE", "a4", iso_week(time.time())) == (0.0, 24.0)
        assert await store.redis.xlen(keys.QUEUE) == 3
