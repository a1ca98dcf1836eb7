"""Every move re-checks who runs it: a launch that comes due is admitted again with the
identity map and groups of the moment it goes, and a reroute runs on its target as the
Unix user, with the account and secrets, derived there (or stays, saying why, where the
target refuses the person). Through the production paths: /train by the core, the
worker's queue loop, the poller's reroute; real Redis and the dev cluster's config."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.core.core import Core
from bot.engine import reroute
from bot.engine.worker import Worker
from bot.gateway.authority import Authority
from bot.gateway.identity import People
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.planning.cost import StartEstimates
from bot.planning.planner import Planner
from bot.settings.config import Config
from bot.store.store import Store
from bot.text.front import Incoming
from cluster.ssh.pool import SSHPool
from commands.policy import PolicyRule, Principals
from commands.requests import TrainRequest
from commands.rules import AccountRule
from tests.bot.botkit import (
    bot_settings,
    dev_config,
    login_run,
    open_test_store,
    thread_texts,
    wait_for_launch,
)

pytestmark = pytest.mark.devcluster


def with_identity(config: Config, cluster: str, users: dict[str, str], **policy: Any) -> Config:
    """``cluster`` maps ``users`` (Slack id to Unix user) and refuses everyone else."""
    clusters = dict(config.clusters)
    profile = clusters[cluster]
    assert profile.identity is not None
    identity = profile.identity.model_copy(update={"users": users, "unmapped": "refuse"})
    clusters[cluster] = profile.model_copy(update={"identity": identity})
    rules = (PolicyRule(users=("*",), clusters=("*",), max_nodes=4),)
    merged = config.policy.model_copy(update={"rules": rules, **policy})
    return config.model_copy(update={"clusters": clusters, "policy": merged})


@asynccontextmanager
async def clusters_of(config: Config, store: Store) -> AsyncIterator[Clusters]:
    async with SSHPool() as pool:
        yield Clusters(config, bot_settings(), pool, store)


async def test_a_due_launch_of_a_person_removed_from_the_identity_map_ends_with_the_reason(
    unique: str,
) -> None:
    """alice is mapped on a4 when she types /train at= an hour ahead; by the time it is
    due the admins removed her: the worker ends it with the reason, nothing submitted."""
    then = with_identity(dev_config(), "a4", {"U0ALICE": "alice"})
    now = with_identity(dev_config(), "a4", {})
    at = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() + 3600))
    async with open_test_store() as store:
        async with clusters_of(then, store) as clusters:
            core = Core(store, clusters, then.command_context())
            text = f"sft llama3p1_8b cluster=a4 name={unique} at={at}Z"
            reply = await core(
                Incoming(user_id="U0ALICE", channel_id="C1", command="/train", text=text)
            )
        assert reply.text.startswith("Queued L-"), reply.text
        launch_id = reply.text.split()[1].rstrip(":")
        queued = await store.launches.get(launch_id)
        assert queued is not None and queued.cluster_user == "alice"

        def due(stored: Launch) -> list[Event]:  # the hour has passed
            past = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
            stored.request = stored.request.model_copy(update={"at": past})
            return []

        await store.launches.mutate(launch_id, due)
        stop = asyncio.Event()
        async with clusters_of(now, store) as clusters:
            worker = Worker(store, clusters, name=f"sec-moves-{unique}")
            task = asyncio.create_task(worker.run(stop))
            try:
                ended = await wait_for_launch(store, launch_id, timeout_s=30)
            finally:
                stop.set()
                await task
    assert ended.phase == Phase.DONE and ended.outcome == "NO_USER", ended
    assert ended.attempts == []  # nothing was submitted, as anyone
    said = [t for t in await thread_texts(store, launch_id) if "not started now" in t]
    assert len(said) == 1, await thread_texts(store, launch_id)
    assert said[0].startswith("⛔ <@U0ALICE>: not started now that it is due: You have no user")
    assert "on a4" in said[0] and "identity.users" in said[0]


def planner_of(store: Store, clusters: Clusters, authority: Authority) -> Planner:
    """The poller's planner: it asks the clusters itself, as the poller does."""
    context = clusters.config.command_context()
    return Planner(
        store, clusters, clusters, context, StartEstimates(), authority.people.cluster_user
    )


