"""Finding launches: the active and tracked sets, the Slurm job index, finished
launches' history, and what earlier runs left behind (step times, launcher options)."""

from __future__ import annotations

import logging
import time
from typing import Any

from bot.lifecycle.launch import HistoryEntry, StepRun
from bot.store import keys
from bot.store.base import Section, rides

log = logging.getLogger(__name__)


class History(Section):
    """Where launches are found, and what finished ones left."""

    @rides
    async def active_ids(self, user_id: str | None = None) -> list[str]:
        key = keys.user_active(user_id) if user_id else keys.ACTIVE
        return sorted(str(m) for m in await self.redis.smembers(key))

    @rides
    async def tracked_ids(self, cluster: str) -> list[str]:
        return sorted(str(m) for m in await self.redis.smembers(keys.tracked(cluster)))

    @rides
    async def find_job(self, job_id: str) -> list[tuple[str, str]]:
        """(cluster, launch id) pairs for a Slurm job id, across clusters (one hash read)."""
        found: Any = await self.redis.hgetall(keys.job_index(job_id))
        return sorted((str(cluster), str(launch_id)) for cluster, launch_id in found.items())

    @rides
    async def finished(self, launch_id: str) -> HistoryEntry | None:
        """The history entry of a finished launch (kept after its record expired)."""
        raw = await self.redis.get(keys.summary(launch_id))
        return HistoryEntry.model_validate_json(raw) if raw else None

    @rides
    async def entries(
        self,
        *,
        user_id: str = "",
        cluster: str = "",
        since: float = 0.0,
        limit: int = 50,
    ) -> list[HistoryEntry]:
        """Finished launches, newest first: everyone's, one user's, one cluster's, or one
        user's on one cluster; only those that ended at or after ``since``."""
        key = keys.history(user_id=user_id) if user_id else keys.history(cluster=cluster)
        entries: list[HistoryEntry] = []
        offset, page = 0, max(limit, 50)
        while len(entries) < limit:
            ids: list[Any] = await self.redis.zrevrangebyscore(
                key, "+inf", since, start=offset, num=page
            )
            if not ids:
                break
            offset += len(ids)
            for raw in await self.redis.mget([keys.summary(i) for i in ids]):
                if raw is None:
                    continue
                entry = HistoryEntry.model_validate_json(raw)
                if not cluster or entry.cluster == cluster:
                    entries.append(entry)
        return entries[:limit]

    @rides
    async def migrate_job_index(self) -> int:
        """Once per Redis: move the job keys of earlier versions into the per-job-id hashes
        (the only keyspace scan, done once and marked done). Returns how many moved."""
        if await self.redis.exists(keys.JOB_INDEX_MIGRATED):
            return 0
        moved = 0
        async for key in self.redis.scan_iter(match=keys.job("*", "*"), count=1000):
            _, _, cluster, job_id = str(key).split(":", 3)
            launch_id = await self.redis.get(key)
            if launch_id:
                await self.redis.hset(keys.job_index(job_id), cluster, str(launch_id))
                moved += 1
            await self.redis.delete(key)
        await self.redis.set(keys.JOB_INDEX_MIGRATED, str(time.time()))
        if moved:
            log.info("moved %d job ids into the job index", moved)
        return moved

    @rides
    async def step_runs(self, cluster: str, recipe: str, nodes: int) -> list[StepRun]:
        """The newest finished runs of ``recipe`` on ``nodes`` nodes of ``cluster`` that
        recorded step times, newest first."""
        raw = await self.redis.lrange(keys.step_runs(cluster, recipe, nodes), 0, -1)
        return [StepRun.model_validate_json(item) for item in raw]

    @rides
    async def launcher_options(self, cluster: str, name: str) -> str | None:
        """What a launcher's ``--help`` listed on ``cluster`` (``name``: framework@user)."""
        raw = await self.redis.get(keys.launcher_options(cluster, name))
        return None if raw is None else str(raw)

    @rides
    async def save_launcher_options(self, cluster: str, name: str, text: str, ttl_s: int) -> None:
        await self.redis.set(keys.launcher_options(cluster, name), text, ex=ttl_s)
