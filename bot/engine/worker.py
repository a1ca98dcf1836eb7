"""Launch workers: take launches off the Redis queue, pre-flight and submit them.

Delivery is at-least-once (a Redis stream with a consumer group); submission is
exactly once per attempt:
- One worker handles a launch at a time: it holds the launch's lock and renews
  it while it works, and it raises the launch's fence token when it takes it, so
  the writes of a worker that lost the lock (stalled past the lock's expiry) fail
  instead of landing.
- The launch is marked SUBMITTING before the launcher runs. A worker that finds
  it so (its predecessor died mid-submit, or the submit's outcome is unknown)
  asks Slurm for a job carrying the launch id, and submits only when Slurm
  answered that there is none once any submit in flight must have ended (the
  login node refuses or kills a submit past its deadline). While the cluster
  cannot be reached it keeps looking, and the thread says so.
- Backoff is never a sleep inside a worker: a retry or a later look is a
  deferred entry (a Redis sorted set by due time) that any worker takes when due.
- A cancel is final: every phase change is conditional, and a job that appears
  after its launch was cancelled is cancelled too.
- An entry that fails inside trainbot (an unexpected exception) is tried a few
  times, then goes to a dead-letter stream, and the thread says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Callable

from bot.engine import babysit, pipelines, placement
from bot.engine.on_cluster import Clusters
from bot.lifecycle import render
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.settings.logs import log_context, set_job_id
from bot.store import keys
from bot.store.base import StoreError
from bot.store.store import Store
from bot.text.mrkdwn import code_block, escape
from cluster.errors import (
    ClusterError,
    ClusterUnreachable,
    CommandTimeout,
    PersonRefused,
    SlurmCommandFailed,
    TrainbotError,
)
from cluster.jobs import FoundJob
from cluster.launch import SUBMIT_TIMEOUT_S, Submission
from cluster.tokenizer import seed_tokenizer_cache

log = logging.getLogger(__name__)

CLAIM_IDLE_MS = 30_000
CLAIM_EVERY_S = 10.0
PROMOTE_EVERY_S = 1.0
UNREACHABLE_RETRIES = 5  # before anything was submitted
MAX_LOOKUP_WAIT_S = 300.0
LOOKUP_AGAIN_S = 20.0  # a SUBMITTING launch whose cluster went away: look again this much later
SUBMIT_SETTLE_S = 30.0  # after a submit whose outcome is unknown, before looking it up
THREAD_WAIT_S = 1.0  # a launch whose thread is not posted yet: look again this much later,
THREAD_WAIT_MAX_S = 60.0  # twice as long each time up to this
LAUNCH_LOCK_MS = 30_000
RETRY_CANCEL_WAIT_S = 15.0  # a Retry's old job must be gone this long after the Retry,
RETRY_CANCEL_LOOK_S = 1.0  # looked at this far apart
LOCK_RENEW_S = 10.0
MAX_DELIVERIES = 3  # of one queue entry that fails inside trainbot, before the dead letters
DEAD_REPLAY_FIRST_S = 60.0  # a dead letter is replayed after this, then twice as long each time


class LostLock(TrainbotError):
    """Another worker took the launch (this one stalled past its lock): stop, write nothing."""


def thread(launch_id: str, text: str) -> Event:
    return Event("thread", launch_id, text)


def update(launch_id: str) -> Event:
    return Event("update", launch_id)


def worker_name(prefix: str = "") -> str:
    """A name no other worker process has, even on the same host."""
    base = prefix or socket.gethostname()
    return f"{base}-{os.getpid()}-{secrets.token_hex(3)}"


class Worker:
    def __init__(self, store: Store, clusters: Clusters, *, name: str) -> None:
        self.store = store
        self.clusters = clusters
        self.name = name  # unique per process: its queue consumer and its launch locks
        self.processed = 0
        self.dead_letters = 0
        self._fence = 0  # the token of the launch being handled

    async def run(self, stop: asyncio.Event) -> None:
        """Work until ``stop`` is set."""
        next_claim = next_promote = 0.0
        while not stop.is_set():
            try:
                entries: list[tuple[str, dict[str, str]]] = []
                now = time.monotonic()
                if now >= next_promote:  # deferred retries and lookups that are due
                    await self.store.promote_due()
                    await self.store.replay_due()  # and dead letters due another try
                    next_promote = now + PROMOTE_EVERY_S
                if now >= next_claim:  # what other, dead or stalled workers left behind
                    entries = await self.store.claim_stale(
                        keys.QUEUE, keys.QUEUE_GROUP, self.name, min_idle_ms=CLAIM_IDLE_MS
                    )
                    next_claim = now + CLAIM_EVERY_S
                if not entries:
                    entries = await self.store.read(
                        keys.QUEUE, keys.QUEUE_GROUP, self.name, block_ms=1000
                    )
                for entry_id, fields in entries:
                    await self.handle(entry_id, fields)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("worker %s: queue error; retrying", self.name)
                await asyncio.sleep(1.0)

    async def handle(self, entry_id: str, fields: dict[str, str]) -> None:
        """One queue entry: processed and acknowledged, left pending, or dead-lettered."""
        with log_context(launch_id=fields.get("launch", "")):
            await self._handle(entry_id, fields)

    async def _handle(self, entry_id: str, fields: dict[str, str]) -> None:
        launch_id = fields.get("launch", "")
        try:
            done = await self.process(launch_id)
        except (StoreError, asyncio.CancelledError):
            raise  # Redis is down: the entry stays pending; the loop retries
        except Exception as exc:
            tries = await self.store.deliveries(keys.QUEUE, keys.QUEUE_GROUP, entry_id)
            log.exception(
                "launch %s: failed inside trainbot (delivery %d of %d)",
                launch_id,
                tries,
                MAX_DELIVERIES,
            )
            if tries >= MAX_DELIVERIES:
                await self._dead_letter(entry_id, fields, exc)
            return
        if done:
            await self.store.ack(keys.QUEUE, keys.QUEUE_GROUP, entry_id)

    async def _dead_letter(self, entry_id: str, fields: dict[str, str], exc: Exception) -> None:
        """Set the entry aside (dead letters). It is replayed later, each time after a
        longer wait, until ``delivery.retry_for_h`` after it first got here; then the
        launch ends."""
        launch_id = fields.get("launch", "")
        reason = f"{type(exc).__name__}: {exc}"
        delivery = self.clusters.config.delivery
        now = time.time()
        replays = int(fields.get("replays", "0") or 0)
        first_dead = float(fields.get("first_dead", "") or now)
        wait_s = min(
            delivery.dead_letter_retry_max_s, DEAD_REPLAY_FIRST_S * 2.0 ** min(replays, 20)
        )
        give_up = now + wait_s - first_dead > delivery.retry_for_h * 3600
        kept = {**fields, "replays": str(replays + 1), "first_dead": repr(first_dead)}
        retry_at = None if give_up else now + wait_s
        await self.store.dead_letter_entry(entry_id, kept, reason, retry_at=retry_at)
        self.dead_letters += 1
        log.error(
            "launch %s: queue entry %s moved to the dead letters: %s (%s)",
            launch_id,
            entry_id,
            reason,
            "given up" if give_up else f"replayed in {wait_s:.0f} s",
        )
        if await self.store.get(launch_id) is None:
            return
        if not give_up:
            note = (
                f"⚠️ This launch failed inside trainbot ({escape(type(exc).__name__)}), "
                f"{MAX_DELIVERIES} times; it was set aside (dead letters) and is tried again "
                f"in {wait_s / 60:.0f} min, for up to {delivery.retry_for_h:g} h. "
                "`/cancel` stops it."
            )
            if replays == 0:  # said once; the later replays are in the log
                await self.store.mutate(
                    launch_id, lambda s: [thread(s.id, note)] if s.active else []
                )
            return
        text = (
            f"❌ This launch failed inside trainbot ({escape(type(exc).__name__)}), "
            f"{MAX_DELIVERIES} times in each of {replays + 1} tries over "
            f"{(now - first_dead) / 3600:.1f} h; it was given up (dead letters). "
            "Nothing more will happen to it; `/train` again to retry."
        )

        def failed(stored: Launch) -> list[Event]:
            if not stored.active:
                return []
            stored.phase, stored.outcome, stored.detail = Phase.DONE, "INTERNAL_ERROR", text
            return [thread(stored.id, text), update(stored.id)]

        await self.store.mutate(launch_id, failed)

    async def process(self, launch_id: str) -> bool:
        """Handle one queue entry; False leaves it pending (another worker holds the launch)."""
        item = await self.store.get(launch_id)
        if item is None:
            log.warning("worker: queue entry for unknown launch %s dropped", launch_id)
            return True
        if item.phase not in (Phase.QUEUED, Phase.PREFLIGHT, Phase.SUBMITTING, Phase.RETRYING):
            if not item.submit_started_at:
                return True  # already handled (a redelivery), or cancelled
        with log_context(launch_id=launch_id, cluster=item.cluster, job_id=item.job_id):
            return await self._process(item)

    async def _process(self, item: Launch) -> bool:
        launch_id = item.id
        # Two workers never handle one launch at once (a redelivery racing the original):
        # the lock is renewed while this worker works, and the fence token it raises makes
        # the writes of any earlier holder fail.
        lock = f"launch:{launch_id}"
        if not await self.store.acquire(lock, self.name, LAUNCH_LOCK_MS):
            log.info("launch %s is being handled by another worker; leaving it pending", launch_id)
            return False
        work = asyncio.create_task(self._work(launch_id))
        renew = asyncio.create_task(self._renew(lock, work))
        try:
            await work
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this worker is being stopped
            log.warning("launch %s: the lock was lost; this worker stops", launch_id)
            return False  # left pending: whoever holds the launch (or takes it) carries on
        except LostLock:
            log.warning("launch %s: another worker took it over; this one stops", launch_id)
            return False
        except PersonRefused as exc:  # the person cannot log in: trying again will not help
            current = await self.store.get(launch_id)
            if current is not None and current.phase == Phase.SUBMITTING:
                await self._unreachable(launch_id, exc)  # a submit may have run: look it up
            else:
                await self._reject(item, "NOT_SUBMITTED", f"Not submitted: {escape(str(exc))}")
        except ClusterUnreachable as exc:
            await self._unreachable(launch_id, exc)
        except ClusterError as exc:
            await self._reject(item, "NOT_SUBMITTED", f"Not submitted: {escape(str(exc))}")
        finally:
            renew.cancel()
            await asyncio.gather(renew, return_exceptions=True)
            await self.store.release(lock, self.name)
        self.processed += 1
        return True

    async def _work(self, launch_id: str) -> None:
        item = await self._take(launch_id)
        if item.active:
            await self._launch(item)
        else:
            await self._settle_cancelled(item)

    async def _renew(self, lock: str, work: asyncio.Task[None]) -> None:
        """Keep the lock while ``work`` runs; losing it stops the work (a submit not yet
        begun never begins: another worker has the launch)."""
        while True:
            await asyncio.sleep(LOCK_RENEW_S)
            try:
                held = await self.store.acquire(lock, self.name, LAUNCH_LOCK_MS)
            except Exception as exc:  # not renewed is not held: stop before another takes it
                log.warning("worker %s could not renew the lock %s: %s", self.name, lock, exc)
                held = False
            if not held:
                log.warning("worker %s lost the lock %s; stopping", self.name, lock)
                work.cancel()  # a submit under way is ended on the login node too
                return

    async def _take(self, launch_id: str) -> Launch:
        """Raise the launch's fence: from now on only this worker's writes land."""

        def take(stored: Launch) -> list[Event]:
            stored.fence += 1
            return []

        item, _ = await self.store.mutate(launch_id, take)
        self._fence = item.fence
        return item

    async def _check_still_ours(self, launch_id: str) -> None:
        """LostLock unless this worker's fence is still the launch's and no other worker
        holds the launch's lock."""
        stored = await self.store.get(launch_id)
        holder = await self.store.lease_holder(f"launch:{launch_id}")
        if stored is None or stored.fence != self._fence:
            fence = stored.fence if stored else None
            raise LostLock(f"launch {launch_id}: fence {fence}, ours {self._fence}; not submitting")
        if holder not in ("", self.name):
            raise LostLock(f"launch {launch_id}: {holder} holds it; not submitting")

    async def _mutate(
        self, launch_id: str, change: Callable[[Launch], list[Event]]
    ) -> tuple[Launch, list[Event]]:
        """:meth:`Store.mutate`, only while this worker still holds the launch."""
        fence = self._fence

        def fenced(stored: Launch) -> list[Event]:
            if stored.fence != fence:
                raise LostLock(f"launch {stored.id}: fence {stored.fence}, ours {fence}")
            return change(stored)

        return await self.store.mutate(launch_id, fenced)

    async def _launch(self, item: Launch) -> None:
        if item.phase == Phase.SUBMITTING and not await self._look_up(item):
            return  # found and recorded, or the cluster did not answer: looked up again later
        if not await self._ready(item):
            return
        profile = self.clusters.profile_for(item)
        started = await pipelines.start_point(self.store, item, self._mutate, profile)
        if started is None:
            return  # from=: the parent has no checkpoint to start from
        item = started
        built = self.clusters.spec_for(item)
        spec = built.spec
        item, _ = await self._mutate(item.id, _to_preflight)
        if item.phase != Phase.PREFLIGHT:
            return  # cancelled meanwhile
        if item.request.dry_run:
            dry = await self.clusters.dry_run(spec)
            checks = "\n".join(
                ("✓ " if c.ok else "✗ ") + escape(c.message) for c in dry.preflight.checks
            )
            as_user = f", as {item.cluster_user}," if item.cluster_user else ""
            text = (
                f"Dry run: nothing was submitted. On the login node{as_user} trainbot would run "
                f"`{escape(dry.remote_shell)}` with this script on stdin (secrets redacted):\n"
                f"{code_block(dry.script)}\nPre-flight:\n{checks}"
            )
            await self._mutate(item.id, _finish(Phase.DRY_RUN, "DRY_RUN", text))
            return
        result = await self.clusters.preflight(spec)
        if not result.ok:
            text = "Not submitted: " + escape(result.message())
            data: dict[str, object] = {}
            partition_ok = all(c.ok for c in result.checks if c.name == "partition")
            default = spec.profile.partition
            if not partition_ok and spec.slurm_partition != default:
                text += f" Re-run with partition={default}?"
                data = {"buttons": ["use_partition"], "partition": default}
            await self._reject(item, "PREFLIGHT", text, data=data)
            return
        notes = "".join(f"\nNote: {escape(n)}." for n in (*built.notes, *result.notes))
        ok = render.preflight_summary(result, spec) + notes
        if not await self._thread_is_up(item):
            return
        item, _ = await self._mutate(item.id, _to_submitting(ok))
        if item.phase != Phase.SUBMITTING:
            return
        # Last word before Slurm: the fence this worker raised must still be the launch's
        # (a successor raised it past ours) and no other worker may hold the lock (one that
        # has not raised it yet). Nothing is re-acquired here: a worker that stalled past
        # its lock must not take it back. The login node holds the submit to its deadline.
        await self._check_still_ours(item.id)
        spec = dataclasses.replace(
            spec, submit_by=math.ceil(item.submit_started_at + SUBMIT_TIMEOUT_S)
        )
        try:
            submission = await self.clusters.submit(spec)
        except (CommandTimeout, ClusterUnreachable) as exc:
            # The launcher may or may not have run: never conclude without Slurm's word.
            await self._outcome_unknown(item, exc)
            return
        except SlurmCommandFailed as exc:
            await self._failed_submit(item, exc)
            return
        await self._record(item, submission=submission)

    async def _ready(self, item: Launch) -> bool:
        """A retry's old job is gone, and a launch that already waited for its thread
        looks at it first: no pre-flight over SSH on each look while it waits. A launch
        waiting for a time or for another launch (at=, after=) goes back until then."""
        if await pipelines.must_wait(self.store, item, self._mutate, self.clusters.config.policy):
            return False
        if item.phase == Phase.RETRYING and not await self._prepare_retry(item):
            return False
        return not await self.store.thread_waits(item.id) or await self._thread_is_up(item)

    async def _thread_is_up(self, item: Launch) -> bool:
        """A launch never runs without a thread anyone can see: submit only once its
        parent message is posted. While it is not, look again shortly (a deferred entry);
        when the channel refuses the bot (the notifier gave up and told the person by
        DM), the launch ends here with nothing submitted."""
        current = await self.store.get(item.id)
        if current is not None and current.parent_ts:
            return True
        refused = await self.store.bad_channel(item.id) or await self.store.no_thread(item.id)
        if refused:
            text = (
                f"Not submitted: trainbot could not post this launch's thread in "
                f"<#{escape(item.channel)}> ({escape(refused)}), and a launch never runs "
                "without one. Invite the bot there, or use a channel it is in, and `/train` again."
            )
            await self._reject(item, "NO_THREAD", text)
            return False
        if current is None or current.phase not in (Phase.QUEUED, Phase.PREFLIGHT):
            return False  # cancelled or ended meanwhile: nothing to wait for
        waits = await self.store.count_thread_wait(item.id)
        wait_s = min(THREAD_WAIT_MAX_S, THREAD_WAIT_S * 2.0 ** min(waits - 1, 10))
        log.info(
            "launch %s: its thread is not posted yet; looking again in %.0f s", item.id, wait_s
        )
        await self.store.requeue(item.id, after_s=wait_s)
        return False

    async def _failed_submit(self, item: Launch, exc: SlurmCommandFailed) -> None:
        """The launcher exited with an error. nemo-run can fail after its sbatch worked,
        so Slurm is asked by the launch id before the launch is called refused."""
        output = code_block(exc.stderr or str(exc))
        try:
            found = await self._new_jobs(item)
        except ClusterError as lookup:
            await self._outcome_unknown(item, lookup)
            return
        if not found:
            await self._reject(item, "SUBMIT_FAILED", "Slurm refused the job:\n" + output)
            return
        how = "The launcher reported an error after its sbatch worked; following"
        await self._record(item, job_id=found[-1].job_id, how=how)
        await self._mutate(
            item.id, lambda stored: [thread(stored.id, "The launcher's error:\n" + output)]
        )

    async def _new_jobs(self, item: Launch) -> list[FoundJob]:
        """The jobs Slurm has for the launch (by its id) that none of its attempts records."""
        known = {a.job_id for a in item.attempts if a.job_id}
        return [j for j in await self.clusters.find(item) if j.job_id not in known]

    async def _look_up(self, item: Launch) -> bool:
        """A launch left SUBMITTING: adopt the job Slurm has for it (False), or go on to
        submit when Slurm answered that it has none (True). While the cluster does not
        answer, look again later (False)."""
        try:
            found = await self._new_jobs(item)
        except ClusterError as exc:
            tries = await self.store.count(f"lookup:{item.id}:{len(item.attempts)}")
            wait_s = min(2.0**tries, MAX_LOOKUP_WAIT_S)
            log.warning("launch %s: lookup failed (%d): %s", item.id, tries, exc)
            if tries == 1:
                text = (
                    f"⚠️ {escape(item.cluster)} cannot be reached ({escape(str(exc))}), so "
                    "trainbot cannot tell whether the job was submitted. It keeps looking it "
                    "up by the launch id and submits nothing until Slurm answers."
                )
                await self._mutate(item.id, lambda stored: [thread(stored.id, text)])
            await self.store.requeue(item.id, after_s=wait_s)
            return False
        if found:  # submitted before a crash or a lost connection: adopt, never resubmit
            how = "Found the job submitted before a restart"
            await self._record(item, job_id=found[-1].job_id, how=how)
            return False
        # "No job yet" is not "never submitted" while a submit may still be in flight (its
        # worker stalled, say): look again once any such submit must have ended.
        settled_at = item.submit_started_at + SUBMIT_TIMEOUT_S + SUBMIT_SETTLE_S
        if item.submit_started_at and time.time() < settled_at:
            wait_s = settled_at - time.time()
            log.info(
                "launch %s: a submit may be in flight; looking again in %.0f s", item.id, wait_s
            )
            await self.store.requeue(item.id, after_s=wait_s)
            return False
        return True

    async def _settle_cancelled(self, item: Launch) -> None:
        """A launch cancelled while a submit's outcome was unknown: cancel whatever Slurm
        has for it, and keep looking until any submit still in flight must have ended."""
        try:
            found = [j for j in await self._new_jobs(item) if j.active]
        except ClusterError as exc:
            log.warning("launch %s: lookup after cancel failed: %s", item.id, exc)
            await self.store.requeue(item.id, after_s=LOOKUP_AGAIN_S)
            return
        for job in found:
            await self._say(item.id, _appeared_after_cancel(job.job_id))
            await self._cancel_late_job(item, job.job_id)
        settled_at = item.submit_started_at + SUBMIT_TIMEOUT_S + SUBMIT_SETTLE_S
        if time.time() < settled_at:  # a submit still in flight could yet land
            await self.store.requeue(item.id, after_s=settled_at - time.time())
            return

        def settled(stored: Launch) -> list[Event]:
            stored.submit_started_at = 0.0
            return []

        await self._mutate(item.id, settled)

    async def _say(self, launch_id: str, text: str) -> None:
        """One line in the launch's thread, nothing else changed."""
        await self._mutate(launch_id, lambda stored: [thread(stored.id, text)])

    async def _outcome_unknown(self, item: Launch, exc: ClusterError) -> None:
        text = (
            f"⚠️ The submission on {escape(item.cluster)} did not finish ({escape(str(exc))}): "
            f"the job may exist. Looking it up by the launch id in {SUBMIT_SETTLE_S:.0f} s "
            "before anything else."
        )
        await self._mutate(item.id, lambda stored: [thread(stored.id, text)])
        await self.store.requeue(item.id, after_s=SUBMIT_SETTLE_S)

    async def _record(
        self,
        item: Launch,
        *,
        submission: Submission | None = None,
        job_id: str = "",
        how: str = "Submitted",
    ) -> None:
        spec = self.clusters.spec_for(item).spec
        tracking = submission.tracking if submission else spec.fw.found(spec, job_id)
        job_id = tracking.job_id
        partition = spec.slurm_partition

        def submitted(stored: Launch) -> list[Event]:
            stored.submit_started_at = 0.0  # Slurm has answered: this is the job
            if stored.attempts and stored.attempts[-1].job_id == job_id:
                return []
            if not stored.attempts or stored.attempts[-1].job_id:
                stored.attempts.append(Attempt(number=len(stored.attempts) + 1))
            attempt = stored.attempts[-1]  # a retry's attempt was made when it was decided
            attempt.job_id, attempt.submitted_at = job_id, time.time()
            attempt.tracking = tracking
            if stored.phase != Phase.SUBMITTING or stored.cancelled_by:  # cancelled meanwhile
                attempt.slurm_state = "CANCELLED"
                return [thread(stored.id, _appeared_after_cancel(job_id))]
            stored.phase = Phase.SUBMITTED
            unit = "node" if stored.request.nodes == 1 else "nodes"
            where = f" Logs: `{escape(tracking.log_dir)}`" if tracking.log_dir else ""
            as_user = f" as {stored.cluster_user}" if stored.cluster_user else ""
            text = (
                f"{how}: Slurm job {job_id} on {stored.cluster}, partition {partition}, "
                f"{stored.request.nodes} {unit}{as_user}.{where}"
            )
            if len(stored.attempts) > 1:
                text += f" (attempt {len(stored.attempts)})"
            return [thread(stored.id, text), update(stored.id)]

        stored, _ = await self._mutate(item.id, submitted)
        set_job_id(job_id)
        if stored.phase == Phase.SUBMITTED:
            log.info("launch %s submitted as job %s", item.id, job_id)
            return
        await self._cancel_late_job(item, job_id)

    async def _cancel_late_job(self, item: Launch, job_id: str) -> None:
        """``scancel`` a job that appeared after its launch was cancelled; the thread says
        how that went."""
        try:
            await self.clusters.cancel(item, [job_id])
            text = f"Cancelled Slurm job {job_id}."
        except ClusterError as exc:
            text = (
                f"⚠️ Could not cancel Slurm job {job_id} ({escape(str(exc))}): "
                f"cancel it by hand (`scancel {job_id}` on {escape(item.cluster)})."
            )
        log.info("job %s appeared after the launch was cancelled: %s", job_id, text)
        await self._say(item.id, text)

    async def _prepare_retry(self, item: Launch) -> bool:
        """Not before the backoff (a deferred entry, not a sleep); seed the tokenizer cache
        when the retry asks for it."""
        attempt = item.attempts[-1]
        if attempt.held and not await self._held_retry_may_go(item):
            return False
        wait_s = attempt.not_before - time.time()
        if wait_s > 0.5:
            await self.store.requeue(item.id, after_s=wait_s)
            return False
        if not attempt.seed_tokenizer:
            return True
        profile = self.clusters.profile_for(item)  # the person's own cache
        try:
            result = await seed_tokenizer_cache(self.clusters.pool, profile)
        except ClusterError as exc:
            why = escape(str(exc))
            text = f"Could not seed the tokenizer cache: {why}. Not retrying."

            def give_up(stored: Launch) -> list[Event]:
                if stored.phase != Phase.RETRYING:
                    return []
                stored.attempts.pop()
                stored.phase, stored.outcome, stored.detail = Phase.DONE, "FAILED", text
                events = [thread(stored.id, text), update(stored.id)]
                return events + babysit.oncall(stored, "tokenizer_seed", why, "Not retried.")

            await self._mutate(item.id, give_up)
            return False
        await self._mutate(item.id, lambda stored: [thread(stored.id, escape(result.summary()))])
        return True

    async def _held_retry_may_go(self, item: Launch) -> bool:
        """Retry's one rule: the button holds the launch and queues it; here a worker
        cancels the old job and looks again a second later, until Slurm shows it gone.
        Gone: the new attempt goes on. Not cancelled (an error, or still there
        ``RETRY_CANCEL_WAIT_S`` after the Retry): the launch goes back to following it."""
        old = next((a.job_id for a in reversed(item.attempts) if a.job_id), "")
        why = ""
        try:
            jobs = {j.job_id: j for j in await self.clusters.find(item)}
            gone = old not in jobs or not jobs[old].active
            if not gone and time.time() - item.attempts[-1].held_at < RETRY_CANCEL_WAIT_S:
                # again each look: scancel is idempotent. A reroute's old job only while it
                # is pending: one that started meanwhile keeps running (placement.settle_move)
                moving = (
                    bool(item.attempts[-1].cluster) and item.attempts[-1].cluster != item.cluster
                )
                await self.clusters.cancel(item, [old], pending_only=moving)
                await self.store.requeue(item.id, after_s=RETRY_CANCEL_LOOK_S)
                return False
        except ClusterError as exc:
            gone, why = False, str(exc)
        why = why or f"Slurm still shows it {RETRY_CANCEL_WAIT_S:g} s later"

        moved = []

        def settle(stored: Launch) -> list[Event]:
            if stored.phase != Phase.RETRYING or not stored.attempts[-1].held:
                return []
            if gone:
                stored.attempts[-1].held = False
                stored.attempts[-2].close(time.time())  # billed until now, not until the end
                if left := placement.settle_move(stored):  # a reroute cut short
                    moved.append(left)
                    text = f"🔀 Job {old} on {left} is gone; moved to {stored.cluster}."
                    return [thread(stored.id, text), update(stored.id)]
                return [thread(stored.id, f"Job {old} is gone: submitting a new attempt.")]
            stored.attempts.pop()
            stored.phase = Phase.RUNNING if stored.attempts[-1].started_at else Phase.SUBMITTED
            text = (
                f"⚠️ Job {old} could not be cancelled ({escape(why)}); it keeps running and "
                "no second job was submitted."
            )
            return [thread(stored.id, text), update(stored.id)]

        await self._mutate(item.id, settle)
        if moved:  # taken up again on its new cluster, from the record as it is now
            await self.store.requeue(item.id, after_s=0.05)
            return False
        return gone

    async def _reject(
        self, item: Launch, outcome: str, text: str, *, data: dict[str, object] | None = None
    ) -> None:
        await self._mutate(item.id, _finish(Phase.REJECTED, outcome, text, data))

    async def _unreachable(self, launch_id: str, exc: ClusterUnreachable) -> None:
        item = await self.store.get(launch_id)
        if item is None or not item.active:
            return
        if item.phase == Phase.SUBMITTING:  # something may have been submitted: look again
            await self.store.requeue(launch_id, after_s=LOOKUP_AGAIN_S)
            return
        tries = await self.store.count(f"unreachable:{item.id}")
        if tries >= UNREACHABLE_RETRIES:
            await self._reject(
                item, "UNREACHABLE", f"Not submitted: {escape(str(exc))}. Tried {tries} times."
            )
            return
        log.warning("launch %s: %s; retrying (%d)", item.id, exc, tries)
        await self.store.requeue(item.id, after_s=min(2**tries, 30))