def pending_on(cluster: str, owner: str) -> Launch:
    request = TrainRequest(
        workload="sft", model="llama3p1_8b", framework="nemo", cluster=cluster, nodes=1,
        name="sec-reroute",
    )  # fmt: skip
    launch = Launch(
        request=request, user_id=owner, channel="C1", placed=f"{cluster} (now)", parent_ts="1.1"
    )
    launch.phase = Phase.SUBMITTED
    launch.attempts.append(Attempt(number=1, job_id="777001", submitted_at=time.time() - 600))
    return launch


async def test_a_rerouted_launch_runs_as_the_targets_user_with_its_account_and_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From a3m (the shared account) to a3u, which maps alice to her own Unix user and
    gives people's jobs only the secrets identity.org_secrets names: the move takes
    alice, a3u's Slurm account for her and a3u's secrets. bob, whom a3u does not map,
    is not moved, and his thread says why."""
    accounts = (AccountRule(users=("U0ALICE",), clusters=("a3u",), account="ml-a3u"),)
    config = with_identity(
        dev_config(), "a3u", {"U0ALICE": "alice"}, accounts=accounts, admins=Principals()
    )
    config = config.model_copy(
        update={
            "policy": config.policy.model_copy(
                update={"placement": config.policy.placement.model_copy(
                    update={"reroute_after_s": 60.0}
                )}
            )
        }
    )  # fmt: skip

    async def place(*args: Any, **kwargs: Any) -> tuple[str, str, bool]:
        return "a3u", "a3u: now; a3m: in 2 h", True  # Slurm's answers, as cluster=auto reads them

    cancelled: list[tuple[str, str, str]] = []

    async def cancel_and_confirm(launch: Launch, job_id: str, *, pending_only: bool) -> str:
        cancelled.append((launch.cluster, launch.cluster_user, job_id))
        return ""  # gone before it started

    monkeypatch.setattr(Planner, "place", place)
    async with open_test_store() as store, clusters_of(config, store) as clusters:
        monkeypatch.setattr(clusters, "cancel_and_confirm", cancel_and_confirm)
        alice, bob = pending_on("a3m", "U0ALICE"), pending_on("a3m", "U0BOB")
        for launch in (alice, bob):
            await store.launches.create(launch, [], enqueue=False)
            await store.launches.mutate(
                launch.id, lambda s: [Event("update", s.id)]
            )  # tracked on a3m
        authority = Authority(store, clusters, People(clusters, None, clusters))
        moved = await reroute.reroute(planner_of(store, clusters, authority), "a3m", authority)
        assert moved == 1
        went = await store.launches.get(alice.id)
        stayed = await store.launches.get(bob.id)
        assert went is not None and stayed is not None
        assert cancelled == [("a3m", "", "777001")]  # the old job, as the account it ran as
        assert (went.cluster, went.cluster_user, went.slurm_account) == ("a3u", "alice", "ml-a3u")
        spec = clusters.spec_for(went).spec
        assert spec.profile.login.user == "alice"
        assert dict(spec.profile.job_secrets) == clusters.profile("a3u").people_secrets()
        assert spec.profile.account == "ml-a3u"

        assert (stayed.cluster, stayed.phase, stayed.rerouted) == ("a3m", Phase.SUBMITTED, True)
        assert stayed.cluster_user == "" and len(stayed.attempts) == 1
        (said,) = await thread_texts(store, bob.id)
        assert said.startswith("🔀 Still pending on a3m; a3u would start it now, but it was not")
        assert "You have no user on a3u" in said
        # Refused once: the next reroute pass does not ask again.
        assert await reroute.reroute(planner_of(store, clusters, authority), "a3m", authority) == 0
        assert len(await thread_texts(store, bob.id)) == 1

        # A worker submits the moved launch on a3u: Slurm runs it as alice.
        stop = asyncio.Event()
        worker = Worker(store, clusters, name=f"sec-reroute-{alice.id}")
        task = asyncio.create_task(worker.run(stop))
        try:
            submitted = await wait_for_launch(store, alice.id, done="submitted", timeout_s=90)
        finally:
            stop.set()
            await task
        job = submitted.job_id
        try:
            owner = login_run(f"squeue -h -t all -j {job} -o %u || sacct -X -n -P -j {job} -o User")
            assert owner.split() == ["alice"], (job, owner)
        finally:
            await clusters.cancel(submitted, [job])
