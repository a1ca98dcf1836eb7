"""The streams: the launch queue (``store.queue``, with its deferred entries and dead
letters) and the outbox (``store.outbox``), each read by its consumer group."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from bot.store import keys
from bot.store.base import OP_DONE_S, Section, rides

_PROMOTE = (  # due deferred launches back onto the queue, atomically
    "local due = redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100) "
    "for _, id in ipairs(due) do redis.call('zrem', KEYS[1], id) "
    "redis.call('xadd', KEYS[2], '*', 'launch', id) end return #due"
)

# Queue dead letters that are due (ARGV[1]) go back on the queue with the fields that
# count their replays; their dead-letter entries are removed (they are queued again).
_REPLAY = """
local due = redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100)
for _, id in ipairs(due) do
  redis.call('zrem', KEYS[1], id)
  local found = redis.call('xrange', KEYS[2], id, id)
  if #found > 0 then
    local f = found[1][2]
    local entry = {}
    for i = 1, #f, 2 do
      if f[i] == 'launch' or f[i] == 'replays' or f[i] == 'first_dead' then
        table.insert(entry, f[i])
        table.insert(entry, f[i + 1])
      end
    end
    redis.call('xadd', KEYS[3], '*', unpack(entry))
    redis.call('xdel', KEYS[2], id)
  end
end
return #due
"""


# A queue entry set aside as a dead letter, with its done-mark, in one step: the dead
# letter's id is the mark's value. KEYS: dead letters, due, queue, done-mark. ARGV:
# the entry's id, the queue's group, when to replay ("" never), the mark's seconds,
# then the dead letter's fields and values.
_DEAD_ENTRY = """
local id = redis.call('xadd', KEYS[1], 'MAXLEN', '~', '10000', '*', unpack(ARGV, 5))
redis.call('set', KEYS[4], id, 'EX', ARGV[4])
if ARGV[3] ~= '' then
  redis.call('zadd', KEYS[2], ARGV[3], id)
