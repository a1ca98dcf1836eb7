"""Delivers the outbox to the front end: each thread in order, threads independently.

One notifier at a time holds the lease. It moves each outbox entry into a
*lane* in Redis (a launch's thread, or that launch's pages), acknowledging the
entry in the same transaction, and delivers every lane on its own: a lane's
entries go out in the order they were written, and an entry that fails holds
back only the later entries of its own lane. A failed entry is tried again
after a backoff that doubles up to a cap (:class:`Retry`); after
``max_tries`` it is a dead letter, recorded in Redis with a WARNING (the
``trainbot_dead_letters`` gauges, ``/healthz`` and the admins' App Home show
them) and, when the launch's channel refuses the bot, a direct message to the
launch's owner saying how to fix it. A dead letter keeps its place first in its
lane and is tried again, less often, for ``give_up_after_s`` (24 h) from its
first failure, so an outage of hours loses nothing and the lane's later
messages still follow it in order; only then is the lane given up for good. A
launch whose parent message became a dead letter is ended by its worker.

Nothing owed lives only in memory: after a crash or restart the next notifier
finds every lane (and its backoff) in Redis. An entry is taken off its lane
only after the front end took it; one already marked posted is not posted
again. Which lane an entry joins and when a failed one is tried again are
``bot.notify.lane_rules``'s rules; what an entry posts is ``bot.notify.poster``'s (a
page is two steps, Slack and PagerDuty, each marked done on its own).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.lifecycle.prefs import quiet_until
from bot.notify.lane_rules import SWEEP_KINDS, Retry, lane_of
from bot.notify.paging import Pager
from bot.notify.poster import Poster
from bot.store.lanes import DeadLetter
from bot.store.store import Store
from bot.text.front import Front, FrontError
from bot.text.mrkdwn import undeliverable_text
from bot.wording import thread
from cluster.site.profiles import ClusterProfile

log = logging.getLogger(__name__)

LEASE = "notifier"
LEASE_TTL_MS = 15_000
PARALLEL = 16  # deliveries in flight at once, across lanes
LANE_READ = 50  # entries of a lane looked at together (to skip superseded updates)
SLEEP_IN_LANE_MAX_S = 5.0  # longer backoffs hand the lane back to the scheduler
STOP_GRACE_S = 10.0
SWEEP_MEMO_MAX = 10_000  # launch -> sweep remembered by the notifier, at most


class Notifier:
    def __init__(
        self,
        store: Store,
        front: Front,
        profiles: dict[str, ClusterProfile],
        *,
        owner: str,
        pager: Pager | None = None,
        retry: Retry | None = None,
    ) -> None:
        self.store = store
        self.front = front
        self.profiles = profiles
        self.owner = owner
        self.pager = pager
        self.retry = retry or Retry()
        self.delivered = 0
        self.retried = 0
        self.dead_lettered = 0
        self.given_up = 0
        # /watch is asked again when it acts: whether a watcher may still see the launch
        # (the runtime gives it the policy and the groups Slack says now; None: all may)
        self.may_see: Callable[[str, Launch], Awaitable[bool]] | None = None
        self._lanes: dict[str, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(PARALLEL)
        self._halt = asyncio.Event()
        self.on_delivered: list[Callable[[str], None]] = []  # told each delivered entry's id
        self._sweep_of: dict[str, str] = {}  # launch id -> its sweep id ("": none)
        self.poster = Poster(store, front, profiles, pager)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    if not await self.store.leases.acquire(LEASE, self.owner, LEASE_TTL_MS):
                        await self._stop_lanes(0.0)  # another notifier delivers now
                        await _sleep(stop, 2.0)
                        continue
                    await self.drain(block_ms=1000)
                except asyncio.CancelledError:
                    raise
                except Exception:  # Redis is down: keep going, slowly
                    log.exception("notifier: reading the outbox failed; retrying")
                    await _sleep(stop, 2.0)
        finally:
            await self._stop_lanes(STOP_GRACE_S)
        try:
            await self.store.leases.release(LEASE, self.owner)
        except Exception as exc:  # it expires on its own
            log.warning("notifier: could not release its lease: %s", exc)

    async def drained(self) -> bool:
        """Whether every outbox entry has been delivered (or dead-lettered)."""
        return await self.store.lanes.undelivered() == 0

    async def drain(self, *, block_ms: int = 1) -> int:
        """Move what is waiting in the outbox to its lanes (this consumer's unacknowledged
        entries first, then a dead consumer's, then new ones, waiting up to ``block_ms``),
        and start delivering every lane that is due. Returns how many entries moved."""
        entries = await self.store.outbox.read(self.owner, block_ms=block_ms, pending=True)
        if not entries:
            entries = await self.store.outbox.claim_stale(self.owner, min_idle_ms=LEASE_TTL_MS)
        if not entries:
            entries = await self.store.outbox.read(self.owner, block_ms=max(block_ms, 1))
        events = []
        for entry_id, fields in entries:
            try:
                events.append(Event.decode(entry_id, fields))
            except ValueError as exc:  # written by another version of trainbot
                log.warning("notifier: outbox entry %s dropped: %s", entry_id, exc)
                await self.store.outbox.ack(entry_id)
        if events:
            lanes = [lane_of(event, await self._sweep_lane(event)) for event in events]
            await self.store.lanes.hold(list(zip(lanes, events, strict=True)))
        self._halt.clear()
        for lane in await self.store.lanes.due_lanes(time.time()):
            if lane not in self._lanes:
                task = asyncio.create_task(self._run_lane(lane), name=f"notify {lane}")
                self._lanes[lane] = task
                task.add_done_callback(self._lane_ended)
        return len(events)

    async def _sweep_lane(self, event: Event) -> str:
        """The sweep of a parent or update event's launch ("": none), remembered."""
        if event.kind not in SWEEP_KINDS:
            return ""
        if event.launch_id not in self._sweep_of:
            if len(self._sweep_of) >= SWEEP_MEMO_MAX:
                self._sweep_of.clear()
            launch = await self.store.launches.get(event.launch_id)
            self._sweep_of[event.launch_id] = launch.sweep if launch else ""
        return self._sweep_of[event.launch_id]

    def _lane_ended(self, task: asyncio.Task[None]) -> None:
        lane = task.get_name().removeprefix("notify ")
        if self._lanes.get(lane) is task:
            del self._lanes[lane]
        if not task.cancelled() and task.exception() is not None:
            log.error("notifier: lane %s stopped: %s", lane, task.exception())

    async def _stop_lanes(self, grace_s: float) -> None:
        """Let deliveries in flight finish (up to ``grace_s``); what is left stays in Redis."""
        self._halt.set()
        tasks = list(self._lanes.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace_s) if grace_s else (set(), tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_lane(self, lane: str) -> None:
        """Deliver ``lane`` in order until it is empty, or waits out a long backoff."""
        while not self._halt.is_set():
            events = await self.store.lanes.lane_events(lane, LANE_READ)
            if not events:
                await self.store.lanes.lane_done(lane, "")  # forget the empty lane
                return
            event = events[0]
            if event.kind == "update" and any(e.kind == "update" for e in events[1:]):
                await self.store.lanes.lane_done(lane, event.id)  # a newer one follows
                continue
            batch = await self._batch(lane, events)
            if not batch:
                return  # quiet hours: drain() starts the lane again when they end
            try:
                async with self._slots:
                    await self._deliver_once(event, batch)
                    if event.kind == "thread" and event.data.get("notices"):
                        await self._write_dms(event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay_s = await self._failed(lane, event, exc)
                if delay_s is None:
                    continue  # given up: whatever came into the lane since goes on
                if delay_s > SLEEP_IN_LANE_MAX_S:
                    return  # drain() starts the lane again when it is due
                await _sleep(self._halt, delay_s)
                continue
            await self._delivered(lane, batch)

    async def _batch(self, lane: str, events: list[Event]) -> list[Event]:
        """What goes out next: the lane's first entry; nothing while the person's quiet hours
        last, and when they are over, every DM they held (one message)."""
        event = events[0]
        if event.kind != "dm" or lane.endswith(":urgent"):
            return [event]
        if await self._quiet(lane, event):
            return []
        return events if await self.store.lanes.quiet_held(lane) else [event]

    async def _delivered(self, lane: str, batch: list[Event]) -> None:
        for done in batch:
            await self.store.lanes.lane_done(lane, done.id)
            self.delivered += 1
            for observer in self.on_delivered:
                observer(done.id)
        event = batch[0]
        if event.kind == "dm":  # what quiet hours held went with it
            await self.store.lanes.quiet_over(lane)
        if lane.startswith("thread:") and event.kind != "update":
            await self.store.marks.clear_bad_channel(event.launch_id)

    async def _deliver_once(self, event: Event, batch: list[Event]) -> None:
        if event.kind == "dm":
            await self.poster.send_dms(batch)
            return
        if await self.store.marks.was_posted(event.id):
            return
        await self.poster.deliver(event)
        if event.kind != "update":
            await self.store.marks.mark_posted(event.id)

    async def _quiet(self, lane: str, event: Event) -> bool:
        """Whether the person is in their quiet hours: then the lane waits until they end."""
        until = quiet_until(
            await self.store.people.prefs(str(event.data.get("user", ""))), time.time()
        )
        if until is None:
            return False
        await self.store.lanes.hold_for_quiet(lane, until)
        log.info("%s: quiet hours until %.0f; %s waits", lane, until, event.id)
        return True

    async def _write_dms(self, event: Event) -> None:
        """After a thread line with notices is posted: a DM to its owner and each watcher
        who wants one for it (their preferences), written once, each in their own lane."""
        launch = await self.store.launches.get(event.launch_id)
        if launch is None:
            return
        people = dict.fromkeys([launch.user_id, *await self.store.people.watchers(launch.id)])
        if self.may_see is not None:  # a watcher who may no longer see it gets nothing
            people = {
                p: None for p in people if p == launch.user_id or await self.may_see(p, launch)
            }
        link = launch.permalink or await self.poster.permalink(launch)
        text = thread.dm(launch, thread.line(event), link)
        dms = []
        for person in people:
            prefs = await self.store.people.prefs(person)
            wanted = [n for n in event.data["notices"] if prefs.wants(n)]
            if wanted:
                urgent = any(prefs.urgent(n) for n in wanted)
                data = {"user": person, "notice": wanted[0], "urgent": urgent}
                dms.append(Event("dm", launch.id, text, data=data))
        if dms:
            await self.store.lanes.write_dms(event.id, dms)

    async def _failed(self, lane: str, event: Event, exc: Exception) -> float | None:
        """Count a failed delivery; the delay before the next try, or None once the
        lane was given up for good."""
        reason = exc.reason if isinstance(exc, FrontError) else f"{type(exc).__name__}: {exc}"
        channel_problem = isinstance(exc, FrontError) and exc.channel_problem
        thread = lane.startswith("thread:")
        now = time.time()
        tries, first_failed = await self.store.lanes.note_failure(event.id, now)
        if now - first_failed >= self.retry.give_up_after_s:
            await self._give_up(lane, event, reason, tries)
            return None
        if tries == self.retry.max_tries:
            await self._dead_letter(lane, event, reason, tries, told=thread and channel_problem)
        delay_s = self.retry.delay_s(tries)
        await self.store.lanes.retry_lane_at(lane, now + delay_s)
        self.retried += 1
        log.info(
            "launch %s: %s message %s not delivered (%s); try %d in %.1f s%s",
            event.launch_id,
            event.kind,
            event.id,
            reason,
            tries + 1,
            delay_s,
            " (a dead letter)" if tries >= self.retry.max_tries else "",
        )
        return delay_s

    async def _letter(self, lane: str, event: Event, reason: str, tries: int) -> DeadLetter:
        launch = await self.store.launches.get(event.launch_id)
        channel = ""
        if launch is not None:
            channel = launch.channel if lane.startswith("thread:") else ""
        if not channel and self.pager is not None and lane.startswith("page:"):
            channel = self.pager.config.oncall_channel or ""
        return DeadLetter(event, lane, reason, tries, channel=channel, at=time.time())

    async def _dead_letter(
        self, lane: str, event: Event, reason: str, tries: int, *, told: bool
    ) -> None:
        """Record a message that kept failing (it stays first in its lane, tried again
        less often); a launch whose parent message it is ends without a job."""
        launch = await self.store.launches.get(event.launch_id)
        letter = await self._letter(lane, event, reason, tries)
        no_thread = lane.startswith("thread:") and launch is not None and not launch.parent_ts
        await self.store.lanes.dead_letter(letter, no_thread=no_thread)
        self.dead_lettered += 1
        log.warning(
            "launch %s: %s message %s moved to the dead letters after %d tries: %s (channel %s); "
            "tried again until %.0f h after its first failure",
            event.launch_id,
            event.kind,
            event.id,
            tries,
            reason,
            letter.channel or "-",
            self.retry.give_up_after_s / 3600,
        )
        if (
            told
            and launch is not None
            and await self.store.marks.mark_bad_channel(launch.id, reason)
        ):
            text = undeliverable_text(
                channel=launch.channel, error=reason, launch_id=launch.id, title=launch.words
            )
            try:
                await self.front.post_to_user(launch.user_id, text)
            except Exception as exc:  # the dead letter and the log line remain
                log.warning(
                    "launch %s: could not tell %s that %s refuses the bot: %s",
                    launch.id,
                    launch.user_id,
                    launch.channel,
                    exc,
                )

    async def _give_up(self, lane: str, event: Event, reason: str, tries: int) -> None:
        """Past ``give_up_after_s``: the whole lane is given up for good, in order."""
        letter = await self._letter(lane, event, reason, tries)
        given = 0
        for pending in await self.store.lanes.lane_events(lane, LANE_READ):
            letter = replace(letter, event=pending, tries=tries if pending.id == event.id else 0)
            await self.store.lanes.lane_done(lane, pending.id, dead=letter)
            given += 1
        self.given_up += given
        log.error(
            "launch %s: %d message(s) of %s given up for good after %.0f h: %s",
            event.launch_id,
            given,
            lane,
            self.retry.give_up_after_s / 3600,
            reason,
        )


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass
