"""A launch as one worker holds it: its writes land only while the worker's fence is still
the launch's (:mod:`bot.engine.worker` raises it when it takes the launch), and every
phase change is a move of :mod:`bot.lifecycle.phases`.

Here too what every path of a worker writes once Slurm has answered: the job it has
for the launch (submitted or found), a job that appeared after a cancel, a refusal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from bot.gateway.authority import Authority
from bot.gateway.identity import People
from bot.gateway.on_cluster import Clusters
from bot.lifecycle import phases
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.settings.logs import set_job_id
from bot.store.store import Store
from cluster.errors import ClusterError, TrainbotError
from cluster.launching.jobs import FoundJob
from cluster.launching.launch import Submission

log = logging.getLogger("bot.engine.worker")  # the worker's one log, whichever part writes


class LostLock(TrainbotError):
    """Another worker took the launch (this one stalled past its lock): stop, write nothing."""


class Hold:
    """A worker's hold on the launch it handles, and what it writes to it: a
    :class:`bot.engine.worker.Worker` has one, and hands it to the functions of
    :mod:`bot.engine.submit` and :mod:`bot.engine.recovery`."""

    def __init__(self, store: Store, clusters: Clusters, *, name: str) -> None:
        self.store = store
        self.clusters = clusters
        self.name = name  # unique per process: its queue consumer and its launch locks
        self._fence = 0  # the token of the launch being handled
        # who may still launch what, asked again as a launch comes due (the runtime gives it
        # the person's groups as Slack says them; without, those recorded with the launch)
        self.authority = Authority(store, clusters, People(clusters, None, clusters))

    async def take(self, launch_id: str) -> Launch:
        """Raise the launch's fence: from now on only this worker's writes land."""

        def take(stored: Launch) -> list[Event]:
            stored.fence += 1
            return []

        launch, _ = await self.store.launches.mutate(launch_id, take)
        self._fence = launch.fence
        return launch

    async def check_still_ours(self, launch_id: str) -> None:
        """LostLock unless this worker's fence is still the launch's and no other worker
        holds the launch's lock."""
        stored = await self.store.launches.get(launch_id)
        holder = await self.store.leases.lease_holder(f"launch:{launch_id}")
        if stored is None or stored.fence != self._fence:
            fence = stored.fence if stored else None
            raise LostLock(f"launch {launch_id}: fence {fence}, ours {self._fence}; not submitting")
        if holder not in ("", self.name):
            raise LostLock(f"launch {launch_id}: {holder} holds it; not submitting")

    async def mutate(
        self, launch_id: str, change: Callable[[Launch], list[Event]]
    ) -> tuple[Launch, list[Event]]:
        """``store.launches.mutate``, only while this worker still holds the launch."""
        fence = self._fence

        def fenced(stored: Launch) -> list[Event]:
            if stored.fence != fence:
                raise LostLock(f"launch {stored.id}: fence {stored.fence}, ours {fence}")
            return change(stored)

        return await self.store.launches.mutate(launch_id, fenced)

    async def move(
        self, launch_id: str, move: phases.Move, facts: phases.Facts
    ) -> tuple[Launch, list[Event]]:
        """``move`` of the held launch, unless it moved on meanwhile (a cancel wins)."""
        return await self.mutate(launch_id, phases.step(move, facts))

    async def tell(self, launch_id: str, move: str, **facts: object) -> None:
        """One line in the launch's thread, as ``move``'s facts (bot.wording words them),
        nothing else changed."""
        data = {"move": move, **facts}
        await self.mutate(launch_id, lambda stored: [Event("thread", stored.id, data=data)])

    async def reject(self, launch: Launch, outcome: str, **facts: object) -> None:
        """It ends ``outcome`` before Slurm ran anything; ``facts``: why (``why``, the error,
        what it needs; bot.wording.endings words them)."""
        await self.move(launch.id, phases.not_submitted, phases.Facts(outcome=outcome, data=facts))

    async def new_jobs(self, launch: Launch) -> list[FoundJob]:
        """The jobs Slurm has for the launch (by its id) that none of its attempts records."""
        known = {a.job_id for a in launch.attempts if a.job_id}
        return [j for j in await self.clusters.find(launch) if j.job_id not in known]

    async def record(
        self,
        launch: Launch,
        *,
        submission: Submission | None = None,
        job_id: str = "",
        how: str = "submitted",
    ) -> None:
        """Slurm has the launch's job (submitted, or found by the launch id): it is the
        current attempt's; one that appeared after a cancel is cancelled."""
        spec = self.clusters.spec_for(launch).spec
        tracking = submission.tracking if submission else spec.fw.found(spec, job_id)
        job_id = tracking.job_id
        facts = phases.Facts(
            now=time.time(),
            job_id=job_id,
            how=how,
            tracking=tracking,
            partition=spec.slurm_partition,
            record=submission.record if submission else None,
        )
        stored, _ = await self.move(launch.id, phases.submitted, facts)
        set_job_id(job_id)
        if stored.phase == Phase.SUBMITTED:
            log.info("launch %s submitted as job %s", launch.id, job_id)
            return
        await self.cancel_late_job(launch, job_id)

    async def cancel_late_job(self, launch: Launch, job_id: str) -> None:
        """``scancel`` a job that appeared after its launch was cancelled; the thread says
        how that went."""
        try:
            await self.clusters.cancel(launch, [job_id])
            error = ""
        except ClusterError as exc:
            error = str(exc)
        log.info("job %s appeared after the launch was cancelled: %s", job_id, error or "cancelled")
        await self.tell(launch.id, "late_job", job=job_id, cluster=launch.cluster, error=error)
