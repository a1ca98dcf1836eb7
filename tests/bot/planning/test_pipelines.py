"""bot.planning.pipelines against real Redis: what a waiting launch does when a worker takes it
(put back for its time or its parent's next look, or ended with its parent's reason)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from bot.gateway.authority import Authority, GroupsOf
from bot.gateway.identity import People
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.planning.pipelines import APPROVAL_PATIENCE_S, PARENT_LOOK_S, must_wait
from bot.planning.start_from import checkpoint_outside, start_point
from bot.settings.env import Settings
from bot.store import keys
from bot.store.store import Store
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from cluster.watching.tracking import Tracking
from commands.budget import iso_week
from commands.policy import BudgetRule, Policy, PolicyRule
from commands.rules import ViewerRule
from tests.bot.botkit import (
    dev_config,
    ended_with,
    flush_test_redis,
    launch_in,
    open_test_store,
    request,
    thread_texts,
)


async def stored(store: Store, launch: Launch) -> Launch:
    await store.launches.create(launch, [], enqueue=False)
    return launch


async def test_a_child_waits_for_its_parent_then_ends_with_its_reason() -> None:
    await flush_test_redis()
    async with open_test_store() as store:
        parent = await stored(store, Launch(request=request(), user_id="U0BOB", channel="C1"))
        child = Launch(request=request(after=parent.id), user_id="U0ALICE", channel="C1")
        child.waits_for = parent.id
        await stored(store, child)

        # The parent still runs: the child goes back for the next look, nothing else.
        before = time.time()
        assert await must_wait(store, child, store.launches.mutate)
        due = await store.redis.zscore(keys.DEFERRED, child.id)
        assert due is not None and before + PARENT_LOOK_S - 1 <= due <= time.time() + PARENT_LOOK_S

        def cancelled(launch: Launch) -> list[Event]:
            launch.phase, launch.outcome = Phase.DONE, "CANCELLED"
            launch.ending = {"move": "cancel", "by": "U0BOB"}
            return []

        await store.launches.mutate(parent.id, cancelled)
        assert await must_wait(store, child, store.launches.mutate)
        ended = await store.launches.get(child.id)
        assert ended is not None and ended.phase == Phase.DONE
        assert (
            ended.outcome == "PARENT_FAILED" and ended_with(ended) == f"{parent.id} ended CANCELLED"
        )
        (text,) = await thread_texts(store, child.id)
        assert text.startswith(f"⛔ Not started, because {parent.id}")  # the mention: notices
        assert "ended CANCELLED (🚫 Cancelled by <@U0BOB>). Nothing" in text  # mrkdwn kept as is
        assert f"after={parent.id}:any" in text
        assert not await store.history.active_ids("U0ALICE")


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
        assert not await must_wait(store, await stored(store, child), store.launches.mutate)

        later = time.time() + 3600
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(later))
        timed = await stored(
            store, Launch(request=request(at=stamp), user_id="U0ALICE", channel="C1")
        )
        assert await must_wait(store, timed, store.launches.mutate)
        due = await store.redis.zscore(keys.DEFERRED, timed.id)
        assert due is not None and abs(due - int(later)) < 2
        dry = Launch(request=request(at=stamp, dry_run=True), user_id="U0ALICE", channel="C1")
        assert not await must_wait(store, await stored(store, dry), store.launches.mutate)


async def test_the_budget_is_checked_again_when_a_waiting_launch_is_due() -> None:
    await flush_test_redis()
    policy = Policy(
        rules=(PolicyRule(users=("U0ALICE",)),),
        budgets=(BudgetRule(users=("U0ALICE",), gpu_hours_per_week=10),),
    )
    async with open_test_store() as store, authority_for(store, policy) as authority:
        past = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
        fits = Launch(request=request(at=past), user_id="U0ALICE", channel="C1")
        fits.estimate_gpu_hours = 8.0  # its own hold is not counted twice
        assert not await must_wait(
            store, await stored(store, fits), store.launches.mutate, authority
        )

        # Charged meanwhile (another run ended this week): no longer fits when due.
        await store.redis.hset(keys.usage("a4", iso_week(time.time())), "U0ALICE", 5.0)
        assert await must_wait(store, fits, store.launches.mutate, authority)
        ended = await store.launches.get(fits.id)
        assert ended is not None and ended.outcome == "OVER_BUDGET"
        (text,) = await thread_texts(store, fits.id)
        assert text.startswith("⛔ Not started now that it is due: This launch needs")

        # A launch that never waited is not checked here (/train did).
        plain = Launch(request=request(), user_id="U0ALICE", channel="C1")
        plain.estimate_gpu_hours = 8.0
        assert not await must_wait(
            store, await stored(store, plain), store.launches.mutate, authority
        )


async def test_a_due_launch_is_admitted_again_with_the_policy_and_groups_of_now() -> None:
    """A rule that covered the person's group when they typed /train covers them no
    more once they left the group: the launch ends when due, saying why, nothing run."""
    await flush_test_redis()
    policy = Policy(rules=(PolicyRule(groups=("S0ML",), clusters=("a4",)),))
    now_in: set[str] = {"S0ML"}

    async def groups_of(user_id: str) -> set[str]:
        return set(now_in)

    async with open_test_store() as store, authority_for(store, policy, groups_of) as authority:
        past = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
        first = Launch(request=request(at=past), user_id="U0ALICE", channel="C1")
        first.groups = ["S0ML"]
        assert not await must_wait(
            store, await stored(store, first), store.launches.mutate, authority
        )
        now_in.clear()  # removed from the group since
        later = Launch(request=request(at=past), user_id="U0ALICE", channel="C1")
        later.groups = ["S0ML"]  # what the record says is not believed
        # While Slack does not answer for some group, a "no" is not final: asked again later.
        authority.unsure = lambda: True
        assert await must_wait(store, await stored(store, later), store.launches.mutate, authority)
        waiting = await store.launches.get(later.id)
        assert waiting is not None and waiting.phase == Phase.QUEUED
        assert await store.redis.zscore(keys.DEFERRED, later.id) is not None
        authority.unsure = lambda: False
        assert await must_wait(store, later, store.launches.mutate, authority)
        ended = await store.launches.get(later.id)
        assert ended is not None and ended.phase == Phase.DONE
        assert (ended.outcome, ended.attempts) == ("NOT_ALLOWED", [])
        (text,) = await thread_texts(store, later.id)
        assert text.startswith("⛔ <@U0ALICE>: not started now that it is due: You may not")
        assert "no policy rule covers you there" in text and "Nothing was submitted." in text


@asynccontextmanager
async def authority_for(
    store: Store, policy: Policy, groups_of: GroupsOf | None = None
) -> AsyncIterator[Authority]:
    config = dev_config().model_copy(update={"policy": policy})
    async with SSHPool() as pool:
        clusters = Clusters(config, Settings.from_environ({}), pool, store)
        yield Authority(store, clusters, People(clusters, None, clusters), groups_of)


# the checkpoint path from a parent's log, the Unix user the parent ran as -> whether
# trainbot may start from it (its cluster keeps jobs' files under ~/vertex-oss-training)
OUTSIDE = [
    ("~/vertex-oss-training/nemo/logs/x-L-1/default/checkpoints", "", True),
    ("/home/trainer/vertex-oss-training/nemo/logs/x-L-1/default/checkpoints", "", True),
    ("/home/alice/vertex-oss-training/nemo_rl/4187/checkpoints", "alice", True),
    ("/home/bob/vertex-oss-training/nemo_rl/4187/checkpoints", "alice", False),  # not hers
    ("/home/trainer/.ssh", "", False),
    ("/etc/vertex-oss-training/nemo/logs/x", "", False),  # not a home named after them
    ("~/vertex-oss-training/../.ssh", "", False),
    ("/home/trainer/vertex-oss-training/nemo/../../.ssh", "", False),
    ("/scratch/ckpt", "", False),
]


@pytest.mark.parametrize(("path", "unix_user", "ok"), OUTSIDE)
def test_a_checkpoint_must_lie_under_the_parents_job_directories(
    path: str, unix_user: str, ok: bool
) -> None:
    profile = ClusterProfile.model_validate(
        {
            "name": "a4",
            "type": "hcc-a4",
            "login": {"host": "127.0.0.1", "port": 2222, "user": "trainer"},
            "partition": "a4",
            "max_nodes": 4,
        }
    )
    parent = Launch(request=request(), user_id="U0ALICE", channel="C1")
    parent.cluster_user = unix_user
    why = checkpoint_outside(path, parent, profile)
    assert (why == "") is ok, why
    if not ok:
        assert why.startswith(f"its checkpoint {path} is not under the directories a4 keeps")


async def test_a_checkpoint_printed_outside_the_parents_directories_is_not_started_from() -> None:
    """A parent whose log named a checkpoint directory elsewhere (a job prints what it
    likes): the child ends when it goes, saying why, and nothing is submitted."""
    await flush_test_redis()
    policy = Policy(rules=(PolicyRule(users=("U0ALICE",)),))
    async with open_test_store() as store, authority_for(store, policy) as authority:
        parent = Launch(request=request(), user_id="U0ALICE", channel="C1")
        parent.phase, parent.outcome = Phase.DONE, "COMPLETED"
        tracking = Tracking(framework="nemo", job_id="4187", checkpoint_dir="/home/bob/ckpts")
        parent.attempts = [Attempt(number=1, job_id="4187", tracking=tracking)]
        parent.checkpoints = ["model_name=0--val_loss=0.00-step=19-consumed_samples=1280.0"]
        await stored(store, parent)
        child = Launch(request=request(start_from=parent.id), user_id="U0ALICE", channel="C1")
        child.starts_from = parent.id
        await stored(store, child)
        profile = authority.clusters.profile("a4")
        assert await start_point(store, child, store.launches.mutate, profile, authority) is None
        ended = await store.launches.get(child.id)
        assert ended is not None and ended.outcome == "NO_CHECKPOINT" and not ended.attempts
        (text,) = await thread_texts(store, child.id)
        assert "its checkpoint /home/bob/ckpts is not under the directories a4 keeps" in text


async def test_after_and_an_approval_are_asked_again_when_the_launch_goes() -> None:
    """after= someone else's launch needs the right to see it when the child goes, not
    only when typed; an approved launch is admitted again when a worker takes it."""
    await flush_test_redis()
    policy = Policy(
        rules=(PolicyRule(users=("*",)),),
        log_viewers=(ViewerRule(groups=("S0TEAM",), clusters=("a4",)),),
    )
    teams: set[str] = {"S0TEAM"}

    async def groups_of(user_id: str) -> set[str]:
        return set(teams)

    async with open_test_store() as store, authority_for(store, policy, groups_of) as authority:
        parent = Launch(request=request(), user_id="U0BOB", channel="C1")
        parent.phase, parent.outcome = Phase.DONE, "COMPLETED"
        await stored(store, parent)

        def child() -> Launch:
            made = Launch(request=request(after=parent.id), user_id="U0ALICE", channel="C1")
            made.waits_for = parent.id
            return made

        assert not await must_wait(
            store, await stored(store, child()), store.launches.mutate, authority
        )
        teams.clear()  # no longer a log viewer on a4
        late = await stored(store, child())
        assert await must_wait(store, late, store.launches.mutate, authority)
        ended = await store.launches.get(late.id)
        assert ended is not None and ended.outcome == "NOT_ALLOWED"
        (text,) = await thread_texts(store, late.id)
        assert f"not started now that it is due: after={parent.id}: That launch belongs" in text

        approved = Launch(request=request(nodes=2), user_id="U0ALICE", channel="C1")
        approved.approved_by = "U0CHIEF"
        await stored(store, approved)
        narrower = Policy(rules=(PolicyRule(users=("*",), max_nodes=1),))
        authority.clusters.config = authority.clusters.config.model_copy(
            update={"policy": narrower}
        )
        assert await must_wait(store, approved, store.launches.mutate, authority)
        gone = await store.launches.get(approved.id)
        assert gone is not None and gone.outcome == "NOT_ALLOWED"


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
        assert (await store.budgets.active_counts("U0ALICE"))[0] == 2

        assert await must_wait(store, child, store.launches.mutate)  # a fresh ask: it waits
        assert (await launch_in(store, child.id)).phase == Phase.QUEUED

        def asked_long_ago(launch: Launch) -> list[Event]:
            launch.created_at = time.time() - APPROVAL_PATIENCE_S - 60
            return []

        await store.launches.mutate(parent.id, asked_long_ago)
        assert await must_wait(store, child, store.launches.mutate)
        ended = await store.launches.get(child.id)
        assert ended is not None and ended.phase == Phase.DONE
        assert ended.outcome == "PARENT_UNAPPROVED"
        assert ended_with(ended) == f"{parent.id} still awaited approval after 24 h"
        said = await thread_texts(store, child.id)
        assert any(
            "has awaited approval for over 24 h" in t and f"after={parent.id}" in t for t in said
        ), said
        assert (await store.budgets.active_counts("U0ALICE"))[0] == 1  # its place given back
