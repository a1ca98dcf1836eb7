"""Per-person limits against a real Redis, through the core as a slash command reaches
it: a sliding-window rate limit on launches (dry runs included) and on commands that
ask a cluster, a cap on dry runs in flight (not counted against max_concurrent), and
/clusters answered from a short cache and only for clusters the person may use."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

from bot.core.core import Core
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.launch import Launch
from bot.settings.config import Config, load_config
from bot.settings.env import Settings
from bot.store import keys
from bot.store.budgets import Charge
from bot.store.store import Store
from bot.text.front import Incoming
from cluster.preflight.discovery import ClusterCapacity
from cluster.ssh.pool import SSHPool
from commands.policy import Limits, PolicyRule
from commands.requests import TrainRequest

EXAMPLE = Path(__file__).resolve().parents[3] / "trainbot.example.yaml"


def config_with(limits: Limits, *rules: PolicyRule) -> Config:
    config = load_config(EXAMPLE)  # admins: U0ADMIN; everyone: max_concurrent 3
    update: dict[str, object] = {"limits": limits}
    if rules:
        update["rules"] = rules
    shared = {  # everyone on the shared login account (who runs as whom is not the point)
        name: profile.model_copy(update={"identity": None})
        for name, profile in config.clusters.items()
    }
    policy = config.policy.model_copy(update=update)
    return config.model_copy(update={"policy": policy, "clusters": shared})


def core_for(store: Store, config: Config, pool: SSHPool) -> Core:
    return Core(store, Clusters(config, Settings.from_environ({}), pool), config.command_context())


async def ask(core: Core, user: str, command: str, text: str = "") -> tuple[bool, str]:
    reply = await core(Incoming(user_id=user, channel_id="C1", command=command, text=text))
    return reply.error, reply.text


DRY = "sft llama3p1_8b cluster=a4 nodes=1 dry_run=true"
REAL = "sft llama3p1_8b cluster=a4 nodes=1"


async def test_launches_and_dry_runs_are_rate_limited_per_person(store: Store) -> None:
    config = config_with(Limits(launches_per_minute=3, dry_runs_at_once=2))
    async with SSHPool(connect_timeout_s=1.0) as pool:
        core = core_for(store, config, pool)
        core.launcher.planner.timeout_s = 0.5
        for _ in range(2):
            error, text = await ask(core, "U0ALICE", "/train", DRY)
            assert not error and text.startswith("Dry run L-"), text
        error, text = await ask(core, "U0ALICE", "/train", DRY)  # counted, then capped
        assert error and text == (
            "You already have 2 dry runs in flight (at most 2 at once). "
            "Wait a few seconds for one to finish."
        )
        error, text = await ask(core, "U0ALICE", "/train", REAL)
        assert error, text
        found = re.fullmatch(
            r"Slow down: you started 3 launches in the last minute; try again in (\d+) s\.", text
        )
        assert found is not None, text
        assert 55 <= int(found.group(1)) <= 60
        assert len(await store.history.active_ids("U0ALICE")) == 2  # nothing more was written
        error, text = await ask(core, "U0BOB", "/train", DRY)  # someone else is not slowed
        assert not error, text


async def test_dry_runs_do_not_count_against_max_concurrent(store: Store) -> None:
    config = config_with(Limits(launches_per_minute=20))
    async with SSHPool(connect_timeout_s=1.0) as pool:
        core = core_for(store, config, pool)
        core.launcher.planner.timeout_s = 0.5
        error, text = await ask(core, "U0ALICE", "/train", DRY)
        assert not error, text
        for _ in range(3):  # max_concurrent 3: a dry run in flight does not take a place
            error, text = await ask(core, "U0ALICE", "/train", REAL)
            assert not error and text.startswith("Queued L-"), text
        error, text = await ask(core, "U0ALICE", "/train", REAL)
        assert error and "You already have 3 launches active (your limit is 3)" in text
        error, text = await ask(core, "U0ALICE", "/train", DRY)  # with 3 running, a dry run
        assert not error and text.startswith("Dry run L-"), text


async def test_the_window_slides(store: Store) -> None:
    t0 = 1_000_000.0
    for offset in (0.0, 10.0, 20.0):
        assert (
            await store.budgets.take_rate("x", "U1", limit=3, window_s=60, now=t0 + offset) == 0.0
        )
    assert await store.budgets.take_rate("x", "U1", limit=3, window_s=60, now=t0 + 30) == 30.0
    assert await store.budgets.take_rate("x", "U1", limit=3, window_s=60, now=t0 + 59) == 1.0
    assert await store.budgets.take_rate("x", "U1", limit=3, window_s=60, now=t0 + 61) == 0.0
    assert await store.budgets.take_rate("x", "U1", limit=3, window_s=60, now=t0 + 62) == 8.0
    assert await store.budgets.take_rate("x", "U2", limit=3, window_s=60, now=t0 + 62) == 0.0


async def test_clusters_is_cached_and_shows_only_clusters_the_person_may_use(
    store: Store,
) -> None:
    alice_on_a4 = PolicyRule(users=("U0ALICE",), clusters=("a4",))
    config = config_with(Limits(commands_per_minute=4, clusters_cache_s=30), alice_on_a4)
    async with SSHPool(connect_timeout_s=1.0) as pool:
        core = core_for(store, config, pool)
        asked: list[str] = []
        real = core.clusters.capacity

        async def counted(cluster: str) -> ClusterCapacity:
            asked.append(cluster)
            return await real(cluster)

        core.clusters.capacity = counted  # type: ignore[method-assign]
        error, first = await ask(core, "U0ALICE", "/clusters")
        assert first.startswith("*a4* (") and "*a3m*" not in first, first
        error, second = await ask(core, "U0ALICE", "/clusters")
        assert second == first and asked == ["a4"]  # the same answer, asked once
        error, text = await ask(core, "U0BOB", "/clusters")
        assert error and text == (
            "You may not launch on any cluster, so /clusters has nothing to show you. "
            "Ask a trainbot admin for access."
        )
        error, text = await ask(core, "U0ADMIN", "/clusters")
        assert not error and all(f"*{name}* (" in text for name in config.clusters)
        assert sorted(asked) == sorted(config.clusters)  # a4 still from the cache
        for _ in range(2):
            assert not (await ask(core, "U0ALICE", "/clusters"))[0]
        error, text = await ask(core, "U0ALICE", "/clusters")
        assert error and text.startswith(
            "Slow down: you ran 4 costly commands (/logs, /clusters, /usage) in the last minute; "
            "try again in"
        )


async def test_usage_counts_against_the_persons_rate_limit_and_draws_off_the_event_loop(
    store: Store,
) -> None:
    """A year of /usage bars takes seconds to draw: the event loop keeps turning while
    it is drawn (every other person's ack waits on it), and a person who asks again and
    again is told to slow down like any costly command."""
    now = time.time()
    charges = {
        Charge(
            launch_id=f"L-{i:04x}", user_id="U0ALICE", user_name="alice",
            cluster=("a4", "a3m", "a3u", "a3h")[i % 4], gpu_hours=1.5, ended_at=now - i * 21600,
        ).model_dump_json(): now - i * 21600
        for i in range(1460)
    }  # fmt: skip
    await store.redis.zadd(keys.CHARGES, charges)
    config = config_with(Limits(commands_per_minute=2))
    async with SSHPool(connect_timeout_s=1.0) as pool:
        core = core_for(store, config, pool)
        gaps: list[float] = []

        async def tick() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                gaps.append(time.monotonic() - last)
                last = time.monotonic()

        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        reply = await core(
            Incoming(user_id="U0ALICE", channel_id="C1", command="/usage", text="days=366")
        )
        took_s = time.monotonic() - started
        ticker.cancel()
        assert not reply.error and reply.file_name == "usage.png", reply.text
        assert reply.file_content is not None and reply.file_content.startswith(b"\x89PNG")
        assert took_s > 0.5  # a real chart, a year of bars
        slowest = max(gaps, default=took_s)  # none at all: the loop never turned
        # The loop kept turning (Agg's C++ drawing holds the GIL for one call at a time:
        # a fraction of a second on a loaded machine, against the whole chart before).
        assert slowest < min(1.0, took_s / 4), (slowest, took_s)
        assert not (await ask(core, "U0ALICE", "/usage", "csv=true"))[0]
        error, text = await ask(core, "U0ALICE", "/usage")
        assert error and text.startswith(
            "Slow down: you ran 2 costly commands (/logs, /clusters, /usage) in the last minute"
        )
        assert not (await ask(core, "U0BOB", "/usage"))[0]  # per person


async def test_jobs_all_and_the_app_home_show_no_more_than_clusters_would(store: Store) -> None:
    """/clusters shows a person the clusters they may launch on; /jobs all and the App
    Home showed everyone's launches and every cluster's capacity to anyone. Now others'
    launches and the capacity of clusters they may not use stay out; admins see all."""
    alice_on_a4 = PolicyRule(users=("U0ALICE",), clusters=("a4",))
    config = config_with(Limits(), alice_on_a4)
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a3m")
    hidden = Launch(request=request, user_id="U0BOB", channel="C1")
    shown = Launch(request=request.model_copy(update={"cluster": "a4"}), user_id="U0BOB",
                   channel="C1")  # fmt: skip
    for launch in (hidden, shown):
        await store.launches.create(launch, [], enqueue=False)
    async with SSHPool(connect_timeout_s=1.0) as pool:
        core = core_for(store, config, pool)

        async def no_capacity(cluster: str) -> ClusterCapacity:
            return ClusterCapacity(cluster=cluster, partitions=())

        core.calls.capacity = no_capacity  # type: ignore[method-assign]
        error, text = await ask(core, "U0ALICE", "/jobs", "all")
        assert not error and shown.id in text and hidden.id not in text, text
        error, text = await ask(core, "U0ADMIN", "/jobs", "all")
        assert hidden.id in text and shown.id in text, text
        error, text = await ask(core, "U0CAROL", "/jobs", "all")  # may launch nowhere
        assert hidden.id not in text and shown.id not in text, text

        async def home_of(user: str) -> str:
            reply = await core(Incoming(user_id=user, channel_id="", event="app_home_opened"))
            return str(reply.blocks)

        alice_home = await home_of("U0ALICE")
        assert "a4" in alice_home and "a3m" not in alice_home, alice_home
        admin_home = await home_of("U0ADMIN")
        assert all(name in admin_home for name in config.clusters), admin_home
