"""The poller's lease of a cluster, on the real Redis: one holder at a time, lasting one
poll interval without renewal, and handed over at once on a graceful stop."""

from __future__ import annotations

import asyncio

from bot.engine.poller import MIN_LEASE_S, RENEWALS_PER_INTERVAL, Poller, lease_ttl_ms
from bot.gateway.on_cluster import Clusters
from bot.settings.config import parse_config
from cluster.ssh.pool import SSHPool
from tests.bot.botkit import PROJECT, bot_settings, flush_test_redis, open_test_store

EXAMPLE = PROJECT / "trainbot.example.yaml"


def test_the_lease_lasts_one_poll_interval() -> None:
    assert lease_ttl_ms(30) == 30_000
    assert lease_ttl_ms(0.2) == int(MIN_LEASE_S * 1000)
    assert RENEWALS_PER_INTERVAL >= 3  # two renewals may fail before the lease runs out


async def test_one_holder_then_the_other_after_expiry_or_release() -> None:
    await flush_test_redis()
    text = EXAMPLE.read_text().replace("poll_interval_s: 5", "poll_interval_s: 1")
    config = parse_config(text, source=str(EXAMPLE), base_dir=PROJECT)
    cluster = next(iter(config.clusters))
    interval_s = config.clusters[cluster].poll_interval_s
    async with open_test_store() as store, SSHPool() as pool:
        clusters = Clusters(config, bot_settings(), pool)
        one = Poller(store, clusters, owner="one")
        two = Poller(store, clusters, owner="two")
        assert await one.hold(cluster) and not await two.hold(cluster)
        assert one.held == {cluster} and two.held == set()
        await one.release()  # a graceful stop: the other takes over at once
        assert await two.hold(cluster) and not await one.hold(cluster)
        ttl_s = lease_ttl_ms(interval_s) / 1000
        await asyncio.sleep(ttl_s * 0.6)
        assert await two.hold(cluster)  # renewed: good for another interval
        await asyncio.sleep(ttl_s * 0.6)  # past the first expiry, not the renewed one
        assert not await one.hold(cluster)
        await asyncio.sleep(ttl_s * 1.1)  # two stopped renewing (it died)
        assert await one.hold(cluster) and not await two.hold(cluster)
        assert two.held == set()
        one.shutdown()  # stopping: a poll still under way takes no lease again
        await one.release()
        assert not await one.hold(cluster) and await two.hold(cluster)
