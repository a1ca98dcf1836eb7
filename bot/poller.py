"""The status poller: one APScheduler interval job per cluster.

Each run takes the cluster's lease (so one bot process polls a cluster at a
time), collects every tracked job of that cluster in one SSH round trip, and
applies the snapshots to the launches.
"""

from __future__ import annotations

import logging

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.clusters import Clusters
from bot.launches import Launch
from bot.store import Event, Store
from bot.tracking import apply_snapshot, tracked_job
from cluster.collector import TrackedJob, collect
from cluster.errors import ClusterError

log = logging.getLogger(__name__)


class Poller:
    def __init__(self, store: Store, clusters: Clusters, *, owner: str) -> None:
        self.store = store
        self.clusters = clusters
        self.owner = owner
        self.polls = 0
        self.scheduler = AsyncIOScheduler()

    def start(self) -> None:
        for name, profile in self.clusters.profiles.items():
            self.scheduler.add_job(
                self.poll,
                "interval",
                seconds=profile.poll_interval_s,
                args=[name],
                id=f"poll-{name}",
                max_instances=1,
                coalesce=True,
                misfire_grace_time=None,
            )
        self.scheduler.start()

    def shutdown(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    async def poll(self, cluster: str) -> int:
        """One poll of ``cluster``; returns how many launches it looked at."""
        profile = self.clusters.profile(cluster)
        ttl_ms = int(max(profile.poll_interval_s * 3, 10) * 1000)
        if not await self.store.acquire(f"poller:{cluster}", self.owner, ttl_ms):
            return 0
        launches: dict[str, Launch] = {}
        jobs: list[TrackedJob] = []
        for launch_id in await self.store.tracked_ids(cluster):
            launch = await self.store.get(launch_id)
            job = tracked_job(launch, profile) if launch else None
            if launch is not None and job is not None:
                launches[job.job_id] = launch
                jobs.append(job)
        if not jobs:
            return 0
        try:
            result = await collect(self.clusters.pool, profile.login, jobs, cluster=cluster)
        except ClusterError as exc:
            log.warning("cluster=%s poll failed: %s", cluster, exc)
            return 0
        self.polls += 1
        for job_id, snap in result.jobs.items():
            launch = launches.get(job_id)
            if launch is None:
                continue

            def change(stored: Launch, snap=snap) -> list[Event]:  # type: ignore[no-untyped-def]
                return apply_snapshot(stored, snap, profile, self.clusters.config.watch)

            await self.store.mutate(launch.id, change)
        return len(jobs)
