"""GPU health of running jobs: one cluster's running launches sampled on their nodes
(:mod:`cluster.preflight.gpu`: one SSH round trip per Unix user whose jobs run there, one in all
on a cluster without identity), each sample applied to its launch (:func:`bot.lifecycle.health.
gpu_sampled`). The poller runs it every ``watch.health.gpu_sample_s`` per cluster while
it holds the cluster's lease."""

from __future__ import annotations

import logging
import time

from bot.gateway.on_cluster import Clusters
from bot.lifecycle.events import Event
from bot.lifecycle.health import gpu_sampled, gpu_text
from bot.lifecycle.launch import Launch, Phase
from bot.settings.sections import HealthRules
from bot.store.store import Store
from cluster.errors import ClusterError
from cluster.preflight.gpu import GpuSample, sample
from cluster.site.login import cert_key_id

log = logging.getLogger(__name__)


async def sample_running(store: Store, clusters: Clusters, cluster: str) -> int:
    """Sample the GPUs of ``cluster``'s running launches; returns how many were read."""
    running = [
        launch
        for launch in await store.launches.get_many(await store.history.tracked_ids(cluster))
        if launch is not None and launch.phase == Phase.RUNNING and launch.job_id
    ]
    by_user: dict[str, list[Launch]] = {}
    for launch in running:
        by_user.setdefault(launch.cluster_user, []).append(launch)
    profile = clusters.profile(cluster)
    rules = clusters.config.watch.health
    read = 0
    for user, launches in by_user.items():
        persons = "+".join(sorted({launch.user_id for launch in launches}))
        person = profile.as_user(user, cert_key_id(persons, user, "gpu"))
        try:
            samples = await sample(
                clusters.pool, person.login, [launch.job_id for launch in launches], cluster=cluster
            )
        except ClusterError as exc:
            log.warning("GPU sample of %s as %s failed: %s", cluster, person.login.user, exc)
            continue
        now = time.time()
        for launch in launches:
            if (found := samples.get(launch.job_id)) is not None:
                read += 1
                await _apply(store, launch, found, rules, now)
    return read


async def _apply(
    store: Store, launch: Launch, found: GpuSample, rules: HealthRules, now: float
) -> None:
    job_id = launch.job_id

    def change(stored: Launch) -> list[Event]:
        if stored.phase != Phase.RUNNING or stored.job_id != job_id:
            return []  # ended or moved on since it was read
        shown = gpu_text(stored)
        notes = gpu_sampled(stored, found, rules, now)
        events = [Event("thread", stored.id, data=note) for note in notes]
        if events or gpu_text(stored) != shown:  # the status line's figure changed
            events.append(Event("update", stored.id))
        return events

    await store.launches.mutate(launch.id, change)
