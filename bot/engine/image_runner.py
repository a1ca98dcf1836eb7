"""Image runs (``/images import`` and ``fetch``): submitted and followed by the workers,
each in a thread of its own.

``/images import|fetch`` writes a queued record (:class:`~bot.lifecycle.image_run.ImageRun`)
and answers at once; a worker process (it holds the SSH keys) goes through the active
records every few seconds, each under a lease so one process handles a run at a time:
- it posts the parent message and the "queued" line, then submits the job as the
  person's Unix user (checked against the config first, as a launch's is), with the path
  and command derived from the request and the config, never from the record;
- it reads Slurm's state and the job's log until the job ends, and says the end in the
  thread (mentioning the owner) and on the parent: the image is ready (``image=<name>``),
  or what went wrong in words a person can act on (a registry's 401, a full disk). Those
  are the site's or the person's to fix: nobody is paged for them.
Each line is posted once: the record keeps which lines went out, so a restart or a
failed post only posts what is missing. The words are not the runner's: it is handed
them (:class:`ImageWords`, ``bot.wording.image_run`` in the service) and says which line
is due.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from bot.gateway.on_cluster import Clusters
from bot.lifecycle.image_run import ImageRun
from bot.store.base import StoreError
from bot.store.store import Store
from bot.text.front import Front, MessageRef
from cluster.errors import ClusterError, ClusterUnreachable, PersonRefused
from cluster.images.jobs import ImageJob, Outcome, outcome, plan_fetch, plan_import
from cluster.slurm.base import is_terminal
from commands.context import User
from commands.images import write_problem

log = logging.getLogger(__name__)

EVERY_S = 2.0
LEASE_MS = 60_000
STATE_EVERY_S = 5.0  # Slurm is asked about one run this often
LOST_AFTER_S = 600.0  # a job sacct still does not know this long after its submit is lost


class ImageWords(Protocol):
    """How an image run reads in its thread (``bot.wording.image_run``)."""

    def parent_text(self, run: ImageRun, job: ImageJob | None = None) -> str: ...
    def queued_text(self, run: ImageRun) -> str: ...
    def submitted_text(self, run: ImageRun, job: ImageJob) -> str: ...
    def running_text(self, run: ImageRun) -> str: ...
    def final_text(self, run: ImageRun, end: Outcome) -> str: ...
    def not_submitted_text(self, run: ImageRun, why: str) -> str: ...
    def lost_text(self, run: ImageRun, after_min: float) -> str: ...
    def not_followed_text(self, run: ImageRun, why: str) -> str: ...


class ImageRunner:
    """Goes through the active image runs (one loop per worker process)."""

    def __init__(
        self, store: Store, clusters: Clusters, front: Front, *, name: str, words: ImageWords
    ) -> None:
        self.words = words
        self.store = store
        self.clusters = clusters
        self.front = front
        self.name = name
        self._asked: dict[str, float] = {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.pass_once()
            try:
                await asyncio.wait_for(stop.wait(), EVERY_S)
            except TimeoutError:
                pass

    async def pass_once(self) -> None:
        """One look at every active run."""
        for run_id in await self.store.image_runs.active():
            lease = f"image-run:{run_id}"
            if not await self.store.leases.acquire(lease, self.name, LEASE_MS):
                continue
            try:
                await self.step(run_id)
            except ClusterUnreachable as exc:  # tried again on the next pass
                log.warning("image run %s: cluster unreachable: %s", run_id, exc)
            except (asyncio.CancelledError, StoreError):
                raise
            except Exception:  # a post Slack refused, a bug: logged, tried again next pass
                log.exception("image run %s: this pass failed; trying again", run_id)
            finally:
                await self.store.leases.release(lease, self.name)

    async def step(self, run_id: str) -> None:
        run = await self.store.image_runs.get(run_id)
        if run is None:
            await self.store.image_runs.drop(run_id)
            return
        job, why = self.plan(run)
        if not run.parent_ts:
            ref = await self.front.post(run.channel, self.words.parent_text(run, job))
            run.parent_ts = ref.ts
            await self.store.image_runs.save(run)
        await self._say(run, "queued", self.words.queued_text(run))
        if job is None:
            await self._end_unsubmitted(run, job, why)
        elif run.phase == "queued":
            await self._submit(run, job)
        elif run.phase in ("submitted", "running"):
            await self._follow(run, job)

    def plan(self, run: ImageRun) -> tuple[ImageJob | None, str]:
        """The job the request asks for, from the config of today (a record that no longer
        fits it, such as a name the config gave another image since, is ended), or why not."""
        try:
            profile = self.clusters.profile(run.cluster)
            request = run.request
            if request.action == "import":
                return plan_import(profile, str(request.source), str(request.name)), ""
            return plan_fetch(profile, str(request.framework)), ""
        except (ValueError, ClusterError) as exc:
            return None, str(exc)

    async def _end_unsubmitted(self, run: ImageRun, job: ImageJob | None, why: str) -> None:
        log.warning("image run %s: not submitted: %s", run.id, why)
        run.phase, run.cause, run.ended_at = "done", "not_submitted", time.time()
        await self.store.image_runs.save(run)
        await self._say(run, "end", self.words.not_submitted_text(run, why))
        await self._update_parent(run, job)

    async def _submit(self, run: ImageRun, job: ImageJob) -> None:
        # the policy of now, as a launch that waited is admitted again when it goes
        owner = User(id=run.user_id, name=run.user_id, groups=frozenset(run.groups))
        profile = self.clusters.profile(run.cluster)
        problem = write_problem(self.clusters.config.policy, profile, job.name, owner)
        if problem:
            await self._end_unsubmitted(run, job, problem)
            return
        try:
            profile = self.clusters.profile_of_person(
                run.cluster, run.user_id, run.cluster_user, run.id
            )
            run.job_id = await self.clusters.submit_image_job(profile, job)
        except ClusterUnreachable as exc:
            if not isinstance(exc, PersonRefused):
                raise  # tried again on the next pass
            await self._end_unsubmitted(run, job, exc.message)
            return
        except ClusterError as exc:
            await self._end_unsubmitted(run, job, exc.message)
            return
        run.phase, run.submitted_at = "submitted", time.time()
        await self.store.image_runs.save(run)
        log.info("image run %s: submitted as job %s on %s", run.id, run.job_id, run.cluster)
        await self._say(run, "submitted", self.words.submitted_text(run, job))
        await self._update_parent(run, job)

    async def _follow(self, run: ImageRun, job: ImageJob) -> None:
        now = time.monotonic()
        if now - self._asked.get(run.id, 0.0) < STATE_EVERY_S:
            return
        self._asked[run.id] = now
        try:
            profile = self.clusters.profile_of_person(
                run.cluster, run.user_id, run.cluster_user, run.id
            )
        except PersonRefused as exc:  # the config changed under it: no longer followed
            run.phase, run.cause, run.ended_at = "done", "not_followed", time.time()
            await self.store.image_runs.save(run)
            await self._say(run, "end", self.words.not_followed_text(run, exc.message))
            await self._update_parent(run, job)
            return
        state = await self.clusters.image_job_state(profile, job, run.job_id)
        run.slurm_state = state.state or run.slurm_state
        if not state.state and time.time() - (run.submitted_at or run.created_at) > LOST_AFTER_S:
            run.phase, run.cause, run.ended_at = "done", "lost", time.time()
            await self.store.image_runs.save(run)
            await self._say(run, "end", self.words.lost_text(run, LOST_AFTER_S / 60))
            await self._update_parent(run, job)
            return
        if state.state == "RUNNING" and run.phase == "submitted":
            run.phase = "running"
            await self.store.image_runs.save(run)
            await self._say(run, "running", self.words.running_text(run))
            await self._update_parent(run, job)
        if not (state.state and is_terminal(state.state)):
            return
        end = outcome(job, state.state, state.exit_code, state.log_tail)
        run.phase, run.ok, run.cause, run.ended_at = "done", end.ok, end.cause, time.time()
        await self.store.image_runs.save(run)
        self._asked.pop(run.id, None)
        log.info("image run %s: job %s ended %s (%s)", run.id, run.job_id, state.state, end.cause)
        await self._say(run, "end", self.words.final_text(run, end))
        await self._update_parent(run, job)

    async def _say(self, run: ImageRun, key: str, text: str) -> None:
        """Post a thread line once (the record remembers it went out)."""
        if key in run.posted:
            return
        await self.front.post(run.channel, text, thread_ts=run.parent_ts)
        run.posted.append(key)
        await self.store.image_runs.save(run)

    async def _update_parent(self, run: ImageRun, job: ImageJob | None) -> None:
        await self.front.update(
            MessageRef(run.channel, run.parent_ts), self.words.parent_text(run, job)
        )