end
redis.call('xack', KEYS[3], ARGV[2], ARGV[1])
redis.call('xdel', KEYS[3], ARGV[1])
return id
"""


def _stream_time(entries: Any) -> float | None:
    """When the first entry of an XRANGE reply was written (its id's milliseconds)."""
    if not entries:
        return None
    return int(str(entries[0][0]).split("-", 1)[0]) / 1000


@dataclass(frozen=True)
class Backlog:
    """What waits in Redis, read in one round trip (for ``/metrics``). Times are epoch seconds."""

    queue: int = 0
    queue_oldest: float | None = None  # when the oldest queue entry was written
    deferred: int = 0
    deferred_due: int = 0
    outbox: int = 0
    outbox_oldest: float | None = None


async def read_backlog(redis_client: aioredis.Redis) -> Backlog:
    """What waits in the queue, its deferred entries and the outbox, in one round trip."""
    async with redis_client.pipeline(transaction=False) as pipe:
        pipe.xlen(keys.QUEUE)
        pipe.xrange(keys.QUEUE, count=1)
        pipe.zcard(keys.DEFERRED)
        pipe.zcount(keys.DEFERRED, "-inf", time.time())
        pipe.xlen(keys.OUTBOX)
        pipe.xrange(keys.OUTBOX, count=1)
        queue, first, deferred, due, outbox, oldest = await pipe.execute()
    return Backlog(
        queue=int(queue),
        queue_oldest=_stream_time(first),
        deferred=int(deferred),
        deferred_due=int(due),
        outbox=int(outbox),
        outbox_oldest=_stream_time(oldest),
    )


class Stream(Section):
    """A stream read by one consumer group; the section names both."""

    stream = ""
    group = ""

    @rides
    async def read(
        self, consumer: str, *, block_ms: int, pending: bool = False
    ) -> list[tuple[str, dict[str, str]]]:
        """Entries for this consumer: new ones, or (``pending``) its own unacknowledged ones."""
        try:
            reply: Any = await self.redis.xreadgroup(
                self.group,
                consumer,
                {self.stream: "0" if pending else ">"},
                count=16,
                block=None if pending else block_ms,
            )
        except ResponseError as exc:
            await self._regroup(exc)
            return []
        entries: list[tuple[str, dict[str, str]]] = []
        for _stream, items in reply or []:
            entries.extend((str(entry_id), dict(fields)) for entry_id, fields in items if fields)
        return entries

    @rides
    async def claim_stale(
        self, consumer: str, *, min_idle_ms: int
    ) -> list[tuple[str, dict[str, str]]]:
        """Take over entries another consumer read but never acknowledged (it died)."""
        try:
            reply: Any = await self.redis.xautoclaim(
                self.stream, self.group, consumer, min_idle_ms, "0-0", count=16
            )
        except ResponseError as exc:
            await self._regroup(exc)
            return []
        return [(str(entry_id), dict(fields)) for entry_id, fields in reply[1] if fields]

    @rides
    async def ack(self, entry_id: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xack(self.stream, self.group, entry_id)
            pipe.xdel(self.stream, entry_id)
            await pipe.execute()

    @rides
    async def length(self) -> int:
        return int(await self.redis.xlen(self.stream))

    @rides
    async def deliveries(self, entry_id: str) -> int:
        """How many times the group has handed out this entry (1 the first time)."""
        info: Any = await self.redis.xpending_range(self.stream, self.group, entry_id, entry_id, 1)
        return int(info[0]["times_delivered"]) if info else 0


class Outbox(Stream):
    """What is to be said (thread lines, parents, DMs), read by the notifiers."""

    stream = keys.OUTBOX
    group = keys.OUTBOX_GROUP


class Queue(Stream):
    """The launch queue read by the workers, with its deferred entries and dead letters."""

    stream = keys.QUEUE
    group = keys.QUEUE_GROUP

    @rides
    async def requeue(self, launch_id: str, *, after_s: float = 0.0) -> None:
        """Back on the queue, now or (``after_s``) as a deferred entry any worker takes when due."""
        if after_s > 0:
            await self.redis.zadd(keys.DEFERRED, {launch_id: time.time() + after_s})
            return
        op = self._op()
        if await self._redone(op) is not None:
            return
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(keys.QUEUE, {"launch": launch_id})
            self._mark_done(pipe, op)
            await pipe.execute()

    @rides
    async def promote_due(self) -> int:
        """Move deferred launches that are due onto the queue; how many moved."""
        moved = await self.redis.eval(_PROMOTE, 2, keys.DEFERRED, keys.QUEUE, str(time.time()))
        return int(moved)

    @rides
    async def deferred_count(self) -> int:
        return int(await self.redis.zcard(keys.DEFERRED))

    @rides
    async def dead_letter_entry(
        self, entry_id: str, fields: dict[str, str], reason: str, *, retry_at: float | None = None
    ) -> None:
        """Keep a queue entry that keeps failing where an admin can see it, and take it off
        the queue; with ``retry_at``, it goes back on the queue then (:meth:`replay_due`)."""
        op = self._op()
        if await self._redone(op) is not None:  # set aside already, its reply lost
            return
        dead = {**fields, "entry": entry_id, "reason": reason[:2000], "at": str(time.time())}
        keys_ = (keys.DEAD_LETTERS, keys.DEAD_LETTERS_DUE, keys.QUEUE, keys.store_op(op.id))
        due = "" if retry_at is None else repr(retry_at)
        args = [entry_id, keys.QUEUE_GROUP, due, str(OP_DONE_S)]
        await self.redis.eval(
            _DEAD_ENTRY, len(keys_), *keys_, *args, *(x for kv in dead.items() for x in kv)
        )

    @rides
    async def replay_due(self, now: float | None = None) -> int:
        """Put the queue's dead letters that are due back on the queue, atomically; how many."""
        when = time.time() if now is None else now
        keys_ = (keys.DEAD_LETTERS_DUE, keys.DEAD_LETTERS, keys.QUEUE)
        return int(await self.redis.eval(_REPLAY, 3, *keys_, str(when)))

    @rides
    async def retrying_count(self) -> int:
        """Queue dead letters that will be replayed."""
        return int(await self.redis.zcard(keys.DEAD_LETTERS_DUE))

    @rides
    async def dead_letter_count(self) -> int:
        return int(await self.redis.xlen(keys.DEAD_LETTERS))
