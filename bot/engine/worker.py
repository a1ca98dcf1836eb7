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
import os
import secrets
import socket
import time

from bot.engine import recovery, submit
from bot.engine.holding import Hold, LostLock, log
from bot.gateway.on_cluster import Clusters
from bot.lifecycle import phases
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.settings.logs import log_context
from bot.store.base import StoreError
from bot.store.store import Store
from cluster.errors import ClusterError, ClusterUnreachable, PersonRefused

CLAIM_IDLE_MS = 30_000
CLAIM_EVERY_S = 10.0
PROMOTE_EVERY_S = 1.0
LAUNCH_LOCK_MS = 30_000
LOCK_RENEW_S = 10.0
MAX_DELIVERIES = 3  # of one queue entry that fails inside trainbot, before the dead letters
DEAD_REPLAY_FIRST_S = 60.0  # a dead letter is replayed after this, then twice as long each time


def worker_name(prefix: str = "") -> str:
    """A name no other worker process has, even on the same host."""
    base = prefix or socket.gethostname()
    return f"{base}-{os.getpid()}-{secrets.token_hex(3)}"


class Worker:
    """Takes launches off the queue, one at a time, each under its lock and fence: the
    queue loop and the dead letters here; the launch it handles is its :class:`Hold`,
    handed to :func:`bot.engine.submit.run` and the paths of :mod:`bot.engine.recovery`."""

    def __init__(self, store: Store, clusters: Clusters, *, name: str) -> None:
        self.store = store
        self.clusters = clusters
        self.name = name  # unique per process: its queue consumer and its launch locks
        self.hold = Hold(store, clusters, name=name)
        self.processed = 0
        self.dead_letters = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Work until ``stop`` is set."""
        next_claim = next_promote = 0.0
        while not stop.is_set():
            try:
                entries: list[tuple[str, dict[str, str]]] = []
                now = time.monotonic()
                if now >= next_promote:  # deferred retries and lookups that are due
                    await self.store.queue.promote_due()
                    await self.store.queue.replay_due()  # and dead letters due another try
                    next_promote = now + PROMOTE_EVERY_S
                if now >= next_claim:  # what other, dead or stalled workers left behind
                    entries = await self.store.queue.claim_stale(
                        self.name, min_idle_ms=CLAIM_IDLE_MS
                    )
                    next_claim = now + CLAIM_EVERY_S
                if not entries:
                    entries = await self.store.queue.read(self.name, block_ms=1000)
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
            tries = await self.store.queue.deliveries(entry_id)
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
            await self.store.queue.ack(entry_id)

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
        await self.store.queue.dead_letter_entry(entry_id, kept, reason, retry_at=retry_at)
        self.dead_letters += 1
        log.error(
            "launch %s: queue entry %s moved to the dead letters: %s (%s)",
            launch_id,
            entry_id,
            reason,
            "given up" if give_up else f"replayed in {wait_s:.0f} s",
        )
        if await self.store.launches.get(launch_id) is None:
            return
        if not give_up:
            note = {"move": "set_aside", "error": type(exc).__name__, "tries": MAX_DELIVERIES}
            note |= {"wait_s": wait_s, "retry_for_h": delivery.retry_for_h}
            if replays == 0:  # said once; the later replays are in the log
                await self.store.launches.mutate(
                    launch_id, lambda s: [Event("thread", s.id, data=note)] if s.active else []
                )
            return
        said = {"error": type(exc).__name__, "tries": MAX_DELIVERIES, "rounds": replays + 1}
        said["hours"] = (now - first_dead) / 3600
        await self.store.launches.mutate(
            launch_id, phases.step(phases.given_up, phases.Facts(data=said))
        )

    async def process(self, launch_id: str) -> bool:
        """Handle one queue entry; False leaves it pending (another worker holds the launch)."""
        launch = await self.store.launches.get(launch_id)
        if launch is None:
            log.warning("worker: queue entry for unknown launch %s dropped", launch_id)
            return True
        if launch.phase not in (Phase.QUEUED, Phase.PREFLIGHT, Phase.SUBMITTING, Phase.RETRYING):
            if not launch.submit_started_at:
                return True  # already handled (a redelivery), or cancelled
        with log_context(launch_id=launch_id, cluster=launch.cluster, job_id=launch.job_id):
            return await self._process(launch)

    async def _process(self, launch: Launch) -> bool:
        launch_id = launch.id
        # Two workers never handle one launch at once (a redelivery racing the original):
        # the lock is renewed while this worker works, and the fence token it raises makes
        # the writes of any earlier holder fail.
        lock = f"launch:{launch_id}"
        if not await self.store.leases.acquire(lock, self.name, LAUNCH_LOCK_MS):
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
            current = await self.store.launches.get(launch_id)
            if current is not None and current.phase == Phase.SUBMITTING:
                await recovery.unreachable(
                    self.hold, launch_id, exc
                )  # a submit may have run: look it up
            else:
                await self.hold.reject(launch, "NOT_SUBMITTED", error=str(exc))
        except ClusterUnreachable as exc:
            await recovery.unreachable(self.hold, launch_id, exc)
        except ClusterError as exc:
            await self.hold.reject(launch, "NOT_SUBMITTED", error=str(exc))
        finally:
            renew.cancel()
            await asyncio.gather(renew, return_exceptions=True)
            await self.store.leases.release(lock, self.name)
        self.processed += 1
        return True

    async def _work(self, launch_id: str) -> None:
        launch = await self.hold.take(launch_id)
        if launch.active:
            await submit.run(self.hold, launch)
        else:
            await recovery.settle_cancelled(self.hold, launch)

    async def _renew(self, lock: str, work: asyncio.Task[None]) -> None:
        """Keep the lock while ``work`` runs; losing it stops the work (a submit not yet
        begun never begins: another worker has the launch)."""
        while True:
            await asyncio.sleep(LOCK_RENEW_S)
            try:
                held = await self.store.leases.acquire(lock, self.name, LAUNCH_LOCK_MS)
            except Exception as exc:  # not renewed is not held: stop before another takes it
                log.warning("worker %s could not renew the lock %s: %s", self.name, lock, exc)
                held = False
            if not held:
                log.warning("worker %s lost the lock %s; stopping", self.name, lock)
                work.cancel()  # a submit under way is ended on the login node too
                return