def _appeared_after_cancel(job_id: str) -> str:
    return f"🚫 Slurm job {job_id} appeared after the launch was cancelled: cancelling it."


def _to_preflight(stored: Launch) -> list[Event]:
    """Pre-flight starts (again), unless the launch was cancelled meanwhile."""
    if stored.phase in (Phase.QUEUED, Phase.RETRYING, Phase.PREFLIGHT, Phase.SUBMITTING):
        stored.phase = Phase.PREFLIGHT
        stored.submit_started_at = 0.0  # Slurm was asked (a lookup) and has no job for it
    return []


def _to_submitting(ok: str) -> Callable[[Launch], list[Event]]:
    """Pre-flight passed: submit, unless the launch was cancelled meanwhile. ``ok`` is said
    once per attempt, even when a worker that died before its submit already said it."""

    def change(stored: Launch) -> list[Event]:
        if stored.phase != Phase.PREFLIGHT:
            return []  # cancelled during pre-flight: nothing is submitted
        stored.phase = Phase.SUBMITTING
        stored.submit_started_at = time.time()
        if stored.preflight_said == len(stored.attempts):
            return [update(stored.id)]
        stored.preflight_said = len(stored.attempts)
        return [thread(stored.id, ok), update(stored.id)]

    return change


def _finish(
    phase: Phase, outcome: str, text: str, data: dict[str, object] | None = None
) -> Callable[[Launch], list[Event]]:
    """The launch ends here without a job, unless it already ended (a cancel wins)."""

    def change(stored: Launch) -> list[Event]:
        if stored.phase not in (Phase.QUEUED, Phase.PREFLIGHT, Phase.SUBMITTING, Phase.RETRYING):
            return []
        stored.phase = phase
        stored.outcome = outcome
        stored.detail = text.split("\n", 1)[0][:300]
        stored.submit_started_at = 0.0
        return [Event("thread", stored.id, text, data=dict(data or {})), update(stored.id)]

    return change
