"""Finding launches: the active and tracked sets, the Slurm job index, finished
launches' history, and what earlier runs left behind (step times, launcher options).

:class:`History` reads them; :func:`write_indexes` and :func:`keep_step_run` write them,
queued on the pipeline of the transaction that writes the launch's record
(:mod:`bot.store.launches`), so a record and its indexes never disagree."""

from __future__ import annotations

import logging
import time
from typing import Any

from bot.lifecycle.launch import TRACKED_PHASES, HistoryEntry, Launch, StepRun
from bot.settings.config import Retention
from bot.store import keys
from bot.store.base import Section, rides

log = logging.getLogger(__name__)

STEP_RUNS_KEPT = 20  # earlier runs per (cluster, recipe, nodes) the GPU-hour estimate uses


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


def write_indexes(pipe: Any, launch: Launch, retention: Retention) -> None:
    """Queue on ``pipe`` what the launch's record being written changes in the indexes:
    the active and tracked sets, its jobs' entries in the job index and, once it has
    finished, its history entry."""
    if launch.active:
        pipe.sadd(keys.ACTIVE, launch.id)
        pipe.sadd(keys.user_active(launch.user_id), launch.id)
    else:
        pipe.srem(keys.ACTIVE, launch.id)
        pipe.srem(keys.user_active(launch.user_id), launch.id)
    if launch.phase in TRACKED_PHASES:
        pipe.sadd(keys.tracked(launch.cluster), launch.id)
    else:
        pipe.srem(keys.tracked(launch.cluster), launch.id)
    for attempt in launch.attempts:
        if attempt.job_id:
            index = keys.job_index(attempt.job_id)
            pipe.hset(index, attempt.cluster or launch.cluster, launch.id)
            if launch.active:
                pipe.persist(index)
            else:
                pipe.expire(index, retention.launch_s)
    if not launch.active:
        _write_finished(pipe, launch, retention)


def _write_finished(pipe: Any, launch: Launch, retention: Retention) -> None:
    """A finished launch: its record expires; its history entry is kept longer."""
    keep_s = retention.history_s
    pipe.expire(keys.launch(launch.id), retention.launch_s)
    pipe.expire(keys.watchers(launch.id), retention.launch_s)  # goes with the record
    pipe.set(keys.summary(launch.id), HistoryEntry.of(launch).model_dump_json(), ex=keep_s)
    oldest = time.time() - keep_s
    for index in (
        keys.history(),
        keys.history(user_id=launch.user_id),
        keys.history(cluster=launch.cluster),
    ):
        pipe.zadd(index, {launch.id: launch.updated_at})
        pipe.zremrangebyscore(index, "-inf", oldest)


def keep_step_run(pipe: Any, launch: Launch, now: float, keep_s: int) -> None:
    """Queue on ``pipe`` the ended launch's median step time, for later GPU-hour estimates
    of its recipe on as many nodes of its cluster (:meth:`History.step_runs`): the newest
    ``STEP_RUNS_KEPT`` are kept. Nothing when it recorded no step times."""
    step_time = launch.progress.median_step_time_s
    if launch.recipe_key and step_time and launch.progress.total:
        run = StepRun(step_time_s=step_time, steps=launch.progress.total, ended_at=now)
        runs = keys.step_runs(launch.cluster, launch.recipe_key, launch.request.nodes)
        pipe.lpush(runs, run.model_dump_json())
        pipe.ltrim(runs, 0, STEP_RUNS_KEPT - 1)
        pipe.expire(runs, keep_s)
