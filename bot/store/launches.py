"""Launch records and sweeps: reading them, creating them (with the limits and budgets a
new launch must fit) and changing them.

Every change to a launch goes through :meth:`Launches.mutate`, which writes the
record, its indexes and the outbox entries it produced in one transaction, so
a crash never leaves a state change without its message, or a message without
its state change.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from redis.exceptions import WatchError

from bot.lifecycle import notices
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Sweep, new_launch_id
from bot.store import keys
from bot.store.base import Change, Section, StoreError, _Op, rides
from bot.store.budgets import (
    BudgetGuard,
    OverBudget,
    TeamGuard,
    check_teams,
    guard_keys,
    has_room,
    hold_teams,
    read_active_counts,
    read_budget_use,
)
from bot.store.history import keep_step_run, write_indexes
from commands.budget import iso_week

log = logging.getLogger(__name__)

# A new launch's keys (KEYS[1], KEYS[2]): how many exist; and its owner's active launch
# ids (the set KEYS[3]). Read under the create's WATCH, in one round trip.
_TAKEN_AND_ACTIVE = """
return {redis.call('exists', KEYS[1], KEYS[2]), redis.call('smembers', KEYS[3])}
"""
ID_DRAWS = 20  # fresh ids tried for a new launch whose id is taken, before giving up


class Launches(Section):
    """Launch records and sweeps."""

    @rides
    async def get(self, launch_id: str) -> Launch | None:
        raw = await self.redis.get(keys.launch(launch_id))
        return Launch.model_validate_json(raw) if raw else None

    @rides
    async def get_many(self, launch_ids: list[str], chunk: int = 500) -> list[Launch | None]:
        """The launches, in order (None for one that is gone): one MGET per ``chunk``. A
        record that does not read as a launch (written by hand, or by another version) is
        logged and counted as gone, left as it is in Redis: one bad entry must not stop
        every poll of its cluster, nor every listing."""
        found: list[Launch | None] = []
        for start in range(0, len(launch_ids), chunk):
            ids = launch_ids[start : start + chunk]
            raws = await self.redis.mget([keys.launch(i) for i in ids])
            for launch_id, raw in zip(ids, raws, strict=True):
                try:
                    found.append(Launch.model_validate_json(raw) if raw else None)
                except ValidationError as exc:
                    log.error(
                        "launch %s: its record in Redis is not a launch; skipped (%d errors, "
                        "first: %s)",
                        launch_id,
                        exc.error_count(),
                        exc.errors()[0]["msg"],
                    )
                    found.append(None)
        return found

    @rides
    async def create(
        self,
        launch: Launch,
        events: list[Event],
        *,
        enqueue: bool = True,
        max_active: int | None = None,
        budget: BudgetGuard | None = None,
        teams: tuple[TeamGuard, ...] = (),
        new_id: Callable[[], str] = new_launch_id,
    ) -> bool:
        """Store a new launch, queue it for a worker and write its first messages.

        The launch's id must be free: when a stored launch or history entry has it
        already, the launch and its events get a fresh id from ``new_id`` (checked
        again, in the same transaction as the write), so a new launch never writes
        into another's record or thread.

        With ``max_active``, only while its owner has fewer active launches (of a
        dry run: fewer dry runs in flight; of a launch: fewer launches, dry runs not
        counted): the count and the write are one transaction (WATCH on the owner's active set),
        so simultaneous requests, from any number of bot processes, cannot both
        pass the limit. False when the limit was reached and nothing was written.
        With ``budget``, likewise only while the launch's estimate fits what is left
        of its owner's week there (WATCH on the usage too); OverBudget when not.
        With ``teams``, likewise for each team budget (WATCH on its usage and launches):
        OverTeamBudget for the first that has no room; the launch is then held by each.
        """
        active_key = keys.user_active(launch.user_id)
        draws = 0
        op = self._op()
        if await self._redone(op) is not None:  # a lost reply: it was written
            return True
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    usage = guard_keys(budget, teams)
                    taken = [keys.launch(launch.id), keys.summary(launch.id)]
                    await pipe.watch(active_key, *usage, *taken)
                    # one round trip: whether the id is taken, and the owner's active ids
                    found, members = await pipe.eval(_TAKEN_AND_ACTIVE, 3, *taken, active_key)
                    if int(found):  # the id is another launch's: draw again
                        await pipe.reset()  # type: ignore[no-untyped-call]
                        draws += 1
                        if draws > ID_DRAWS:
                            raise StoreError(f"no free launch id after {ID_DRAWS} draws")
                        self._renumber(launch, events, new_id())
                        continue
                    if not await has_room(pipe, launch, max_active, members):
                        return False
                    if budget is not None:
                        charged, held = await read_budget_use(
                            pipe, launch.user_id, budget.cluster, budget.week
                        )
                        if charged + held + (launch.estimate_gpu_hours or 0.0) > budget.limit:
                            await pipe.reset()  # type: ignore[no-untyped-call]
                            raise OverBudget(charged, held)
                    await check_teams(pipe, launch, teams)
                    notices.tag(events, *notices.classify(None, launch))
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.set(keys.launch(launch.id), self._record(launch))
                    hold_teams(pipe, launch.id, teams, self.retention.history_s)
                    write_indexes(pipe, launch, self.retention)
                    for event in events:
                        pipe.xadd(keys.OUTBOX, self._entry(event))
                    if enqueue:
                        pipe.xadd(keys.QUEUE, {"launch": launch.id})
                    self._mark_done(pipe, op)
                    await pipe.execute()
                    await self._wait_replicas(op)  # a queued launch must survive a failover
                    return True
                except WatchError:  # another writer, or a connection lost mid-transaction
                    if await self._redone(op, lost=True) is not None:
                        return True
                    continue

    @rides
    async def create_sweep(
        self,
        sweep: Sweep,
        launches: list[Launch],
        events: list[Event],
        *,
        enqueue: bool = True,
        max_active: int | None = None,
        budget: BudgetGuard | None = None,
        teams: tuple[TeamGuard, ...] = (),
    ) -> bool:
        """Store a sweep and all its members at once, queue them, write ``events``.

        With ``max_active``, the owner's active launches are counted in the same
        transaction as the write (WATCH on their active set, as :meth:`create`): False,
        nothing written, when they have no room left; else the members past the room
        each wait for the member that many places before them (``waits_for``), so two
        sweeps sent together never run more than ``max_active`` at once.
        With ``budget`` (and ``teams``), only while the members' estimates together fit
        what is left: one transaction, watched like :meth:`create`, so the sweep is
        refused whole (OverBudget, OverTeamBudget) before any member exists."""
        total = sum(launch.estimate_gpu_hours or 0.0 for launch in launches)
        whole = launches[0].model_copy(update={"estimate_gpu_hours": total})
        op = self._op()
        if await self._redone(op) is not None:  # a lost reply: it was written
            return True
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    usage = guard_keys(budget, teams)
                    taken = [keys.sweep(sweep.id)]
                    taken += [keys.launch(launch.id) for launch in launches]
                    taken += [keys.summary(launch.id) for launch in launches]
                    await pipe.watch(keys.user_active(sweep.user_id), *usage, *taken)
                    if await pipe.exists(*taken):
                        await pipe.reset()  # type: ignore[no-untyped-call]
                        raise StoreError(f"sweep {sweep.id} or one of its launch ids is taken")
                    if not await _sweep_room(pipe, sweep.user_id, launches, max_active):
                        return False
                    if budget is not None:
                        charged, held = await read_budget_use(
                            pipe, sweep.user_id, budget.cluster, budget.week
                        )
                        if charged + held + total > budget.limit:
                            await pipe.reset()  # type: ignore[no-untyped-call]
                            raise OverBudget(charged, held)
                    await check_teams(pipe, whole, teams)
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.set(
                        keys.sweep(sweep.id), sweep.model_dump_json(), ex=self.retention.launch_s
                    )
                    for launch in launches:
                        pipe.set(keys.launch(launch.id), self._record(launch))
                        hold_teams(pipe, launch.id, teams, self.retention.history_s)
                        write_indexes(pipe, launch, self.retention)
                    for event in events:
                        pipe.xadd(keys.OUTBOX, self._entry(event))
                    for launch in launches if enqueue else []:
                        pipe.xadd(keys.QUEUE, {"launch": launch.id})
                    self._mark_done(pipe, op)
                    await pipe.execute()
                    await self._wait_replicas(op)  # queued launches must survive a failover
                    return True
                except WatchError:  # another writer, or a connection lost mid-transaction
                    if await self._redone(op, lost=True) is not None:
                        return True
                    continue

    @rides
    async def get_sweep(self, sweep_id: str) -> Sweep | None:
        raw = await self.redis.get(keys.sweep(sweep_id))
        return Sweep.model_validate_json(raw) if raw else None

    @rides
    async def save_sweep(self, sweep: Sweep) -> None:
        """Write the sweep's record back (its parent message, once posted); it is kept as
        long as a finished launch's record."""
        await self.redis.set(
            keys.sweep(sweep.id), sweep.model_dump_json(), ex=self.retention.launch_s
        )

    @staticmethod
    def _renumber(launch: Launch, events: list[Event], launch_id: str) -> None:
        """Give a new launch (not stored yet) and its first events another id."""
        old = launch.id
        launch.id = launch_id
        for event in events:
            if event.launch_id == old:
                event.launch_id = launch_id

    @rides
    async def mutate(
        self, launch_id: str, change: Callable[[Launch], list[Event]]
    ) -> tuple[Launch, list[Event]]:
        """Apply ``change`` to the stored launch and write it with the events it returns.

        ``change`` edits the launch in place and may run more than once (when
        another process writes the same launch meanwhile); it must not do I/O.
        """
        key = keys.launch(launch_id)
        op = self._op()
        if await self._redone(op) is not None:  # a lost reply: the change was written
            return await self._replayed(launch_id, op)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    raw = await pipe.get(key)
                    if raw is None:
                        raise StoreError(f"launch {launch_id} does not exist")
                    launch = Launch.model_validate_json(raw)
                    was_active, attempts_before = launch.active, len(launch.attempts)
                    job_before, cancelled_before = launch.job_id, launch.cancelled_at
                    before = notices.Before.of(launch)
                    events = change(launch)
                    notices.tag(events, *notices.classify(before, launch))
                    launch.updated_at = time.time()
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.set(key, self._record(launch))
                    write_indexes(pipe, launch, self.retention)
                    if was_active and not launch.active:
                        self._ran(pipe, launch)
                    for event in events:
                        if event.kind == "enqueue":  # back to the workers (a retry)
                            due = float(event.data.get("due", 0) or 0)
                            if due > time.time():  # backoff: a deferred entry, not a sleep
                                pipe.zadd(keys.DEFERRED, {launch.id: due})
                            else:
                                pipe.xadd(keys.QUEUE, {"launch": launch.id})
                        else:
                            pipe.xadd(keys.OUTBOX, self._entry(event))
                    self._mark_done(pipe, op, self._done_events(events))
                    await pipe.execute()
                    if launch.job_id != job_before or launch.cancelled_at != cancelled_before:
                        await self._wait_replicas(op)  # a job id or a cancel must survive
                    self._tell(Change(launch, events, was_active, attempts_before))
                    return launch, events
                except WatchError:  # another writer, or a connection lost mid-transaction
                    if await self._redone(op, lost=True) is not None:
                        return await self._replayed(launch_id, op)
                    continue

    async def _replayed(self, launch_id: str, op: _Op) -> tuple[Launch, list[Event]]:
        """What a change whose reply was lost wrote: the launch now, and its events (kept
        in the done-mark)."""
        done = await self.redis.get(keys.store_op(op.id))
        stored = await self.get(launch_id)
        if stored is None or done is None:
            raise StoreError(f"launch {launch_id} does not exist")
        return stored, [Event.decode("", fields) for fields in json.loads(done)]

    def _tell(self, change: Change) -> None:
        for observer in self.core.observers:
            try:
                observer(change)
            except Exception:  # an observer's bug never undoes a write
                log.exception("store observer failed")

    @rides
    async def after_pending(self, cluster: str) -> list[str]:
        """The launches of ``cluster`` whose export or evaluation is to run or be followed."""
        return sorted(str(i) for i in await self.redis.smembers(keys.after_pending(cluster)))

    @rides
    async def ask_after(self, cluster: str, launch_id: str) -> None:
        await self.redis.sadd(keys.after_pending(cluster), launch_id)

    @rides
    async def after_done(self, cluster: str, launch_id: str) -> None:
        await self.redis.srem(keys.after_pending(cluster), launch_id)

    def _ran(self, pipe: Any, launch: Launch) -> None:
        """A launch just ended (in the transaction that ended it, whichever way it ended):
        it waits to be charged what Slurm recorded for its jobs (:meth:`Budgets.charge`, once its
        jobs have ended), in its owner's ISO week of now; keep its step time for later
        estimates."""
        now, keep_s = time.time(), self.retention.history_s
        if not launch.charged:
            pipe.hset(keys.uncharged(launch.cluster), launch.id, f"{iso_week(now)} {now:.3f}")
        then = getattr(launch.request, "then", None)
        if then and launch.outcome == "COMPLETED" and not launch.after_state:
            pipe.sadd(keys.after_pending(launch.cluster), launch.id)  # then=: run after
        keep_step_run(pipe, launch, now, keep_s)


async def _sweep_room(
    pipe: Any, user_id: str, launches: list[Launch], max_active: int | None
) -> bool:
    """Whether the owner has room for a sweep under ``max_active`` (read inside the
    watched transaction); the members past the room take turns. False: the watch is let go."""
    if max_active is None:
        return True
    real, _ = await read_active_counts(pipe, user_id)
    if real >= max_active:
        await pipe.reset()
        return False
    take_turns(launches, max_active - real)
    return True


def take_turns(launches: list[Launch], room: int) -> None:
    """The members past ``room`` each wait for the member ``room`` places before them."""
    for index, launch in enumerate(launches):
        launch.waits_for = launches[index - room].id if index >= room else ""
