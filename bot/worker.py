"""Launch workers: take launches off the Redis queue, pre-flight and submit them.

Delivery is at-least-once (a Redis stream with a consumer group); submission
is exactly once per launch: the launch is marked SUBMITTING before ``sbatch``
runs, and a worker that finds it so (its predecessor died mid-submit) first
asks Slurm for a job carrying the launch id before submitting anything.
"""

from __future__ import annotations

import asyncio
import logging
import time

from bot import babysit, keys, render
from bot.clusters import Clusters
from bot.launches import Attempt, Launch, Phase
from bot.slack_text import code_block, escape
from bot.store import Event, Store
from cluster.errors import ClusterError, ClusterUnreachable, CommandTimeout, SlurmCommandFailed
from cluster.launch import Submission
from cluster.tokenizer import seed_tokenizer_cache

log = logging.getLogger(__name__)

CLAIM_IDLE_MS = 30_000
CLAIM_EVERY_S = 10.0
UNREACHABLE_RETRIES = 5
MAX_BACKOFF_S = 300.0
LAUNCH_LOCK_MS = 180_000  # longer than a submission may take


def thread(launch_id: str, text: str) -> Event:
    return Event("thread", launch_id, text)


def update(launch_id: str) -> Event:
    return Event("update", launch_id)


