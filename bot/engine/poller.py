"""The status poller: one APScheduler interval job per cluster.

Each run needs the cluster's lease (so one bot process polls a cluster at a
time), collects every tracked job of that cluster in one SSH round trip, and
applies the snapshots to the launches. A job that ended other than COMPLETED is
diagnosed first from everything it left (:func:`cluster.watching.evidence.gather`, one
more round trip); when that names no known cause, it is read once more after
``watch.evidence_reread_s`` (shared file systems lag) before "unknown" stands.

The lease lives as long as one poll interval (at least ``MIN_LEASE_S``) and is
renewed, or tried for by the pollers that do not hold it, three times per
interval, apart from the polls themselves: a poll that takes long keeps its
lease, and when the holder dies another poller takes the cluster over within
about 1.3 poll intervals. A poller that finds it lost the lease mid-poll writes
nothing; one that stops gracefully gives its leases up at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.engine import wandb_summary
from bot.engine.after_training import AfterTraining
from bot.engine.charging import charge_ended
from bot.engine.evidence import Diagnoser, record_faulty_node
from bot.engine.gpuwatch import sample_running
from bot.engine.reroute import reroute as reroute_pending
from bot.engine.tracking import apply_snapshot, tracked
from bot.gateway.authority import Authority
from bot.gateway.identity import People
from bot.gateway.on_cluster import Clusters
from bot.gateway.trust import log_roots, user_problem
from bot.lifecycle.events import Event
from bot.lifecycle.health import TRAINBOT
from bot.lifecycle.launch import Launch
from bot.planning.cost import StartEstimates
from bot.planning.planner import Planner
from bot.settings.logs import log_context
from bot.store.store import Store
from cluster.errors import ClusterError
from cluster.site.login import cert_key_id
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import is_terminal
from cluster.watching.collector import JobSnapshot, PollResult, collect
from cluster.watching.diagnosis import Diagnosis
from cluster.watching.tracking import Tracking

log = logging.getLogger(__name__)

MIN_LEASE_S = 1.0
MIN_REROUTE_INTERVAL_S = 5.0  # pending launches are looked at for a move at most this often
MIN_CHARGE_INTERVAL_S = 2.0  # ended launches are charged at most this often per cluster
RENEWALS_PER_INTERVAL = 3


def _changes(launch: Launch, change: Callable[[Launch], list[Event]]) -> bool:
    """Whether ``change`` would write anything, tried on ``launch`` itself: the copy this
    poll read (the poll's own, used for nothing else), compared as JSON before and after
    (a deep copy of a launch costs several times more). The write re-reads the stored
    launch and applies ``change`` again under WATCH, so a launch changed meanwhile by
    someone else is still handled right."""
    before = launch.model_dump_json()
    return bool(change(launch)) or launch.model_dump_json() != before


def _persons(launches: dict[str, Launch], job_ids: list[str]) -> str:
    """Whose jobs one poll as a Unix user reads (their user ids, for the certificate)."""
    return "+".join(sorted({launches[job_id].user_id for job_id in job_ids}))


CANCEL_GRACE_S = 5.0  # a cancel's own scancel is given this long before the poller sends one
RESEND_SCANCEL_S = 30.0  # and the poller sends it again this often while the job lives


def lease_name(cluster: str) -> str:
    return f"poller:{cluster}"


def lease_ttl_ms(poll_interval_s: float) -> int:
    """How long a cluster's poller lease lasts without renewal."""
    return int(max(poll_interval_s, MIN_LEASE_S) * 1000)


class Poller:
    def __init__(self, store: Store, clusters: Clusters, *, owner: str) -> None:
        self.store = store
        self.clusters = clusters
        self.owner = owner
        self.polls = 0
        self.scheduler = AsyncIOScheduler()
        self.diagnoser = Diagnoser(clusters)  # a failed job's evidence, read again when unknown
        self.held: set[str] = set()  # the clusters whose lease this poller holds
        self.stopping = False
        self.observers: list[Callable[[str, float], None]] = []  # (cluster, seconds) per poll
        self.scancel_sent: dict[str, float] = {}  # job id -> when this poller last sent scancel
        self.wandb = wandb_summary.ReadBacks(store, wandb_summary.reader_for(clusters.settings))
        self.after = AfterTraining(store, clusters)  # then=export / then=eval, once completed
        self.people = People(
            clusters, None, clusters
        )  # reroute: each person's Unix user per cluster
        # reroute: the move admitted again (the runtime gives it the groups Slack says now)
        self.authority = Authority(store, clusters, self.people)
        # reroute: where a pending launch would start now (Slurm's estimates, shared briefly)
        self.planner = Planner(
            store,
            clusters,
            clusters,
            clusters.config.command_context(),
            StartEstimates(),
            self.people.cluster_user,
        )

    def start(self) -> None:
        placement = self.clusters.config.policy.placement
        for name, profile in self.clusters.profiles.items():
            interval = profile.poll_interval_s
            self._every(
                self.hold, name, "lease", lease_ttl_ms(interval) / 1000 / RENEWALS_PER_INTERVAL
            )
            self._every(self.poll, name, "poll", interval)
            self._every(self.charge, name, "charge", max(interval, MIN_CHARGE_INTERVAL_S))
            if placement.reroute_after_s is not None:
                self._every(self.reroute, name, "reroute", max(interval, MIN_REROUTE_INTERVAL_S))
            if (every_s := self.clusters.config.watch.health.gpu_sample_for(name)) > 0:
                self._every(self.sample_gpus, name, "gpu", every_s)
        self.scheduler.start()

    def _every(
        self, job: Callable[[str], Awaitable[object]], cluster: str, kind: str, seconds: float
    ) -> None:
        """Run ``job(cluster)`` every ``seconds``, one run at a time, missed runs coalesced."""
        self.scheduler.add_job(
            self.scheduled,
            "interval",
            seconds=seconds,
            args=[job, cluster],
            id=f"{kind}-{cluster}",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
        )

    async def scheduled(self, job: Callable[[str], Awaitable[object]], cluster: str) -> None:
        """Run one of ``cluster``'s scheduled jobs. One that :meth:`shutdown` cuts short ends
        quietly: it is not a failure, and the next process (or this one's next run) does it."""
        try:
            await job(cluster)
        except asyncio.CancelledError:
            if not self.stopping:
                raise

    async def sample_gpus(self, cluster: str) -> int:
        """GPU figures of ``cluster``'s running jobs (:mod:`bot.engine.gpuwatch`), while this
        poller holds the cluster's lease."""
        if cluster not in self.held or self.stopping:
            return 0
        with log_context(cluster=cluster):
            try:
                return await sample_running(self.store, self.clusters, cluster)
            except Exception:  # Redis away, say: the next run tries again
                log.exception("GPU sample of %s failed", cluster)
                return 0

    async def charge(self, cluster: str) -> int:
        """Charge the ended launches of ``cluster`` what sacct recorded (``bot.engine.charging``),
        while this poller holds the cluster's lease."""
        if cluster not in self.held or self.stopping:
            return 0
        with log_context(cluster=cluster):
            try:
                return await charge_ended(self.store, self.clusters, cluster)
            except Exception:  # Redis away, say: the next run tries again
                log.exception("charging ended launches of %s failed", cluster)
                return 0

    async def reroute(self, cluster: str) -> int:
        """Move launches still pending on ``cluster`` where another cluster would start
        them now (policy ``placement.reroute_after_s``; :func:`bot.engine.reroute.reroute`),
        while this poller holds the cluster's lease."""
        if cluster not in self.held or self.stopping:
            return 0
        with log_context(cluster=cluster):
            try:
                return await reroute_pending(self.planner, cluster, self.authority)
            except Exception:  # Redis away, say: the next run tries again
                log.exception("rerouting pending launches of %s failed", cluster)
                return 0

    def shutdown(self) -> None:
        self.stopping = True  # a poll still under way takes no lease again
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        self.after.shutdown()  # what they followed stays pending in Redis for the next poller

    async def hold(self, cluster: str) -> bool:
        """Take or renew ``cluster``'s lease; whether this poller holds it now."""
        if self.stopping:
            self.held.discard(cluster)
            return False
        ttl_ms = lease_ttl_ms(self.clusters.profile(cluster).poll_interval_s)
        try:
            held = await self.store.leases.acquire(lease_name(cluster), self.owner, ttl_ms)
        except Exception as exc:  # Redis is down: the lease runs out, as everyone's does
            log.warning("poller lease of %s not renewed: %s", cluster, exc)
            held = False
        if held and cluster not in self.held:
            log.info("%s polled by %s from now on", cluster, self.owner)
        (self.held.add if held else self.held.discard)(cluster)
        return held

    async def release(self) -> None:
        """Give up every lease this poller holds (a graceful stop: others take over at once)."""
        for cluster in sorted(self.held):
            try:
                await self.store.leases.release(lease_name(cluster), self.owner)
            except Exception as exc:
                log.warning("poller lease of %s not released: %s", cluster, exc)
        self.held.clear()

    async def poll(self, cluster: str) -> int:
        """One poll of ``cluster``; returns how many launches it looked at."""
        with log_context(cluster=cluster):
            return await self._poll(cluster)

    async def _poll(self, cluster: str) -> int:
        if not await self.hold(cluster):
            return 0
        await self.after.take_up(cluster)  # then=, Export, Evaluate: run or followed here
        started = time.monotonic()  # one poll: reading the launches, collecting, applying
        launches, jobs = await self._tracked(cluster)
        if not jobs:
            return 0
        # Each person's jobs are read as that person (their files are theirs alone): one
        # round trip per Unix user with tracked jobs, all at once.
        by_user: dict[str, list[str]] = {}
        for job_id, launch in launches.items():
            by_user.setdefault(launch.cluster_user, []).append(job_id)
        profile = self.clusters.profile(cluster)
        people = {
            user: profile.as_user(user, cert_key_id(_persons(launches, ids), user, "poll"))
            for user, ids in by_user.items()
        }
        results = await asyncio.gather(
            *(self._collect(people[user], ids, launches, jobs) for user, ids in by_user.items())
        )
        if not any(r is not None for r in results):
            return 0
        self.polls += 1
        if not await self.hold(cluster):  # another poller took over while this one read
            log.warning("poller lease of %s lost during a poll; its results dropped", cluster)
            return 0
        for user, result in zip(by_user, results, strict=True):
            if result is None:
                continue
            for job_id, snap in result.jobs.items():
                if job_id not in launches or launches[job_id].cluster_user != user:
                    continue
                with log_context(launch_id=launches[job_id].id, job_id=job_id):
                    await self._apply(people[user], launches[job_id], jobs[job_id], snap)
        for observer in self.observers:
            observer(cluster, time.monotonic() - started)
        return len(jobs)

    async def _collect(
        self,
        profile: ClusterProfile,
        job_ids: list[str],
        launches: dict[str, Launch],
        jobs: dict[str, Tracking],
    ) -> PollResult | None:
        """One round trip for one Unix user's jobs (None when it failed)."""
        try:
            return await collect(
                self.clusters.pool,
                profile.login,
                [jobs[j] for j in job_ids],
                known_checkpoints={j: launches[j].checkpoints for j in job_ids},
                known_restarts={j: launches[j].attempts[-1].restarts for j in job_ids},
                cluster=profile.name,
                roots=log_roots(profile),  # the config's directories, not the record's
            )
        except ClusterError as exc:
            log.warning("poll of %s as %s failed: %s", profile.name, profile.login.user, exc)
            return None

    async def _tracked(self, cluster: str) -> tuple[dict[str, Launch], dict[str, Tracking]]:
        """The launches ``cluster``'s jobs belong to, and the jobs, by job id."""
        launches: dict[str, Launch] = {}
        jobs: dict[str, Tracking] = {}
        profile = self.clusters.profile(cluster)
        for launch in await self.store.launches.get_many(
            await self.store.history.tracked_ids(cluster)
        ):
            job = tracked(launch) if launch else None
            if launch is None or job is None:
                continue
            # Read as whom the config gives its person, never as whom its record claims.
            problem = user_problem(profile, launch.user_id, launch.cluster_user)
            if problem:
                log.warning(
                    "launch %s not polled: its record says it runs as %r, but %s",
                    launch.id, launch.cluster_user or profile.login.user, problem,
                )  # fmt: skip
                continue
            launches[job.job_id] = launch
            jobs[job.job_id] = job
        return launches, jobs

    async def _apply(
        self, profile: ClusterProfile, launch: Launch, job: Tracking, snap: JobSnapshot
    ) -> None:
        """One job's snapshot onto its launch, diagnosed first when it failed."""
        watch = self.clusters.config.watch
        diagnosis: Diagnosis | None = None
        ended = snap.state and is_terminal(snap.state) and snap.state != "COMPLETED"
        if launch.cancelled_by and snap.state and not is_terminal(snap.state):
            await self._finish_cancel(launch, job.job_id)
        if ended and not launch.cancelled_by:  # a cancelled launch ends CANCELLED: no diagnosis
            try:
                diagnosis = await self.diagnoser.diagnose(profile, job, snap)
            except ClusterError as exc:
                log.warning("job %s: evidence not read: %s", job.job_id, exc)
                return  # the next poll reads it again
            if diagnosis is None:
                return  # read again after a short delay

        now = time.time()

        def change(stored: Launch) -> list[Event]:
            return apply_snapshot(stored, snap, profile, watch, now=now, diagnosis=diagnosis)

        was_active = launch.active  # before _changes, which tries the change on ``launch``
        if diagnosis is None and not _changes(launch, change):
            return  # nothing new for this launch: no write (most tracked jobs, most polls)
        stored, _ = await self.store.launches.mutate(launch.id, change)
        if was_active and not stored.active:  # it ended now: its W&B run's summary
            self.wandb.start(stored)  # then= steps: the store keeps them (Store.after_pending)
        if diagnosis is not None and diagnosis.failed_node:
            await record_faulty_node(self.store, profile.name, stored, job.job_id, diagnosis, now)
        if stored.cancelled_by == TRAINBOT and stored.cancelled_at == now:  # NaN: stop it now
            await self._finish_cancel(stored, job.job_id, grace_s=0.0)

    async def _finish_cancel(
        self, launch: Launch, job_id: str, grace_s: float = CANCEL_GRACE_S
    ) -> None:
        """A cancelled launch whose job Slurm still runs: ``scancel`` it as its person. The
        cancel's own ``scancel`` failed (or no worker answered the web role's ask); the
        poller then sends it, again every ``RESEND_SCANCEL_S`` while the job lives."""
        now = time.time()
        if now - (launch.cancelled_at or 0) < grace_s:
            return  # the process that took the cancel is sending it now
        if now - self.scancel_sent.get(job_id, 0.0) < RESEND_SCANCEL_S:
            return
        self.scancel_sent[job_id] = now
        try:
            await self.clusters.cancel(launch, [job_id])
        except ClusterError as exc:
            log.warning("job %s of cancelled launch %s not cancelled: %s", job_id, launch.id, exc)
            return
        log.info("job %s of cancelled launch %s: scancel sent by the poller", job_id, launch.id)
