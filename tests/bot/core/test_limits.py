"""Per-person limits against a real Redis, through the core as a slash command reaches
it: a sliding-window rate limit on launches (dry runs included) and on commands that
ask a cluster, a cap on dry runs in flight (not counted against max_concurrent), and
/clusters answered from a short cache and only for clusters the person may use."""

from __future__ import annotations

import re
from pathlib import Path

from bot.core.core import Core
from bot.engine.on_cluster import Clusters
from bot.settings.config import Config, load_config
from bot.settings.env import Settings
from bot.store.store import Store
from bot.text.front import Incoming
from cluster.discovery import ClusterCapacity
from cluster.ssh.pool import SSHPool
from commands.policy import Limits, PolicyRule

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
        core.launcher.start_estimate_timeout_s = 0.5
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
        assert len(await store.active_ids("U0ALICE")) == 2  # nothing more was written
        error, text = await ask(core, "U0BOB", "/train", DRY)  # someone else is not slowed
        assert not error, text


async def test_dry_runs_do_not_count_against_max_concurrent(store: Store) -> None:
    config = config_with(Limits(launches_per_minute=20))
    async with SSHPool(connect_timeout_s=1.0) as pool:
        core = core_for(store, config, pool)
        core.launcher.start_estimate_timeout_s = 0.5
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
        assert await store.take_rate("x", "U1", limit=3, window_s=60, now=t0 + offset) == 0.0
    assert await store.take_rate("x", "U1", limit=3, window_s=60, now=t0 + 30) == 30.0
    assert await store.take_rate("x", "U1", limit=3, window_s=60, now=t0 + 59) == 1.0
    assert await store.take_rate("x", "U1", limit=3, window_s=60, now=t0 + 61) == 0.0
    assert await store.take_rate("x", "U1", limit=3, window_s=60, now=t0 + 62) == 8.0
    assert await store.take_rate("x", "U2", limit=3, window_s=60, now=t0 + 62) == 0.0


async def test_clusters_is_cached_and_shows_only_clusters_the_person_may_use(
    store: Store,
) -> None:
    alice_on_a4 = PolicyRule(users=("U0ALICE",), clusters=("a4",))
    config = config_with(Limits(commands_per_minute=4, clusters_cache_s=30), alice_on_a4)
    async with SSHPool(connect_timeout_s=1.0) as pool:
        core = core_for(store, config, pool)
        asked: list[str] = []
        real = core.clusters.capacity

        async def counted(name: str) -> ClusterCapacity:
            asked.append(name)
            return await real(name)

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
            "Slow down: you ran 4 commands that ask a cluster in the last minute; try again in"
        )