class Worker:
    def __init__(self, store: Store, clusters: Clusters, *, name: str) -> None:
        self.store = store
        self.clusters = clusters
        self.name = name  # stable across restarts: its queue consumer and its launch locks
        self.processed = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Work until ``stop`` is set; this consumer's own unfinished entries come first."""
        own_pending = True
        next_claim = 0.0
        while not stop.is_set():
            try:
                entries: list[tuple[str, dict[str, str]]] = []
                if own_pending:  # after a restart: what this worker took but never finished
                    entries = await self.store.read(
                        keys.QUEUE, keys.QUEUE_GROUP, self.name, block_ms=0, pending=True
                    )
                    own_pending = False
                elif time.monotonic() >= next_claim:  # what other, dead workers left behind
                    entries = await self.store.claim_stale(
                        keys.QUEUE, keys.QUEUE_GROUP, self.name, min_idle_ms=CLAIM_IDLE_MS
                    )
                    next_claim = time.monotonic() + CLAIM_EVERY_S
                if not entries:
                    entries = await self.store.read(
                        keys.QUEUE, keys.QUEUE_GROUP, self.name, block_ms=1000
                    )
                for entry_id, fields in entries:
                    if await self.process(fields.get("launch", "")):
                        await self.store.ack(keys.QUEUE, keys.QUEUE_GROUP, entry_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("worker %s: queue error; retrying", self.name)
                await asyncio.sleep(1.0)

    async def process(self, launch_id: str) -> bool:
        """Handle one queue entry; False leaves it pending (another worker holds the launch)."""
        item = await self.store.get(launch_id)
        if item is None:
            log.warning("worker: queue entry for unknown launch %s dropped", launch_id)
            return True
        if item.phase not in (Phase.QUEUED, Phase.PREFLIGHT, Phase.SUBMITTING, Phase.RETRYING):
            return True  # already handled (a redelivery)
        # Two workers never handle one launch at once (a redelivery racing the original).
        # The lock is held under the worker's stable name, so the same worker restarted
        # takes it straight back; another worker waits until it expires, then reclaims.
        lock = f"launch:{launch_id}"
        if not await self.store.acquire(lock, self.name, LAUNCH_LOCK_MS):
            log.info("launch %s is being handled by another worker; leaving it pending", launch_id)
            return False
        try:
            await self._launch(item)
        except ClusterUnreachable as exc:
            await self._unreachable(item, exc)
        except ClusterError as exc:
            await self._reject(item, "NOT_SUBMITTED", f"Not submitted: {escape(str(exc))}")
        finally:
            await self.store.release(lock, self.name)
        self.processed += 1
        return True

    async def _launch(self, item: Launch) -> None:
        if item.phase == Phase.SUBMITTING:
            known = {a.job_id for a in item.attempts if a.job_id}
            found = [j for j in await self.clusters.find(item) if j.job_id not in known]
            if found:  # the previous worker submitted, then died: adopt, never resubmit
                job = found[-1]
                await self._record(item, job_id=job.job_id, adopted=True)
                return
        if item.phase == Phase.RETRYING and not await self._prepare_retry(item):
            return
        built = self.clusters.spec_for(item)
        spec = built.spec
        item, _ = await self.store.mutate(item.id, _set_phase(Phase.PREFLIGHT))
        if item.request.dry_run:
            dry = await self.clusters.dry_run(spec)
            checks = "\n".join(
                ("✓ " if c.ok else "✗ ") + escape(c.message) for c in dry.preflight.checks
            )
            text = (
                "Dry run: nothing was submitted. On the login node trainbot would run "
                f"`{escape(dry.remote_shell)}` with this script on stdin (secrets redacted):\n"
                f"{code_block(dry.script)}\nPre-flight:\n{checks}"
            )
            await self.store.mutate(item.id, _finish(Phase.DRY_RUN, "DRY_RUN", text))
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
        notes = "".join(f"\nNote: {escape(n)}." for n in built.notes)
        ok = render.preflight_summary(result, spec) + notes

        def submitting(stored: Launch) -> list[Event]:
            stored.phase = Phase.SUBMITTING
            return [thread(stored.id, ok), update(stored.id)]

        item, _ = await self.store.mutate(item.id, submitting)
        try:
            submission = await self.clusters.submit(spec)
        except CommandTimeout:
            # sbatch may or may not have run: stay SUBMITTING; the next try looks it up first.
            await self.store.requeue(item.id)
            raise
        except SlurmCommandFailed as exc:
            await self._reject(
                item,
                "SUBMIT_FAILED",
                "Slurm refused the job:\n" + code_block(exc.stderr or str(exc)),
            )
            return
        await self._record(item, submission=submission)

    async def _record(
        self,
        item: Launch,
        *,
        submission: Submission | None = None,
        job_id: str = "",
        adopted: bool = False,
    ) -> None:
        spec = self.clusters.spec_for(item).spec
        tracking = submission.tracking if submission else spec.fw.found(spec, job_id)
        job_id = tracking.job_id
        partition = spec.slurm_partition

        def submitted(stored: Launch) -> list[Event]:
            if stored.attempts and stored.attempts[-1].job_id == job_id:
                return []
            if not stored.attempts or stored.attempts[-1].job_id:
                stored.attempts.append(Attempt(number=len(stored.attempts) + 1))
            attempt = stored.attempts[-1]  # a retry's attempt was made when it was decided
            attempt.job_id, attempt.submitted_at = job_id, time.time()
            attempt.tracking = tracking
            stored.phase = Phase.SUBMITTED
            unit = "node" if stored.request.nodes == 1 else "nodes"
            how = "Found the job submitted before a restart" if adopted else "Submitted"
            where = f" Logs: `{escape(tracking.log_dir)}`" if tracking.log_dir else ""
            text = (
                f"{how}: Slurm job {job_id} on {stored.cluster}, partition {partition}, "
                f"{stored.request.nodes} {unit}.{where}"
            )
            if len(stored.attempts) > 1:
                text += f" (attempt {len(stored.attempts)})"
            return [thread(stored.id, text), update(stored.id)]

        await self.store.mutate(item.id, submitted)
        log.info("job=%s cluster=%s launch %s submitted", job_id, item.cluster, item.id)

    async def _prepare_retry(self, item: Launch) -> bool:
        """Wait out the backoff and seed the tokenizer cache when the retry asks for it."""
        attempt = item.attempts[-1]
        wait_s = attempt.not_before - time.time()
        if wait_s > 0:
            await asyncio.sleep(min(wait_s, MAX_BACKOFF_S))
        if not attempt.seed_tokenizer:
            return True
        profile = self.clusters.profile(item.cluster)
        try:
            result = await seed_tokenizer_cache(self.clusters.pool, profile)
        except ClusterError as exc:
            why = escape(str(exc))
            text = f"Could not seed the tokenizer cache: {why}. Not retrying."

            def give_up(stored: Launch) -> list[Event]:
                stored.attempts.pop()
                stored.phase, stored.outcome, stored.detail = Phase.DONE, "FAILED", text
                events = [thread(stored.id, text), update(stored.id)]
                return events + babysit.oncall(stored, "tokenizer_seed", why, "Not retried.")

            await self.store.mutate(item.id, give_up)
            return False
        await self.store.mutate(
            item.id, lambda stored: [thread(stored.id, escape(result.summary()))]
        )
        return True

    async def _reject(
        self, item: Launch, outcome: str, text: str, *, data: dict[str, object] | None = None
    ) -> None:
        await self.store.mutate(item.id, _finish(Phase.REJECTED, outcome, text, data))

    async def _unreachable(self, item: Launch, exc: ClusterUnreachable) -> None:
        tries = await self.store.count(f"unreachable:{item.id}")
        if tries >= UNREACHABLE_RETRIES:
            await self._reject(
                item, "UNREACHABLE", f"Not submitted: {escape(str(exc))}. Tried {tries} times."
            )
            return
        log.warning("launch %s: %s; retrying (%d)", item.id, exc, tries)
        await asyncio.sleep(min(2**tries, 30))
        await self.store.requeue(item.id)


def _set_phase(phase: Phase):  # type: ignore[no-untyped-def]
    def change(stored: Launch) -> list[Event]:
        if stored.phase in (Phase.QUEUED, Phase.RETRYING):
            stored.phase = phase
        return []

    return change


def _finish(phase: Phase, outcome: str, text: str, data: dict[str, object] | None = None):  # type: ignore[no-untyped-def]
    def change(stored: Launch) -> list[Event]:
        stored.phase = phase
        stored.outcome = outcome
        stored.detail = text.split("\n", 1)[0][:300]
        return [Event("thread", stored.id, text, data=dict(data or {})), update(stored.id)]

    return change
